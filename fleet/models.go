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
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.openai == nil {
			p, err := openai.New(f.LLM.OpenAI)
			if err != nil {
				return nil, mc, fmt.Errorf("openai provider: %w", err)
			}
			f.openai = p
		}
		return f.openai, mc, nil
	case "anthropic":
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.anthropic == nil {
			p, err := anthropic.New(f.LLM.Anthropic)
			if err != nil {
				return nil, mc, fmt.Errorf("anthropic provider: %w", err)
			}
			f.anthropic = p
		}
		return f.anthropic, mc, nil
	default:
		return nil, mc, fmt.Errorf("unknown model provider %q", mc.Provider)
	}
}
