package events_test

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/events"
)

// eventConstants are the string constants of the "Event types" block of
// events.go, by name.
func eventConstants(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "events.go", nil, parser.ParseComments)
	require.NoError(t, err)
	out := map[string]string{}
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST || !strings.HasPrefix(gd.Doc.Text(), "Event types") {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, n := range vs.Names {
				lit, ok := vs.Values[i].(*ast.BasicLit)
				require.True(t, ok, "event type %s is not a string literal", n.Name)
				v, err := strconv.Unquote(lit.Value)
				require.NoError(t, err)
				out[n.Name] = v
			}
		}
	}
	require.NotEmpty(t, out, `no "Event types" const block in events.go`)
	return out
}

// Every event type constant is declared with a payload, once; every declared
// type is a constant.
func TestEveryTypeIsDeclaredOnce(t *testing.T) {
	t.Parallel()
	consts := eventConstants(t)
	values := map[string]bool{}
	for _, v := range consts {
		values[v] = true
	}
	seen := map[string]bool{}
	for _, d := range events.Types() {
		require.False(t, seen[d.Type], "%s declared twice", d.Type)
		seen[d.Type] = true
		require.True(t, values[d.Type], "%s is declared but is no constant of events.go", d.Type)
		require.Equal(t, reflect.Struct, reflect.TypeOf(d.Payload).Kind(), "%s: payload is not a struct", d.Type)
	}
	for name, v := range consts {
		require.True(t, seen[v], "events.%s (%s) has no payload in events.Types", name, v)
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, typ string
		data      any
		wantErr   string
	}{
		{"its payload", events.ToolCall, events.ToolCallData{Tool: "x"}, ""},
		{"a pointer to its payload", events.ToolCall, &events.ToolCallData{}, ""},
		{"a shared payload", events.RunFailed, events.RunEndedData{}, ""},
		{"another type's payload", events.ToolCall, events.ProgressData{}, "not events.ToolCallData"},
		{"a map", events.Progress, map[string]any{"percent": 1}, "not events.ProgressData"},
		{"nil", events.Progress, nil, "not events.ProgressData"},
		{"an undeclared type", "tool.called", events.ToolCallData{}, "not declared"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := events.Check(tc.typ, tc.data)
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

// The stored JSON keeps the field names the Studio and the CLI read, and
// leaves out only the fields that were conditionally absent before the
// payloads were typed.
func TestPayloadJSON(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		data any
		want string
	}{
		{"a queued run that waits", events.RunQueuedData{Team: "t", Priority: 3, Position: 2, RunLimit: 1},
			`{"team":"t","template":"","priority":3,"position":2,"run_limit":1}`},
		{"a queued run admitted at once", events.RunQueuedData{Team: "t", Template: "demo", Priority: 3},
			`{"team":"t","template":"demo","priority":3}`},
		{"a team's tool call", events.ToolCallData{Tool: "write_file", CallID: "c1", Decision: "allowed", DurationMS: 3},
			`{"tool":"write_file","call_id":"c1","decision":"allowed","layer":"","error":"","result":"","duration_ms":3}`},
		{"an MCP tool call", events.ToolCallData{Tool: "t", MCPProfile: "ide"},
			`{"tool":"t","call_id":"","decision":"","layer":"","error":"","result":"","duration_ms":0,"mcp_profile":"ide"}`},
		{"a model answer without extras", events.ModelAnsweredData{ToolCalls: []string{}},
			`{"content":"","tool_calls":[],"tokens":0,"provider":"","model":"","duration_ms":0}`},
		{"a delegation's end", events.FinishedDelegation("d", "completed", strings.Repeat("é", 1500), ""),
			`{"delegation_id":"d","status":"completed","result":"` + strings.Repeat("é", 1000) + `…","error":""}`},
		{"a label without private reads", events.FlowLabelledData{Untrusted: []string{"web_fetch"}}, `{"untrusted":["web_fetch"]}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			raw, err := json.Marshal(tc.data)
			require.NoError(t, err)
			require.JSONEq(t, tc.want, string(raw))
		})
	}
}

// emitSite is one place the module's code records an event: its type and
// data expressions.
type emitSite struct {
	pos       token.Position
	typ, data ast.Expr
}

// emitSites finds every Emit call (a Recorder's: ctx, run, key, type, agent,
// data; a tools.Coordinator's: ctx, key, type, data) and every store.NewEvent
// literal in the module's non-test code.
func emitSites(t *testing.T, root string) []emitSite {
	t.Helper()
	fset := token.NewFileSet()
	var sites []emitSite
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n == "testdata" || n == "node_modules" || (strings.HasPrefix(n, ".") && path != root) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !ok || sel.Sel.Name != "Emit" {
					return true
				}
				switch len(n.Args) {
				case 6:
					sites = append(sites, emitSite{fset.Position(n.Pos()), n.Args[3], n.Args[5]})
				case 4:
					sites = append(sites, emitSite{fset.Position(n.Pos()), n.Args[2], n.Args[3]})
				}
			case *ast.CompositeLit:
				if isNewEvent(n.Type) {
					sites = append(sites, newEventSite(fset, n))
				}
				if at, ok := n.Type.(*ast.ArrayType); ok && isNewEvent(at.Elt) {
					for _, el := range n.Elts {
						if lit, ok := el.(*ast.CompositeLit); ok && lit.Type == nil {
							sites = append(sites, newEventSite(fset, lit))
						}
					}
				}
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	return sites
}

func isNewEvent(e ast.Expr) bool {
	if sel, ok := e.(*ast.SelectorExpr); ok {
		if x, ok := sel.X.(*ast.Ident); ok {
			return x.Name == "store" && sel.Sel.Name == "NewEvent"
		}
	}
	return false
}

func newEventSite(fset *token.FileSet, lit *ast.CompositeLit) emitSite {
	s := emitSite{pos: fset.Position(lit.Pos())}
	for _, el := range lit.Elts {
		kv, ok := el.(*ast.KeyValueExpr)
		if !ok {
			continue
		}
		switch kv.Key.(*ast.Ident).Name {
		case "Type":
			s.typ = kv.Value
		case "Data":
			s.data = kv.Value
		}
	}
	return s
}

// Every place the code records an event names its type by a constant of
// package events (never a string literal) and passes the type's payload
// struct (never a map): a type without a schema, or data of another shape,
// cannot reach the store. A type or data held in a variable is followed by
// the compiler and by the stored events' validation against the OpenAPI
// document (fleettest).
func TestEmitSitesPassDeclaredPayloads(t *testing.T) {
	t.Parallel()
	sites := emitSites(t, "..")
	require.Greater(t, len(sites), 25, "the walk found too few emit sites to mean anything")
	for _, p := range judge(sites, eventConstants(t)) {
		t.Error(p)
	}
}

// judge lists the problems of sites.
func judge(sites []emitSite, consts map[string]string) []string {
	payloads := map[string]string{}
	for _, d := range events.Types() {
		payloads[d.Type] = reflect.TypeOf(d.Payload).Name()
	}
	var problems []string
	for _, s := range sites {
		if s.typ == nil || s.data == nil {
			problems = append(problems, fmt.Sprintf("%s: an event without a Type or Data", s.pos))
			continue
		}
		if lit, ok := s.typ.(*ast.BasicLit); ok {
			problems = append(problems, fmt.Sprintf("%s: event type %s is a string literal: use its constant in package events", s.pos, lit.Value))
			continue
		}
		typ := ""
		if sel, ok := s.typ.(*ast.SelectorExpr); ok {
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == "events" {
				v, ok := consts[sel.Sel.Name]
				if !ok {
					problems = append(problems, fmt.Sprintf("%s: events.%s is no event type constant", s.pos, sel.Sel.Name))
					continue
				}
				typ = v
			}
		}
		if id, ok := s.typ.(*ast.Ident); ok {
			typ = consts[id.Name] // inside package events
		}
		lit, ok := s.data.(*ast.CompositeLit)
		if !ok {
			if id, ok := s.data.(*ast.Ident); ok && id.Name == "nil" {
				problems = append(problems, fmt.Sprintf("%s: nil event data", s.pos))
			}
			continue // a variable or a call: its type is the compiler's
		}
		var name string
		switch ty := lit.Type.(type) {
		case *ast.MapType:
			problems = append(problems, fmt.Sprintf("%s: event data is a map literal: build the type's payload struct (events/payloads.go)", s.pos))
			continue
		case *ast.SelectorExpr:
			name = ty.Sel.Name
		case *ast.Ident:
			name = ty.Name
		}
		if typ != "" && payloads[typ] != name {
			problems = append(problems, fmt.Sprintf("%s: %s event with data %s, not its payload %s", s.pos, typ, name, payloads[typ]))
		}
	}
	return problems
}

// The check refuses what it must, and passes what it must.
func TestEmitSitesCatchLiterals(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src := `package x

func f() {
	r.Emit(ctx, run, "k", "tool.call", "", events.ToolCallData{})
	r.Emit(ctx, run, "k", events.ToolCall, "", map[string]any{})
	c.Emit(ctx, "k", events.Progress, events.ToolCallData{})
	c.Emit(ctx, "k", events.Progress, nil)
	c.Emit(ctx, "k", events.Colour, events.ProgressData{})
	_ = []store.NewEvent{{Key: "k", Type: events.ToolCall, Data: events.ToolCallData{}}}
	_ = store.NewEvent{Key: "k", Type: events.RunFailed, Data: events.RunEndedData{}}
	_ = store.NewEvent{Key: "k", Type: typ, Data: data}
	c.Emit(ctx, "k", events.Progress, events.ProgressData{Percent: 1})
}
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "x.go"), []byte(src), 0o644))
	sites := emitSites(t, dir)
	require.Len(t, sites, 9)
	problems := judge(sites, eventConstants(t))
	require.Len(t, problems, 5, "%v", problems)
	for i, want := range []string{"string literal", "map literal", "with data ToolCallData, not its payload ProgressData", "nil event data", "events.Colour is no event type"} {
		require.Contains(t, problems[i], want)
	}
}
