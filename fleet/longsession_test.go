package fleet_test

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/llm/llmtest"
	"github.com/aetherium-engine/aetherium/llm/tokens"
	"github.com/aetherium-engine/aetherium/store"
)

// A long session on a provider with a real context window (the fake OpenAI API
// answers its context-length error past it): the session is compacted and
// completes. With the window right in llm.windows no request is refused; with
// it wrong (larger than the provider's), the provider's refusal makes the step
// compact and ask again.
func TestLongSessionKeepsInsideTheProvidersWindow(t *testing.T) {
	t.Parallel()
	const model, window, turns = "long-model", 3000, 30
	tests := []struct {
		name       string
		configured int
		refusals   bool
	}{
		{"the window is known", window, false},
		{"the window is configured too large", 3 * window, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			wrote := regexp.MustCompile(`f(\d+)\.txt`)
			u, err := llmtest.StartUpstream(llmtest.UpstreamConfig{Wire: llmtest.WireOpenAI, ContextWindow: map[string]int{model: window},
				Answer: func(req llmtest.UpstreamRequest) llmtest.UpstreamAnswer {
					if len(req.Tools) == 0 {
						return llmtest.UpstreamAnswer{Text: "Wrote files one per turn, as asked."}
					}
					turn := 1
					for i := len(req.Messages) - 1; i >= 0; i-- {
						if req.Messages[i].Role == "tool" {
							if m := wrote.FindStringSubmatch(req.Messages[i].Text); m != nil {
								n, _ := strconv.Atoi(m[1])
								turn = n + 1
							}
							break
						}
					}
					if turn > turns {
						return llmtest.UpstreamAnswer{Tool: "reply", Args: `{"message":"all written"}`}
					}
					return llmtest.UpstreamAnswer{Tool: "write_file", Args: fmt.Sprintf(`{"path":"f%d.txt","content":%q}`, turn, strings.Repeat("data ", 40))}
				}})
			require.NoError(t, err)
			t.Cleanup(u.Close)
			f := trafficFleet(t, u, func(c *config.Config) {
				c.LLM.Windows = tokens.Config{Models: map[string]tokens.Limits{model: {Context: tt.configured, Output: 300}}}
				c.Worker.KeepTurns = 2
				c.Worker.SummaryTokens = 200
			})
			team := trafficTeam(map[string]any{"provider": "openai", "model": model, "max_tokens": 300}, "")
			team["supervisor"] = map[string]any{"name": "boss", "prompt": "write the files", "mcp_servers": []string{"orchestration", "workspace"}}
			id := f.SubmitTeam(team, "write")
			run := f.WaitTerminal(id, 2*time.Minute)
			require.Equal(t, store.RunCompleted, run.Status, "%s: %s", run.Reason, run.Error)

			stats := u.Stats()
			if tt.refusals {
				require.Positive(t, stats.ContextLength, "the provider refused a request the table thought fit")
				require.LessOrEqual(t, stats.ContextLength, 3, "a refusal teaches the window: the next requests fit")
			} else {
				require.Zero(t, stats.ContextLength, "no request passed the window")
				require.LessOrEqual(t, stats.Models[model].MaxInputTokens, window)
			}
			var compactions, tools int
			require.NoError(t, f.Store.Pool.QueryRow(t.Context(), `SELECT count(*) FROM run_events WHERE run_id = $1 AND type = 'session.compacted'`, id).Scan(&compactions))
			require.Positive(t, compactions)
			require.NoError(t, f.Store.Pool.QueryRow(t.Context(), `SELECT count(*) FROM sessions s, jsonb_array_elements(session_history(s.id)) m
				WHERE s.run_id = $1 AND m->>'role' = 'tool' AND m->>'name' = 'write_file'`, id).Scan(&tools))
			require.Equal(t, turns, tools, "the full history holds every turn once")
		})
	}
}
