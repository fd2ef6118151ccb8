package governor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aetherium-engine/aetherium/llm"
)

// Feedback bounds.
const (
	// DefaultPenalty is how long a 429 without any hint (no Retry-After, no
	// exhausted limit with a reset) blocks the fleet, and how long a 503/529
	// without Retry-After parks the one call. Fixed, not doubled: the next 429
	// sets it again.
	DefaultPenalty = time.Second
	// MaxPenalty caps any provider hint: a Retry-After or reset above it is
	// clamped to it (a garbled header never blocks the fleet for a day).
	MaxPenalty = time.Hour
	// ConcurrencyPoll is the longest wait returned for a full concurrency
	// limit: slots free on Done, which the script cannot foresee.
	ConcurrencyPoll = time.Second
)

// ErrNeverFits is returned (wrapped, naming the limit) for a call whose own
// token estimate is over a TPM limit: it would wait forever, so the run
// should fail instead.
var ErrNeverFits = errors.New("governor: request can never fit the limit")

// Call is what admission needs to know of a model call.
type Call struct {
	Provider, Model string
	Team, Principal string
	// Tokens is the call's estimate (Estimate), at least 1.
	Tokens int
}

// Reservation is an admitted call: give it to Done when the call is over.
type Reservation struct {
	ticket string
	tokens int
	keys   []string // per check: log, token counter, concurrency set
}

// Tokens is the estimate the reservation holds in the window.
func (r *Reservation) Tokens() int {
	if r == nil {
		return 0
	}
	return r.tokens
}

// Governor admits calls against the fleet-wide limits kept in Redis.
type Governor struct {
	rdb redis.UniversalClient
	cfg atomic.Pointer[compiled]
	sc  scripts
	log *slog.Logger
}

// compiled is a validated Config with its lines indexed by provider.
type compiled struct {
	Config
	byProvider map[string][]Limit
}

func compile(cfg Config) (*compiled, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &compiled{Config: cfg, byProvider: map[string][]Limit{}}
	c.Limits = slices.Clone(cfg.Limits)
	for _, l := range c.Limits {
		c.byProvider[l.Provider] = append(c.byProvider[l.Provider], l)
	}
	return c, nil
}

// New returns a Governor on rdb (nil is allowed while cfg is disabled).
func New(rdb redis.UniversalClient, cfg Config) (*Governor, error) {
	g := &Governor{rdb: rdb, sc: newScripts(), log: slog.Default().With("component", "llm.governor")}
	if err := g.SetConfig(cfg); err != nil {
		return nil, err
	}
	return g, nil
}

// SetConfig validates cfg (after WithDefaults) and makes it the current
// configuration, atomically; on an error the last good one stays. A cfg
// whose Observer has no funcs (a reload from YAML) keeps the current
// Observer.
func (g *Governor) SetConfig(cfg Config) error {
	c, err := compile(cfg)
	if err != nil {
		return err
	}
	if c.Enabled && g.rdb == nil {
		return fmt.Errorf("%w: enabled without a Redis client", ErrInvalidConfig)
	}
	for {
		old := g.cfg.Load()
		if old != nil && c.Observer.OnWait == nil && c.Observer.OnFeedback == nil {
			c.Observer = old.Observer
		}
		if g.cfg.CompareAndSwap(old, c) {
			return nil
		}
	}
}

// Config is a copy of the current configuration (defaults filled in).
func (g *Governor) Config() Config {
	c := g.cfg.Load().Config
	c.Limits = slices.Clone(c.Limits)
	return c
}

// MaxWait is the current MaxWait, for the worker.
func (g *Governor) MaxWait() time.Duration { return g.cfg.Load().MaxWait }

// tag is the hash tag of every key of provider: one slot per provider, so a
// script touching the provider-wide and model keys runs on one cluster node.
// A brace in a provider's name (Validate refuses them in llm.limits, but
// next.Name() is not validated) would end the tag early: it becomes a
// parenthesis.
func tag(prefix, provider string) string {
	provider = strings.ReplaceAll(strings.ReplaceAll(provider, "{", "("), "}", ")")
	return "{" + prefix + "gov:" + provider + "}"
}

func scope(l Limit) string {
	if l.wide() {
		return "*"
	}
	return "m:" + l.Model
}

func blockKey(prefix, provider, model string) string {
	if model == "" || model == "*" {
		return tag(prefix, provider) + ":block:*"
	}
	return tag(prefix, provider) + ":block:m:" + model
}

func share(v, pct int) int {
	if v == 0 {
		return 0
	}
	s := v * pct / 100
	if s < 1 {
		s = 1
	}
	return s
}

type check struct {
	log, tok, conc string
	rpm, tpm, cc   int
	name           string
}

// checks lists every limit key call is checked against.
func (c *compiled) checks(call Call) []check {
	var out []check
	t := tag(c.KeyPrefix, call.Provider)
	for _, l := range c.byProvider[call.Provider] {
		if !l.wide() && l.Model != call.Model {
			continue
		}
		base := t + ":" + scope(l)
		add := func(suffix, label string, rpm, tpm, cc int) {
			out = append(out, check{
				log: base + suffix + ":log", tok: base + suffix + ":tok", conc: base + suffix + ":conc",
				rpm: rpm, tpm: tpm, cc: cc, name: l.name() + label,
			})
		}
		add("", "", l.RPM, l.TPM, l.Concurrency)
		if call.Team != "" && l.TeamShare > 0 {
			p := l.TeamShare
			add("|t:"+call.Team, " team="+call.Team, share(l.RPM, p), share(l.TPM, p), share(l.Concurrency, p))
		}
		if call.Principal != "" && l.PrincipalShare > 0 {
			p := l.PrincipalShare
			add("|p:"+call.Principal, " principal="+call.Principal, share(l.RPM, p), share(l.TPM, p), share(l.Concurrency, p))
		}
	}
	return out
}

func newTicket() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

// Admit records call in every window it is checked against, or none: it
// returns a *llm.WaitError (After, Limit) when a limit or a provider block
// holds the call back, an error wrapping ErrNeverFits when the estimate is
// over a TPM limit, or a Redis error. With the governor disabled every call
// is admitted (a Reservation with nothing to undo).
func (g *Governor) Admit(ctx context.Context, call Call) (*Reservation, error) {
	c := g.cfg.Load()
	if !c.Enabled {
		return &Reservation{}, nil
	}
	if call.Tokens < 1 {
		call.Tokens = 1
	}
	cs := c.checks(call)
	blocks := []string{blockKey(c.KeyPrefix, call.Provider, "")}
	names := []any{call.Provider + "/* blocked by the provider"}
	if call.Model != "" && call.Model != "*" {
		blocks = append(blocks, blockKey(c.KeyPrefix, call.Provider, call.Model))
		names = append(names, call.Provider+"/"+call.Model+" blocked by the provider")
	}
	keys := append([]string(nil), blocks...)
	r := &Reservation{ticket: newTicket(), tokens: call.Tokens}
	// A slot outlives its call by Guard at most: the call's deadline when ctx
	// has one, else ConcurrencyTTL.
	hold := c.ConcurrencyTTL
	if dl, ok := ctx.Deadline(); ok {
		hold = max(min(hold, time.Until(dl)+c.Guard), time.Millisecond)
	}
	args := []any{r.ticket, call.Tokens, ms(c.Window + c.Guard), ms(hold), ms(ConcurrencyPoll), len(blocks), len(cs)}
	args = append(args, names...)
	for _, k := range cs {
		keys = append(keys, k.log, k.tok, k.conc)
		r.keys = append(r.keys, k.log, k.tok, k.conc)
		args = append(args, k.rpm, k.tpm, k.cc, k.name)
	}
	res, err := g.sc.admit.Run(ctx, g.rdb, keys, args...).Slice()
	if err != nil {
		return nil, fmt.Errorf("governor: admit %s/%s: %w", call.Provider, call.Model, err)
	}
	if len(res) < 3 {
		return nil, fmt.Errorf("governor: admit %s/%s: odd script answer %v", call.Provider, call.Model, res)
	}
	status, _ := res[0].(int64)
	n, _ := res[1].(int64)
	limit, _ := res[2].(string)
	switch status {
	case 0:
		return r, nil
	case 2:
		return nil, fmt.Errorf("%w: %s is %d, the call alone is estimated at %d tokens", ErrNeverFits, limit, n, call.Tokens)
	default:
		w := &llm.WaitError{After: time.Duration(n) * time.Millisecond, Limit: limit}
		if f := c.Observer.OnWait; f != nil {
			f(w.Limit, w.After)
		}
		return nil, w
	}
}

// Done ends a reservation: its estimate in the windows is replaced by actual
// tokens (actual <= 0: the usage is unknown, the estimate stays) and its
// concurrency slots are freed. Call it on every admitted call, failed ones
// too. An entry already out of the window is left alone.
func (g *Governor) Done(ctx context.Context, r *Reservation, actual int) error {
	if r == nil || len(r.keys) == 0 || g.rdb == nil {
		return nil
	}
	if actual <= 0 {
		actual = -1
	}
	if err := g.sc.done.Run(ctx, g.rdb, r.keys, r.ticket, r.tokens, actual).Err(); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("governor: done: %w", err)
	}
	return nil
}

// Penalty is how long a provider's answer says to stay away: status 429 (a
// rate limit), 503/529 (overloaded) or 0/200 (a success). It takes
// RetryAfter, else the longest reset of an exhausted limit (remaining 0);
// a 429 or overload without either gets DefaultPenalty, a success gets 0.
// Negative hints are ignored, hints over MaxPenalty clamped to it.
func Penalty(status int, retryAfter time.Duration, lim *llm.RateLimits) time.Duration {
	clamp := func(d time.Duration) time.Duration {
		if d <= 0 {
			return 0
		}
		return min(d, MaxPenalty)
	}
	d := clamp(retryAfter)
	if d == 0 && lim != nil {
		if lim.RequestsRemaining == 0 {
			d = max(d, clamp(lim.RequestsReset))
		}
		if lim.TokensRemaining == 0 {
			d = max(d, clamp(lim.TokensReset))
		}
	}
	if d == 0 && (status == http.StatusTooManyRequests || status >= 500) {
		d = DefaultPenalty
	}
	return d
}

// Feedback tells the fleet what the provider said about a call on
// provider/model: a 429, or a success (status 0 or 200) whose Limits say
// remaining 0, blocks every worker's admission on that model (or the whole
// provider when model is "") for Penalty(...). Overloads (503/529) block
// nothing: they are the provider's state, not our credential's limit, and
// another model or moment may fare better. It returns the block set (0 if
// none). A block never shortens a longer one already set.
func (g *Governor) Feedback(ctx context.Context, provider, model string, status int, retryAfter time.Duration, lim *llm.RateLimits) (time.Duration, error) {
	c := g.cfg.Load()
	var d time.Duration
	switch {
	case !c.Enabled:
	case status == http.StatusTooManyRequests:
		d = Penalty(status, retryAfter, lim)
	case status == 0 || status == http.StatusOK:
		d = Penalty(status, 0, lim)
	}
	if d > 0 {
		left, err := g.sc.block.Run(ctx, g.rdb, []string{blockKey(c.KeyPrefix, provider, model)}, ms(max(d, time.Millisecond))).Int64()
		if err != nil {
			return 0, fmt.Errorf("governor: feedback %s/%s: %w", provider, model, err)
		}
		d = time.Duration(left) * time.Millisecond
	}
	if f := c.Observer.OnFeedback; f != nil && (status != 0 && status != http.StatusOK || d > 0) {
		f(provider, model, status, d)
	}
	return d, nil
}
