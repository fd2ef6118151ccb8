package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/aetherium-engine/aetherium/templates"
)

// teamBlock is a whole team in a page: a YAML code block with a top-level name.
var teamBlock = regexp.MustCompile("(?s)```yaml\n(.*?)```")

// TestDocTeamsAreValid parses and validates, against the tools this build
// registers, every whole team the tutorial and the how-tos show, so a reader who
// copies one gets a team the API accepts.
func TestDocTeamsAreValid(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	reg, err := registry()
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, page := range []string{"docs/tutorial.md", "docs/how-to/write-a-template.md", "docs/how-to/configure-a-provider.md"} {
		raw, err := os.ReadFile(filepath.Join(root, page))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range teamBlock.FindAllStringSubmatch(string(raw), -1) {
			block := m[1]
			if !regexp.MustCompile(`(?m)^name: `).MatchString(block) || !strings.Contains(block, "\nsupervisor:") {
				continue // a fragment, not a team
			}
			found++
			team, err := templates.ParseYAML([]byte(block))
			if err != nil {
				t.Errorf("%s: a team does not parse: %v", page, err)
				continue
			}
			if err := team.Validate(reg); err != nil {
				t.Errorf("%s: team %q is invalid: %v", page, team.Name, err)
			}
			if _, err := team.Render(sampleVars(team)); err != nil {
				t.Errorf("%s: team %q does not render: %v", page, team.Name, err)
			}
		}
	}
	if found < 2 {
		t.Errorf("found %d whole teams in the pages, want the tutorial's and the template how-to's", found)
	}
}

func sampleVars(t templates.Template) map[string]any {
	vars := map[string]any{}
	for _, v := range t.Variables() {
		vars[v] = "x"
	}
	return vars
}
