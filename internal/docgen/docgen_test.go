package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGeneratedPagesAreCurrent regenerates every page docgen writes and compares
// it with the committed one: a change to a Config struct, a tool registration or
// the OpenAPI document that leaves its page behind fails here.
func TestGeneratedPagesAreCurrent(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pages {
		t.Run(filepath.Base(p.path), func(t *testing.T) {
			want, err := p.gen(root)
			if err != nil {
				t.Fatalf("generating %s: %v", p.path, err)
			}
			have, err := os.ReadFile(filepath.Join(root, p.path))
			if err != nil {
				t.Fatalf("%s: %v; run `%s` and commit the page", p.path, err, regenerate)
			}
			if !bytes.Equal(have, want) {
				t.Fatalf("%s differs from what the code generates (first difference at line %d: %q, generated %q);\nrun `%s` (or `make docs`) and commit the page",
					p.path, firstDiff(have, want), line(have, firstDiff(have, want)), line(want, firstDiff(have, want)), regenerate)
			}
		})
	}
}

// TestAnchor pins GitHub's heading anchors for the shapes the pages use.
func TestAnchor(t *testing.T) {
	for heading, want := range map[string]string{
		"GET /api/runs/{id}/events":           "get-apirunsidevents",
		"Group `workspace`":                   "group-workspace",
		"read_file":                           "read_file",
		"Projects and agent memory":           "projects-and-agent-memory",
		"CI under load":                       "ci-under-load",
		"The [gate](x.md): tiers & approvals": "the-gate-tiers--approvals",
	} {
		if got := anchor(heading); got != want {
			t.Errorf("anchor(%q) = %q, want %q", heading, got, want)
		}
	}
}

func firstDiff(a, b []byte) int {
	al, bl := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	for i := 0; i < len(al) && i < len(bl); i++ {
		if al[i] != bl[i] {
			return i + 1
		}
	}
	return min(len(al), len(bl)) + 1
}

func line(b []byte, n int) string {
	l := strings.Split(string(b), "\n")
	if n-1 < len(l) {
		return l[n-1]
	}
	return "(end of file)"
}

// A field of a struct that several sections share names the constant of its
// section when the package declares one (Default<Section><Field>), not the
// shared Default<Field>: the production tier's quota is not the temp tier's.
func TestConfigKeysNameTheSectionsConstant(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	page, err := configKeys(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| `workspace_tiers.production.quota` | wsquota.Size | `4.0 GiB` (`wsquota.DefaultProductionQuota`) |",
		"| `workspace_tiers.temp.retention` | duration | `168h` (`wsquota.DefaultTempRetention`) |",
		"| `workspace_tiers.temp.quota` | wsquota.Size | `wsquota.DefaultQuota` |",
	} {
		if !strings.Contains(string(page), want) {
			t.Errorf("the configuration keys page lacks the row %q", want)
		}
	}
}
