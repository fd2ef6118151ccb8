package governor_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/llm/governor"
)

func TestWithDefaultsFillsZeroFieldsOnly(t *testing.T) {
	t.Parallel()
	c := governor.Config{}.WithDefaults()
	require.Equal(t, governor.DefaultWindow, c.Window)
	require.Equal(t, governor.DefaultGuard, c.Guard)
	require.Equal(t, governor.DefaultMaxWait, c.MaxWait)
	require.Equal(t, governor.DefaultConcurrencyTTL, c.ConcurrencyTTL)
	require.Equal(t, governor.DefaultKeyPrefix, c.KeyPrefix)
	require.NoError(t, c.Validate())

	c = governor.Config{Window: time.Second, Guard: time.Millisecond, MaxWait: time.Minute, ConcurrencyTTL: 2 * time.Second, KeyPrefix: "x:"}.WithDefaults()
	require.Equal(t, governor.Config{Window: time.Second, Guard: time.Millisecond, MaxWait: time.Minute, ConcurrencyTTL: 2 * time.Second, KeyPrefix: "x:"}, c)
}

func TestValidateRefusesBadConfigs(t *testing.T) {
	t.Parallel()
	ok := governor.Limit{Provider: "openai", Model: "gpt-4o", RPM: 10}
	tests := []struct {
		name string
		cfg  governor.Config
		want string // substring of the error; "" = valid
	}{
		{"valid", governor.Config{Limits: []governor.Limit{ok, {Provider: "openai", TPM: 5}, {Provider: "anything-goes", Model: "*", Concurrency: 1, TeamShare: 100, PrincipalShare: 1}}}, ""},
		{"no limits at all is valid", governor.Config{Enabled: true}, ""},
		{"negative rpm", governor.Config{Limits: []governor.Limit{ok, {Provider: "openai", TPM: 5}, {Provider: "a", RPM: -5}}}, "llm.limits[2]: rpm -5 is negative"},
		{"negative tpm", governor.Config{Limits: []governor.Limit{{Provider: "a", TPM: -1}}}, "llm.limits[0]: tpm -1 is negative"},
		{"negative concurrency", governor.Config{Limits: []governor.Limit{{Provider: "a", RPM: 1, Concurrency: -1}}}, "llm.limits[0]: concurrency -1 is negative"},
		{"absurd rpm", governor.Config{Limits: []governor.Limit{{Provider: "a", RPM: 1_000_001}}}, "llm.limits[0]: rpm 1000001 is over 1000000"},
		{"absurd tpm", governor.Config{Limits: []governor.Limit{{Provider: "a", TPM: 1_000_000_001}}}, "tpm 1000000001 is over"},
		{"absurd concurrency", governor.Config{Limits: []governor.Limit{{Provider: "a", Concurrency: 100_001}}}, "concurrency 100001 is over"},
		{"team share over 100", governor.Config{Limits: []governor.Limit{{Provider: "a", RPM: 1, TeamShare: 101}}}, "team_share 101 is over 100"},
		{"negative principal share", governor.Config{Limits: []governor.Limit{{Provider: "a", RPM: 1, PrincipalShare: -1}}}, "principal_share -1 is negative"},
		{"no limit on the line", governor.Config{Limits: []governor.Limit{{Provider: "a", Model: "m", TeamShare: 10}}}, "llm.limits[0]: a/m sets none of rpm, tpm, concurrency"},
		{"empty provider", governor.Config{Limits: []governor.Limit{{RPM: 1}}}, "llm.limits[0]: provider is empty"},
		{"brace in provider", governor.Config{Limits: []governor.Limit{{Provider: "a}b", RPM: 1}}}, "brace"},
		{"duplicate model line", governor.Config{Limits: []governor.Limit{ok, {Provider: "openai", Model: "gpt-4o", TPM: 1}}}, "llm.limits[1]: openai/gpt-4o repeats llm.limits[0]"},
		{"'' and '*' are the same line", governor.Config{Limits: []governor.Limit{{Provider: "a", RPM: 1}, {Provider: "a", Model: "*", TPM: 1}}}, "llm.limits[1]: a/* repeats llm.limits[0]"},
		{"negative max wait", governor.Config{MaxWait: -time.Second}, "max_wait -1s is negative"},
		{"negative window", governor.Config{Window: -time.Second}, "window -1s must be positive"},
		{"negative guard", governor.Config{Guard: -time.Millisecond}, "guard -1ms is negative"},
		{"absurd window", governor.Config{Window: 2 * time.Hour}, "is over 1h0m0s"},
		{"negative concurrency ttl", governor.Config{ConcurrencyTTL: -1}, "concurrency_ttl"},
		{"brace in prefix", governor.Config{KeyPrefix: "{x}"}, "brace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.cfg.WithDefaults().Validate()
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, governor.ErrInvalidConfig)
			require.ErrorContains(t, err, tt.want)
			_, err = governor.New(nil, tt.cfg)
			require.ErrorContains(t, err, tt.want, "New validates too")
		})
	}
}

func TestPenaltyTakesTheHintClampsGarbageAndDefaults(t *testing.T) {
	t.Parallel()
	lim := func(rr int, rreset time.Duration, tr int, treset time.Duration) *llm.RateLimits {
		return &llm.RateLimits{RequestsLimit: -1, TokensLimit: -1, RequestsRemaining: rr, RequestsReset: rreset, TokensRemaining: tr, TokensReset: treset}
	}
	tests := []struct {
		name   string
		status int
		after  time.Duration
		lim    *llm.RateLimits
		want   time.Duration
	}{
		{"retry-after wins", 429, 3 * time.Second, lim(0, time.Minute, -1, 0), 3 * time.Second},
		{"requests reset when exhausted", 429, 0, lim(0, 2*time.Second, 10, 9*time.Second), 2 * time.Second},
		{"longest exhausted reset", 429, 0, lim(0, 2*time.Second, 0, 5*time.Second), 5 * time.Second},
		{"no hint: default", 429, 0, nil, governor.DefaultPenalty},
		{"negative retry-after ignored", 429, -time.Hour, nil, governor.DefaultPenalty},
		{"negative reset ignored", 429, 0, lim(0, -time.Second, -1, 0), governor.DefaultPenalty},
		{"a day clamped", 429, 24 * time.Hour, nil, governor.MaxPenalty},
		{"a day of reset clamped", 429, 0, lim(-1, 0, 0, 48*time.Hour), governor.MaxPenalty},
		{"overload default", 529, 0, nil, governor.DefaultPenalty},
		{"success with room: nothing", 200, 0, lim(5, time.Second, 5, time.Second), 0},
		{"success exhausted", 200, 0, lim(0, 700*time.Millisecond, 5, time.Second), 700 * time.Millisecond},
		{"success, no hint: nothing", 200, 0, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, governor.Penalty(tt.status, tt.after, tt.lim))
		})
	}
}

func TestConfigReadsFromYAML(t *testing.T) {
	t.Parallel()
	const doc = `
enabled: true
max_wait: 5m
window: 30s
limits:
  - {provider: openai, rpm: 500, tpm: 200000, concurrency: 20}
  - {provider: openai, model: gpt-4o, tpm: 30000, team_share: 50, principal_share: 10}
`
	var c governor.Config
	require.NoError(t, yaml.Unmarshal([]byte(doc), &c))
	c = c.WithDefaults()
	require.NoError(t, c.Validate())
	require.True(t, c.Enabled)
	require.Equal(t, 5*time.Minute, c.MaxWait)
	require.Equal(t, 30*time.Second, c.Window)
	require.Equal(t, governor.DefaultGuard, c.Guard)
	require.Equal(t, []governor.Limit{
		{Provider: "openai", RPM: 500, TPM: 200000, Concurrency: 20},
		{Provider: "openai", Model: "gpt-4o", TPM: 30000, TeamShare: 50, PrincipalShare: 10},
	}, c.Limits)
}
