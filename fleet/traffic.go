package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/internal/filewatch"
	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/llm/governor"
	"github.com/aetherium-engine/aetherium/llm/pricing"
	"github.com/aetherium-engine/aetherium/templates"
)

// Traffic is a process's model-traffic plane: the governor (the providers'
// limits, shared by the fleet through Redis) and the price table, which every
// provider call of the process goes through (Wrap). Both reload when the
// configuration file or the price file changes; a broken file keeps the last
// good ones.
type Traffic struct {
	Governor *governor.Governor
	prices   atomic.Pointer[pricing.Table]
	// path is the configuration file (Config.Path), prices the price file
	// (llm.prices) watched beside it.
	path, pricesPath string
	// defaults names the providers' default models (a team may name none).
	defaults config.LLM
	log      *slog.Logger
	// reloaded counts the reloads that took (tests wait on it).
	reloaded atomic.Int64
}

func newTraffic(cfg config.Config, rdb redis.UniversalClient, log *slog.Logger) (*Traffic, error) {
	table, err := cfg.LLM.PriceTable()
	if err != nil {
		return nil, fmt.Errorf("llm.prices: %w", err)
	}
	gc := cfg.LLM.GovernorConfig()
	gc.Observer = governor.Observer{OnFeedback: func(provider, model string, status int, d time.Duration) {
		if d > 0 {
			log.Warn("the provider's rate limit pauses the fleet's calls", "provider", provider, "model", model, "status", status, "for", d)
		}
	}}
	g, err := governor.New(rdb, gc)
	if err != nil {
		return nil, fmt.Errorf("llm.limits: %w", err)
	}
	t := &Traffic{Governor: g, path: cfg.Path, pricesPath: cfg.LLM.Prices, defaults: cfg.LLM, log: log}
	t.prices.Store(table)
	return t, nil
}

// Prices is the price table in force.
func (t *Traffic) Prices() *pricing.Table { return t.prices.Load() }

// Wrap puts a provider behind the governor and the meter: the call is
// admitted (or parked, *llm.WaitError) and its answer priced.
func (t *Traffic) Wrap(p llm.Provider) llm.Provider {
	return pricing.Meter(t.Prices)(t.Governor.Provider(p))
}

// Watch reloads the llm section's limits and prices when the configuration
// file or the price file changes, until ctx ends.
func (t *Traffic) Watch(ctx context.Context) error {
	return filewatch.Watch(ctx, t.log, 0, func() {
		if err := t.reload(); err != nil {
			t.log.Error("llm limits and prices reload failed; keeping the last good ones", "config", t.path, "prices", t.pricesPath, "err", err)
			return
		}
		t.log.Info("llm limits and prices reloaded", "config", t.path, "limits", len(t.Governor.Config().Limits), "prices_as_of", t.Prices().AsOf().Format(time.DateOnly))
	}, t.path, t.pricesPath)
}

// reload reads the configuration again (with the environment, as at start)
// and takes its limits and prices; the rest of the file needs a restart.
func (t *Traffic) reload() error {
	path := t.path
	if path == "" {
		path = os.Getenv("AETHERIUM_CONFIG")
	}
	cfg, err := config.LoadFrom(path, os.LookupEnv)
	if err != nil {
		return err
	}
	table, err := cfg.LLM.PriceTable()
	if err != nil {
		return err
	}
	if err := t.Governor.SetConfig(cfg.LLM.GovernorConfig()); err != nil {
		return err
	}
	t.prices.Store(table)
	t.reloaded.Add(1)
	return nil
}

// CheckModels is the submit's check of a team's models (api.Deps.CheckModels):
// a fallback must be a model the price table knows (an unknown name is a typo
// that would surface only when the primary fails, and an unpriced call would
// escape the money budgets), and a team with a money budget may ask only
// priced models (the script model costs nothing).
func (t *Traffic) CheckModels(team templates.Template) error {
	table := t.Prices()
	var errs []error
	budgeted := team.CostBudget() > 0
	seen := map[string]bool{}
	for _, n := range append([]templates.Node{team.Supervisor}, team.Workers...) {
		mc := team.ModelFor(n)
		for i, m := range append([]llm.ModelConfig{mc}, mc.Fallback...) {
			if m.Provider == "script" {
				continue
			}
			name := m.Model
			if name == "" {
				name = t.defaults.DefaultModel(m.Provider)
			}
			key := fmt.Sprint(m.Provider, "/", name, i > 0)
			if _, ok := table.Lookup(m.Provider, name); ok || seen[key] {
				continue
			}
			seen[key] = true
			switch {
			case i > 0:
				errs = append(errs, fmt.Errorf("fallback %s/%s is not a model of the price table (llm.prices): name a known model or add its price", m.Provider, name))
			case budgeted:
				errs = append(errs, fmt.Errorf("%s/%s has no price (llm.prices), so budget.max_cost cannot hold: add its price or drop the budget", m.Provider, name))
			}
		}
	}
	return errors.Join(errs...)
}
