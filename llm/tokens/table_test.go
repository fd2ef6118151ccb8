package tokens_test

import (
	"testing"

	"github.com/aetherium-engine/aetherium/llm/tokens"
	"github.com/stretchr/testify/require"
)

func TestDefaultTable(t *testing.T) {
	t.Parallel()
	tab := tokens.Default()
	require.Same(t, tab, tokens.Default(), "parsed once")
	require.NotEmpty(t, tab.AsOf())
	require.Equal(t, tokens.Limits{Context: 32768, Output: 4096}, tab.Fallback())
	for name, l := range tab.Models() {
		require.NoError(t, l.Validate(), name)
	}
	tests := []struct {
		model string
		want  tokens.Limits
		known bool
	}{
		{"gpt-4o", tokens.Limits{Context: 128000, Output: 16384}, true},
		{"gpt-4o-2024-08-06", tokens.Limits{Context: 128000, Output: 16384}, true},
		{"gpt-4o-2024-05-13", tokens.Limits{Context: 128000, Output: 4096}, true},
		{"gpt-4o-mini", tokens.Limits{Context: 128000, Output: 16384}, true},
		{"gpt-4.1-mini", tokens.Limits{Context: 1047576, Output: 32768}, true},
		{"gpt-5-nano", tokens.Limits{Context: 400000, Output: 128000}, true},
		{"o3-mini", tokens.Limits{Context: 200000, Output: 100000}, true},
		{"o1-mini-2024-09-12", tokens.Limits{Context: 128000, Output: 65536}, true},
		{"gpt-4-turbo-2024-04-09", tokens.Limits{Context: 128000, Output: 4096}, true},
		{"gpt-4-0613", tokens.Limits{Context: 8192, Output: 4096}, true},
		{"claude-3-5-sonnet-20241022", tokens.Limits{Context: 200000, Output: 8192}, true},
		{"claude-3-7-sonnet-latest", tokens.Limits{Context: 200000, Output: 64000}, true},
		{"claude-sonnet-4-20250514", tokens.Limits{Context: 200000, Output: 64000}, true},
		{"claude-sonnet-4-5-20250929", tokens.Limits{Context: 200000, Output: 64000}, true},
		{"claude-opus-4-1-20250805", tokens.Limits{Context: 200000, Output: 32000}, true},
		{"claude-haiku-4-5", tokens.Limits{Context: 200000, Output: 64000}, true},
		{"anthropic/claude-opus-4-5", tokens.Limits{Context: 200000, Output: 64000}, true},
		{"llama-3.1-70b", tokens.Limits{Context: 32768, Output: 4096}, false},
		{"script", tokens.Limits{Context: 1048576, Output: 4096}, true},
		{"", tokens.Limits{Context: 32768, Output: 4096}, false},
	}
	for _, tc := range tests {
		t.Run(tc.model, func(t *testing.T) {
			t.Parallel()
			got, known := tab.Lookup(tc.model)
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.known, known)
		})
	}
}

func TestLoad(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, yaml, err string
	}{
		{name: "minimal", yaml: "default: {context: 100, output: 10}\n"},
		{name: "full", yaml: "as_of: 2026-01-01\ndefault: {context: 100, output: 10}\nmodels:\n  m: {context: 50, output: 5}\n"},
		{name: "no default", yaml: "models:\n  m: {context: 50, output: 5}\n", err: "no default limits"},
		{name: "unknown field", yaml: "default: {context: 100, output: 10}\nmodel: {}\n", err: "field model not found"},
		{name: "not YAML", yaml: "default: [", err: "parse window table"},
		{name: "zero context", yaml: "default: {context: 0, output: 10}\n", err: "default: context 0: must be positive"},
		{name: "negative output", yaml: "default: {context: 100, output: -1}\nmodels: {}\n", err: "output -1: must be positive"},
		{name: "output fills the window", yaml: "default: {context: 100, output: 10}\nmodels:\n  m: {context: 50, output: 50}\n", err: `model "m": output 50: must be less than context 50`},
		{name: "blank name", yaml: "default: {context: 100, output: 10}\nmodels:\n  ' ': {context: 50, output: 5}\n", err: "must be non-empty"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tab, err := tokens.Load([]byte(tc.yaml))
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tokens.Limits{Context: 100, Output: 10}, tab.Fallback())
		})
	}
}

func TestLoadDefaultYAML(t *testing.T) {
	t.Parallel()
	tab, err := tokens.Load(tokens.DefaultYAML())
	require.NoError(t, err)
	require.Equal(t, tokens.Default().Models(), tab.Models())
}

func TestMerge(t *testing.T) {
	t.Parallel()
	base := tokens.Default()
	merged, err := base.Merge(tokens.Config{
		Default: &tokens.Limits{Context: 32000, Output: 2000},
		Models: map[string]tokens.Limits{
			"gpt-4o":        {Context: 64000, Output: 4000},
			"llama-3.1-70b": {Context: 131072, Output: 8192},
		},
	})
	require.NoError(t, err)
	tests := []struct {
		model string
		want  tokens.Limits
	}{
		{"gpt-4o", tokens.Limits{Context: 64000, Output: 4000}},
		{"gpt-4o-2024-08-06", tokens.Limits{Context: 64000, Output: 4000}},
		{"gpt-4o-mini", tokens.Limits{Context: 128000, Output: 16384}},
		{"llama-3.1-70b-instruct", tokens.Limits{Context: 131072, Output: 8192}},
		{"unknown", tokens.Limits{Context: 32000, Output: 2000}},
	}
	for _, tc := range tests {
		got, _ := merged.Lookup(tc.model)
		require.Equal(t, tc.want, got, tc.model)
	}
	got, _ := base.Lookup("gpt-4o")
	require.Equal(t, tokens.Limits{Context: 128000, Output: 16384}, got, "Merge leaves its table alone")

	same, err := base.Merge(tokens.Config{})
	require.NoError(t, err)
	require.Equal(t, base.Models(), same.Models())
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  tokens.Config
		err  string
	}{
		{name: "zero"},
		{name: "good", cfg: tokens.Config{Models: map[string]tokens.Limits{"m": {Context: 10, Output: 1}}}},
		{name: "bad default", cfg: tokens.Config{Default: &tokens.Limits{Context: 10, Output: 10}}, err: "default: output 10: must be less than context 10"},
		{name: "zero limits", cfg: tokens.Config{Models: map[string]tokens.Limits{"m": {}}}, err: `model "m": context 0: must be positive`},
		{name: "negative output", cfg: tokens.Config{Models: map[string]tokens.Limits{"m": {Context: 10, Output: -5}}}, err: "output -5: must be positive"},
		{name: "empty name", cfg: tokens.Config{Models: map[string]tokens.Limits{"": {Context: 10, Output: 1}}}, err: "must be non-empty"},
		{name: "spaced name", cfg: tokens.Config{Models: map[string]tokens.Limits{" m": {Context: 10, Output: 1}}}, err: "without surrounding spaces"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.cfg.Validate()
			if tc.err == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.err)
			_, err = tokens.Default().Merge(tc.cfg)
			require.ErrorContains(t, err, tc.err)
		})
	}
}
