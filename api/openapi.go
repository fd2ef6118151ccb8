package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"unicode"

	"github.com/gofiber/fiber/v2"
	"github.com/invopop/jsonschema"
)

// OpenAPIPath is where the API serves its OpenAPI document.
const OpenAPIPath = "/api/openapi.json"

// NotInOpenAPI are the path prefixes the Fiber app serves that the OpenAPI
// document leaves out on purpose, each with the reason. A route the app
// registers outside them must be in the document (TestRoutesMatchOpenAPI).
var NotInOpenAPI = map[string]string{
	"/monitoring": "asynqmon's web UI and the JSON API its pages call: asynqmon's, versioned with it, not ours",
	"/app":        "the Studio: HTML shells and their static files (package studio), which call the documented API",
	"/":           "the redirect to the Studio (exactly /)",
}

// route is one row of the route table (Server.routes): how New registers it and
// how the OpenAPI document describes it. Build one with get, post or del and the
// methods below; every method returns the row, so a row reads as one chain.
type route struct {
	method, path, summary string
	handler               fiber.Handler
	// anyRole are the roles of which the token must hold one; nil serves the route
	// without a token.
	anyRole     []string
	description string
	params      []param
	request     any
	requestOpt  bool
	responses   []response
	errs        []int
}

type param struct {
	name, in, description string
	required              bool
	schema                map[string]any
}

type response struct {
	status      int
	body        any    // a Go value of the type the handler encodes; nil: no body
	media       string // "" is application/json
	description string
	// item is, for a stream, a Go value of the type of each event's data: its
	// schema is the media type's x-event-data (OpenAPI 3.1 has no keyword for the
	// items of a stream; 3.2's itemSchema is one).
	item any
}

func get(path, summary string, h fiber.Handler) route {
	return route{method: http.MethodGet, path: path, summary: summary, handler: h}
}

func post(path, summary string, h fiber.Handler) route {
	return route{method: http.MethodPost, path: path, summary: summary, handler: h}
}

func del(path, summary string, h fiber.Handler) route {
	return route{method: http.MethodDelete, path: path, summary: summary, handler: h}
}

// roles asks a token holding one of roles (admin holds every role, read_all holds read).
func (r route) roles(roles ...string) route { r.anyRole = roles; return r }

func (r route) describe(text string) route { r.description = text; return r }

// body is the JSON request body, decoded strictly into the type of v.
func (r route) body(v any) route { r.request = v; return r }

// optionalBody is body for a route that also accepts an empty request body.
func (r route) optionalBody(v any) route { r.request, r.requestOpt = v, true; return r }

// query documents a query parameter; schema is a JSON Schema.
func (r route) query(name, description string, schema map[string]any) route {
	r.params = append(r.params, param{name: name, in: "query", description: description, schema: schema})
	return r
}

func (r route) header(name, description string, schema map[string]any) route {
	r.params = append(r.params, param{name: name, in: "header", description: description, schema: schema})
	return r
}

// pathParam describes a path parameter; one not described is a plain string.
func (r route) pathParam(name, description string, schema map[string]any) route {
	r.params = append(r.params, param{name: name, in: "path", description: description, required: true, schema: schema})
	return r
}

// returns documents a JSON answer with the type of v (nil: no body).
func (r route) returns(status int, v any) route {
	r.responses = append(r.responses, response{status: status, body: v})
	return r
}

// returnsText documents a non-JSON answer (a string body of media type media).
func (r route) returnsText(status int, media, description string) route {
	r.responses = append(r.responses, response{status: status, media: media, description: description})
	return r
}

// returnsStream documents a stream of media type media whose events carry a
// JSON value of the type of item.
func (r route) returnsStream(status int, media, description string, item any) route {
	r.responses = append(r.responses, response{status: status, media: media, description: description, item: item})
	return r
}

// errors lists the error statuses the handler itself answers ({"error","field"}).
// 401 and 403 of a route asking a token, 400 and 413 of one with a body, and
// 500 are listed for every such route.
func (r route) errors(statuses ...int) route { r.errs = append(r.errs, statuses...); return r }

// openAPIPath is the route's path in OpenAPI form: Fiber's :id becomes {id}.
func (r route) openAPIPath() string { return OpenAPIPathOf(r.path) }

// OpenAPIPathOf turns a Fiber route path into an OpenAPI path template
// (/api/runs/:id → /api/runs/{id}).
func OpenAPIPathOf(fiberPath string) string {
	segs := strings.Split(fiberPath, "/")
	for i, s := range segs {
		if name, ok := strings.CutPrefix(s, ":"); ok {
			segs[i] = "{" + name + "}"
		}
	}
	return strings.Join(segs, "/")
}

// OpenAPI returns the OpenAPI 3.1 document of the API, the bytes served at
// OpenAPIPath. It is built once from the route table with the schemas reflected
// from the Go types the handlers decode and encode, so it describes what the
// code does.
func OpenAPI() ([]byte, error) {
	openAPIOnce.Do(func() {
		// The table is read for its paths and types only: no handler runs.
		openAPIDoc, openAPIErr = buildOpenAPI((&Server{}).routes())
	})
	return openAPIDoc, openAPIErr
}

var (
	openAPIOnce sync.Once
	openAPIDoc  []byte
	openAPIErr  error
)

func (s *Server) serveOpenAPI(c *fiber.Ctx) error {
	doc, err := OpenAPI()
	if err != nil {
		return fmt.Errorf("openapi document: %w", err)
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(doc)
}

// schemaSet reflects Go types into the document's components. Response types
// list every field without omitempty as required (the encoder always writes
// it); request types list none, because the decoder accepts a missing field and
// the handler says which it needs. Both forbid unknown fields: responses write
// none, and requests are decoded with DisallowUnknownFields.
type schemaSet struct {
	components map[string]json.RawMessage
	// types are the Go types of the components, by component name.
	types     map[string]reflect.Type
	req, resp *jsonschema.Reflector
	err       error
}

func newSchemaSet() *schemaSet {
	s := &schemaSet{components: map[string]json.RawMessage{}, types: map[string]reflect.Type{}}
	namer := func(t reflect.Type) string {
		name := schemaName(t)
		if name != "" {
			s.types[name] = t
		}
		return name
	}
	s.req = &jsonschema.Reflector{Anonymous: true, RequiredFromJSONSchemaTags: true, Namer: namer, LookupComment: lookupComment}
	s.resp = &jsonschema.Reflector{Anonymous: true, Namer: namer, LookupComment: lookupComment}
	return s
}

// lookupComment describes a component or one of its fields with its Go doc
// comment (goComments, generated from the source: the binary has none).
func lookupComment(t reflect.Type, field string) string {
	key := schemaName(t)
	if key == "" {
		return ""
	}
	if field != "" {
		key += "." + field
	}
	return goComments[key]
}

// schemaName names a component: the API's own types by their name, others by
// package and name (store.Event and lease.Event are different shapes).
func schemaName(t reflect.Type) string {
	name := t.Name()
	if name == "" {
		return ""
	}
	pkg := t.PkgPath()
	if pkg == reflect.TypeOf(Server{}).PkgPath() {
		r := []rune(name)
		r[0] = unicode.ToUpper(r[0])
		return string(r)
	}
	if pkg == "" {
		return "" // builtins stay inline
	}
	return pkg[strings.LastIndex(pkg, "/")+1:] + "." + name
}

const defsRef, componentsRef = `"#/$defs/`, `"#/components/schemas/`

// schemaOf returns the schema of v's type (usually a $ref into the components).
func (s *schemaSet) schemaOf(v any, request bool) json.RawMessage {
	r := s.resp
	if request {
		r = s.req
	}
	root := r.Reflect(v)
	defs := root.Definitions
	root.Definitions, root.Version = nil, ""
	if request {
		for _, def := range defs {
			nullableContainers(def)
		}
		nullableContainers(root)
	}
	for name, def := range defs {
		raw, err := json.Marshal(def)
		if err != nil {
			s.err = fmt.Errorf("schema %s: %w", name, err)
			continue
		}
		raw = bytes.ReplaceAll(raw, []byte(defsRef), []byte(componentsRef))
		if old, ok := s.components[name]; ok && !bytes.Equal(old, raw) {
			// One type used both as a request and as a response, or two types of
			// one name: either would make a component say two things.
			s.err = fmt.Errorf("schema %s: two different shapes under one name", name)
			continue
		}
		s.components[name] = raw
	}
	raw, err := json.Marshal(root)
	if err != nil {
		s.err = fmt.Errorf("schema of %T: %w", v, err)
	}
	return bytes.ReplaceAll(raw, []byte(defsRef), []byte(componentsRef))
}

func typeOf[T any]() reflect.Type { return reflect.TypeOf((*T)(nil)).Elem() }

// nullableContainers lets every object and array property of a request schema
// be null too: encoding/json decodes null into a nil map or slice, and Go
// clients send one for a map or slice they never filled (variables, a script
// call's args).
func nullableContainers(s *jsonschema.Schema) {
	if s == nil {
		return
	}
	nullableContainers(s.Items)
	nullableContainers(s.AdditionalProperties)
	if s.Properties == nil {
		return
	}
	for p := s.Properties.Oldest(); p != nil; p = p.Next() {
		nullableContainers(p.Value)
		if p.Value.Type == "object" || p.Value.Type == "array" {
			p.Value = &jsonschema.Schema{OneOf: []*jsonschema.Schema{p.Value, {Type: "null"}}}
		}
	}
}

// ref names a component of the document.
func ref(name string) map[string]any { return map[string]any{"$ref": "#/components/schemas/" + name} }

func buildOpenAPI(routes []route) ([]byte, error) {
	doc, _, err := buildOpenAPIWith(newSchemaSet(), routes)
	return doc, err
}

// buildOpenAPIWith builds the document into schemas; it returns the Go types of
// its components too.
func buildOpenAPIWith(schemas *schemaSet, routes []route) ([]byte, map[string]reflect.Type, error) {
	errRef := ref(schemaName(typeOf[errorResponse]()))
	schemas.schemaOf(errorResponse{}, false)
	paths := map[string]map[string]any{}
	for _, r := range routes {
		p := r.openAPIPath()
		if paths[p] == nil {
			paths[p] = map[string]any{}
		}
		m := strings.ToLower(r.method)
		if _, dup := paths[p][m]; dup {
			return nil, nil, fmt.Errorf("route table: %s %s twice", r.method, r.path)
		}
		op, err := r.operation(schemas, errRef)
		if err != nil {
			return nil, nil, err
		}
		paths[p][m] = op
	}
	if err := schemas.eventUnion(); err != nil {
		return nil, nil, err
	}
	if schemas.err != nil {
		return nil, nil, schemas.err
	}
	// The tags the operations use, declared once with a description each, in
	// order, so generated clients and documentation viewers group by them.
	tagSet := map[string]bool{}
	for _, r := range routes {
		tagSet[tag(r.path)] = true
	}
	tagNames := make([]string, 0, len(tagSet))
	for t := range tagSet {
		tagNames = append(tagNames, t)
	}
	sort.Strings(tagNames)
	tags := make([]map[string]any, len(tagNames))
	for i, t := range tagNames {
		tags[i] = map[string]any{"name": t, "description": "Operations under /api/" + t + "."}
		if t == "operations" {
			tags[i]["description"] = "Health, readiness and metrics, outside /api."
		}
	}
	doc := map[string]any{
		// A relative server: the document describes the API that serves it, at
		// whatever address the deployment gives it.
		"servers":           []map[string]any{{"url": "/", "description": "The API that serves this document."}},
		"tags":              tags,
		"openapi":           "3.1.0",
		"jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
		"info": map[string]any{
			"title":   "Aetherium Fleet API",
			"version": "1",
			"description": "Runs of multi-agent LLM teams: submit, follow (SSE), approve, audit. " +
				"Every error answers {\"error\": message, \"field\": the offending input when there is one}. " +
				"Operations that ask for a token name the roles in x-roles, any one of which suffices " +
				"(admin holds every role, read_all holds read); an API configured without tokens " +
				"(loopback only) asks for none. Every operation answers 403 to a Host outside the allowlist and to a change from another " +
				"origin, and a change needs Content-Type: application/json (415). The document is generated from the handlers' Go types.",
		},
		"paths": paths,
		"components": map[string]any{
			"schemas": schemas.components,
			"securitySchemes": map[string]any{
				"bearer": map[string]any{"type": "http", "scheme": "bearer",
					"description": "An api.tokens secret; the configuration holds only its SHA-256."},
			},
		},
	}
	raw, err := json.MarshalIndent(doc, "", "  ")
	types := map[string]reflect.Type{}
	for name := range schemas.components {
		// The namer saw inline types (time.Time) too; the per-type event
		// components (eventUnion) have no Go type of their own.
		if t := schemas.types[name]; t != nil {
			types[name] = t
		}
	}
	return raw, types, err
}

func (r route) operation(schemas *schemaSet, errRef map[string]any) (map[string]any, error) {
	desc := r.description
	op := map[string]any{
		"operationId": operationID(r.method, r.path),
		"summary":     r.summary,
		"tags":        []string{tag(r.path)},
	}
	if r.anyRole != nil {
		op["security"] = []map[string][]string{{"bearer": {}}}
		op["x-roles"] = r.anyRole
		desc = strings.TrimSpace(desc + "\n\nRoles: any of " + strings.Join(r.anyRole, ", ") + ".")
	} else {
		op["security"] = []map[string][]string{}
	}
	if desc != "" {
		op["description"] = desc
	}
	params, err := r.parameters()
	if err != nil {
		return nil, err
	}
	if len(params) > 0 {
		op["parameters"] = params
	}
	if r.request != nil {
		op["requestBody"] = map[string]any{
			"required": !r.requestOpt,
			"content":  map[string]any{fiber.MIMEApplicationJSON: map[string]any{"schema": schemas.schemaOf(r.request, true)}},
		}
	}
	responses := map[string]any{}
	for _, res := range r.responses {
		key := fmt.Sprint(res.status)
		d := res.description
		if d == "" {
			d = http.StatusText(res.status)
		}
		out := map[string]any{"description": d}
		switch {
		case res.media != "":
			media := map[string]any{"schema": map[string]any{"type": "string"}}
			if res.item != nil {
				media["x-event-data"] = schemas.schemaOf(res.item, false)
			}
			out["content"] = map[string]any{res.media: media}
		case res.body != nil:
			out["content"] = map[string]any{fiber.MIMEApplicationJSON: map[string]any{"schema": schemas.schemaOf(res.body, false)}}
		}
		if prev, dup := responses[key].(map[string]any); dup {
			// One status, two representations (the event stream, and the same
			// events as a JSON list): one response with both media types.
			merged, ok := mergeContent(prev, out)
			if !ok {
				return nil, fmt.Errorf("route table: %s %s: status %d twice", r.method, r.path, res.status)
			}
			out = merged
		}
		responses[key] = out
	}
	errs := slices.Clone(r.errs)
	if r.anyRole != nil {
		errs = append(errs, http.StatusUnauthorized)
	}
	// Every operation: a Host not allowed or a change from another origin (edge.go).
	errs = append(errs, http.StatusForbidden)
	if r.method != http.MethodGet {
		errs = append(errs, http.StatusUnsupportedMediaType)
	}
	if r.request != nil {
		errs = append(errs, http.StatusBadRequest, http.StatusRequestEntityTooLarge)
	}
	errs = append(errs, http.StatusInternalServerError)
	for _, st := range errs {
		key := fmt.Sprint(st)
		if _, ok := responses[key]; ok {
			continue
		}
		responses[key] = errorAnswer(http.StatusText(st), errRef)
	}
	// Any other status (a 431 for oversized headers, …) is still the error shape.
	responses["default"] = errorAnswer("Any other error", errRef)
	op["responses"] = responses
	return op, nil
}

// mergeContent joins two documented answers of one status that have
// different media types, under the first's description (which names both);
// ok is false when either has no content or they share a media type.
func mergeContent(a, b map[string]any) (map[string]any, bool) {
	ca, _ := a["content"].(map[string]any)
	cb, _ := b["content"].(map[string]any)
	if len(ca) == 0 || len(cb) == 0 {
		return nil, false
	}
	content := map[string]any{}
	for m, v := range ca {
		content[m] = v
	}
	for m, v := range cb {
		if _, both := content[m]; both {
			return nil, false
		}
		content[m] = v
	}
	return map[string]any{"description": a["description"], "content": content}, true
}

func errorAnswer(description string, errRef map[string]any) map[string]any {
	return map[string]any{"description": description,
		"content": map[string]any{fiber.MIMEApplicationJSON: map[string]any{"schema": errRef}}}
}

// parameters lists the route's parameters: every path parameter (a string
// unless pathParam describes it), then the query and header ones.
func (r route) parameters() ([]map[string]any, error) {
	described := map[string]param{}
	for _, p := range r.params {
		if p.in == "path" {
			described[p.name] = p
		}
	}
	var out []map[string]any
	for _, seg := range strings.Split(r.path, "/") {
		name, ok := strings.CutPrefix(seg, ":")
		if !ok {
			if strings.ContainsAny(seg, "*+?") {
				return nil, fmt.Errorf("route table: %s %s: wildcard and optional segments have no OpenAPI form", r.method, r.path)
			}
			continue
		}
		p, ok := described[name]
		if !ok {
			p = param{name: name, in: "path", required: true, schema: map[string]any{"type": "string"}}
		}
		delete(described, name)
		out = append(out, p.openAPI())
	}
	if len(described) > 0 {
		return nil, fmt.Errorf("route table: %s %s describes path parameters it does not have", r.method, r.path)
	}
	for _, p := range r.params {
		if p.in != "path" {
			out = append(out, p.openAPI())
		}
	}
	return out, nil
}

func (p param) openAPI() map[string]any {
	m := map[string]any{"name": p.name, "in": p.in, "schema": p.schema}
	if p.required {
		m["required"] = true
	}
	if p.description != "" {
		m["description"] = p.description
	}
	return m
}

// operationID derives a stable id from method and path: GET /api/runs/:id/events
// is getRunsByIdEvents.
func operationID(method, path string) string {
	var b strings.Builder
	b.WriteString(strings.ToLower(method))
	for _, seg := range strings.Split(strings.TrimPrefix(path, "/api"), "/") {
		name, isParam := strings.CutPrefix(seg, ":")
		if isParam {
			b.WriteString("By")
		}
		for _, word := range strings.FieldsFunc(name, func(r rune) bool { return r == '-' || r == '_' || r == '.' }) {
			r := []rune(word)
			r[0] = unicode.ToUpper(r[0])
			b.WriteString(string(r))
		}
	}
	return b.String()
}

// tag groups operations by their first path segment under /api (runs,
// approvals, …); the probes outside /api are "operations".
func tag(path string) string {
	rest, ok := strings.CutPrefix(path, "/api/")
	if !ok {
		return "operations"
	}
	first, _, _ := strings.Cut(rest, "/")
	return strings.TrimSuffix(first, ".json")
}

// enumOf is a string schema with the sorted keys of set as its enum.
func enumOf(set map[string]bool) map[string]any {
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	enum := make([]any, len(keys))
	for i, k := range keys {
		enum[i] = k
	}
	return map[string]any{"type": "string", "enum": enum}
}

func intRange(lo, hi int) map[string]any {
	return map[string]any{"type": "integer", "minimum": lo, "maximum": hi}
}

var (
	stringSchema = map[string]any{"type": "string"}
	uuidSchema   = map[string]any{"type": "string", "format": "uuid"}
)
