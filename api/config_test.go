package api

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestConfigWithDefaultsAndValidate(t *testing.T) {
	t.Parallel()
	d := Config{}.WithDefaults()
	require.Equal(t, DefaultAddr, d.Addr)
	require.Equal(t, DefaultBodyLimit, d.BodyLimit)
	require.Equal(t, DefaultSSEPoll, d.SSEPoll)
	require.Equal(t, DefaultSSEHeartbeat, d.SSEHeartbeat)
	require.Equal(t, DefaultMonitoringSessionTTL, d.MonitoringSessionTTL)
	require.True(t, d.monitoringReadOnly())
	require.NoError(t, d.Validate())
	require.NotSame(t, d.MonitoringReadOnly, Config{}.WithDefaults().MonitoringReadOnly, "each call has its own MonitoringReadOnly")
	off := false
	require.False(t, Config{MonitoringReadOnly: &off}.WithDefaults().monitoringReadOnly(), "an explicit false is kept")
	for _, tc := range []struct {
		name string
		cfg  func(*Config)
		want string
	}{
		{"bad addr", func(c *Config) { c.Addr = "8080" }, "api.addr (AETHERIUM_API_ADDR)"},
		{"zero body limit", func(c *Config) { c.BodyLimit = 0 }, "api.body_limit (AETHERIUM_API_BODY_LIMIT)"},
		{"negative runs in flight", func(c *Config) { c.MaxRunsInFlight = -1 }, "api.max_runs_in_flight"},
		{"monitoring session over a day", func(c *Config) { c.MonitoringSessionTTL = 25 * time.Hour }, "api.monitoring_session_ttl"},
		{"negative monitoring session", func(c *Config) { c.MonitoringSessionTTL = -time.Second }, "api.monitoring_session_ttl"},
		{"short monitoring key", func(c *Config) { c.MonitoringSessionKey = "short" }, "api.monitoring_session_key (AETHERIUM_API_MONITORING_SESSION_KEY): want at least 32 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := Config{}.WithDefaults()
			tc.cfg(&c)
			require.ErrorContains(t, c.Validate(), tc.want)
		})
	}
}

// CheckAuth: tokens or loopback, or the explicit insecure switch.
func TestCheckAuth(t *testing.T) {
	t.Parallel()
	tok := []Token{{Name: "ci", SHA256: HashToken("ci-secret"), Roles: []string{RoleSubmit}}}
	for _, tc := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"loopback without tokens", Config{Addr: "127.0.0.1:8080"}, true},
		{"public without tokens", Config{Addr: "0.0.0.0:8080"}, false},
		{"public with tokens", Config{Addr: "0.0.0.0:8080", Tokens: tok}, true},
		{"public, insecure switch", Config{Addr: "0.0.0.0:8080", InsecureNoAuth: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.cfg.CheckAuth()
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.ErrorContains(t, err, "api.tokens is empty")
			}
		})
	}
}
