package archtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// pkg is one package of the module as `go list` reports it, with import paths of
// the module's own packages made relative to the module ("worker", "llm/script")
// and every other import dropped: the rules speak only of the module's packages.
type pkg struct {
	Path string
	Name string
	// Imports are the non-test files' imports; TestImports those of its _test.go
	// files (in-package and external test package together).
	Imports, TestImports []string
}

// rule forbids some imports between the module's packages.
type rule struct {
	name string
	// tests applies the rule to test files' imports as well.
	tests bool
	// forbids reports whether from may not import to.
	forbids func(from pkg, to string) bool
}

// rules are the module's import rules (issue 15).
var rules = []rule{
	{
		// config composes the packages' Config types (worker.Config is the worker
		// section), so it is part of the composition root.
		name:  "only the composition root (fleet, and config for worker.Config) imports worker",
		tests: true,
		forbids: func(from pkg, to string) bool {
			return to == "worker" && from.Path != "fleet" && from.Path != "config" && from.Path != "worker"
		},
	},
	{
		name: "worker imports neither config nor a concrete llm provider (llm/*)",
		forbids: func(from pkg, to string) bool {
			return from.Path == "worker" && (to == "config" || strings.HasPrefix(to, "llm/"))
		},
	},
	{
		// Issue 36: the worker keeps the durable agent loop; product rules plug in
		// through worker/hook (reply checks, post-run work), registered by the
		// composition root. Its tests may link them to drive a hook end to end.
		name: "worker imports no tool class (tools/<class>, toolbox/<class>) and no product rule (qa, requiredoutput, finishimage)",
		forbids: func(from pkg, to string) bool {
			if from.Path != "worker" {
				return false
			}
			switch to {
			case "qa", "requiredoutput", "finishimage":
				return true
			}
			return strings.HasPrefix(to, "tools/") || strings.HasPrefix(to, "toolbox/")
		},
	},
	{
		// Tests may import fleet: end-to-end tests in any package build one.
		name: "no package imports fleet but commands (package main), cli and test helpers (fleettest)",
		forbids: func(from pkg, to string) bool {
			return to == "fleet" && from.Name != "main" && from.Path != "cli" && from.Path != "fleettest" && from.Path != "fleet"
		},
	},
	{
		// Below every floor: a leaf serves all packages, the floors included
		// (the floors' rules let them import it), so it imports nothing of the module.
		name: "a leaf (internal/defaults, queue/fair, tracing) imports no package of the module",
		forbids: func(from pkg, _ string) bool {
			return leaves[from.Path]
		},
	},
	{
		// A leaf's tests may link only the test helpers listed for it in
		// leafTests (queue/fair's run on real Redis through internal/testdb).
		name:  "a leaf's tests import no package of the module but its test helpers",
		tests: true,
		forbids: func(from pkg, to string) bool {
			return leaves[from.Path] && !leafTests[from.Path][to]
		},
	},
	{
		name: "queue imports no package of the module (everything that enqueues imports it)",
		forbids: func(from pkg, to string) bool {
			return from.Path == "queue" && !leaves[to]
		},
	},
	{
		// The lowest floor: every host-side reader of workspace data (tools,
		// device, api, worker, knowledge) imports it, so it can import none of them.
		name: "confine imports no package of the module (workspace confinement is the lowest floor)",
		forbids: func(from pkg, to string) bool {
			return from.Path == "confine" && !leaves[to]
		},
	},
	{
		// The egress floor (destination policy, DLP, secrets, URL normalization,
		// canonical JSON): tools, the gate, the sandboxes' proxy and the store
		// all import it. Below it only the shell parse, which its approval view
		// shows an approver, and the private-content fingerprints its DLP may use.
		name: "egress imports no package of the module (destination policy and DLP are a floor below the tools and the gate)",
		forbids: func(from pkg, to string) bool {
			return from.Path == "egress" && to != "egress/shell" && to != "egress/fingerprint" && !leaves[to]
		},
	},
	{
		// The fingerprints of a session's private reads (issue 49) match
		// outbound text for the gate and egress; they read text only, so they
		// stand on the standard library alone, tests included.
		name:  "egress/fingerprint imports no package of the module, tests included (the fingerprints are a floor under egress)",
		tests: true,
		forbids: func(from pkg, to string) bool {
			return from.Path == "egress/fingerprint" && to != "egress/fingerprint"
		},
	},
	{
		// The shell parse judges run_shell's command lines for the gate
		// (tools.Escalates) and for the approver's view; it reads text only.
		name: "egress/shell imports no package of the module (the shell parse is the floor under egress)",
		forbids: func(from pkg, to string) bool {
			return from.Path == "egress/shell" && !leaves[to]
		},
	},
	{
		// The gate wraps the tools; a tool reaches the egress checks through
		// egress, never through the gate (and so never links store or queue for it).
		// cli is the top floor (it links fleet, hence the gate, anyway): its
		// `policy test` replays the gate's rule layers over the record.
		name: "only the composition root (fleet, config) and the gate's runners (worker, mcpserver, cli's policy test) import security",
		forbids: func(from pkg, to string) bool {
			switch from.Path {
			case "fleet", "config", "worker", "mcpserver", "security", "cli":
				return false
			}
			return to == "security" && from.Name != "main"
		},
	},
	{
		// The router core is the floor the server classes register on: importing
		// one of them back would make every tool a dependency of the router and of
		// everything that only needs the catalog (templates, config, the gate).
		// Its external tests may build the whole toolbox (the catalog check).
		name: "the router core (tools) imports no toolbox package",
		forbids: func(from pkg, to string) bool {
			return from.Path == "tools" && isToolbox(to)
		},
	},
	{
		// A tool sits under the gate and the agent loop that run it: it reaches the
		// network through egress and the workspace through confine, and learns its
		// caller from its tools.Call, so it has no use for the layers above it; a
		// test of a tool that needs them runs a whole fleet. fleet itself is the
		// rule above's: end-to-end tests (toolbox/shell's) build one.
		name:  "no toolbox package imports security, worker, api or mcpserver, tests included",
		tests: true,
		forbids: func(from pkg, to string) bool {
			switch to {
			case "security", "worker", "api", "mcpserver":
				return isToolbox(from.Path)
			}
			return false
		},
	},
	{
		// Token counting (issue 38) serves the worker, the providers, their
		// fake (llmtest) and the bench: it stands on llm's types alone.
		name: "llm/tokens imports no package of the module but llm",
		forbids: func(from pkg, to string) bool {
			return from.Path == "llm/tokens" && to != "llm" && !leaves[to]
		},
	},
	{
		// Inbound webhook verification (issue 43): signatures, nesting bound,
		// JSON pointers. The API's delivery endpoint looks the hook up and
		// records the outcome; the checks themselves need nothing of the fleet.
		name:  "webhook/inbound imports no package of the module, tests included (verifying a delivery is a floor below the API)",
		tests: true,
		forbids: func(from pkg, to string) bool {
			return from.Path == "webhook/inbound" && to != "webhook/inbound" && !leaves[to]
		},
	},
	{
		// The resource server's token check (issue 50): the MCP listener uses
		// it, and the API may; it knows no role, principal store or route of the
		// fleet (its callers decide what a role allows), so it stands on the
		// standard library, go-jose and the leaves, and its tests on its own
		// OpenID provider (oauth/oauthtest, which imports nothing of the module).
		name:  "oauth imports no package of the module, tests included (the token check is a floor below the listeners)",
		tests: true,
		forbids: func(from pkg, to string) bool {
			if from.Path != "oauth" && from.Path != "oauth/oauthtest" {
				return false
			}
			return to != "oauth" && to != "oauth/oauthtest" && !leaves[to]
		},
	},
	{
		name: "egressproxy imports neither store nor queue (it records through an interface)",
		forbids: func(from pkg, to string) bool {
			return from.Path == "egressproxy" && (to == "store" || to == "queue")
		},
	},
	{
		// fleettest links the whole module. A package whose tests import it links
		// every package into its test binary, and when the package also has
		// in-package tests, Go recompiles every package above it against its test
		// variant (egress's tests once recompiled 33 packages for a Redis URL).
		// Tests that need only a database, Redis or a logger use internal/testdb
		// and internal/testlog; these packages' tests start fleets.
		name:  "only tests that start a fleet import fleettest (a database, Redis or a logger come from internal/testdb and internal/testlog)",
		tests: true,
		forbids: func(from pkg, to string) bool {
			switch from.Path {
			case "api", "cli", "dashboards", "fleet", "mcpserver", "studio", "submit", "webhook", "toolbox/research", "toolbox/shell":
				return false
			}
			return to == "fleettest" && from.Name != "main"
		},
	},
	{
		// A test helper (fleettest, sandboxtest, egresstest, …) carries fixtures
		// and fakes that must never reach a binary; tests import them freely.
		name: "test helper packages (named …test) are imported only by tests and other test helpers",
		forbids: func(from pkg, to string) bool {
			return testHelper(to) && !testHelper(from.Path) && !testSupport[from.Path]
		},
	},
}

// testHelper reports whether the package at path is a test helper: its last
// element ends in "test" (fleettest, gpu/gputest, egress/egresstest), as the
// module names them. internal/testdb and internal/testinfra are not: commands
// (cmd/bench, cmd/drills) build on them.
func testHelper(path string) bool {
	return strings.HasSuffix(path[strings.LastIndex(path, "/")+1:], "test")
}

// testSupport are packages that serve tests only without a …test name, so they
// may import test helpers: simimage builds the TTS simulator's image for tests;
// the bench measures the fleet against fakes of third-party services (llmtest's
// rate-limited model API) and is never part of a deployment.
var testSupport = map[string]bool{"media/voice/ttssim/simimage": true, "cmd/bench": true}

// leaves are the packages below the lowest floor: they import only the standard
// library, so queue, confine and egress may import them (the floors' rules speak
// of the module's other packages). internal/defaults fills the Configs' defaults.
var leaves = map[string]bool{"internal/defaults": true, "queue/fair": true, "tracing": true}

// leafTests are the test helpers a leaf's tests may import.
var leafTests = map[string]map[string]bool{
	"queue/fair": {"internal/testdb": true, "internal/testinfra": true},
}

// isToolbox reports whether path is package toolbox or one of its server classes.
func isToolbox(path string) bool { return path == "toolbox" || strings.HasPrefix(path, "toolbox/") }

// exceptions are known violations of the rules, each with the follow-up that
// removes it: "from -> to" → why. A violation listed here does not fail the test;
// an exception that no longer occurs does, so the list only shrinks.
var exceptions = map[string]string{}

// violation is one forbidden import.
type violation struct {
	from, to, rule string
	test           bool
}

func (v violation) edge() string { return v.from + " -> " + v.to }

func (v violation) String() string {
	in := ""
	if v.test {
		in = " (in its tests)"
	}
	return fmt.Sprintf("%s%s breaks %q", v.edge(), in, v.rule)
}

// check applies rules to pkgs and returns the violations not excused by
// exceptions, and the exceptions that no longer occur.
func check(pkgs []pkg, rules []rule, exceptions map[string]string) (violations []string, stale []string) {
	seen := map[string]bool{}
	visit := func(from pkg, imports []string, r rule, test bool) {
		for _, to := range imports {
			if (test && to == from.Path) || !r.forbids(from, to) {
				continue
			}
			v := violation{from: from.Path, to: to, rule: r.name, test: test}
			seen[v.edge()] = true
			if _, excused := exceptions[v.edge()]; !excused {
				violations = append(violations, v.String())
			}
		}
	}
	for _, p := range pkgs {
		for _, r := range rules {
			visit(p, p.Imports, r, false)
			if r.tests {
				visit(p, p.TestImports, r, true)
			}
		}
	}
	for e := range exceptions {
		if !seen[e] {
			stale = append(stale, e)
		}
	}
	sort.Strings(violations)
	sort.Strings(stale)
	return violations, stale
}

// TestImportRules checks the rules over the module's real import graph.
func TestImportRules(t *testing.T) {
	pkgs := listPackages(t)
	var names []string
	for _, p := range pkgs {
		names = append(names, p.Path)
	}
	for _, want := range []string{"api", "confine", "egress", "egressproxy", "fleet", "queue", "scheduler", "security", "toolbox", "toolbox/workspace", "tools", "webhook", "worker"} {
		if !slices.Contains(names, want) {
			t.Fatalf("go list did not report package %s (got %v): the rules would pass vacuously", want, names)
		}
	}
	violations, stale := check(pkgs, rules, exceptions)
	for _, v := range violations {
		t.Errorf("import rule violated: %s", v)
	}
	for _, e := range stale {
		t.Errorf("exception %q no longer occurs: remove it from exceptions", e)
	}
}

// TestImportRulesCatchViolations proves the check fails where it must, on a
// synthetic graph.
func TestImportRulesCatchViolations(t *testing.T) {
	clean := []pkg{
		{Path: "api", Name: "api", Imports: []string{"queue", "events"}, TestImports: []string{"fleettest", "queue"}},
		{Path: "worker", Name: "worker", Imports: []string{"queue", "llm", "templates"}, TestImports: []string{"llm/script"}},
		{Path: "fleet", Name: "fleet", Imports: []string{"worker", "config", "llm/openai", "queue"}, TestImports: []string{"fleet", "worker"}},
		{Path: "fleettest", Name: "fleettest", Imports: []string{"fleet"}},
		{Path: "config", Name: "config", Imports: []string{"worker", "scheduler", "api"}},
		{Path: "cli", Name: "cli", Imports: []string{"fleet"}},
		{Path: "cmd/bench", Name: "main", Imports: []string{"fleet"}},
		{Path: "dashboards", Name: "dashboards", TestImports: []string{"fleet"}},
		{Path: "queue", Name: "queue", TestImports: []string{"internal/testdb"}},
	}
	with := func(extra ...pkg) []pkg { return append(slices.Clone(clean), extra...) }
	for _, c := range []struct {
		name       string
		pkgs       []pkg
		exceptions map[string]string
		want       []string
		stale      []string
	}{
		{name: "clean", pkgs: clean},
		{name: "scheduler enqueues through worker", pkgs: with(pkg{Path: "scheduler", Name: "scheduler", Imports: []string{"worker"}}),
			want: []string{`scheduler -> worker breaks "only the composition root (fleet, and config for worker.Config) imports worker"`}},
		{name: "a test reaches into worker", pkgs: with(pkg{Path: "security", Name: "security", TestImports: []string{"worker"}}),
			want: []string{`security -> worker (in its tests) breaks "only the composition root (fleet, and config for worker.Config) imports worker"`}},
		{name: "worker imports config and a provider", pkgs: with(pkg{Path: "worker", Name: "worker", Imports: []string{"config", "llm", "llm/script"}}),
			want: []string{
				`worker -> config breaks "worker imports neither config nor a concrete llm provider (llm/*)"`,
				`worker -> llm/script breaks "worker imports neither config nor a concrete llm provider (llm/*)"`,
			}},
		{name: "worker links a product rule and a tool class", pkgs: with(pkg{Path: "worker", Name: "worker", Imports: []string{"queue", "qa", "tools/comfyui", "worker/hook"}}),
			want: []string{
				`worker -> qa breaks "worker imports no tool class (tools/<class>, toolbox/<class>) and no product rule (qa, requiredoutput, finishimage)"`,
				`worker -> tools/comfyui breaks "worker imports no tool class (tools/<class>, toolbox/<class>) and no product rule (qa, requiredoutput, finishimage)"`,
			}},
		{name: "a library imports fleet", pkgs: with(pkg{Path: "scheduler", Name: "scheduler", Imports: []string{"fleet"}}),
			want: []string{`scheduler -> fleet breaks "no package imports fleet but commands (package main), cli and test helpers (fleettest)"`}},
		{name: "queue imports the store", pkgs: with(pkg{Path: "queue", Name: "queue", Imports: []string{"store"}}),
			want: []string{`queue -> store breaks "queue imports no package of the module (everything that enqueues imports it)"`}},
		{name: "confine imports a tool", pkgs: with(pkg{Path: "confine", Name: "confine", Imports: []string{"toolbox/workspace"}}),
			want: []string{`confine -> toolbox/workspace breaks "confine imports no package of the module (workspace confinement is the lowest floor)"`}},
		{name: "the shell parse imports egress", pkgs: with(pkg{Path: "egress/shell", Name: "shell", Imports: []string{"egress"}}),
			want: []string{`egress/shell -> egress breaks "egress/shell imports no package of the module (the shell parse is the floor under egress)"`}},
		{name: "egress imports the shell parse", pkgs: with(pkg{Path: "egress", Name: "egress", Imports: []string{"egress/shell"}})},
		{name: "egress imports the fingerprints", pkgs: with(pkg{Path: "egress", Name: "egress", Imports: []string{"egress/shell", "egress/fingerprint"}})},
		{name: "the fingerprints import egress and a leaf, their tests the DLP helpers", pkgs: with(
			pkg{Path: "egress/fingerprint", Name: "fingerprint", Imports: []string{"egress", "internal/defaults"}, TestImports: []string{"egress/fingerprint", "egress/egresstest"}}),
			want: []string{
				`egress/fingerprint -> egress breaks "egress/fingerprint imports no package of the module, tests included (the fingerprints are a floor under egress)"`,
				`egress/fingerprint -> egress/egresstest (in its tests) breaks "egress/fingerprint imports no package of the module, tests included (the fingerprints are a floor under egress)"`,
				`egress/fingerprint -> internal/defaults breaks "egress/fingerprint imports no package of the module, tests included (the fingerprints are a floor under egress)"`,
			}},
		{name: "the floors import a leaf", pkgs: with(
			pkg{Path: "queue", Name: "queue", Imports: []string{"internal/defaults"}},
			pkg{Path: "confine", Name: "confine", Imports: []string{"internal/defaults"}},
			pkg{Path: "egress", Name: "egress", Imports: []string{"internal/defaults"}},
			pkg{Path: "internal/defaults", Name: "defaults"})},
		{name: "a leaf imports the egress floor", pkgs: with(pkg{Path: "internal/defaults", Name: "defaults", TestImports: []string{"egress"}}),
			want: []string{`internal/defaults -> egress (in its tests) breaks "a leaf's tests import no package of the module but its test helpers"`}},
		{name: "the fair dispatcher's tests run on the test helpers", pkgs: with(
			pkg{Path: "queue/fair", Name: "fair", TestImports: []string{"internal/testdb", "internal/testinfra", "queue/fair"}})},
		{name: "the fair dispatcher links the test helpers outside its tests", pkgs: with(pkg{Path: "queue/fair", Name: "fair", Imports: []string{"internal/testdb"}}),
			want: []string{`queue/fair -> internal/testdb breaks "a leaf (internal/defaults, queue/fair, tracing) imports no package of the module"`}},
		{name: "the fair dispatcher's tests link the queue", pkgs: with(pkg{Path: "queue/fair", Name: "fair", TestImports: []string{"queue"}}),
			want: []string{`queue/fair -> queue (in its tests) breaks "a leaf's tests import no package of the module but its test helpers"`}},
		{name: "defaults' tests may not link the test helpers", pkgs: with(pkg{Path: "internal/defaults", Name: "defaults", TestImports: []string{"internal/testdb"}}),
			want: []string{`internal/defaults -> internal/testdb (in its tests) breaks "a leaf's tests import no package of the module but its test helpers"`}},
		{name: "egress imports the gate", pkgs: with(pkg{Path: "egress", Name: "egress", Imports: []string{"security"}}),
			want: []string{
				`egress -> security breaks "egress imports no package of the module (destination policy and DLP are a floor below the tools and the gate)"`,
				`egress -> security breaks "only the composition root (fleet, config) and the gate's runners (worker, mcpserver, cli's policy test) import security"`,
			}},
		{name: "a tool imports the gate", pkgs: with(pkg{Path: "toolbox/research", Name: "research", Imports: []string{"egress", "security", "tools"}}),
			want: []string{
				`toolbox/research -> security breaks "no toolbox package imports security, worker, api or mcpserver, tests included"`,
				`toolbox/research -> security breaks "only the composition root (fleet, config) and the gate's runners (worker, mcpserver, cli's policy test) import security"`,
			}},
		{name: "a tool's test reaches into the gate and a tool serves MCP", pkgs: with(
			pkg{Path: "toolbox/shell", Name: "shell", Imports: []string{"tools", "mcpserver"}, TestImports: []string{"security", "fleet", "fleettest"}}),
			want: []string{
				`toolbox/shell -> mcpserver breaks "no toolbox package imports security, worker, api or mcpserver, tests included"`,
				`toolbox/shell -> security (in its tests) breaks "no toolbox package imports security, worker, api or mcpserver, tests included"`,
			}},
		{name: "the router imports the toolbox", pkgs: with(
			pkg{Path: "tools", Name: "tools", Imports: []string{"llm", "toolbox/workspace", "toolbox"}, TestImports: []string{"toolbox"}},
			pkg{Path: "toolbox", Name: "toolbox", Imports: []string{"tools", "toolbox/workspace"}}),
			want: []string{
				`tools -> toolbox breaks "the router core (tools) imports no toolbox package"`,
				`tools -> toolbox/workspace breaks "the router core (tools) imports no toolbox package"`,
			}},
		{name: "the token check and its provider stand alone", pkgs: with(
			pkg{Path: "oauth", Name: "oauth", Imports: []string{"internal/defaults"}, TestImports: []string{"oauth", "oauth/oauthtest"}},
			pkg{Path: "oauth/oauthtest", Name: "oauthtest"})},
		{name: "the token check learns the fleet's roles", pkgs: with(
			pkg{Path: "oauth", Name: "oauth", Imports: []string{"api"}, TestImports: []string{"fleettest"}}),
			want: []string{
				`oauth -> api breaks "oauth imports no package of the module, tests included (the token check is a floor below the listeners)"`,
				`oauth -> fleettest (in its tests) breaks "oauth imports no package of the module, tests included (the token check is a floor below the listeners)"`,
				`oauth -> fleettest (in its tests) breaks "only tests that start a fleet import fleettest (a database, Redis or a logger come from internal/testdb and internal/testlog)"`,
			}},
		{name: "the sandboxes' proxy links the store", pkgs: with(pkg{Path: "egressproxy", Name: "egressproxy", Imports: []string{"egress", "store"}}),
			want: []string{`egressproxy -> store breaks "egressproxy imports neither store nor queue (it records through an interface)"`}},
		{name: "a store test links the fleet for a database", pkgs: with(pkg{Path: "store", Name: "store", TestImports: []string{"fleettest"}}),
			want: []string{`store -> fleettest (in its tests) breaks "only tests that start a fleet import fleettest (a database, Redis or a logger come from internal/testdb and internal/testlog)"`}},
		{name: "a library links a test helper", pkgs: with(pkg{Path: "security", Name: "security", Imports: []string{"egress", "egress/egresstest"}}),
			want: []string{`security -> egress/egresstest breaks "test helper packages (named …test) are imported only by tests and other test helpers"`}},
		{name: "tests and test helpers import test helpers", pkgs: with(
			pkg{Path: "security", Name: "security", Imports: []string{"egress"}, TestImports: []string{"egress/egresstest", "internal/testdb"}},
			pkg{Path: "egress/egresstest", Name: "egresstest", Imports: []string{"egress"}},
			pkg{Path: "sandbox/sandboxtest", Name: "sandboxtest", Imports: []string{"sandbox", "egress/egresstest"}})},
		{name: "an exception excuses its edge only", pkgs: with(pkg{Path: "worker", Name: "worker", Imports: []string{"config", "llm/script"}}),
			exceptions: map[string]string{"worker -> config": "follow-up"},
			want:       []string{`worker -> llm/script breaks "worker imports neither config nor a concrete llm provider (llm/*)"`}},
		{name: "a stale exception is reported", pkgs: clean,
			exceptions: map[string]string{"worker -> config": "follow-up"}, stale: []string{"worker -> config"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, stale := check(c.pkgs, rules, c.exceptions)
			if !slices.Equal(got, c.want) || !slices.Equal(stale, c.stale) {
				t.Errorf("violations\n got %q\nwant %q\nstale\n got %q\nwant %q", got, c.want, stale, c.stale)
			}
		})
	}
}

// listPackages runs `go list` over the module and returns its packages.
func listPackages(t *testing.T) []pkg {
	t.Helper()
	gomod := goCmd(t, "", "env", "GOMOD")
	if gomod == "" || gomod == "/dev/null" {
		t.Fatalf("not inside a module (go env GOMOD = %q)", gomod)
	}
	root := filepath.Dir(gomod)
	mod := goCmd(t, root, "list", "-m")
	out := goCmd(t, root, "list", "-e", "-json=ImportPath,Name,Imports,TestImports,XTestImports,Error", "./...")
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(out))
	for {
		var p struct {
			ImportPath, Name                   string
			Imports, TestImports, XTestImports []string
			Error                              *struct{ Err string }
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		if p.Error != nil {
			t.Fatalf("go list %s: %s", p.ImportPath, p.Error.Err)
		}
		rel := func(paths []string) []string {
			var out []string
			for _, ip := range paths {
				if r, ok := strings.CutPrefix(ip, mod+"/"); ok {
					out = append(out, r)
				}
			}
			return out
		}
		path, ok := strings.CutPrefix(p.ImportPath, mod+"/")
		if !ok {
			path = p.ImportPath
		}
		pkgs = append(pkgs, pkg{Path: path, Name: p.Name, Imports: rel(p.Imports),
			TestImports: rel(append(p.TestImports, p.XTestImports...))})
	}
	return pkgs
}

func goCmd(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}
