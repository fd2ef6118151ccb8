package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aetherium-engine/aetherium/internal/defaults"
)

// Defaults of OneShotConfig.
const (
	// DefaultOneShotsPerRun is how many one-shot containers (toolchain, browser,
	// media: RunOnce) one run may have running at once, all its sessions
	// together. A session's calls run one after another, so only parallel
	// sessions (subagents, workers) ever meet it.
	DefaultOneShotsPerRun = 4
	// DefaultOneShotsPerPrincipal is how many one principal's runs may have in
	// all: one tenant cannot fill the engine's host for the others.
	DefaultOneShotsPerPrincipal = 8
	// DefaultOneShotWait is how long a one-shot past a cap waits for a slot
	// before it fails.
	DefaultOneShotWait = 30 * time.Second
)

// OneShotConfig caps the concurrent one-shot containers across every worker
// process (the sandbox.oneshot section). The slots are in Redis, each with an
// expiry (the one-shot's timeout plus a margin), so a slot of a worker that died
// holding it comes back on its own.
//
// A one-shot past a cap waits up to Wait for a slot, then fails with
// ErrOneShotBusy naming the cap. Waiting, not failing at once: a run's parallel
// subagents that all run tests at the same moment are legitimate and are served
// one after another; failing them at once would hand every one a refusal to
// retry, which a model does by asking again right away. The wait is bounded, so a
// run or a tenant that keeps the slots busy gets a clear error instead of
// holding the worker's task for good.
type OneShotConfig struct {
	// MaxPerRun caps one run's concurrent one-shots. Default DefaultOneShotsPerRun.
	MaxPerRun int `yaml:"max_per_run"`
	// MaxPerPrincipal caps those of one principal's runs together (the run's
	// owner; MCP calls are their principal's). Default DefaultOneShotsPerPrincipal.
	MaxPerPrincipal int `yaml:"max_per_principal"`
	// Wait is how long a one-shot past a cap waits for a slot. Default
	// DefaultOneShotWait.
	Wait time.Duration `yaml:"wait"`
}

// WithDefaults returns c with zero fields set to their defaults.
func (c OneShotConfig) WithDefaults() OneShotConfig {
	c.MaxPerRun = defaults.Positive(c.MaxPerRun, DefaultOneShotsPerRun)
	c.MaxPerPrincipal = defaults.Positive(c.MaxPerPrincipal, DefaultOneShotsPerPrincipal)
	c.Wait = defaults.Positive(c.Wait, DefaultOneShotWait)
	return c
}

// Validate reports invalid fields, naming their keys.
func (c OneShotConfig) Validate() error {
	var errs []error
	if c.MaxPerRun <= 0 || c.MaxPerPrincipal <= 0 {
		errs = append(errs, fmt.Errorf("sandbox.oneshot: max_per_run and max_per_principal must be positive, got %d and %d", c.MaxPerRun, c.MaxPerPrincipal))
	}
	if c.MaxPerRun > c.MaxPerPrincipal {
		errs = append(errs, fmt.Errorf("sandbox.oneshot.max_per_run (%d) must not exceed max_per_principal (%d)", c.MaxPerRun, c.MaxPerPrincipal))
	}
	if c.Wait <= 0 || c.Wait > 10*time.Minute {
		errs = append(errs, fmt.Errorf("sandbox.oneshot.wait: want more than 0 and at most 10m, got %s", c.Wait))
	}
	return errors.Join(errs...)
}

// ErrOneShotBusy is a one-shot refused because its run or its principal has as
// many one-shot containers running as its cap allows, and none freed up within
// OneShotConfig.Wait.
var ErrOneShotBusy = errors.New("too many one-shot containers running")

// Caller is whom a one-shot serves: the run and the principal (the run's owner)
// its slots are counted against.
type Caller struct {
	Run, Principal string
}

type callerKey struct{}

// WithCaller returns ctx carrying c: RunOnce counts its container against c's
// run and principal (the worker sets it on every tool call's context).
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFrom returns the caller ctx carries (zero when none).
func CallerFrom(ctx context.Context) Caller {
	c, _ := ctx.Value(callerKey{}).(Caller)
	return c
}

// Slots is a counting semaphore per run and per principal in Redis, shared by
// every worker process.
type Slots struct {
	rdb redis.UniversalClient
	cfg OneShotConfig
	// poll is how often a waiting acquire tries again.
	poll time.Duration
}

// NewSlots returns the semaphore of cfg (defaults filled in) on rdb.
func NewSlots(rdb redis.UniversalClient, cfg OneShotConfig) *Slots {
	return &Slots{rdb: rdb, cfg: cfg.WithDefaults(), poll: 200 * time.Millisecond}
}

// slotsKeyPrefix names the slot sets; the one hash tag keeps a run's and its
// principal's sets in one Redis Cluster slot (one script touches both).
const slotsKeyPrefix = "aetherium:oneshot:{slots}:"

// acquireSlots takes a slot in every key whose set has room, or none. Keys:
// the sets (ZSET holder → expiry ms, Redis's clock). ARGV: holder, ttl ms, then
// each key's cap. Reply: 0 when taken, else the 1-based index of the first full
// key and how many hold it.
var acquireSlots = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local holder, ttl = ARGV[1], tonumber(ARGV[2])
for i, k in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', k, '-inf', now)
  local n = redis.call('ZCARD', k)
  if n >= tonumber(ARGV[2 + i]) then
    return {i, n}
  end
end
for _, k in ipairs(KEYS) do
  redis.call('ZADD', k, now + ttl, holder)
  -- The set lives as long as its longest slot (never shortened by a short one).
  if redis.call('PTTL', k) < ttl then redis.call('PEXPIRE', k, ttl) end
end
return {0, 0}
`)

// Acquire takes a slot of c's run (and of its principal, when known) for a
// one-shot that may hold it up to hold (its timeout: past it the slot expires,
// which is how a dead worker's slot comes back). It waits up to the configured
// Wait while a cap is reached, then returns ErrOneShotBusy naming the cap.
// release gives the slot back (idempotent).
func (s *Slots) Acquire(ctx context.Context, c Caller, hold time.Duration) (release func(), err error) {
	if c.Run == "" {
		return nil, fmt.Errorf("%w: a one-shot names no run", ErrInvalidRequest)
	}
	keys := []string{slotsKeyPrefix + "run:" + c.Run}
	caps := []any{s.cfg.MaxPerRun}
	names := []string{"run " + c.Run + " (sandbox.oneshot.max_per_run)"}
	if c.Principal != "" {
		keys = append(keys, slotsKeyPrefix+"principal:"+c.Principal)
		caps = append(caps, s.cfg.MaxPerPrincipal)
		names = append(names, "principal "+c.Principal+" (sandbox.oneshot.max_per_principal)")
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	holder := hex.EncodeToString(b[:])
	// A minute past the one-shot's own timeout: RunOnce has killed and removed
	// its container by then, or its worker is gone.
	ttl := (hold + time.Minute).Milliseconds()
	deadline := time.Now().Add(s.cfg.Wait)
	for {
		res, err := acquireSlots.Run(ctx, s.rdb, keys, append([]any{holder, ttl}, caps...)...).Int64Slice()
		if err != nil {
			return nil, fmt.Errorf("one-shot slot: %w", err)
		}
		if res[0] == 0 {
			release := func() {
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				defer cancel()
				pipe := s.rdb.Pipeline()
				for _, k := range keys {
					pipe.ZRem(rctx, k, holder)
				}
				_, _ = pipe.Exec(rctx) // a slot not given back expires with its TTL
			}
			return release, nil
		}
		if !time.Now().Before(deadline) {
			full := names[res[0]-1]
			return nil, fmt.Errorf("%w: the %s has %d running, its cap; none finished within %s. Try again later or run fewer at once",
				ErrOneShotBusy, full, res[1], s.cfg.Wait)
		}
		t := time.NewTimer(min(s.poll, time.Until(deadline)))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("one-shot slot: %w", ctx.Err())
		case <-t.C:
		}
	}
}
