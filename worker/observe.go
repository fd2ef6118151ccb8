package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aetherium-engine/aetherium/metrics"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/tools"
)

func (w *Worker) observeLLM(ctx context.Context, provider, model string, start time.Time, resp llm.Response, err error) {
	if w.metrics == nil {
		return
	}
	if model == "" {
		model = resp.Model
	}
	// Model names come from submitted teams (and from the provider's answer):
	// only known ones become label values.
	model = w.modelLabels.Value(model)
	outcome := "ok"
	var wait *llm.WaitError
	switch {
	case errors.As(err, &wait):
		outcome = "rate_limited"
		w.metrics.LLMWaits.WithLabelValues(provider, waitCause(wait)).Inc()
	case err != nil:
		outcome = "error"
	}
	w.metrics.LLMRequests.WithLabelValues(provider, model, outcome).Inc()
	if wait != nil && wait.Cause == nil {
		return // held back by the governor: no call was made
	}
	metrics.ObserveTraced(ctx, w.metrics.LLMLatency.WithLabelValues(provider, model), time.Since(start).Seconds())
	if err == nil {
		u := resp.Usage
		w.metrics.LLMTokens.WithLabelValues(provider, model, "input").Add(float64(u.InputTokens))
		w.metrics.LLMTokens.WithLabelValues(provider, model, "output").Add(float64(u.OutputTokens))
		if u.CachedInputTokens > 0 {
			w.metrics.LLMTokens.WithLabelValues(provider, model, "cached_input").Add(float64(u.CachedInputTokens))
		}
		if u.CacheWriteTokens > 0 {
			w.metrics.LLMTokens.WithLabelValues(provider, model, "cache_write").Add(float64(u.CacheWriteTokens))
		}
		if resp.Cost > 0 {
			w.metrics.LLMCost.WithLabelValues(provider, model).Add(resp.Cost.Dollars())
		}
	}
}

// waitCause is a bounded label for what parked a call: the governor, or the
// provider's status.
func waitCause(w *llm.WaitError) string {
	var api *llm.APIError
	if errors.As(w.Cause, &api) {
		switch api.Status {
		case 429, 503, llm.StatusOverloaded:
			return fmt.Sprintf("http_%d", api.Status)
		}
		return "http_other"
	}
	return "governor"
}

func (w *Worker) observeTool(ctx context.Context, tool, decision, layer string, start time.Time) {
	if w.metrics == nil {
		return
	}
	// A tool name comes from the model: one it hallucinated is not a label value.
	if _, ok := w.router.Registry().Spec(tool); !ok {
		tool = "unknown"
	}
	w.metrics.ToolCalls.WithLabelValues(tool, tools.TierOf(tool).String(), decision).Inc()
	metrics.ObserveTraced(ctx, w.metrics.ToolDuration.WithLabelValues(tool), time.Since(start).Seconds())
	// The gate counts its own denials; without a gate, count the router's
	// refusals. The caps' refusals are the worker's own (a gated delegation cap
	// is a handler's answer, which the gate does not count).
	if decision == "denied" && (!w.gated || layer == CapLayer) {
		w.metrics.GateDenials.WithLabelValues(layer).Inc()
	}
}

// observeFirstModelCall records how long the step took from its handler's start
// to its first model call.
func (w *Worker) observeFirstModelCall(ctx context.Context, role string) {
	if w.metrics == nil {
		return
	}
	if at, ok := metrics.TaskStart(ctx); ok {
		w.metrics.FirstModelCall.WithLabelValues(role).Observe(time.Since(at).Seconds())
	}
}
