package fleet

import (
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
// screenplay is part of the template); SDK providers are shared per process.
type ModelFactory struct {
	LLM config.LLM
	// ScriptLatency is slept before every script answer (benchmarks). Default 0.
	ScriptLatency time.Duration

	mu        sync.Mutex
	openai    llm.Provider
	anthropic llm.Provider
}

// For implements worker.Models.
func (f *ModelFactory) For(team templates.Template, node templates.Node) (llm.Provider, llm.ModelConfig, error) {
	mc := team.ModelFor(node)
	switch mc.Provider {
	case "script":
		return script.New(team.Script, f.ScriptLatency), mc, nil
	case "openai":
		p, err := f.shared(&f.openai, "openai", func() (llm.Provider, error) { return openai.New(f.LLM.OpenAI) })
		return p, mc, err
	case "anthropic":
		p, err := f.shared(&f.anthropic, "anthropic", func() (llm.Provider, error) { return anthropic.New(f.LLM.Anthropic) })
		return p, mc, err
	default:
		return nil, mc, fmt.Errorf("unknown model provider %q", mc.Provider)
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
