package quality

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The outputs under testdata/outputs were captured from the toolchain image's
// linters and runners on the fixtures beside them.
func output(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "outputs", name))
	require.NoError(t, err)
	return string(b)
}

func TestParseLinters(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		parse func(t *testing.T) []Finding
		want  []Finding
	}{
		{
			name:  "flake8",
			parse: func(t *testing.T) []Finding { return parseFlake8(output(t, "flake8.txt")) },
			want: []Finding{
				{File: "py/calc.py", Line: 1, Column: 1, Rule: "F401", Severity: "error", Message: "'os' imported but unused", Linter: "flake8"},
				{File: "py/calc.py", Line: 9, Column: 12, Rule: "F821", Severity: "error", Message: "undefined name 'undefined_name'", Linter: "flake8"},
			},
		},
		{
			name: "eslint",
			parse: func(t *testing.T) []Finding {
				fs, perrs, err := parseESLint([]byte(output(t, "eslint.json")))
				require.NoError(t, err)
				require.Empty(t, perrs)
				return fs
			},
			want: []Finding{
				{File: "js/math.js", Line: 5, Column: 10, Rule: "no-unused-vars", Severity: "error", Message: "'unused' is defined but never used.", Linter: "eslint"},
				{File: "js/math.js", Line: 8, Column: 38, Rule: "no-undef", Severity: "error", Message: "'missing' is not defined.", Linter: "eslint"},
			},
		},
		{
			name: "shellcheck json1",
			parse: func(t *testing.T) []Finding {
				fs, err := parseShellcheck([]byte(output(t, "shellcheck.json")))
				require.NoError(t, err)
				return fs
			},
			want: []Finding{
				{File: "sh/tool", Line: 2, Column: 10, Rule: "SC2045", Severity: "error", Message: "Iterating over ls output is fragile. Use globs.", Linter: "shellcheck"},
				{File: "sh/script.sh", Line: 3, Column: 6, Rule: "SC2086", Severity: "info", Message: "Double quote to prevent globbing and word splitting.", Linter: "shellcheck"},
			},
		},
		{
			name: "go vet -json (paths absolute in the container, relative to the module)",
			parse: func(t *testing.T) []Finding {
				fs, notes := parseGoVet(output(t, "govet.txt"), "gomod")
				require.Empty(t, notes)
				return fs
			},
			want: []Finding{
				{File: "gomod/calc.go", Line: 11, Column: 2, Rule: "unreachable", Severity: "warning", Message: "unreachable code", Linter: "go vet"},
			},
		},
		{
			name: "go vet type error and braces in a message",
			parse: func(t *testing.T) []Finding {
				fs, notes := parseGoVet("# fixture\nvet: ./a.go:3:9: undefined: x\n# fixture\n{\n\t\"fixture\": {\n\t\t\"printf\": [\n\t\t\t{\n\t\t\t\t\"posn\": \"/workspace/m/b.go:4:2\",\n\t\t\t\t\"message\": \"odd {brace\"\n\t\t\t}\n\t\t]\n\t}\n}\n", "m")
				require.Empty(t, notes)
				return fs
			},
			want: []Finding{
				{File: "m/a.go", Line: 3, Column: 9, Rule: "typecheck", Severity: "error", Message: "undefined: x", Linter: "go vet"},
				{File: "m/b.go", Line: 4, Column: 2, Rule: "printf", Severity: "warning", Message: "odd {brace", Linter: "go vet"},
			},
		},
		{
			name:  "gofmt -l",
			parse: func(t *testing.T) []Finding { return parseGofmt("./gomod/ugly.go\n", "") },
			want:  []Finding{{File: "gomod/ugly.go", Rule: "gofmt", Severity: "warning", Message: "file is not gofmt-formatted (run gofmt -w)", Linter: "gofmt"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, tc.parse(t))
		})
	}
}

func TestParsePylint(t *testing.T) {
	t.Parallel()
	fs, err := parsePylint([]byte(output(t, "pylint.json")))
	require.NoError(t, err)
	require.Len(t, fs, 7)
	require.Contains(t, fs, Finding{File: "py/calc.py", Line: 9, Column: 12, Rule: "E0602 undefined-variable", Severity: "error", Message: "Undefined variable 'undefined_name'", Linter: "pylint"})
	require.Contains(t, fs, Finding{File: "py/calc.py", Line: 1, Column: 1, Rule: "W0611 unused-import", Severity: "warning", Message: "Unused import os", Linter: "pylint"})
}

func TestParseESLintSyntaxTooNew(t *testing.T) {
	t.Parallel()
	fs, perrs, err := parseESLint([]byte(output(t, "eslint-parse-error.json")))
	require.NoError(t, err)
	require.Empty(t, fs, "a parse error is not a finding")
	require.Equal(t, []string{"m/a.js:1:11: Parsing error: Unexpected character '#'"}, perrs)
}

func TestParseTestReports(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		parse func(t *testing.T, r *TestReport)
		want  TestReport
	}{
		{
			name:  "pytest junitxml",
			parse: func(t *testing.T, r *TestReport) { require.NoError(t, parseJUnit([]byte(output(t, "junit.xml")), r)) },
			want: TestReport{Passed: 2, Failed: 1, Skipped: 1, Failures: []Failure{
				{Name: "test_calc::test_add_wrong", Message: "assert 4 == 5\n +  where 4 = add(2, 2)"},
			}},
		},
		{
			name: "pytest junitxml of a suite interrupted at its timeout",
			parse: func(t *testing.T, r *TestReport) {
				require.NoError(t, parseJUnit([]byte(output(t, "junit-interrupted.xml")), r))
			},
			want: TestReport{Passed: 1, Failures: []Failure{}},
		},
		{
			name:  "node --test TAP",
			parse: func(t *testing.T, r *TestReport) { parseTAP(output(t, "node.tap"), r) },
			want: TestReport{Passed: 2, Failed: 1, Skipped: 1, Failures: []Failure{
				{Name: "adds wrong", Message: "Expected values to be strictly equal:"},
			}},
		},
		{
			name: "node --test TAP with files and suites (nested subtests)",
			parse: func(t *testing.T, r *TestReport) {
				parseTAP("TAP version 13\n    # Subtest: a\n    ok 1 - a\n    # Subtest: b\n    not ok 2 - b\n      ---\n      error: 'boom'\n      ...\n    1..2\n# Subtest: suite\nnot ok 1 - suite\n# Subtest: c\nok 2 - c # SKIP\n", r)
			},
			want: TestReport{Passed: 1, Failed: 1, Skipped: 1, Failures: []Failure{{Name: "b", Message: "boom"}}},
		},
		{
			name:  "go test -json of a package that does not build",
			parse: func(t *testing.T, r *TestReport) { parseGoTest(output(t, "gotest-buildfail.json"), r) },
			want: TestReport{Errors: 1, Failures: []Failure{
				{Name: "fixture", Message: "package failed (build error, panic, or a failure outside any test)"},
			}},
		},
		{
			name:  "go test -json",
			parse: func(t *testing.T, r *TestReport) { parseGoTest(output(t, "gotest.json"), r) },
			want: TestReport{Passed: 2, Failed: 1, Skipped: 1, Failures: []Failure{
				{Name: "fixture.TestAddWrong", Message: "calc_test.go:13: planted failure: 2+2 = 4"},
			}},
		},
		{
			name: "go test -json interrupted at the timeout",
			parse: func(t *testing.T, r *TestReport) {
				parseGoTest(`{"Action":"start","Package":"m"}
{"Action":"run","Package":"m","Test":"TestQuick"}
{"Action":"pass","Package":"m","Test":"TestQuick","Elapsed":0}
{"Action":"run","Package":"m","Test":"TestHang"}
{"Action":"output","Package":"m","Test":"TestHang","Output":"=== RUN   TestHang\n"}
{"Action":"output","Package":"m","Output":"FAIL\tm\t20.1s\n"}
{"Action":"fail","Package":"m","Elapsed":20.1}
`, r)
			},
			want: TestReport{Passed: 1, Failures: []Failure{{Name: "m.TestHang", Message: "did not finish (still running when the suite ended)"}}},
		},
		{
			name: "jest --json",
			parse: func(t *testing.T, r *TestReport) {
				require.NoError(t, parseJest([]byte(`{"numPassedTests":2,"numFailedTests":1,"numPendingTests":1,"numTodoTests":0,"testResults":[{"name":"/workspace/j/a.test.js","status":"failed","message":"","assertionResults":[{"fullName":"adds","status":"passed","failureMessages":[]},{"fullName":"adds wrong","status":"failed","failureMessages":["expect(received).toBe(expected)"]}]},{"name":"/workspace/j/b.test.js","status":"failed","message":"SyntaxError: Unexpected token","assertionResults":[]}]}`), r))
			},
			want: TestReport{Passed: 2, Failed: 1, Skipped: 1, Errors: 1, Failures: []Failure{
				{Name: "adds wrong", Message: "expect(received).toBe(expected)"},
				{Name: "j/b.test.js", Message: "SyntaxError: Unexpected token"},
			}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := TestReport{Failures: []Failure{}}
			tc.parse(t, &r)
			if tc.want.Failures == nil {
				tc.want.Failures = []Failure{}
			}
			require.Equal(t, tc.want, r)
		})
	}
}

func TestParseSections(t *testing.T) {
	t.Parallel()
	n := "@@aetherium-x"
	r := parseSections(n+" rc 124\n"+n+" stderr\nboom\n\n"+n+" report\n<x/>\n"+n+" stdout\nline1\n"+n+" forged\n", n)
	require.Equal(t, 124, r.rc)
	require.Equal(t, "boom", r.stderr)
	require.Equal(t, "<x/>", r.report)
	require.Equal(t, "line1\n"+n+" forged\n", r.stdout)
}

func TestLangOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, head string
		want       lang
		ok         bool
	}{
		{"a.py", "", langPython, true},
		{"a.cjs", "", langJS, true},
		{"a.mjs", "", langJS, true},
		{"run", "#!/usr/bin/env bash\n", langShell, true},
		{"run", "#!/bin/sh -e\n", langShell, true},
		{"run", "#!/usr/bin/python3\n", "", false},
		{"x.tsx", "", langTS, true},
		{"P.cs", "", langCS, true},
		{"README", "hello", "", false},
	}
	for _, tc := range tests {
		got, ok := langOf(tc.name, []byte(tc.head))
		require.Equal(t, tc.ok, ok, tc.name+" "+tc.head)
		require.Equal(t, tc.want, got, tc.name+" "+tc.head)
	}
}

func TestDetect(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		files map[string]string
		want  string
		err   string
	}{
		{name: "go.mod", files: map[string]string{"go.mod": "module m\n", "test_x.py": ""}, want: "go"},
		{name: "package.json naming jest", files: map[string]string{"package.json": `{"devDependencies": {"jest": "^29"}}`}, want: "jest"},
		{name: "package.json test script jest", files: map[string]string{"package.json": `{"scripts": {"test": "jest --ci"}}`}, want: "jest"},
		{name: "package.json without jest", files: map[string]string{"package.json": `{"scripts": {"test": "node --test"}}`}, want: "node"},
		{name: "pyproject", files: map[string]string{"pyproject.toml": ""}, want: "pytest"},
		{name: "test file only", files: map[string]string{"test_calc.py": ""}, want: "pytest"},
		{name: "csproj", files: map[string]string{"App.csproj": ""}, want: "dotnet"},
		{name: "nothing", files: map[string]string{"README.md": ""}, err: "no test suite detected"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			for n, c := range tc.files {
				require.NoError(t, os.WriteFile(filepath.Join(root, n), []byte(c), 0o644))
			}
			got, err := detect(target{root: root, rel: ".", dir: true})
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestCollectSkipsHiddenDependenciesAndSymlinks(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	outside := t.TempDir()
	for _, p := range []string{"a.py", "src/b.js", "src/run", ".git/hook.sh", "node_modules/x/y.js", "vendor/v.go", "src/.hidden/c.py", "notes.txt"} {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755))
		content := ""
		if p == "src/run" {
			content = "#!/bin/bash\necho hi\n"
		}
		require.NoError(t, os.WriteFile(filepath.Join(root, p), []byte(content), 0o644))
	}
	require.NoError(t, os.WriteFile(filepath.Join(outside, "evil.py"), nil, 0o644))
	require.NoError(t, os.Symlink(outside, filepath.Join(root, "link")))
	require.NoError(t, os.Symlink(filepath.Join(outside, "evil.py"), filepath.Join(root, "evil.py")))
	got, truncated, err := collect(target{root: root, rel: ".", dir: true}, 100)
	require.NoError(t, err)
	require.False(t, truncated)
	require.Equal(t, map[lang][]string{langPython: {"a.py"}, langJS: {"src/b.js"}, langShell: {"src/run"}}, got)

	_, truncated, err = collect(target{root: root, rel: ".", dir: true}, 2)
	require.NoError(t, err)
	require.True(t, truncated)
}
