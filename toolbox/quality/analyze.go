package quality

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/aetherium-engine/aetherium/tools"
)

// AnalyzeArgs are analyze_code's arguments.
type AnalyzeArgs struct {
	Path   string `json:"path" jsonschema:"description=A file or directory relative to the workspace (directories are walked; hidden directories and node_modules are skipped)"`
	Linter string `json:"linter,omitempty" jsonschema:"enum=flake8,enum=pylint,description=Python only: flake8 (default) or pylint"`
}

// Finding is one linter message in the common shape.
type Finding struct {
	File     string `json:"file"`
	Line     int    `json:"line"`
	Column   int    `json:"column,omitempty"`
	Rule     string `json:"rule"`
	Severity string `json:"severity"` // error | warning | info
	Message  string `json:"message"`
	Linter   string `json:"linter"`
}

// LinterRun is what one linter did.
type LinterRun struct {
	Linter string `json:"linter"`
	Files  int    `json:"files"`
	// Note says why it found nothing it could report (a crash, an unsupported
	// syntax) when that is the case.
	Note string `json:"note,omitempty"`
}

// Analysis is analyze_code's answer.
type Analysis struct {
	Path      string         `json:"path"`
	Findings  []Finding      `json:"findings"`
	Counts    map[string]int `json:"counts"`
	Total     int            `json:"total"`
	Truncated bool           `json:"truncated,omitempty"`
	Linters   []LinterRun    `json:"linters"`
	Notes     []string       `json:"notes,omitempty"`
}

// lang is a file's language for the linters.
type lang string

const (
	langPython lang = "python"
	langJS     lang = "javascript"
	langShell  lang = "shell"
	langGo     lang = "go"
	langCS     lang = "csharp"
	langTS     lang = "typescript"
)

func langOf(name string, head []byte) (lang, bool) {
	switch strings.ToLower(path.Ext(name)) {
	case ".py":
		return langPython, true
	case ".js", ".mjs", ".cjs":
		return langJS, true
	case ".sh", ".bash":
		return langShell, true
	case ".go":
		return langGo, true
	case ".cs":
		return langCS, true
	case ".ts", ".tsx":
		return langTS, true
	case "":
		if shebangShell(head) {
			return langShell, true
		}
	}
	return "", false
}

var shebangRE = regexp.MustCompile(`^#!\s*\S*?(?:/|\benv\s+)(?:ba|da|k)?sh\b`)

func shebangShell(head []byte) bool {
	line, _, _ := bytes.Cut(head, []byte("\n"))
	return shebangRE.Match(line)
}

// skipDir is a directory analyze_code does not walk: dot directories (.git,
// .frame, .aetherium), installed dependencies and build output.
func skipDir(name string) bool {
	return strings.HasPrefix(name, ".") || name == "node_modules" || name == "vendor" || name == "__pycache__"
}

// collect lists t's lintable files by language, walking through a confine.Root
// so a symlink cannot lead the walk outside (symlinks are not followed at all)
// and a FIFO never blocks the head read.
func collect(t target, maxFiles int) (map[lang][]string, bool, error) {
	r, err := openRoot(t.root)
	if err != nil {
		return nil, false, fmt.Errorf("workspace root: %w", err)
	}
	defer r.Close()
	out := map[lang][]string{}
	n, truncated := 0, false
	add := func(rel string, d fs.DirEntry) {
		var head []byte
		if path.Ext(rel) == "" {
			if f, err := r.Open(rel); err == nil {
				head = make([]byte, 128)
				k, _ := io.ReadFull(f, head)
				head = head[:k]
				f.Close()
			}
		}
		if l, ok := langOf(d.Name(), head); ok {
			if n >= maxFiles {
				truncated = true
				return
			}
			n++
			out[l] = append(out[l], rel)
		}
	}
	if !t.dir {
		fi, err := r.Lstat(t.rel)
		if err != nil {
			return nil, false, err
		}
		add(t.rel, fs.FileInfoToDirEntry(fi))
		return out, false, nil
	}
	err = fs.WalkDir(r.FS(), t.rel, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // unreadable: skipped
		}
		if d.IsDir() {
			if p != t.rel && skipDir(d.Name()) {
				return fs.SkipDir
			}
			return nil
		}
		if d.Type().IsRegular() {
			add(p, d)
		}
		if truncated {
			return fs.SkipAll // a workspace of millions of files is not walked to the end
		}
		return nil
	})
	for _, fs := range out {
		sort.Strings(fs)
	}
	return out, truncated, err
}

// argPath is rel as a linter argument: "./" first, so a file named "-x" is no
// option.
func argPath(rel string) string { return "./" + rel }

func (s *server) analyze(ctx context.Context, call tools.Call, a AnalyzeArgs) (tools.Result, error) {
	sess := call.Session
	if a.Linter != "" && a.Linter != "flake8" && a.Linter != "pylint" {
		return tools.Result{}, fmt.Errorf("analyze_code: linter %q: the choice is flake8 or pylint (Python); other languages have one linter each", a.Linter)
	}
	t, err := resolve(call, a.Path)
	if err != nil {
		return tools.Result{}, fmt.Errorf("analyze_code: %w", err)
	}
	files, truncated, err := collect(t, s.cfg.MaxFiles)
	if err != nil {
		return tools.Result{}, fmt.Errorf("analyze_code: walking %s: %w", t.rel, err)
	}
	an := Analysis{Path: t.rel, Findings: []Finding{}, Counts: map[string]int{"error": 0, "warning": 0, "info": 0}, Linters: []LinterRun{}}
	if truncated {
		an.Notes = append(an.Notes, fmt.Sprintf("more than %d lintable files: the first %d (by walk order) were analyzed", s.cfg.MaxFiles, s.cfg.MaxFiles))
	}
	if fs := files[langCS]; len(fs) > 0 {
		an.Notes = append(an.Notes, fmt.Sprintf("%d C# file(s) not analyzed: C# analysis needs dotnet format, which is not installable here", len(fs)))
	}
	if fs := files[langTS]; len(fs) > 0 {
		an.Notes = append(an.Notes, fmt.Sprintf("%d TypeScript file(s) not analyzed: TypeScript needs a newer eslint than the sandbox has (eslint 6.4)", len(fs)))
	}
	var all []Finding
	for _, l := range []lang{langPython, langJS, langShell, langGo} {
		fs := files[l]
		if len(fs) == 0 {
			continue
		}
		var found []Finding
		var run LinterRun
		switch l {
		case langPython:
			found, run, err = s.python(ctx, sess, t, fs, a.Linter)
		case langJS:
			found, run, err = s.eslint(ctx, sess, t, fs)
		case langShell:
			found, run, err = s.shellcheck(ctx, sess, t, fs)
		case langGo:
			var runs []LinterRun
			found, runs, err = s.golang(ctx, sess, t, fs)
			an.Linters = append(an.Linters, runs...)
		}
		if err != nil {
			return tools.Result{}, fmt.Errorf("analyze_code: %s: %w", l, err)
		}
		if run.Linter != "" {
			an.Linters = append(an.Linters, run)
		}
		all = append(all, found...)
	}
	if len(an.Linters) == 0 && len(an.Notes) == 0 {
		an.Notes = append(an.Notes, fmt.Sprintf("nothing lintable under %s: analyze_code reads .py, .js/.mjs/.cjs, .sh/.bash (or a shell shebang), .go (and reports .cs, .ts/.tsx as unsupported here)", t.rel))
	}
	sort.SliceStable(all, func(i, j int) bool {
		if all[i].File != all[j].File {
			return all[i].File < all[j].File
		}
		if all[i].Line != all[j].Line {
			return all[i].Line < all[j].Line
		}
		return all[i].Column < all[j].Column
	})
	for _, f := range all {
		an.Counts[f.Severity]++
	}
	an.Total = len(all)
	if len(all) > s.cfg.MaxFindings {
		all, an.Truncated = all[:s.cfg.MaxFindings], true
	}
	an.Findings = append(an.Findings, all...)
	return tools.JSON(an)
}

// failed describes a linter run that produced nothing parseable.
func failed(r ran, linter string) error {
	if r.timedOut {
		return fmt.Errorf("%s timed out", linter)
	}
	msg := strings.TrimSpace(tail(r.stderr, 2000))
	if msg == "" {
		msg = strings.TrimSpace(tail(r.stdout, 2000))
	}
	return fmt.Errorf("%s failed (exit %d): %s", linter, r.rc, msg)
}

func (s *server) python(ctx context.Context, sess *tools.Session, t target, files []string, linter string) ([]Finding, LinterRun, error) {
	args := make([]string, 0, len(files))
	for _, f := range files {
		args = append(args, argPath(f))
	}
	if linter == "pylint" {
		r, err := s.exec(ctx, sess, t, ".", append([]string{"pylint", "--output-format=json", "--score=n", "--persistent=n", "--"}, args...), "", s.cfg.AnalyzeTimeout)
		if err != nil {
			return nil, LinterRun{}, err
		}
		// pylint's exit status is a bit mask of what it found; 32 is a usage error.
		if r.timedOut || r.rc&32 != 0 || r.rc < 0 {
			return nil, LinterRun{}, failed(r, "pylint")
		}
		fs, err := parsePylint([]byte(r.stdout))
		if err != nil {
			return nil, LinterRun{}, fmt.Errorf("pylint output: %w", err)
		}
		return fs, LinterRun{Linter: "pylint", Files: len(files)}, nil
	}
	r, err := s.exec(ctx, sess, t, ".", append([]string{"flake8", "--format=default", "--"}, args...), "", s.cfg.AnalyzeTimeout)
	if err != nil {
		return nil, LinterRun{}, err
	}
	if r.timedOut || r.rc > 1 || r.rc < 0 {
		return nil, LinterRun{}, failed(r, "flake8")
	}
	return parseFlake8(r.stdout), LinterRun{Linter: "flake8", Files: len(files)}, nil
}

// defaultESLint is the config a project without its own gets: eslint 6.4's
// recommended rules for the newest syntax it parses.
const defaultESLint = `{"root": true, "extends": "eslint:recommended",
 "parserOptions": {"ecmaVersion": 2020, "sourceType": "module"},
 "env": {"es6": true, "node": true, "browser": true}}`

// hasESLintConfig reports whether the project configures eslint itself: a
// config file (or package.json's eslintConfig) from the linted directory up to
// the workspace root.
func hasESLintConfig(t target) bool {
	r, err := openRoot(t.root)
	if err != nil {
		return false
	}
	defer r.Close()
	dir := t.rel
	if !t.dir {
		dir = path.Dir(dir)
	}
	for {
		for _, n := range []string{".eslintrc", ".eslintrc.js", ".eslintrc.cjs", ".eslintrc.json", ".eslintrc.yaml", ".eslintrc.yml"} {
			if _, err := r.Stat(path.Join(dir, n)); err == nil {
				return true
			}
		}
		if b, err := readSmall(r, path.Join(dir, "package.json")); err == nil && bytes.Contains(b, []byte(`"eslintConfig"`)) {
			return true
		}
		if dir == "." {
			return false
		}
		dir = path.Dir(dir)
	}
}

func (s *server) eslint(ctx context.Context, sess *tools.Session, t target, files []string) ([]Finding, LinterRun, error) {
	cmd := []string{"eslint", "--format", "json", "--no-color", "--no-inline-config=false"}
	cmd = cmd[:4]
	var env []string
	if !hasESLintConfig(t) {
		cmd = append(cmd, "--no-eslintrc", "--config", "/tmp/eslintrc.json")
		env = []string{"AETH_WRITE_PATH=/tmp/eslintrc.json", "AETH_WRITE_CONTENT=" + defaultESLint}
	}
	cmd = append(cmd, "--")
	for _, f := range files {
		cmd = append(cmd, argPath(f))
	}
	r, err := s.exec(ctx, sess, t, ".", cmd, "", s.cfg.AnalyzeTimeout, env...)
	if err != nil {
		return nil, LinterRun{}, err
	}
	if r.timedOut || r.rc > 1 || r.rc < 0 {
		return nil, LinterRun{}, failed(r, "eslint")
	}
	fs, parseErrs, err := parseESLint([]byte(r.stdout))
	if err != nil {
		return nil, LinterRun{}, fmt.Errorf("eslint output: %w", err)
	}
	run := LinterRun{Linter: "eslint", Files: len(files)}
	if len(parseErrs) > 0 {
		run.Note = "this syntax needs a newer eslint than the sandbox has (eslint 6.4, ES2020): " + strings.Join(parseErrs, "; ")
	}
	return fs, run, nil
}

func (s *server) shellcheck(ctx context.Context, sess *tools.Session, t target, files []string) ([]Finding, LinterRun, error) {
	cmd := []string{"shellcheck", "--format=json1", "--"}
	for _, f := range files {
		cmd = append(cmd, argPath(f))
	}
	r, err := s.exec(ctx, sess, t, ".", cmd, "", s.cfg.AnalyzeTimeout)
	if err != nil {
		return nil, LinterRun{}, err
	}
	if r.timedOut || r.rc > 1 || r.rc < 0 {
		return nil, LinterRun{}, failed(r, "shellcheck")
	}
	fs, err := parseShellcheck([]byte(r.stdout))
	if err != nil {
		return nil, LinterRun{}, fmt.Errorf("shellcheck output: %w", err)
	}
	return fs, LinterRun{Linter: "shellcheck", Files: len(files)}, nil
}

// golang runs gofmt -l on the files and go vet -json on their packages, per
// module (the nearest go.mod above each file inside the workspace).
func (s *server) golang(ctx context.Context, sess *tools.Session, t target, files []string) ([]Finding, []LinterRun, error) {
	var out []Finding
	var runs []LinterRun
	cmd := []string{"gofmt", "-l", "--"}
	for _, f := range files {
		cmd = append(cmd, argPath(f))
	}
	r, err := s.exec(ctx, sess, t, ".", cmd, "", s.cfg.AnalyzeTimeout)
	if err != nil {
		return nil, nil, err
	}
	if r.timedOut || r.rc < 0 {
		return nil, nil, failed(r, "gofmt")
	}
	out = append(out, parseGofmt(r.stdout, r.stderr)...)
	runs = append(runs, LinterRun{Linter: "gofmt", Files: len(files)})

	mods, noMod := modules(t, files)
	for _, mod := range sortedKeys(mods) {
		pkgs := mods[mod]
		cmd := []string{"go", "vet", "-json", "--"}
		cmd = cmd[:3]
		for _, p := range pkgs {
			cmd = append(cmd, p)
		}
		r, err := s.exec(ctx, sess, t, mod, cmd, "", s.cfg.AnalyzeTimeout)
		if err != nil {
			return nil, nil, err
		}
		if r.timedOut || r.rc < 0 {
			return nil, nil, failed(r, "go vet")
		}
		fs, notes := parseGoVet(r.stdout+"\n"+r.stderr, mod)
		out = append(out, fs...)
		run := LinterRun{Linter: "go vet", Files: len(pkgs)}
		if len(notes) > 0 {
			run.Note = strings.Join(notes, "; ")
		}
		runs = append(runs, run)
	}
	if len(noMod) > 0 {
		runs = append(runs, LinterRun{Linter: "go vet", Files: 0, Note: fmt.Sprintf("%d Go file(s) outside any module (no go.mod above them in the workspace): not vetted", len(noMod))})
	}
	return out, runs, nil
}

// modules groups Go files by their module root: root → "./pkg" patterns.
func modules(t target, files []string) (map[string][]string, []string) {
	r, err := openRoot(t.root)
	if err != nil {
		return nil, files
	}
	defer r.Close()
	mods := map[string][]string{}
	seen := map[string]bool{}
	var none []string
	for _, f := range files {
		dir := path.Dir(f)
		mod := ""
		for d := dir; ; d = path.Dir(d) {
			if fi, err := r.Stat(path.Join(d, "go.mod")); err == nil && fi.Mode().IsRegular() {
				mod = d
				break
			}
			if d == "." {
				break
			}
		}
		if mod == "" {
			none = append(none, f)
			continue
		}
		rel := "."
		if dir != mod {
			rel = strings.TrimPrefix(dir, mod+"/")
			if mod == "." {
				rel = dir
			}
		}
		pkg := "./" + strings.TrimPrefix(rel, "./")
		if rel == "." {
			pkg = "."
		}
		if !seen[mod+"\x00"+pkg] {
			seen[mod+"\x00"+pkg] = true
			mods[mod] = append(mods[mod], pkg)
		}
	}
	return mods, none
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// relFile maps a path a linter printed to the workspace-relative one.
// Absolute container paths are the workspace's; relative ones are relative to
// base, the directory the linter ran in.
func relFile(p, base string) string {
	if abs, ok := strings.CutPrefix(p, wsMount+"/"); ok {
		return path.Clean(abs)
	}
	p = strings.TrimPrefix(p, "./")
	if base != "" && base != "." && !strings.HasPrefix(p, "/") {
		p = path.Join(base, p)
	}
	return path.Clean(p)
}

// flake8Line is flake8's default format: path:line:col: CODE message.
var flake8Line = regexp.MustCompile(`^(.+?):(\d+):(\d+): ([A-Z]+[0-9]+) (.*)$`)

// parseFlake8 reads flake8's default format. pyflakes' F codes and
// pycodestyle's E9 (syntax and I/O errors) are errors, the rest style
// warnings, C9 (complexity) is information.
func parseFlake8(out string) []Finding {
	var fs []Finding
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		m := flake8Line.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		line, _ := strconv.Atoi(m[2])
		col, _ := strconv.Atoi(m[3])
		sev := "warning"
		switch {
		case strings.HasPrefix(m[4], "F"), strings.HasPrefix(m[4], "E9"):
			sev = "error"
		case strings.HasPrefix(m[4], "C"):
			sev = "info"
		}
		fs = append(fs, Finding{File: relFile(m[1], ""), Line: line, Column: col, Rule: m[4], Severity: sev, Message: m[5], Linter: "flake8"})
	}
	return fs
}

// decodeOutput decodes a tool's machine-readable report (b) into v with
// unmarshal. ok is false when the tool printed nothing: no findings or results,
// not a malformed report.
func decodeOutput(b []byte, v any, unmarshal func([]byte, any) error) (ok bool, err error) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return false, nil
	}
	return true, unmarshal(b, v)
}

// parsePylint reads pylint's JSON reporter (a list of messages).
func parsePylint(out []byte) ([]Finding, error) {
	var msgs []struct {
		Type      string `json:"type"`
		Line      int    `json:"line"`
		Column    int    `json:"column"`
		Path      string `json:"path"`
		Symbol    string `json:"symbol"`
		Message   string `json:"message"`
		MessageID string `json:"message-id"`
	}
	if ok, err := decodeOutput(out, &msgs, json.Unmarshal); !ok || err != nil {
		return nil, err
	}
	fs := make([]Finding, 0, len(msgs))
	for _, m := range msgs {
		sev := "info" // convention, refactor, information
		switch m.Type {
		case "error", "fatal":
			sev = "error"
		case "warning":
			sev = "warning"
		}
		rule := m.MessageID
		if m.Symbol != "" {
			rule = m.MessageID + " " + m.Symbol
		}
		// pylint columns are 0-based.
		fs = append(fs, Finding{File: relFile(m.Path, ""), Line: m.Line, Column: m.Column + 1, Rule: rule, Severity: sev, Message: m.Message, Linter: "pylint"})
	}
	return fs, nil
}

// parseESLint reads eslint's JSON formatter. A fatal message without a rule is
// a parse error: eslint could not read the file, which says nothing about the
// code, so it is returned apart, not as a finding.
func parseESLint(out []byte) ([]Finding, []string, error) {
	var files []struct {
		FilePath string `json:"filePath"`
		Messages []struct {
			RuleID   *string `json:"ruleId"`
			Severity int     `json:"severity"`
			Message  string  `json:"message"`
			Line     int     `json:"line"`
			Column   int     `json:"column"`
			Fatal    bool    `json:"fatal"`
		} `json:"messages"`
	}
	if ok, err := decodeOutput(out, &files, json.Unmarshal); !ok || err != nil {
		return nil, nil, err
	}
	var fs []Finding
	var parseErrs []string
	for _, f := range files {
		file := relFile(f.FilePath, "")
		for _, m := range f.Messages {
			if m.Fatal || m.RuleID == nil {
				parseErrs = append(parseErrs, fmt.Sprintf("%s:%d:%d: %s", file, m.Line, m.Column, m.Message))
				continue
			}
			sev := "warning"
			if m.Severity == 2 {
				sev = "error"
			}
			fs = append(fs, Finding{File: file, Line: m.Line, Column: m.Column, Rule: *m.RuleID, Severity: sev, Message: m.Message, Linter: "eslint"})
		}
	}
	return fs, parseErrs, nil
}

// parseShellcheck reads shellcheck's json1 format.
func parseShellcheck(out []byte) ([]Finding, error) {
	var doc struct {
		Comments []struct {
			File    string `json:"file"`
			Line    int    `json:"line"`
			Column  int    `json:"column"`
			Level   string `json:"level"`
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"comments"`
	}
	if ok, err := decodeOutput(out, &doc, json.Unmarshal); !ok || err != nil {
		return nil, err
	}
	fs := make([]Finding, 0, len(doc.Comments))
	for _, c := range doc.Comments {
		sev := "info" // info, style
		switch c.Level {
		case "error":
			sev = "error"
		case "warning":
			sev = "warning"
		}
		fs = append(fs, Finding{File: relFile(c.File, ""), Line: c.Line, Column: c.Column, Rule: fmt.Sprintf("SC%d", c.Code), Severity: sev, Message: c.Message, Linter: "shellcheck"})
	}
	return fs, nil
}

// gofmtErr is a file gofmt could not parse.
var gofmtErr = regexp.MustCompile(`^(.+?\.go):(\d+):(\d+): (.*)$`)

// parseGofmt reads `gofmt -l`: each file it lists is not gofmt-formatted (a
// whole-file finding, line 0); a syntax error is an error finding.
func parseGofmt(stdout, stderr string) []Finding {
	var fs []Finding
	for _, l := range strings.Split(stdout, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			fs = append(fs, Finding{File: relFile(l, ""), Rule: "gofmt", Severity: "warning", Message: "file is not gofmt-formatted (run gofmt -w)", Linter: "gofmt"})
		}
	}
	for _, l := range strings.Split(stderr, "\n") {
		if m := gofmtErr.FindStringSubmatch(strings.TrimSpace(l)); m != nil {
			line, _ := strconv.Atoi(m[2])
			col, _ := strconv.Atoi(m[3])
			fs = append(fs, Finding{File: relFile(m[1], ""), Line: line, Column: col, Rule: "syntax", Severity: "error", Message: m[4], Linter: "gofmt"})
		}
	}
	return fs
}

var (
	posnRE     = regexp.MustCompile(`^(.+?):(\d+)(?::(\d+))?$`)
	vetErrLine = regexp.MustCompile(`^(?:vet: )?(\S+?\.go):(\d+):(\d+): (.*)$`)
)

// parseGoVet reads `go vet -json`'s output (its JSON goes to stdout since Go
// 1.25 or so, to stderr before; type errors to stderr): "# pkg" comment lines, then per
// package a JSON object {pkg: {analyzer: [{posn, message}]}} (or {analyzer:
// {error}}); type errors come as plain "file:line:col: msg" lines, which are
// error findings. mod is the module's workspace-relative directory (vet prints
// paths relative to its working directory or absolute).
func parseGoVet(stderr, mod string) ([]Finding, []string) {
	var fs []Finding
	var notes []string
	add := func(doc map[string]map[string]json.RawMessage) {
		for _, pkg := range sortedKeys(doc) {
			for _, analyzer := range sortedKeys(doc[pkg]) {
				raw := doc[pkg][analyzer]
				var diags []struct {
					Posn    string `json:"posn"`
					Message string `json:"message"`
				}
				if err := json.Unmarshal(raw, &diags); err != nil {
					var e struct {
						Error string `json:"error"`
					}
					if json.Unmarshal(raw, &e) == nil && e.Error != "" {
						notes = append(notes, fmt.Sprintf("%s: %s: %s", pkg, analyzer, e.Error))
					}
					continue
				}
				for _, d := range diags {
					f := Finding{Rule: analyzer, Severity: "warning", Message: d.Message, Linter: "go vet"}
					if m := posnRE.FindStringSubmatch(d.Posn); m != nil {
						f.File = relFile(m[1], mod)
						f.Line, _ = strconv.Atoi(m[2])
						f.Column, _ = strconv.Atoi(m[3])
					} else {
						f.File = d.Posn
					}
					fs = append(fs, f)
				}
			}
		}
	}
	rest := stderr
	for rest != "" {
		line, next, _ := strings.Cut(rest, "\n")
		trim := strings.TrimSpace(line)
		switch {
		case trim == "" || strings.HasPrefix(trim, "#"):
		case strings.HasPrefix(line, "{"):
			// A JSON object: decoded whole (messages may hold braces).
			var doc map[string]map[string]json.RawMessage
			dec := json.NewDecoder(strings.NewReader(rest))
			if err := dec.Decode(&doc); err != nil {
				notes = append(notes, "unparseable go vet output: "+tail(rest, 200))
				return fs, notes
			}
			add(doc)
			next = strings.TrimPrefix(rest[dec.InputOffset():], "\n")
		default:
			if m := vetErrLine.FindStringSubmatch(trim); m != nil {
				l, _ := strconv.Atoi(m[2])
				c, _ := strconv.Atoi(m[3])
				fs = append(fs, Finding{File: relFile(m[1], mod), Line: l, Column: c, Rule: "typecheck", Severity: "error", Message: m[4], Linter: "go vet"})
			} else {
				notes = append(notes, tail(trim, 300))
			}
		}
		rest = next
	}
	return fs, notes
}
