package governor

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Defaults of Config (WithDefaults fills a zero field with them).
const (
	// DefaultWindow is the providers' window: limits are per minute.
	DefaultWindow = time.Minute
	// DefaultGuard is added to the window so a call admitted near the window's
	// edge does not land inside the provider's window because of network delay.
	DefaultGuard = 250 * time.Millisecond
	// DefaultMaxWait is how long a step may wait in total before its run fails
	// (reason rate_limited). The worker enforces it; the governor carries it.
	DefaultMaxWait = 10 * time.Minute
	// DefaultConcurrencyTTL is the longest a concurrency slot is held when its
	// worker dies mid-call (pass the call's timeout).
	DefaultConcurrencyTTL = 10 * time.Minute
	// DefaultKeyPrefix starts every Redis key of the governor.
	DefaultKeyPrefix = "aeth:"
)

// Bounds Validate enforces; a value above one is a typo, not a limit.
const (
	MaxRPM         = 1_000_000
	MaxTPM         = 1_000_000_000
	MaxConcurrency = 100_000
	// MaxWindow bounds Window + Guard (and the keys' lifetime).
	MaxWindow = time.Hour
)

// ErrInvalidConfig is what every error of Validate wraps.
var ErrInvalidConfig = errors.New("governor: invalid config")

// Limit is one line of llm.limits: the limits of one provider credential,
// for all its models (Model "" or "*") or for one model.
type Limit struct {
	Provider string `yaml:"provider" json:"provider"`
	// Model "" or "*" is the provider-wide (credential) limit; a name is that
	// model's own limit. A call is checked against both.
	Model string `yaml:"model,omitempty" json:"model,omitempty"`
	// RPM (requests), TPM (tokens, estimated then corrected) per Window, and
	// Concurrency (calls in flight); 0 = no such limit.
	RPM         int `yaml:"rpm,omitempty" json:"rpm,omitempty"`
	TPM         int `yaml:"tpm,omitempty" json:"tpm,omitempty"`
	Concurrency int `yaml:"concurrency,omitempty" json:"concurrency,omitempty"`
	// TeamShare and PrincipalShare are percentages (1..100, 0 = none): one
	// team (Request.Team) or one principal (Request.Principal) may use at most
	// that share of each of RPM, TPM and Concurrency (rounded down, at least 1).
	TeamShare      int `yaml:"team_share,omitempty" json:"team_share,omitempty"`
	PrincipalShare int `yaml:"principal_share,omitempty" json:"principal_share,omitempty"`
}

// wide reports whether l is the provider-wide line.
func (l Limit) wide() bool { return l.Model == "" || l.Model == "*" }

// name is how waits name the line: "openai/gpt-4o", "openai/*".
func (l Limit) name() string {
	if l.wide() {
		return l.Provider + "/*"
	}
	return l.Provider + "/" + l.Model
}

// Observer is told what the governor does, for metrics; nil funcs are skipped.
// The funcs run in the caller's goroutine and must be quick.
type Observer struct {
	// OnWait: a call was held back by limit for d ("openai/gpt-4o tpm",
	// "HTTP 429").
	OnWait func(limit string, d time.Duration)
	// OnFeedback: the provider answered status (0 for a success whose
	// rate-limit headers said remaining 0) and the fleet is blocked for d
	// (0 when nothing was blocked).
	OnFeedback func(provider, model string, status int, d time.Duration)
}

// Config is the governor's configuration (llm.limits and friends).
type Config struct {
	// Enabled turns admission and feedback on. Off, the middleware still turns
	// a provider's 429/503/529 into a *llm.WaitError.
	Enabled bool    `yaml:"enabled" json:"enabled"`
	Limits  []Limit `yaml:"limits,omitempty" json:"limits,omitempty"`
	// MaxWait is how long a step may wait in total (carried for the worker).
	MaxWait time.Duration `yaml:"max_wait,omitempty" json:"max_wait,omitempty"`
	// Window is the length of the sliding window of RPM and TPM.
	Window time.Duration `yaml:"window,omitempty" json:"window,omitempty"`
	// Guard is added to Window when computing when an entry leaves it.
	Guard time.Duration `yaml:"guard,omitempty" json:"guard,omitempty"`
	// ConcurrencyTTL is how long a concurrency slot is held at most when its
	// worker dies mid-call; a call whose context has a deadline holds its slot
	// until that deadline plus Guard, if sooner.
	ConcurrencyTTL time.Duration `yaml:"concurrency_ttl,omitempty" json:"concurrency_ttl,omitempty"`
	// KeyPrefix starts every key (a per-test prefix in tests).
	KeyPrefix string `yaml:"key_prefix,omitempty" json:"key_prefix,omitempty"`
	// Observer receives the hooks; not validated, not part of the YAML.
	Observer Observer `yaml:"-" json:"-"`
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.MaxWait == 0 {
		c.MaxWait = DefaultMaxWait
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.Guard == 0 {
		c.Guard = DefaultGuard
	}
	if c.ConcurrencyTTL == 0 {
		c.ConcurrencyTTL = DefaultConcurrencyTTL
	}
	if c.KeyPrefix == "" {
		c.KeyPrefix = DefaultKeyPrefix
	}
	return c
}

func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, a...))
}

// Validate reports the first problem of c (call it after WithDefaults): a
// negative or absurd value, a line without any limit, a duplicate
// (provider, model) line. Provider names are not checked against a list.
func (c Config) Validate() error {
	if c.MaxWait < 0 {
		return invalid("max_wait %s is negative", c.MaxWait)
	}
	if c.Window <= 0 {
		return invalid("window %s must be positive", c.Window)
	}
	if c.Guard < 0 {
		return invalid("guard %s is negative", c.Guard)
	}
	if c.Window+c.Guard > MaxWindow {
		return invalid("window %s + guard %s is over %s", c.Window, c.Guard, MaxWindow)
	}
	if c.ConcurrencyTTL <= 0 {
		return invalid("concurrency_ttl %s must be positive", c.ConcurrencyTTL)
	}
	if strings.ContainsAny(c.KeyPrefix, "{}") {
		return invalid("key prefix %q holds a brace (it would break the hash tag)", c.KeyPrefix)
	}
	seen := map[[2]string]int{}
	for i, l := range c.Limits {
		at := fmt.Sprintf("llm.limits[%d]", i)
		if strings.TrimSpace(l.Provider) == "" {
			return invalid("%s: provider is empty", at)
		}
		if strings.ContainsAny(l.Provider, "{}") {
			return invalid("%s: provider %q holds a brace", at, l.Provider)
		}
		for _, f := range []struct {
			name   string
			v, max int
		}{
			{"rpm", l.RPM, MaxRPM}, {"tpm", l.TPM, MaxTPM}, {"concurrency", l.Concurrency, MaxConcurrency},
			{"team_share", l.TeamShare, 100}, {"principal_share", l.PrincipalShare, 100},
		} {
			if f.v < 0 {
				return invalid("%s: %s %d is negative", at, f.name, f.v)
			}
			if f.v > f.max {
				return invalid("%s: %s %d is over %d", at, f.name, f.v, f.max)
			}
		}
		if l.RPM == 0 && l.TPM == 0 && l.Concurrency == 0 {
			return invalid("%s: %s sets none of rpm, tpm, concurrency", at, l.name())
		}
		k := [2]string{l.Provider, l.Model}
		if l.wide() {
			k[1] = "*"
		}
		if j, dup := seen[k]; dup {
			return invalid("%s: %s repeats llm.limits[%d]", at, l.name(), j)
		}
		seen[k] = i
	}
	return nil
}
