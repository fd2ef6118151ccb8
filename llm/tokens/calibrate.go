package tokens

import (
	"sync"

	"github.com/aetherium-engine/aetherium/llm"
)

// Bounds of a Calibrator's scale. Below 1 it would cut the counter's count,
// and the counters already err high (Estimate) or are exact (Tiktoken): a
// provider reporting fewer tokens costs a little window, never a refusal.
// Above 2 the estimate is not off, something else is (a wrong model name, a
// provider counting an attachment): doubling is as far as a count is trusted
// to be corrected.
const (
	MinScale = 1.0
	MaxScale = 2.0
)

// Rates of the scale's moving average. A rise is followed fast, a fall
// slowly: a scale that lags low lets requests through that the provider
// refuses; one that lags high only compacts a little early.
const (
	riseRate = 0.5
	fallRate = 0.1
)

// Calibrator learns, per model, how far the provider's reported input tokens
// are above the counted ones, and scales later counts by it. Its zero value
// is ready to use; it is safe for concurrent use.
type Calibrator struct {
	mu     sync.Mutex
	scales map[string]float64
}

// Observe records one answered call of model: estimated is what Request (or
// Estimate) counted for it, reported the provider's usage input tokens
// (cached ones included, llm.Usage.InputTokens). A call without a positive
// count on either side teaches nothing and is ignored; a ratio beyond the
// scale's bounds is clamped to them before it is averaged in, so one outlier
// moves the scale at most half-way to MaxScale.
func (c *Calibrator) Observe(model string, estimated, reported int) {
	if estimated <= 0 || reported <= 0 {
		return
	}
	ratio := clampScale(float64(reported) / float64(estimated))
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.scales == nil {
		c.scales = map[string]float64{}
	}
	old, ok := c.scales[model]
	switch {
	case !ok:
		c.scales[model] = ratio
	case ratio > old:
		c.scales[model] = clampScale(old + riseRate*(ratio-old))
	default:
		c.scales[model] = clampScale(old + fallRate*(ratio-old))
	}
}

// Scale is the factor model's counts are multiplied by: in [MinScale,
// MaxScale], MinScale for a model not yet observed.
func (c *Calibrator) Scale(model string) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.scales[model]; ok {
		return s
	}
	return MinScale
}

// Estimate is the calibrated input tokens of req for model: ceil(Request(
// ForModel(model), req) × Scale(model)). The model is the caller's (the one
// it will Observe with), not req.Model, which may be empty.
func (c *Calibrator) Estimate(model string, req llm.Request) int {
	return ceilScaled(Request(ForModel(model), req), c.Scale(model))
}

// Scaled is n, a count of model's counter, calibrated: ceil(n × Scale(model)).
// A caller counting with its own Counter (a Memo) scales with it.
func (c *Calibrator) Scaled(model string, n int) int { return ceilScaled(n, c.Scale(model)) }

func clampScale(s float64) float64 { return min(max(s, MinScale), MaxScale) }
