package fleet

import (
	"cmp"
	"fmt"
	"sync"
	"time"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/llm/anthropic"
	"github.com/aetherium-engine/aetherium/llm/openai"
	"github.com/aetherium-engine/aetherium/llm/script"
	"github.com/aetherium-engine/aetherium/templates"
)

// ModelFactory is the production worker.Models: script providers are built per team (the
// screenplay is part of the template); SDK providers are shared per process,
// each behind the process's Traffic (the governor and the meter), and a model
// with fallbacks is a chain of them (llm.Chain).
type ModelFactory struct {
	LLM config.LLM
	// ScriptLatency is slept before every script answer (benchmarks). Default 0.
	ScriptLatency time.Duration
	// Traffic governs and prices the SDK providers' calls; nil leaves them bare
	// (tests of other parts).
	Traffic *Traffic

	mu        sync.Mutex
	openai    llm.Provider
	anthropic llm.Provider
}

// For implements worker.Models.
func (f *ModelFactory) For(team templates.Template, node templates.Node) (llm.Provider, llm.ModelConfig, error) {
	mc := team.ModelFor(node)
	if mc.Provider == "script" {
		return script.New(team.Script, f.ScriptLatency), mc, nil
	}
	links := make([]llm.Link, 0, 1+len(mc.Fallback))
	for _, m := range append([]llm.ModelConfig{mc}, mc.Fallback...) {
		p, err := f.provider(m.Provider)
		if err != nil {
			return nil, mc, err
		}
		if f.Traffic != nil {
			p = f.Traffic.Wrap(p)
		}
		// The model is named even when it is the provider's default: the
		// governor's limits and the price table are per model.
		links = append(links, llm.Link{Provider: p, Model: cmp.Or(m.Model, f.LLM.DefaultModel(m.Provider)), MaxTokens: m.MaxTokens})
	}
	mc.Model = links[0].Model
	return llm.Chain(links...), mc, nil
}

// provider is the process's shared provider of a name.
func (f *ModelFactory) provider(name string) (llm.Provider, error) {
	switch name {
	case "openai":
		return f.shared(&f.openai, "openai", func() (llm.Provider, error) { return openai.New(f.LLM.OpenAI) })
	case "anthropic":
		return f.shared(&f.anthropic, "anthropic", func() (llm.Provider, error) { return anthropic.New(f.LLM.Anthropic) })
	default:
		return nil, fmt.Errorf("unknown model provider %q", name)
	}
}

// shared is the process's provider in slot, built on the first call that needs
// it (a fleet without that provider's config never builds it).
func (f *ModelFactory) shared(slot *llm.Provider, name string, build func() (llm.Provider, error)) (llm.Provider, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if *slot == nil {
		p, err := build()
		if err != nil {
			return nil, fmt.Errorf("%s provider: %w", name, err)
		}
		*slot = p
	}
	return *slot, nil
}
