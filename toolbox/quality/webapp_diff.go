package quality

import (
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
)

// Kinds of breaking change capture_api_schema reports.
const (
	BreakMissingPath          = "missing_path"
	BreakMissingOperation     = "missing_operation"
	BreakMissingResponse      = "missing_response"
	BreakMissingField         = "missing_response_field"
	BreakChangedType          = "changed_type"
	BreakNewRequiredField     = "new_required_request_field"
	BreakNewRequiredParameter = "new_required_parameter"
)

// APIBreak is one difference that breaks a client written against the old
// schema.
type APIBreak struct {
	Kind string `json:"kind"`
	// Path is the operation ("GET /api/users") or the path alone.
	Path string `json:"path"`
	// Field is where in the body ("response 200: items[].email"), "" for a
	// path or operation.
	Field string `json:"field,omitempty"`
	Was   string `json:"was,omitempty"`
	Now   string `json:"now,omitempty"`
}

// maxDiffDepth bounds the schema walk (recursive schemas through $ref).
const maxDiffDepth = 24

// breakingChanges lists what a client of old loses in now: paths, operations
// and success responses that vanished, response fields that vanished or changed
// type, and request fields or parameters that became required. Additions that
// an old client ignores are not reported.
func breakingChanges(old, now *openapi3.T) []APIBreak {
	var out []APIBreak
	oldPaths, nowPaths := pathMap(old), pathMap(now)
	for _, p := range sortedKeys(oldPaths) {
		oi := oldPaths[p]
		ni, ok := nowPaths[p]
		if !ok {
			out = append(out, APIBreak{Kind: BreakMissingPath, Path: p})
			continue
		}
		oops, nops := oi.Operations(), ni.Operations()
		for _, m := range sortedKeys(oops) {
			op := m + " " + p
			nop, ok := nops[m]
			if !ok {
				out = append(out, APIBreak{Kind: BreakMissingOperation, Path: op})
				continue
			}
			out = append(out, operationBreaks(op, oops[m], nop)...)
		}
	}
	return out
}

func operationBreaks(op string, o, n *openapi3.Operation) []APIBreak {
	var out []APIBreak
	// Parameters: a parameter the old client never sent that is now required.
	oldParams := map[string]bool{}
	for _, pr := range o.Parameters {
		if pr != nil && pr.Value != nil {
			oldParams[pr.Value.In+":"+pr.Value.Name] = pr.Value.Required
		}
	}
	for _, pr := range n.Parameters {
		if pr == nil || pr.Value == nil || !pr.Value.Required || pr.Value.In == openapi3.ParameterInPath {
			continue
		}
		if !oldParams[pr.Value.In+":"+pr.Value.Name] {
			out = append(out, APIBreak{Kind: BreakNewRequiredParameter, Path: op, Field: pr.Value.In + " " + pr.Value.Name, Was: "optional or absent", Now: "required"})
		}
	}
	// Request body: fields the old client may leave out that are now required.
	if ob, nb := jsonBodySchema(o.RequestBody), jsonBodySchema(n.RequestBody); nb != nil {
		if ob == nil {
			if o.RequestBody == nil && n.RequestBody != nil && n.RequestBody.Value != nil && n.RequestBody.Value.Required {
				out = append(out, APIBreak{Kind: BreakNewRequiredField, Path: op, Field: "request body", Was: "absent", Now: "required"})
			}
		} else {
			w := newDiffWalk()
			w.requestBreaks(op, "request", ob, nb, 0)
			out = append(out, w.out...)
		}
	}
	// Responses: a success response the old client handled, and its fields.
	if o.Responses == nil {
		return out
	}
	for _, code := range sortedKeys(o.Responses.Map()) {
		if !strings.HasPrefix(code, "2") {
			continue
		}
		or := o.Responses.Value(code)
		var nr *openapi3.ResponseRef
		if n.Responses != nil {
			nr = n.Responses.Value(code)
		}
		if nr == nil || nr.Value == nil {
			out = append(out, APIBreak{Kind: BreakMissingResponse, Path: op, Field: "response " + code})
			continue
		}
		os, ns := responseSchema(or), responseSchema(nr)
		if os != nil && ns != nil {
			w := newDiffWalk()
			w.responseBreaks(op, "response "+code, os, ns, 0)
			out = append(out, w.out...)
		}
	}
	return out
}

// diffWalk is one body's comparison. Each pair of schemas is compared once: a
// recursive schema (a tree whose nodes list their children) would otherwise be
// walked once per path to the depth limit, exponentially many.
type diffWalk struct {
	out  []APIBreak
	seen map[[2]*openapi3.Schema]bool
}

func newDiffWalk() *diffWalk { return &diffWalk{seen: map[[2]*openapi3.Schema]bool{}} }

// first reports whether the pair is met for the first time.
func (w *diffWalk) first(o, n *openapi3.Schema) bool {
	k := [2]*openapi3.Schema{o, n}
	if w.seen[k] {
		return false
	}
	w.seen[k] = true
	return true
}

// enter reports whether the walk compares what lies below o and n: not past
// maxDiffDepth, not a second time, and not below a changed type, which it
// records as the break at field. fits says whether o's type still fits n's in
// the direction the walk's values flow.
func (w *diffWalk) enter(op, field string, o, n *openapi3.Schema, depth int, fits func(o, n *openapi3.Schema) bool) bool {
	if depth > maxDiffDepth || o == nil || n == nil || !w.first(o, n) {
		return false
	}
	if to, tn := typeText(o), typeText(n); to != "" && tn != "" && !fits(o, n) {
		w.out = append(w.out, APIBreak{Kind: BreakChangedType, Path: op, Field: field, Was: to, Now: tn})
		return false
	}
	return true
}

// responseBreaks walks an old response schema: every property it promised must
// still be there with the same type.
func (w *diffWalk) responseBreaks(op, field string, o, n *openapi3.Schema, depth int) {
	if !w.enter(op, field, o, n, depth, typeCompatible) {
		return
	}
	out := &w.out
	for _, k := range sortedKeys(o.Properties) {
		op2 := o.Properties[k]
		np, ok := n.Properties[k]
		f := joinField(field, k, depth)
		if !ok || np == nil {
			// An open schema (additionalProperties, no listed properties) still
			// may carry it; only a listed set of properties proves it gone.
			if len(n.Properties) > 0 || schemaType(n) == openapi3.TypeObject {
				*out = append(*out, APIBreak{Kind: BreakMissingField, Path: op, Field: f, Was: typeText(op2.Value)})
			}
			continue
		}
		w.responseBreaks(op, f, op2.Value, np.Value, depth+1)
	}
	if o.Items != nil && n.Items != nil {
		w.responseBreaks(op, itemsField(field, depth), o.Items.Value, n.Items.Value, depth+1)
	}
}

// requestBreaks reports request fields required now that were not before.
func (w *diffWalk) requestBreaks(op, field string, o, n *openapi3.Schema, depth int) {
	newFitsOld := func(o, n *openapi3.Schema) bool { return typeCompatible(n, o) }
	if !w.enter(op, field, o, n, depth, newFitsOld) {
		return
	}
	out := &w.out
	for _, r := range n.Required {
		if inStrings(o.Required, r) {
			continue
		}
		was := "optional"
		if _, ok := o.Properties[r]; !ok {
			was = "absent"
		}
		*out = append(*out, APIBreak{Kind: BreakNewRequiredField, Path: op, Field: joinField(field, r, depth), Was: was, Now: "required"})
	}
	for _, k := range sortedKeys(n.Properties) {
		if op2, ok := o.Properties[k]; ok && op2 != nil && n.Properties[k] != nil {
			w.requestBreaks(op, joinField(field, k, depth), op2.Value, n.Properties[k].Value, depth+1)
		}
	}
	if o.Items != nil && n.Items != nil {
		w.requestBreaks(op, itemsField(field, depth), o.Items.Value, n.Items.Value, depth+1)
	}
}

// itemsField names an array's items: "response 200: []", "…tags[]".
func itemsField(field string, depth int) string {
	if depth == 0 {
		return field + ": []"
	}
	return field + "[]"
}

// joinField names a property: "response 200: id" at the top, "….owner.id" below.
func joinField(field, k string, depth int) string {
	if depth == 0 {
		return field + ": " + k
	}
	return field + "." + k
}

// typeCompatible: does every value of from's type still fit to's? integer fits
// number; an open target takes anything.
func typeCompatible(from, to *openapi3.Schema) bool {
	if to.Type == nil || len(*to.Type) == 0 {
		return true
	}
	for _, t := range from.Type.Slice() {
		if !to.Type.Permits(t) && !(t == openapi3.TypeInteger && to.Type.Permits(openapi3.TypeNumber)) {
			return false
		}
	}
	return true
}

func typeText(s *openapi3.Schema) string {
	if s == nil || s.Type == nil {
		return ""
	}
	return strings.Join(s.Type.Slice(), "|")
}

func pathMap(doc *openapi3.T) map[string]*openapi3.PathItem {
	if doc == nil || doc.Paths == nil {
		return nil
	}
	return doc.Paths.Map()
}

func jsonBodySchema(rb *openapi3.RequestBodyRef) *openapi3.Schema {
	if rb == nil || rb.Value == nil {
		return nil
	}
	return jsonContentSchema(rb.Value.Content)
}

func responseSchema(r *openapi3.ResponseRef) *openapi3.Schema {
	if r == nil || r.Value == nil {
		return nil
	}
	return jsonContentSchema(r.Value.Content)
}

// jsonContentSchema is the schema of a content map's JSON media type.
func jsonContentSchema(c openapi3.Content) *openapi3.Schema {
	for _, k := range sortedKeys(c) {
		if isJSONMedia(strings.ToLower(k)) || k == "*/*" {
			if mt := c[k]; mt != nil && mt.Schema != nil {
				return mt.Schema.Value
			}
		}
	}
	return nil
}
