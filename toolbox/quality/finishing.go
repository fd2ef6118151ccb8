package quality

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/format/gitignore"

	"github.com/aetherium-engine/aetherium/toolbox/workspace"
	"github.com/aetherium-engine/aetherium/tools"
)

// RegisterFinishing adds record_style and check_finishing, the two deterministic
// "is it finished" tools of the quality group. ws bounds the files they read and
// names the owner of the record they write, as for the workspace tools.
func RegisterFinishing(reg *tools.Registry, ws workspace.Config) {
	if ws.MaxFileBytes <= 0 {
		ws.MaxFileBytes = 1 << 20
	}
	registerStyle(reg, ws)
	tools.Register(reg, "check_finishing", "Check the deterministic marks of a finished project and return a PASS/FAIL row per mark (each FAIL names file and line): "+
		"every HTML page links a favicon that exists; no leftover scaffold markers (TODO/FIXME in shipped code, lorem ipsum, default framework titles and logos, placeholder images); "+
		"every image the README references exists; the manifest version matches the CHANGELOG head; every list screen has an empty state. "+
		"Reads only files that ship: .gitignore is honoured; dependencies, tests, build output and dot directories are skipped.",
		tabled("check_finishing", func(ctx context.Context, call tools.Call, a FinishingArgs) (FinishingReport, error) {
			return checkFinishing(ctx, call, a, ws.MaxFileBytes)
		}), tools.ReadOnly(), tools.Idempotent(), tools.InGroup("quality"))
}

// tabled is the handler of a tool (name) whose answer is its report as JSON and
// then as the report's table. The JSON is not HTML-escaped: details and
// evidence quote markup (<ul id="list">) for a reader.
func tabled[A any, R interface{ Table() string }](name string, run func(context.Context, tools.Call, A) (R, error)) func(context.Context, tools.Call, A) (tools.Result, error) {
	return func(ctx context.Context, call tools.Call, a A) (tools.Result, error) {
		rep, err := run(ctx, call, a)
		if err != nil {
			return tools.Result{}, fmt.Errorf("%s: %w", name, err)
		}
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(rep); err != nil {
			return tools.Result{}, fmt.Errorf("%s: %w", name, err)
		}
		return tools.Result{Content: b.String() + "\n" + rep.Table()}, nil
	}
}

// FinishingArgs are check_finishing's arguments.
type FinishingArgs struct {
	Path string `json:"path,omitempty" jsonschema:"description=The project directory (workspace path; default: the workspace root)"`
}

// Mark names, in the order rows are reported.
const (
	MarkFavicon      = "favicon"
	MarkScaffold     = "scaffold"
	MarkReadmeImages = "readme_images"
	MarkVersion      = "version"
	MarkEmptyState   = "empty_state"
)

// FinishingRow is one line of the report: a PASS row per mark that holds, a FAIL row per
// place where it does not.
type FinishingRow struct {
	Mark   string `json:"mark"`
	Status string `json:"status"` // PASS | FAIL
	File   string `json:"file"`
	Line   int    `json:"line"` // 1-based; 0 when the row has no place (a missing file)
	Detail string `json:"detail"`
}

// FinishingReport is check_finishing's answer.
type FinishingReport struct {
	Passed bool           `json:"passed"`
	Rows   []FinishingRow `json:"rows"`
}

// Table is the report for a person to read.
func (r FinishingReport) Table() string {
	var b strings.Builder
	b.WriteString("| mark | status | where | detail |\n| --- | --- | --- | --- |\n")
	for _, row := range r.Rows {
		where := row.File
		if row.Line > 0 {
			where = fmt.Sprintf("%s:%d", row.File, row.Line)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", row.Mark, row.Status, mdCell(where), mdCell(row.Detail))
	}
	verdict := "FAIL"
	if r.Passed {
		verdict = "PASS"
	}
	fmt.Fprintf(&b, "\nOverall: %s\n", verdict)
	return b.String()
}

// Bounds of one check.
const (
	maxWalkEntries = 50000 // directory entries visited (after skipping)
	maxRowsPerMark = 50    // FAIL rows per mark; the rest are summarized in one
)

// shippedProject is the shipped view of one project directory.
type shippedProject struct {
	root    *os.Root
	ignores []gitignore.Pattern
	files   []string // shipped regular files, slash paths relative to the project, sorted
	limit   int64    // files over this size are not read
}

// skippedDir reports directories that do not ship: dependencies, build output,
// tests, and every dot directory (.git, .frame, .aetherium, .next…).
func skippedDir(name string) bool {
	if strings.HasPrefix(name, ".") {
		return true
	}
	switch strings.ToLower(name) {
	case "node_modules", "bower_components", "jspm_packages", "vendor", "venv", "__pycache__", "site-packages",
		"dist", "build", "out", "target", "coverage", "storybook-static",
		"test", "tests", "__tests__", "__mocks__", "spec", "specs", "e2e", "cypress", "testdata", "fixtures":
		return true
	}
	return false
}

// isTestSource reports test sources by the naming conventions of the usual runners.
func isTestSource(name string) bool {
	n := strings.ToLower(name)
	switch {
	case strings.HasSuffix(n, "_test.go"), strings.HasPrefix(n, "test_") && strings.HasSuffix(n, ".py"),
		strings.HasSuffix(n, "_test.py"), n == "conftest.py":
		return true
	}
	for _, mid := range []string{".test.", ".spec.", ".stories."} {
		if strings.Contains(n, mid) {
			return true
		}
	}
	return false
}

// loadProject walks dir (already confined to the workspace) and keeps the files
// that ship.
func loadProject(root *os.Root, limit int64) (*shippedProject, error) {
	p := &shippedProject{root: root, limit: limit}
	entries := 0
	var walk func(dir string, parts []string) error
	walk = func(dir string, parts []string) error {
		if b, err := readRootFile(root, path.Join(dir, ".gitignore"), limit); err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				line = strings.TrimSuffix(line, "\r")
				if strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" {
					continue
				}
				p.ignores = append(p.ignores, gitignore.ParsePattern(line, parts))
			}
		}
		des, err := fs.ReadDir(root.FS(), dir)
		if err != nil {
			return rootPathErr(dir, err)
		}
		for _, de := range des {
			if entries++; entries > maxWalkEntries {
				return fmt.Errorf("the project has more than %d files and directories that ship; point path at a smaller part", maxWalkEntries)
			}
			name := de.Name()
			rel := path.Join(dir, name)
			sub := append(append([]string(nil), parts...), name)
			switch {
			case de.IsDir():
				if skippedDir(name) || p.ignored(sub, true) {
					continue
				}
				if err := walk(rel, sub); err != nil {
					return err
				}
			case de.Type()&fs.ModeSymlink != 0:
				// A link ships as a link: count it when it leads to a regular
				// file inside the project (the root refuses anything else).
				if strings.HasPrefix(name, ".") || isTestSource(name) || p.ignored(sub, false) {
					continue
				}
				if fi, err := root.Stat(rel); err == nil && fi.Mode().IsRegular() {
					p.files = append(p.files, rel)
				}
			case de.Type().IsRegular():
				if strings.HasPrefix(name, ".") || isTestSource(name) || p.ignored(sub, false) {
					continue
				}
				p.files = append(p.files, rel)
			}
		}
		return nil
	}
	if err := walk(".", nil); err != nil {
		return nil, err
	}
	sort.Strings(p.files)
	return p, nil
}

func (p *shippedProject) ignored(parts []string, isDir bool) bool {
	return len(p.ignores) > 0 && gitignore.NewMatcher(p.ignores).Match(parts, isDir)
}

// ships reports whether rel (slash path relative to the project) is a file that
// ships: present, regular, not under a dot or ignored directory.
func (p *shippedProject) ships(rel string) bool {
	rel = path.Clean(rel)
	if rel == "." || rel == ".." || strings.HasPrefix(rel, "../") || path.IsAbs(rel) {
		return false
	}
	parts := strings.Split(rel, "/")
	for i, part := range parts {
		if strings.HasPrefix(part, ".") || p.ignored(parts[:i+1], i < len(parts)-1) {
			return false
		}
	}
	fi, err := p.root.Stat(rel)
	return err == nil && fi.Mode().IsRegular()
}

// read returns a shipped file's text; ok is false for files over the size
// limit or binary ones, which no mark reads.
func (p *shippedProject) read(rel string) (string, bool) {
	b, err := readRootFile(p.root, rel, p.limit)
	if err != nil || strings.IndexByte(string(b), 0) >= 0 {
		return "", false
	}
	return string(b), true
}

// rootFile finds a shipped file at the project root by case-insensitive name,
// in the order of names.
func (p *shippedProject) rootFile(names ...string) string {
	for _, n := range names {
		for _, f := range p.files {
			if !strings.Contains(f, "/") && strings.EqualFold(f, n) {
				return f
			}
		}
	}
	return ""
}

func checkFinishing(ctx context.Context, call tools.Call, a FinishingArgs, limit int64) (FinishingReport, error) {
	rel, err := cleanPathArg(cmp.Or(a.Path, "."))
	if err != nil {
		return FinishingReport{}, fmt.Errorf("path: %w", err)
	}
	ws, _, err := openSessionRoot(call)
	if err != nil {
		return FinishingReport{}, err
	}
	defer ws.Close()
	fi, err := ws.Stat(rel)
	if err != nil {
		return FinishingReport{}, fmt.Errorf("path: %w", rootPathErr(rel, err))
	}
	if !fi.IsDir() {
		return FinishingReport{}, fmt.Errorf("path: %s is not a directory (give the project directory)", rel)
	}
	root, err := ws.OpenRoot(rel)
	if err != nil {
		return FinishingReport{}, fmt.Errorf("path: %w", rootPathErr(rel, err))
	}
	defer root.Close()
	p, err := loadProject(root, limit)
	if err != nil {
		return FinishingReport{}, err
	}
	var rows []FinishingRow
	for _, mark := range []struct {
		name  string
		check func(*shippedProject) ([]FinishingRow, string)
	}{
		{MarkFavicon, checkFavicon},
		{MarkScaffold, checkScaffold},
		{MarkReadmeImages, checkReadmeImages},
		{MarkVersion, checkVersion},
		{MarkEmptyState, checkEmptyState},
	} {
		if err := ctx.Err(); err != nil {
			return FinishingReport{}, err
		}
		fails, pass := mark.check(p)
		sort.SliceStable(fails, func(i, j int) bool {
			if fails[i].File != fails[j].File {
				return fails[i].File < fails[j].File
			}
			return fails[i].Line < fails[j].Line
		})
		if len(fails) == 0 {
			rows = append(rows, FinishingRow{Mark: mark.name, Status: "PASS", Detail: pass})
			continue
		}
		for i, f := range fails {
			if i == maxRowsPerMark {
				rows = append(rows, FinishingRow{Mark: mark.name, Status: "FAIL", Detail: fmt.Sprintf("and %d more", len(fails)-maxRowsPerMark)})
				break
			}
			f.Mark, f.Status = mark.name, "FAIL"
			if rel != "." && f.File != "" {
				f.File = path.Join(rel, f.File)
			}
			rows = append(rows, f)
		}
	}
	rep := FinishingReport{Passed: true, Rows: rows}
	for _, r := range rows {
		if r.Status != "PASS" {
			rep.Passed = false
		}
	}
	return rep, nil
}

// lineOfOffset is the 1-based line of byte offset off in s.
func lineOfOffset(s string, off int) int {
	return strings.Count(s[:min(off, len(s))], "\n") + 1
}

// rowSnippet is a line trimmed for a report detail.
func rowSnippet(s string) string {
	r := []rune(strings.TrimSpace(s))
	if len(r) > 80 {
		return string(r[:77]) + "..."
	}
	return string(r)
}
