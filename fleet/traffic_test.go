package fleet_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/cli"
	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/llm/governor"
	"github.com/aetherium-engine/aetherium/llm/llmtest"
	"github.com/aetherium-engine/aetherium/llm/pricing"
	"github.com/aetherium-engine/aetherium/store"
)

// trafficPrices prices the fake's two models; odd prices, so a rounding or a
// swapped token class shows in the sums.
const trafficPrices = `currency: USD
as_of: 2026-12-01
models:
  - provider: openai
    model: primary-model
    input: 3.000001
    output: 15.000007
  - provider: openai
    model: backup-model
    input: 0.150003
    output: 0.600011
    cached_input: 0.075001
`

// upstream is a fake OpenAI-compatible provider whose every answer is the
// supervisor's reply: a run is one model call.
func upstream(t *testing.T, cfg llmtest.UpstreamConfig) *llmtest.Upstream {
	t.Helper()
	cfg.Wire = llmtest.WireOpenAI
	cfg.Answer = func(llmtest.UpstreamRequest) llmtest.UpstreamAnswer {
		return llmtest.UpstreamAnswer{Tool: "reply", Args: `{"message":"done"}`}
	}
	u, err := llmtest.StartUpstream(cfg)
	require.NoError(t, err)
	t.Cleanup(u.Close)
	return u
}

func trafficTeam(model map[string]any, budget string) map[string]any {
	team := map[string]any{
		"name": "traffic", "model": model,
		"supervisor": map[string]any{"name": "boss", "prompt": "answer", "mcp_servers": []string{"orchestration"}},
		"workers":    []map[string]any{},
	}
	if budget != "" {
		team["budget"] = map[string]any{"max_cost": budget}
	}
	return team
}

func trafficFleet(t *testing.T, u *llmtest.Upstream, configure func(c *config.Config)) *fleettest.Fleet {
	t.Helper()
	prices := filepath.Join(t.TempDir(), "prices.yaml")
	require.NoError(t, os.WriteFile(prices, []byte(trafficPrices), 0o600))
	return fleettest.Start(t, fleettest.Options{Configure: func(c *config.Config) {
		c.LLM.OpenAI.BaseURL, c.LLM.OpenAI.APIKey, c.LLM.OpenAI.Model = u.URL, "test-key", "primary-model"
		c.LLM.Prices = prices
		if configure != nil {
			configure(c)
		}
	}})
}

// TestModelFallbackAndCost: the primary model answers 529, its fallback
// answers and the events say so; what 40 runs cost adds up exactly to the
// fake's usage × the price table; a money budget stops a run at the call that
// crosses it; a fallback no price table knows is refused at submit.
func TestModelFallbackAndCost(t *testing.T) {
	t.Parallel()
	u := upstream(t, llmtest.UpstreamConfig{Overloaded: map[string]int{"primary-model": llm.StatusOverloaded}})
	f := trafficFleet(t, u, nil)
	model := map[string]any{"provider": "openai", "model": "primary-model", "max_tokens": 64,
		"fallback": []map[string]any{{"provider": "openai", "model": "backup-model"}}}

	const runs = 40
	ids := make([]string, runs)
	for i := range ids {
		ids[i] = f.SubmitTeam(trafficTeam(model, ""), fmt.Sprintf("question %d", i))
	}
	for _, id := range ids {
		require.Equal(t, store.RunCompleted, f.WaitTerminal(id, 90*time.Second).Status)
	}

	// Which model answered: in the answer's event and the run's cost lines.
	evs := f.Follow(ids[0], 0, 10*time.Second)
	var answered map[string]any
	for _, e := range evs {
		if e.Type == "agent.message" {
			require.NoError(t, json.Unmarshal(e.Data, &answered))
		}
	}
	require.NotNil(t, answered)
	data := answered
	if d, ok := answered["data"].(map[string]any); ok {
		data = d
	}
	require.Equal(t, "backup-model", data["model"], "%v", answered)
	require.Equal(t, true, data["fallback"])
	var report struct {
		Total int64 `json:"total_picousd"`
		Lines []struct {
			Model     string `json:"model"`
			Calls     int64  `json:"calls"`
			Fallbacks int64  `json:"fallbacks"`
		} `json:"lines"`
	}
	code, raw := f.Do("GET", "/api/runs/"+ids[0]+"/costs", nil, &report)
	require.Equal(t, http.StatusOK, code, "%s", raw)
	require.Len(t, report.Lines, 1)
	require.Equal(t, "backup-model", report.Lines[0].Model)
	require.EqualValues(t, 1, report.Lines[0].Fallbacks)

	// The CLI's view of the same.
	var out, errOut bytes.Buffer
	require.Zero(t, cli.Main([]string{"runs", "show", ids[0], "--api", f.URL}, &out, &errOut), "%s", errOut.String())
	require.Contains(t, out.String(), "completed")
	require.Contains(t, out.String(), "openai/backup-model")
	require.Contains(t, out.String(), "1 (1 as fallback)")

	// Cost: the runs' sum is the fake's usage × the prices, to the picodollar.
	stats := u.Stats()
	require.Equal(t, runs, stats.Models["backup-model"].Answered)
	require.Equal(t, runs, stats.Models["primary-model"].Overloaded)
	table, err := pricing.Load(filepath.Join(filepath.Dir(f.Cfg.LLM.Prices), "prices.yaml"))
	require.NoError(t, err)
	want, ok := table.Cost("openai", "backup-model", stats.Models["backup-model"].Usage)
	require.True(t, ok)
	var sum int64
	require.NoError(t, f.Store.Pool.QueryRow(t.Context(), `SELECT sum(cost)::bigint FROM runs WHERE id = ANY($1::uuid[])`, ids).Scan(&sum))
	require.Equal(t, int64(want), sum, "the recorded costs are the fake's usage priced, exactly")
	var ledger int64
	require.NoError(t, f.Store.Pool.QueryRow(t.Context(), `SELECT sum(cost)::bigint FROM llm_calls`).Scan(&ledger))
	require.Equal(t, sum, ledger)

	// A money budget stops the run at the call that crosses it.
	id := f.SubmitTeam(trafficTeam(model, "0.000001"), "one more")
	run := f.WaitTerminal(id, 60*time.Second)
	require.Equal(t, store.RunFailed, run.Status)
	require.Equal(t, "budget_exceeded", run.Reason)
	require.Contains(t, run.Error, "cost budget of $0.000001 exceeded")

	// A fallback the price table does not know is a typo found at submit.
	bad := map[string]any{"provider": "openai", "model": "primary-model", "fallback": []map[string]any{{"provider": "openai", "model": "backup-modle"}}}
	code, raw = f.Do("POST", "/api/orchestrator/run", map[string]any{"team": trafficTeam(bad, ""), "prompt": "x"}, nil)
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, string(raw), "fallback openai/backup-modle is not a model of the price table")
	// And an unpriced model cannot carry a money budget.
	unpriced := map[string]any{"provider": "openai", "model": "mystery-model"}
	code, raw = f.Do("POST", "/api/orchestrator/run", map[string]any{"team": trafficTeam(unpriced, "1.00"), "prompt": "x"}, nil)
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, string(raw), "openai/mystery-model has no price")
}

// TestDailyBudget: a principal whose calls cost its daily budget gets 429 on
// its next submit.
func TestDailyBudget(t *testing.T) {
	t.Parallel()
	u := upstream(t, llmtest.UpstreamConfig{})
	f := trafficFleet(t, u, func(c *config.Config) { c.LLM.Budgets.PrincipalDaily = "0.000001" })
	model := map[string]any{"provider": "openai", "model": "primary-model", "max_tokens": 64}
	require.Equal(t, store.RunCompleted, f.WaitTerminal(f.SubmitTeam(trafficTeam(model, ""), "first"), 60*time.Second).Status)
	code, raw := f.Do("POST", "/api/orchestrator/run", map[string]any{"team": trafficTeam(model, ""), "prompt": "second"}, nil)
	require.Equal(t, http.StatusTooManyRequests, code, "%s", raw)
	require.Contains(t, string(raw), "daily budget")
}

// TestRateLimitedProviderParksRuns: with the governor, runs over a provider's
// RPM wait their turn (agent.waiting) and the provider answers no 429; without
// it, the provider's 429s park the steps and every run still completes.
func TestRateLimitedProviderParksRuns(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"on", "off"} {
		t.Run("governor "+mode, func(t *testing.T) {
			t.Parallel()
			const window, rpm, runs = 2 * time.Second, 3, 7
			u := upstream(t, llmtest.UpstreamConfig{RPM: rpm, Window: window})
			f := trafficFleet(t, u, func(c *config.Config) {
				c.LLM.Governor = mode
				c.LLM.Limits = []governor.Limit{{Provider: "openai", RPM: rpm}}
			})
			gc := f.Traffic.Governor.Config()
			gc.Window = window
			require.NoError(t, f.Traffic.Governor.SetConfig(gc))
			model := map[string]any{"provider": "openai", "model": "primary-model", "max_tokens": 64}
			ids := make([]string, runs)
			var wg sync.WaitGroup
			for i := range ids {
				ids[i] = f.SubmitTeam(trafficTeam(model, ""), fmt.Sprintf("q%d", i))
			}
			wg.Wait()
			for _, id := range ids {
				run := f.WaitTerminal(id, 90*time.Second)
				require.Equal(t, store.RunCompleted, run.Status, "%s: %s", run.Reason, run.Error)
			}
			stats := u.Stats()
			require.Equal(t, runs, stats.Answered)
			require.LessOrEqual(t, stats.PeakWindowRequests, rpm, "the fake never saw more than its limit in a window")
			var waits int
			require.NoError(t, f.Store.Pool.QueryRow(t.Context(), `SELECT count(*) FROM run_events WHERE type = 'agent.waiting'`).Scan(&waits))
			require.Positive(t, waits, "runs over the limit waited, and said so")
			if mode == "on" {
				require.Zero(t, stats.RateLimited, "the governor kept the fleet under the limit")
			} else {
				require.Positive(t, stats.RateLimited, "without the governor the provider's 429s are what hold the fleet back")
			}
		})
	}
}
