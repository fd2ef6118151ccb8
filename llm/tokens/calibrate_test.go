package tokens_test

import (
	"math"
	"sync"
	"testing"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/llm/tokens"
	"github.com/stretchr/testify/require"
)

func TestCalibrator(t *testing.T) {
	t.Parallel()
	type obs struct{ estimated, reported int }
	tests := []struct {
		name string
		obs  []obs
		want float64
	}{
		{name: "unobserved", want: 1},
		{name: "first observation is taken", obs: []obs{{100, 130}}, want: 1.3},
		{name: "never below 1", obs: []obs{{100, 50}}, want: 1},
		{name: "an outlier is clamped to 2", obs: []obs{{100, 1000}}, want: 2},
		{name: "a rise is followed half-way", obs: []obs{{100, 120}, {100, 160}}, want: 1.4},
		{name: "a fall a tenth of the way", obs: []obs{{100, 150}, {100, 100}}, want: 1.45},
		{name: "one outlier moves it half-way to 2", obs: []obs{{100, 110}, {10, 100000}}, want: 1.55},
		{name: "nothing counted teaches nothing", obs: []obs{{0, 100}, {100, 0}, {-5, 10}, {100, 140}}, want: 1.4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var c tokens.Calibrator
			for _, o := range tc.obs {
				c.Observe("m", o.estimated, o.reported)
			}
			require.InDelta(t, tc.want, c.Scale("m"), 1e-9)
			require.Equal(t, 1.0, c.Scale("other"), "models are learnt apart")
		})
	}
}

func TestCalibratorStaysInBounds(t *testing.T) {
	t.Parallel()
	var c tokens.Calibrator
	for i := range 1000 {
		c.Observe("m", 1+i%7, 1+(i*7919)%5000)
		s := c.Scale("m")
		require.GreaterOrEqual(t, s, tokens.MinScale)
		require.LessOrEqual(t, s, tokens.MaxScale)
	}
}

func TestCalibratorEstimate(t *testing.T) {
	t.Parallel()
	req := llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: english}}}
	tests := []struct {
		model string
		scale float64
	}{
		{"claude-sonnet-4-5", 1},
		{"claude-sonnet-4-5", 1.25},
		{"gpt-4o", 1.1},
		{"llama", 2},
	}
	for _, tc := range tests {
		var c tokens.Calibrator
		base := tokens.Request(tokens.ForModel(tc.model), req)
		if tc.scale > 1 {
			c.Observe(tc.model, 1000, int(1000*tc.scale))
		}
		require.Equal(t, int(math.Ceil(float64(base)*tc.scale-1e-9)), c.Estimate(tc.model, req), "%s × %v", tc.model, tc.scale)
		require.GreaterOrEqual(t, c.Estimate(tc.model, req), base)
		require.Equal(t, c.Estimate(tc.model, req), c.Scaled(tc.model, base))
	}
}

func TestCalibratorConcurrent(t *testing.T) {
	t.Parallel()
	var c tokens.Calibrator
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 200 {
				c.Observe("m", 100, 100+i+j%50)
				_ = c.Scale("m")
			}
		})
	}
	wg.Wait()
	require.InDelta(t, 1.3, c.Scale("m"), 0.3)
}
