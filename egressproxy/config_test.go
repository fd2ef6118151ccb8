package egressproxy_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/egressproxy"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		cfg     egressproxy.Config
		wantErr string
	}{
		{"defaults", egressproxy.Config{}, ""},
		{"bad port", egressproxy.Config{Port: 70000}, "port 70000"},
		{"bad pool", egressproxy.Config{SubnetPool: "10.0.0.0"}, "subnet_pool"},
		{"ipv6 pool", egressproxy.Config{SubnetPool: "fd00::/64"}, "IPv4"},
		{"subnet larger than pool", egressproxy.Config{SubnetPool: "10.1.0.0/24", SubnetBits: 16}, "subnet_bits 16"},
		{"subnet too small", egressproxy.Config{SubnetBits: 30}, "subnet_bits 30"},
		{"bad allowed port", egressproxy.Config{Ports: []int{443, 0}}, "0 is not a port"},
		{"egress service", egressproxy.Config{Service: egressproxy.ServiceConfig{URL: "http://host.docker.internal:3127"}}, ""},
		{"egress service without a scheme", egressproxy.Config{Service: egressproxy.ServiceConfig{URL: "host.docker.internal:3127"}}, "service.url"},
		{"bad relay", egressproxy.Config{Service: egressproxy.ServiceConfig{Relay: "3129"}}, "service.relay"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.cfg.WithDefaults().Validate()
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
	d := egressproxy.Config{}.WithDefaults()
	require.Equal(t, egressproxy.DefaultPort, d.Port)
	require.Equal(t, egressproxy.DefaultPorts, d.Ports)
	require.Equal(t, "10.213.0.0/16", d.Pool().String())
}
