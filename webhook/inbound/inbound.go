// Package inbound verifies inbound webhook deliveries: the signature schemes a
// sender uses (GitHub's, Stripe's, and a generic timestamped HMAC of our own),
// the bounds a payload must keep before anyone parses it (size, nesting), and
// the JSON pointers (RFC 6901) that map a payload to a template's variables.
//
// It imports nothing of the module: the API's delivery endpoint (api/hooks.go)
// looks a hook up, calls Verify, Depth and Resolve, and records the outcome.
// Package webhook is the other direction (the fleet signs its outbound events
// per Standard Webhooks); the shapes here follow it: sentinel errors a caller
// branches on, a tolerance window, hmac.Equal for every comparison.
package inbound

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"time"
)

// Defaults of Config.
const (
	// DefaultBodyLimit caps a delivery's body (1 MiB): GitHub caps its payloads
	// at 25 MB, but a run is started from a few fields; a larger body is 413.
	DefaultBodyLimit = 1 << 20
	// DefaultMaxDepth bounds a payload's nesting of objects and arrays, checked
	// by one pass over the bytes before anything parses it (GitHub's and
	// Stripe's payloads nest less than 10 deep).
	DefaultMaxDepth = 64
	// DefaultTolerance is how far a signed timestamp (stripe, hmac) may be from
	// the receiver's clock, either way, as webhook.DefaultTolerance.
	DefaultTolerance = 5 * time.Minute
	// DefaultKeepRefused is how many refused deliveries a hook keeps recorded
	// (the newest): refusals come from anyone who knows the hook's URL, so
	// their rows are bounded. Accepted deliveries are all kept (they dedupe).
	DefaultKeepRefused = 1000
	// MinSecretLen is the shortest secret a hook accepts (a generated one is 32
	// random bytes, base64url).
	MinSecretLen = 16
	// MaxSecretLen bounds a supplied secret.
	MaxSecretLen = 256
)

// Config is api.hooks: the inbound webhook endpoint (POST /hooks/:id). Zero
// fields take their defaults (WithDefaults).
type Config struct {
	// Addr, when set, is a listener of its own that serves only POST /hooks/:id
	// (for a deployment that exposes its hooks to the internet but not its
	// API). The API's own listener serves /hooks/:id too. Like the API, agents
	// can never reach it (it is registered as a control-plane endpoint). Env
	// AETHERIUM_API_HOOKS_ADDR. Default empty (off).
	Addr string `yaml:"addr"`
	// BodyLimit caps a delivery's body in bytes; a larger one is refused (413,
	// reason too_large). Default DefaultBodyLimit (1 MiB).
	BodyLimit int `yaml:"body_limit"`
	// MaxDepth bounds a payload's nesting of objects and arrays (400, reason
	// too_deep). Default DefaultMaxDepth.
	MaxDepth int `yaml:"max_depth"`
	// Tolerance is the replay window of the timestamped schemes (stripe, hmac):
	// a delivery signed further from now, either way, is refused (401, reason
	// stale). Default DefaultTolerance (5m).
	Tolerance time.Duration `yaml:"tolerance"`
	// KeepRefused is how many refused deliveries each hook keeps recorded.
	// Default DefaultKeepRefused.
	KeepRefused int `yaml:"keep_refused"`
}

// WithDefaults returns c with every zero field filled in.
func (c Config) WithDefaults() Config {
	c.BodyLimit = cmp.Or(c.BodyLimit, DefaultBodyLimit)
	c.MaxDepth = cmp.Or(c.MaxDepth, DefaultMaxDepth)
	c.Tolerance = cmp.Or(c.Tolerance, DefaultTolerance)
	c.KeepRefused = cmp.Or(c.KeepRefused, DefaultKeepRefused)
	return c
}

// Validate reports every invalid field, naming its key.
func (c Config) Validate() error {
	var errs []error
	if c.Addr != "" {
		if _, _, err := net.SplitHostPort(c.Addr); err != nil {
			errs = append(errs, fmt.Errorf("api.hooks.addr (AETHERIUM_API_HOOKS_ADDR): want host:port or empty, got %q", c.Addr))
		}
	}
	if c.BodyLimit < 0 {
		errs = append(errs, fmt.Errorf("api.hooks.body_limit: must be positive, got %d", c.BodyLimit))
	}
	if c.MaxDepth < 0 || c.MaxDepth > 10000 {
		errs = append(errs, fmt.Errorf("api.hooks.max_depth: must be from 1 to 10000, got %d", c.MaxDepth))
	}
	if c.Tolerance < 0 {
		errs = append(errs, fmt.Errorf("api.hooks.tolerance: must be positive, got %s", c.Tolerance))
	}
	if c.KeepRefused < 0 {
		errs = append(errs, fmt.Errorf("api.hooks.keep_refused: must be positive, got %d", c.KeepRefused))
	}
	return errors.Join(errs...)
}

// Reasons a delivery starts no run: the bounded set recorded with such a
// delivery and the label values of aetherium_hook_deliveries_refused_total.
// A replayed delivery is answered with the first delivery's run (200) but
// starts nothing, so it is recorded and counted as one.
const (
	ReasonBadSignature  = "bad_signature"
	ReasonStale         = "stale"
	ReasonReplayed      = "replayed"
	ReasonTooLarge      = "too_large"
	ReasonTooDeep       = "too_deep"
	ReasonBadJSON       = "bad_json"
	ReasonUnmapped      = "unmapped"
	ReasonDisabled      = "disabled"
	ReasonOwnerGone     = "owner_gone"
	ReasonSubmitRefused = "submit_refused"
)

// Reasons lists every refusal reason (the metric's label values).
var Reasons = []string{ReasonBadSignature, ReasonStale, ReasonReplayed, ReasonTooLarge, ReasonTooDeep,
	ReasonBadJSON, ReasonUnmapped, ReasonDisabled, ReasonOwnerGone, ReasonSubmitRefused}
