package config_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/llm/governor"
	"github.com/aetherium-engine/aetherium/queue"
)

// The limits an operator sees follow the configuration: defaults spelled out,
// configured keys, roles, rate lines, budgets and GPU services each named by
// their key, every one with why it exists.
func TestOperatorLimits(t *testing.T) {
	t.Parallel()
	three := 3
	for _, tc := range []struct {
		name string
		edit func(*config.Config)
		want map[string]string
	}{
		{"defaults", func(*config.Config) {}, map[string]string{
			"worker.concurrency": "20", "fairness.dispatch": "fair", "fairness.default.runs": "unlimited",
			"fairness.default.weight": "1", "llm.governor": "on", "llm.budgets.principal_daily": "none",
		}},
		{"configured", func(c *config.Config) {
			c.Worker.Concurrency = 4
			c.Fairness.Default = queue.KeyPolicy{Runs: 2, Turns: 5}
			c.Fairness.Keys = map[string]queue.KeyPolicy{"ci": {Weight: &three, Runs: 1}}
			c.Fairness.MaxPriority = map[string]int{"submit": 2}
			c.LLM.Governor = "off"
			c.LLM.Limits = []governor.Limit{{Provider: "openai", RPM: 60, TPM: 1000}}
			c.LLM.Budgets.PrincipalDaily = "5.00"
			c.Streams.Leases = lease.Config{Services: []lease.Service{{Name: "comfyui", Capacity: 2}}}
		}, map[string]string{
			"worker.concurrency": "4", "fairness.default.runs": "2", "fairness.default.turns": "5",
			`fairness.keys["ci"]`:                       "weight 3, runs 1, turns unlimited",
			`fairness.max_priority["submit"]`:           "2",
			"llm.governor":                              "off",
			"llm.limits[openai/*]":                      "rpm 60, tpm 1000",
			"llm.budgets.principal_daily":               "$5.00",
			"streams.leases.services[comfyui].capacity": "2",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := config.Default()
			tc.edit(&c)
			got := map[string]string{}
			for _, l := range c.OperatorLimits() {
				require.NotEmpty(t, l.Why, l.Name)
				require.NotContains(t, got, l.Name, "one line per key")
				got[l.Name] = l.Value
			}
			for k, v := range tc.want {
				require.Equal(t, v, got[k], k)
			}
		})
	}
}
