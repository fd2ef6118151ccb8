package config_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/tracing"
)

// tracing: is off by default, read from YAML, turned on or off by
// AETHERIUM_TRACING, and validated.
func TestTracingSection(t *testing.T) {
	t.Parallel()
	const yaml = `
tracing:
  enabled: true
  exporter: otlp-grpc
  endpoint: https://collector:4317
  service_name: fleet-eu
  sample_ratio: 0.25
  shutdown_timeout: 2s
`
	for _, tc := range []struct {
		name, yaml string
		env        map[string]string
		want       tracing.Config
		bad        string
	}{
		{name: "default", want: tracing.Config{}.WithDefaults()},
		{name: "yaml", yaml: yaml, want: tracing.Config{Enabled: true, Exporter: tracing.ExporterGRPC, Endpoint: "https://collector:4317",
			ServiceName: "fleet-eu", SampleRatio: 0.25, ShutdownTimeout: 2 * time.Second}},
		{name: "env turns it on", env: map[string]string{"AETHERIUM_TRACING": "true"}, want: func() tracing.Config {
			c := tracing.Config{}.WithDefaults()
			c.Enabled = true
			return c
		}()},
		{name: "env turns it off", yaml: yaml, env: map[string]string{"AETHERIUM_TRACING": "0"}, want: tracing.Config{Exporter: tracing.ExporterGRPC,
			Endpoint: "https://collector:4317", ServiceName: "fleet-eu", SampleRatio: 0.25, ShutdownTimeout: 2 * time.Second}},
		{name: "env not a bool", env: map[string]string{"AETHERIUM_TRACING": "yes please"}, bad: "AETHERIUM_TRACING"},
		{name: "bad exporter", yaml: "tracing: {exporter: jaeger-thrift}\n", bad: "exporter"},
		{name: "bad ratio", yaml: "tracing: {sample_ratio: 2}\n", bad: "sample ratio"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := ""
			if tc.yaml != "" {
				path = writeFile(t, tc.yaml)
			}
			c, err := config.LoadFrom(path, envOf(tc.env))
			if tc.bad != "" {
				require.ErrorContains(t, err, tc.bad)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, c.Tracing)
		})
	}
}
