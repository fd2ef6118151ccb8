package security_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/security"
)

func TestConfigWithDefaultsAndValidate(t *testing.T) {
	t.Parallel()
	d := security.Config{}.WithDefaults()
	require.Equal(t, security.Config{PermissionsFile: security.DefaultPermissionsFile, ApprovalWindow: security.DefaultApprovalWindow, GrantMaxTTL: security.DefaultGrantMaxTTL,
		AuditRetention: security.DefaultAuditRetention, MaxRedirects: security.DefaultMaxRedirects, EgressTimeout: security.DefaultEgressTimeout,
		Egress: security.EgressRules{Private: egress.PrivateAllowlist, Refresh: egress.DefaultEndpointRefresh}, Flow: security.DefaultFlow, FlowInstructionFiles: security.DefaultInstructionFiles, FlowPrivateContent: security.DefaultFlowContent}, d)
	require.NoError(t, d.Validate())
	for _, tc := range []struct {
		name string
		cfg  func(*security.Config)
		want string
	}{
		{"short approval window", func(c *security.Config) { c.ApprovalWindow = time.Millisecond }, "security.approval_window"},
		{"unknown fallback tool", func(c *security.Config) { c.SupervisorFallback = security.FallbackTools{"rm_everything"} }, `"rm_everything" is not a tool`},
		{"headset never falls back", func(c *security.Config) { c.SupervisorFallback = security.FallbackTools{"frame_run"} }, "never falls back"},
		{"negative redirects", func(c *security.Config) { c.MaxRedirects = -1 }, "security.max_redirects"},
		{"secret without domains", func(c *security.Config) {
			c.Secrets = map[string]egress.SecretSource{"gh": {Env: "GH"}}
		}, "security.secrets.gh"},
		{"private maybe", func(c *security.Config) { c.Egress.Private = "maybe" }, "security.egress.private (AETHERIUM_EGRESS_PRIVATE)"},
		{"flow content maybe", func(c *security.Config) { c.FlowPrivateContent = "maybe" }, `security.flow_private_content: "maybe" is neither refuse nor ask`},
		{"deny without port", func(c *security.Config) { c.Egress.Deny = []string{"10.0.0.1"} }, "security.egress.deny[0]"},
		{"deny port out of range", func(c *security.Config) { c.Egress.Deny = []string{"10.0.0.1:70000"} }, "1-65535"},
		{"fast refresh", func(c *security.Config) { c.Egress.Refresh = time.Millisecond }, "security.egress.refresh"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := security.Config{}.WithDefaults()
			tc.cfg(&c)
			require.ErrorContains(t, c.Validate(), tc.want)
		})
	}
}
