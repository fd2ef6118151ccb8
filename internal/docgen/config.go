package main

import (
	"fmt"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/aetherium-engine/aetherium/config"
)

// module is the module path: a Go type's package path under it names the
// directory of its source.
const module = "github.com/aetherium-engine/aetherium"

// configKey is one row of the configuration page.
type configKey struct {
	key, typ, def, constant, env, doc string
}

// configKeys renders docs/reference/configuration-keys.md: every key of
// aetherium.yaml, walked from config.Config through its yaml tags (inline sections
// flattened, maps as <name>, lists as []), each with the doc comment of its Go
// field, its default (the value config.Default() holds once every section's
// WithDefaults has filled its zero fields, which is where the packages' Default*
// constants land; the constant is named beside it), and the environment variable
// config's applyEnv reads into it.
func configKeys(root string) ([]byte, error) {
	src := &sources{root: root, pkgs: map[string]*pkgSource{}}
	env, err := envVars(filepath.Join(root, "config", "config.go"))
	if err != nil {
		return nil, err
	}
	var rows []configKey
	w := walker{src: src, env: env, rows: &rows, inside: map[reflect.Type]bool{}}
	if err := w.walk(reflect.ValueOf(config.Default()), "", ""); err != nil {
		return nil, err
	}
	var b strings.Builder
	b.WriteString(header("Configuration keys", "the `Config` structs of `config` and the packages it composes (yaml tags, doc comments, defaults)"))
	b.WriteString("`aetherium.yaml` (path in `AETHERIUM_CONFIG`; `./aetherium.yaml` when present) overlaid by the\n" +
		"environment variables below, then validated: an unknown key or an invalid value stops start-up\n" +
		"with an error naming the key. Durations take a unit (`30s`, `5m`). A default is what\n" +
		"`config.Default()` holds once each section's `WithDefaults` has filled its zero fields; a key\n" +
		"shown without one is empty or off unless its description says otherwise. `<name>` stands for a\n" +
		"map key of your choosing, `[]` for an entry of a list. The [configuration](configuration.md)\n" +
		"page explains the keys by topic.\n")
	section := "\x00"
	for _, k := range rows {
		top := k.key
		if i := strings.IndexAny(top, ".["); i >= 0 {
			top = top[:i]
		} else {
			top = ""
		}
		if k.typ == "section" && !strings.ContainsAny(k.key, ".[") {
			// A top-level section: its comment introduces its own table.
			section = k.key
			fmt.Fprintf(&b, "\n## `%s`\n\n%s\n", k.key, strings.Join(strings.Fields(k.doc), " "))
			b.WriteString(tableHead)
			continue
		}
		if top != section {
			section = top
			title := "Top-level keys"
			if top != "" {
				title = "`" + top + "`"
			}
			fmt.Fprintf(&b, "\n## %s\n%s", title, tableHead)
		}
		def := k.def
		if k.constant != "" {
			if def == "" {
				def = "`" + k.constant + "`"
			} else {
				def += " (`" + k.constant + "`)"
			}
		}
		envCol := ""
		if k.env != "" {
			envCol = k.env
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", k.key, k.typ, def, envCol, cell(k.doc))
	}
	return []byte(b.String()), nil
}

const tableHead = "\n| key | type | default | env | description |\n| --- | --- | --- | --- | --- |\n"

// walker walks a configuration value by its yaml tags.
type walker struct {
	src  *sources
	env  map[string]string // Go field path (API.Addr) → environment variables
	rows *[]configKey
	// inside are the list and map element types being walked: a type that
	// holds a list of itself (llm.ModelConfig's fallbacks) is listed once.
	inside map[reflect.Type]bool
}

var (
	durationType    = reflect.TypeOf(time.Duration(0))
	unmarshalerType = reflect.TypeOf((*yaml.Unmarshaler)(nil)).Elem()
)

// walk visits v (a struct) whose key prefix is prefix and Go field path goPath.
func (w walker) walk(v reflect.Value, prefix, goPath string) error {
	v = withDefaults(v)
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, inline := yamlName(f)
		if name == "-" {
			continue
		}
		fv := v.Field(i)
		path := joinPath(goPath, f.Name)
		if inline {
			if f.Anonymous { // promoted: c.API.Addr, not c.API.Config.Addr
				path = goPath
			}
			if err := w.walk(fv, prefix, path); err != nil {
				return err
			}
			continue
		}
		key := name
		if prefix != "" {
			key = prefix + "." + name
		}
		comment, constant := w.src.field(t, f.Name, goPath[strings.LastIndex(goPath, ".")+1:])
		if err := w.visit(fv, f.Type, key, path, comment, constant); err != nil {
			return err
		}
	}
	return nil
}

// visit emits key (or walks into it when it is a section).
func (w walker) visit(v reflect.Value, t reflect.Type, key, path, comment, constant string) error {
	leaf := func() {
		*w.rows = append(*w.rows, configKey{key: key, typ: typeName(t), def: value(v), constant: constant, env: w.env[path], doc: comment})
	}
	if isLeaf(t) {
		leaf()
		return nil
	}
	switch t.Kind() {
	case reflect.Pointer:
		e := reflect.New(t.Elem()).Elem()
		if v.IsValid() && !v.IsNil() {
			e = v.Elem()
		}
		return w.visit(e, t.Elem(), key, path, comment, constant)
	case reflect.Struct:
		if comment != "" {
			*w.rows = append(*w.rows, configKey{key: key, typ: "section", doc: comment})
		}
		return w.walk(v, key, path)
	case reflect.Map:
		if comment != "" {
			*w.rows = append(*w.rows, configKey{key: key + ".<name>", typ: "map of " + typeName(t.Elem()), doc: comment})
		}
		if isLeaf(t.Elem()) {
			return nil
		}
		return w.walkElem(t.Elem(), key+".<name>", path)
	case reflect.Slice:
		*w.rows = append(*w.rows, configKey{key: key, typ: "list", doc: comment})
		return w.walkElem(t.Elem(), key+"[]", path)
	}
	leaf()
	return nil
}

// walkElem walks the element type of a map or a list (a zero value: its entries
// are yours, they have no defaults of their own but their WithDefaults).
func (w walker) walkElem(t reflect.Type, key, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || w.inside[t] {
		return nil
	}
	w.inside[t] = true
	defer delete(w.inside, t)
	return w.walk(reflect.New(t).Elem(), key, path+"[]")
}

// isLeaf reports a type written as one YAML value: scalars, durations, lists and
// maps of scalars, and types with their own YAML form.
func isLeaf(t reflect.Type) bool {
	if t == durationType || reflect.PointerTo(t).Implements(unmarshalerType) {
		return true
	}
	switch t.Kind() {
	case reflect.Struct:
		return false
	case reflect.Pointer:
		return isLeaf(t.Elem())
	case reflect.Slice, reflect.Map:
		e := t.Elem()
		for e.Kind() == reflect.Pointer {
			e = e.Elem()
		}
		return e.Kind() != reflect.Struct || isLeaf(e)
	}
	return true
}

// withDefaults returns v with its type's WithDefaults applied, when it has one.
func withDefaults(v reflect.Value) reflect.Value {
	m := v.MethodByName("WithDefaults")
	if !m.IsValid() || m.Type().NumIn() != 0 || m.Type().NumOut() != 1 || m.Type().Out(0) != v.Type() {
		return v
	}
	return m.Call(nil)[0]
}

// yamlName is the key yaml.v3 reads a field from, and whether it is inlined.
func yamlName(f reflect.StructField) (string, bool) {
	tag := f.Tag.Get("yaml")
	name, opts, _ := strings.Cut(tag, ",")
	if strings.Contains(","+opts+",", ",inline,") {
		return "", true
	}
	if name == "" {
		name = strings.ToLower(f.Name)
	}
	return name, false
}

func joinPath(a, b string) string {
	if a == "" {
		return b
	}
	return a + "." + b
}

// typeName is a reader's name for a key's type.
func typeName(t reflect.Type) string {
	switch {
	case t == durationType:
		return "duration"
	case t.Kind() == reflect.Pointer:
		return typeName(t.Elem())
	case t.Kind() == reflect.Slice:
		return "list of " + typeName(t.Elem())
	case t.Kind() == reflect.Map:
		return "map of " + typeName(t.Elem())
	case t.PkgPath() != "" && t.Kind() != reflect.Struct && reflect.PointerTo(t).Implements(unmarshalerType):
		return path.Base(t.PkgPath()) + "." + t.Name()
	case t.Kind() == reflect.Struct:
		return path.Base(t.PkgPath()) + "." + t.Name()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	}
	return t.Kind().String()
}

// value renders a default as YAML would be written ("" for a zero value).
func value(v reflect.Value) string {
	if !v.IsValid() || v.IsZero() {
		return ""
	}
	if v.Kind() == reflect.Pointer {
		return value(v.Elem())
	}
	if v.Type() == durationType {
		return "`" + shortDuration(time.Duration(v.Int())) + "`"
	}
	if st, ok := v.Interface().(fmt.Stringer); ok && v.Kind() != reflect.Map && v.Kind() != reflect.Slice {
		return "`" + st.String() + "`" // sizes as written: 1GiB, 5%
	}
	out, err := yaml.Marshal(v.Interface())
	if err != nil {
		return "`" + fmt.Sprint(v.Interface()) + "`"
	}
	s := strings.TrimSpace(string(out))
	if strings.Contains(s, "\n") {
		// A list or a map: one line in flow style.
		var n yaml.Node
		if yaml.Unmarshal(out, &n) == nil && len(n.Content) == 1 {
			n.Content[0].Style = yaml.FlowStyle
			if flow, err := yaml.Marshal(n.Content[0]); err == nil {
				s = strings.TrimSpace(string(flow))
			}
		}
	}
	if strings.HasPrefix(s, "\"") || strings.HasPrefix(s, "'") {
		if u, err := strconv.Unquote(s); err == nil {
			s = u
		}
	}
	return "`" + s + "`"
}

// shortDuration is d as a configuration writes it: 2m rather than 2m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// cell makes a comment one table cell.
func cell(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	return strings.ReplaceAll(s, "|", `\|`)
}

// sources reads the doc comments of the module's packages from their source.
type sources struct {
	root string
	pkgs map[string]*pkgSource
}

// pkgSource is one package's struct field comments and Default* constants.
type pkgSource struct {
	name      string
	fields    map[string]map[string]string // type → field → comment
	constants map[string]bool
}

// field returns the doc comment of field name of struct type t and the
// package's Default<parent><name> constant (the field of one of several values
// of t: wsquota.DefaultProductionQuota for WorkspaceTiers.Production.Quota), or
// else its Default<name>, if it declares one.
func (s *sources) field(t reflect.Type, name, parent string) (comment, constant string) {
	p, err := s.pkg(t.PkgPath())
	if err != nil || p == nil {
		return "", ""
	}
	switch {
	case parent != "" && p.constants["Default"+parent+name]:
		constant = p.name + ".Default" + parent + name
	case p.constants["Default"+name]:
		constant = p.name + ".Default" + name
	}
	return p.fields[t.Name()][name], constant
}

func (s *sources) pkg(importPath string) (*pkgSource, error) {
	if p, ok := s.pkgs[importPath]; ok {
		return p, nil
	}
	rel, ok := strings.CutPrefix(importPath, module+"/")
	if !ok {
		s.pkgs[importPath] = nil
		return nil, nil
	}
	fset := token.NewFileSet()
	dir := filepath.Join(s.root, filepath.FromSlash(rel))
	parsed, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	p := &pkgSource{fields: map[string]map[string]string{}, constants: map[string]bool{}}
	for name, astPkg := range parsed {
		p.name = name
		files := make([]*ast.File, 0, len(astPkg.Files))
		for _, f := range astPkg.Files {
			files = append(files, f)
		}
		dp, err := doc.NewFromFiles(fset, files, importPath, doc.PreserveAST)
		if err != nil {
			return nil, err
		}
		for _, c := range dp.Consts {
			for _, n := range c.Names {
				p.constants[n] = true
			}
		}
		for _, ty := range dp.Types {
			for _, c := range ty.Consts {
				for _, n := range c.Names {
					p.constants[n] = true
				}
			}
			for _, spec := range ty.Decl.Specs {
				ts, ok := spec.(*ast.TypeSpec)
				if !ok {
					continue
				}
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					continue
				}
				m := map[string]string{}
				for _, f := range st.Fields.List {
					text := f.Doc.Text()
					if text == "" {
						text = f.Comment.Text()
					}
					names := f.Names
					if len(names) == 0 { // embedded: named by its type
						names = []*ast.Ident{{Name: embeddedName(f.Type)}}
					}
					for _, n := range names {
						m[n.Name] = text
					}
				}
				p.fields[ts.Name.Name] = m
			}
		}
	}
	s.pkgs[importPath] = p
	return p, nil
}

func embeddedName(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return embeddedName(x.X)
	case *ast.SelectorExpr:
		return x.Sel.Name
	case *ast.Ident:
		return x.Name
	}
	return ""
}

// envVars reads config's applyEnv: each environment variable it looks up and the
// Go field path (API.Addr) it sets, from the maps of variables to fields and from
// the `if v, ok := env("X"); ok { c.F… = … }` statements. Several variables of one
// field are joined.
func envVars(file string) (map[string]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, nil, 0)
	if err != nil {
		return nil, err
	}
	byField := map[string][]string{}
	add := func(name string, target ast.Expr) {
		if p := fieldPath(target); p != "" && !contains(byField[p], name) {
			byField[p] = append(byField[p], name)
		}
	}
	var fn *ast.FuncDecl
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Name.Name == "applyEnv" {
			fn = fd
		}
	}
	if fn == nil {
		return nil, fmt.Errorf("%s: no func applyEnv", file)
	}
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.KeyValueExpr:
			if name, ok := stringLit(x.Key); ok {
				if u, ok := x.Value.(*ast.UnaryExpr); ok && u.Op == token.AND {
					add(name, u.X)
				}
			}
		case *ast.IfStmt:
			as, ok := x.Init.(*ast.AssignStmt)
			if !ok || len(as.Rhs) != 1 {
				return true
			}
			call, ok := as.Rhs[0].(*ast.CallExpr)
			if !ok || len(call.Args) != 1 {
				return true
			}
			if id, ok := call.Fun.(*ast.Ident); !ok || id.Name != "env" {
				return true
			}
			name, ok := stringLit(call.Args[0])
			if !ok {
				return true
			}
			for _, st := range x.Body.List {
				a, ok := st.(*ast.AssignStmt)
				if ok && len(a.Lhs) == 1 && fieldPath(a.Lhs[0]) != "" {
					add(name, a.Lhs[0])
					break
				}
			}
		}
		return true
	})
	out := map[string]string{}
	for p, names := range byField {
		sort.Slice(names, func(i, j int) bool { // AETHERIUM_ spellings first
			ai, aj := strings.HasPrefix(names[i], "AETHERIUM_"), strings.HasPrefix(names[j], "AETHERIUM_")
			if ai != aj {
				return ai
			}
			return names[i] < names[j]
		})
		for i, n := range names {
			names[i] = "`" + n + "`"
		}
		out[p] = strings.Join(names, ", ")
	}
	return out, nil
}

// fieldPath is the Go field path of c.A.B (A.B), "" for anything else. Embedded
// section types are dropped by the walker's inline handling, so c.API.Addr and
// c.API.Config.Addr are both API.Addr.
func fieldPath(e ast.Expr) string {
	var parts []string
	for {
		switch x := e.(type) {
		case *ast.SelectorExpr:
			parts = append([]string{x.Sel.Name}, parts...)
			e = x.X
			continue
		case *ast.Ident:
			if x.Name != "c" || len(parts) == 0 {
				return ""
			}
			return strings.Join(parts, ".")
		}
		return ""
	}
}

func stringLit(e ast.Expr) (string, bool) {
	bl, ok := e.(*ast.BasicLit)
	if !ok || bl.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(bl.Value)
	return s, err == nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
