package fleet_test

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/review"
)

const reviewedCode = "import os\n\ndef run(cmd):\n    os.system(cmd)\n"

const validReview = `[{"severity":"critical","file":"app.py","line":4,"title":"Shell injection","detail":"cmd reaches os.system","suggestion":"use subprocess.run with a list"},
{"severity":"nit","file":"app.py","line":1,"title":"Unused blank line","detail":"style","suggestion":"remove it"}]`

// reviewTeam: the supervisor delegates to coder, who writes app.py, asks for a
// review of it and finishes; coder's reviewer answers with the given texts.
func reviewTeam(reviewer ...string) map[string]any {
	answers := make([]map[string]any, len(reviewer))
	for i, a := range reviewer {
		answers[i] = map[string]any{"say": a}
	}
	return map[string]any{
		"name": "review-team", "model": map[string]any{"provider": "script"},
		"supervisor": map[string]any{"name": "boss", "prompt": "coordinate", "mcp_servers": []string{"orchestration"}},
		"workers":    []map[string]any{{"name": "coder", "prompt": "write code", "mcp_servers": []string{"workspace", "quality"}}},
		"script": map[string]any{"agents": map[string]any{
			"boss": []map[string]any{
				call("delegate", map[string]any{"agent": "coder", "task": "write app.py and have it reviewed"}),
				call("reply", map[string]any{"message": "done"}),
			},
			"coder": []map[string]any{
				call("write_file", map[string]any{"path": "app.py", "content": reviewedCode}),
				call("code_review", map[string]any{"path": "app.py", "focus": "security"}),
				{"say": "reviewed"},
			},
			review.Agent("coder"): answers,
		}},
	}
}

// toolCall is the first tool.call event of tool.
func toolCall(t *testing.T, evs []fleettest.Event, tool string) (decision, result, errMsg string) {
	t.Helper()
	for _, e := range evs {
		if e.Type != "tool.call" {
			continue
		}
		var d struct{ Tool, Result, Decision, Error string }
		require.NoError(t, json.Unmarshal(e.Data, &d))
		if d.Tool == tool {
			return d.Decision, d.Result, d.Error
		}
	}
	t.Fatalf("no %s call", tool)
	return "", "", ""
}

// code_review end to end on the script model: the caller's turn waits for a
// reviewer delegation; a conforming review comes back ordered and counted; a
// non-conforming one is asked for once more with the validation error; twice
// non-conforming is a tool error for the caller, and the run goes on.
func TestCodeReviewScript(t *testing.T) {
	t.Parallel()
	f := fleettest.Start(t, fleettest.Options{})
	cases := []struct {
		name     string
		reviewer []string
		decision string
		result   string
		retries  int
	}{
		{"valid", []string{validReview}, "allowed", `"counts":{"critical":1,"major":0,"minor":0,"nit":1}`, 0},
		{"retried once", []string{"Looks fine to me!", "```json\n" + validReview + "\n```"}, "allowed", `"title":"Shell injection"`, 1},
		{"invalid twice", []string{"Looks fine to me!", `[{"severity":"blocker","file":"app.py","line":1,"title":"x","detail":"","suggestion":""}]`},
			"error", `did not conform to the review schema after one retry`, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			id := f.SubmitTeam(reviewTeam(tc.reviewer...), "write and review")
			evs := f.Follow(id, 0, 60*time.Second)
			require.Equal(t, "run.completed", evs[len(evs)-1].Type, "%+v", evs[len(evs)-1])
			decision, result, errMsg := toolCall(t, evs, "code_review")
			require.Equal(t, tc.decision, decision, errMsg)
			require.Contains(t, result+errMsg, tc.result)

			// The reviewer saw the file line-numbered after the review prompt; a
			// retry carries the validation error.
			var msgs []struct{ Role, Content string }
			var raw []byte
			require.NoError(t, f.Store.Pool.QueryRow(t.Context(), `SELECT session_history(id) FROM sessions WHERE run_id = $1 AND agent = $2`, id, review.Agent("coder")).Scan(&raw))
			require.NoError(t, json.Unmarshal(raw, &msgs))
			require.Equal(t, review.SystemPrompt, msgs[0].Content)
			require.Contains(t, msgs[1].Content, "with this focus: security")
			require.Contains(t, msgs[1].Content, "    4|     os.system(cmd)\n")
			retries := 0
			for _, m := range msgs {
				if m.Role == "user" && review.IsRetry(m.Content) {
					retries++
				}
			}
			require.Equal(t, tc.retries, retries)
		})
	}
}

// Hostile paths never reach a reviewer.
func TestCodeReviewRefusesPaths(t *testing.T) {
	t.Parallel()
	f := fleettest.Start(t, fleettest.Options{})
	for _, p := range []string{"../../etc/passwd", "/etc/passwd", ".aetherium/snapshots", "missing.py", "empty"} {
		team := reviewTeam(validReview)
		coder := team["script"].(map[string]any)["agents"].(map[string]any)["coder"].([]map[string]any)
		coder[0] = call("write_file", map[string]any{"path": "empty/.hidden", "content": "a dot file only"})
		coder[1] = call("code_review", map[string]any{"path": p})
		id := f.SubmitTeam(team, "review "+p)
		evs := f.Follow(id, 0, 60*time.Second)
		require.Equal(t, "run.completed", evs[len(evs)-1].Type, "%s: %+v", p, evs[len(evs)-1])
		decision, _, errMsg := toolCall(t, evs, "code_review")
		require.Equal(t, "error", decision, p)
		require.NotEmpty(t, errMsg, p)
		var n int
		require.NoError(t, f.Store.Pool.QueryRow(t.Context(), `SELECT count(*) FROM delegations WHERE run_id = $1 AND kind = 'review'`, id).Scan(&n))
		require.Zero(t, n, "%s: no reviewer", p)
	}
}

// code_review on the OpenAI-compatible wire: the reviewer's request carries the
// review prompt and the numbered file, its JSON answer comes back to the caller,
// and its tokens count against the run's budget.
func TestCodeReviewOpenAI(t *testing.T) {
	t.Parallel()
	const task = "write app.py and review it"
	model := &chatModel{decide: func(r chatRequest) chatAnswer {
		if strings.HasPrefix(r.task(), "Review these files") {
			return chatAnswer{Text: validReview}
		}
		tools := 0
		for _, m := range r.Messages {
			if m.Role == "tool" {
				tools++
			}
		}
		switch tools {
		case 0:
			return chatAnswer{Tool: "write_file", Args: map[string]any{"path": "app.py", "content": reviewedCode}}
		case 1:
			return chatAnswer{Tool: "code_review", Args: map[string]any{"path": "app.py"}}
		default:
			return chatAnswer{Tool: "reply", Args: map[string]any{"message": r.Messages[len(r.Messages)-1].Content}}
		}
	}}
	fake := httptest.NewServer(model)
	t.Cleanup(fake.Close)
	f := fleettest.Start(t, fleettest.Options{Configure: func(c *config.Config) {
		c.LLM.OpenAI.BaseURL, c.LLM.OpenAI.APIKey, c.LLM.OpenAI.Model = fake.URL+"/v1", "test-key", "fake-model"
	}})
	team := map[string]any{
		"name": "review-openai", "model": map[string]any{"provider": "openai", "model": "fake-model"},
		"supervisor": map[string]any{"name": "boss", "prompt": "write and review", "mcp_servers": []string{"orchestration", "workspace", "quality"}},
		"workers":    []map[string]any{},
	}
	id := f.SubmitTeam(team, task)
	evs := f.Follow(id, 0, 60*time.Second)
	require.Equal(t, "run.completed", evs[len(evs)-1].Type, "%+v", evs[len(evs)-1])
	run := f.GetRun(id)
	require.Contains(t, run.Result, `"title":"Shell injection"`, "the validated review reached the caller")

	model.mu.Lock()
	reqs := append([]chatRequest(nil), model.requests...)
	model.mu.Unlock()
	var reviewer *chatRequest
	for i := range reqs {
		if strings.HasPrefix(reqs[i].task(), "Review these files") {
			reviewer = &reqs[i]
		}
	}
	require.NotNil(t, reviewer, "the reviewer asked the model")
	require.Equal(t, "system", reviewer.Messages[0].Role)
	require.Equal(t, review.SystemPrompt, reviewer.Messages[0].Content)
	require.Contains(t, reviewer.Messages[1].Content, "    4|     os.system(cmd)\n")
	require.Equal(t, int64(60*len(reqs)), run.TokensUsed, "every request, the reviewer's included, counts against the budget")
}
