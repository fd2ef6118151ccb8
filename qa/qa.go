// Package qa is the QA rule (issue 19), a reply check of the worker
// (hook.ReplyCheck) the composition root registers: a QA node — marked
// qa: true, or holding play_test — states verdicts as lines
// "VERDICT <page> PASS|FAIL <reason>". A verdict on a page it has not played
// with play_test in this session, or whose files changed since it played
// them, is not accepted: the answer goes back to the agent with the reason,
// up to the circuit breaker.
package qa

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strings"

	"github.com/aetherium-engine/aetherium/confine"
	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/templates"
	"github.com/aetherium-engine/aetherium/toolbox/workspace"
	"github.com/aetherium-engine/aetherium/tools"
	"github.com/aetherium-engine/aetherium/worker/hook"
)

// Check is the QA rule as a reply check: a QA session's final answer whose
// verdicts do not rest on a play of the page as it stands is sent back.
func Check(_ context.Context, r hook.Reply) error {
	if !isQA(r.Node, r.Access) {
		return nil
	}
	if reason := qaRefusal(r.Workspace, r.History, r.Answer); reason != "" {
		return &hook.SendBack{Reason: reason, What: "verdicts"}
	}
	return nil
}

// playTest is the tool whose plays the rule reads (toolbox/research registers
// it; this package does not link the browser tools).
const playTest = "play_test"

var verdictLine = regexp.MustCompile(`(?m)^[ \t*_>-]*VERDICT[ \t]+(\S+)[ \t]+(PASS|FAIL)\b`)

func isQA(node templates.Node, access tools.Access) bool {
	return node.QA || slices.Contains(access.Tools, playTest)
}

// played is what the QA rule reads of a play_test result (research.PlayAnswer).
type played struct {
	Page  string            `json:"page"`
	URL   string            `json:"url"`
	Files map[string]string `json:"files"`
}

// pageKey names a page the same way in a verdict and in a play: a workspace
// path cleaned (./index.html is index.html), a URL as it is.
func pageKey(p string) string {
	if strings.Contains(p, "://") {
		return p
	}
	if c, err := workspace.Clean(p); err == nil {
		return c
	}
	return p
}

// qaRefusal is why answer cannot be accepted from a QA session whose history
// (before the answer) is msgs, or "" when every verdict stands.
func qaRefusal(ws string, msgs []llm.Message, answer string) string {
	verdicts := verdictLine.FindAllStringSubmatch(answer, -1)
	if len(verdicts) == 0 {
		return ""
	}
	// The latest successful play of each page in this session.
	plays := map[string]played{}
	callOf := map[string]string{}
	for _, m := range msgs {
		if m.Role == llm.RoleAssistant {
			for _, c := range m.ToolCalls {
				callOf[c.ID] = c.Name
			}
		}
		if m.Role != llm.RoleTool || m.IsError || (m.Name != playTest && callOf[m.ToolCallID] != playTest) {
			continue
		}
		var p played
		if json.Unmarshal([]byte(m.Content), &p) == nil && p.Page != "" {
			plays[pageKey(p.Page)] = p
			if p.URL != "" {
				plays[p.URL] = p
			}
		}
	}
	var problems []string
	for _, v := range verdicts {
		page := strings.Trim(v[1], "`'\"")
		p, ok := plays[pageKey(page)]
		if !ok {
			problems = append(problems, fmt.Sprintf("play_test has not been run on %s as it stands now", page))
			continue
		}
		if changed := changedFiles(ws, p.Files); len(changed) > 0 {
			problems = append(problems, fmt.Sprintf("%s changed since play_test played it (%s): play_test has not been run on %s as it stands now",
				page, strings.Join(changed, ", "), page))
		}
	}
	if len(problems) == 0 {
		return ""
	}
	return "Your verdict is not accepted: " + strings.Join(problems, "; ") +
		". Run play_test on the page, then state the verdict again (VERDICT <page> PASS|FAIL <reason>)."
}

// qaMaxFile bounds a played file changedFiles reads (play_test serves none
// larger).
const qaMaxFile = 8 << 20

// changedFiles are the played files whose content differs now (or that are
// gone), read through confine (no symlink out, a FIFO refused instead of
// blocking the open, at most research's play limit of 8 MiB, as play_test
// serves no more).
func changedFiles(ws string, files map[string]string) []string {
	if len(files) == 0 {
		return nil
	}
	root, err := confine.OpenRoot(ws, confine.Config{MaxBytes: qaMaxFile})
	if err != nil {
		return []string{"the workspace is unreadable"}
	}
	defer root.Close()
	var out []string
	for p, want := range files {
		data, err := root.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			out = append(out, p+" is gone")
			continue
		}
		if err != nil {
			out = append(out, fmt.Sprintf("%s is unreadable (%v)", p, err))
			continue
		}
		sum := sha256.Sum256(data)
		if hex.EncodeToString(sum[:]) != want {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}
