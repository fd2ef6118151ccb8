// Package fenceproxy is the fencing proxy the GPU controller starts in front of a
// leased service (ComfyUI, a TTS server): those services know nothing of leases,
// so the proxy checks every request's fencing token (lease.Header) before the
// service sees it, and refuses with 409 and a JSON reason:
//
//   - missing: no token, or not a number, or no grant secret (lease.SecretHeader):
//     the token is public and predictable, so it only orders grants; the
//     per-grant secret, which only the holder's workers know, authorizes;
//   - stale: the token is older than the newest one the proxy admitted — for a
//     capacity-1 service any lower token, for a larger one any token of an older
//     epoch (several live holders interleave their tokens there, so only the
//     epoch order is a fence; Validate does the rest);
//   - not_live: the lease manager says the token is no live grant with that
//     secret (lease.Manager.Validate: expired, reclaimed, released, or the
//     secret is not the grant's).
//
// The secret header is removed before the request is forwarded.
//
// When Redis cannot be asked the proxy fails closed (503 validate_failed). One
// proxy serves every worker (it runs beside the service, not in the workers), so
// "the newest admitted token" is one number per service. WebSocket upgrades pass
// through after the same check and are checked again every Config.Revalidate
// while open: one whose lease ended is closed.
package fenceproxy

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aetherium-engine/aetherium/internal/defaults"
	"github.com/aetherium-engine/aetherium/internal/tick"
	"github.com/aetherium-engine/aetherium/lease"
)

// Defaults of Config.
const (
	DefaultListen   = ":8190"
	DefaultPrefix   = "aeth:lease"
	DefaultCapacity = 1
	DefaultTTL      = 2 * time.Minute
	// DefaultValidateTimeout bounds one Validate call to Redis.
	DefaultValidateTimeout = 3 * time.Second
	// DefaultRevalidate is how often an open WebSocket's token is checked again.
	DefaultRevalidate = 5 * time.Second
)

// Paths the proxy answers itself (never forwarded).
const (
	HealthPath = "/_fence/health"
	StatePath  = "/_fence/state"
)

// Refusal codes in the JSON body of a 409/503 answer.
const (
	ReasonMissing        = "missing"
	ReasonStale          = "stale"
	ReasonNotLive        = "not_live"
	ReasonValidateFailed = "validate_failed"
)

// Config is one proxy's settings (the GPU controller passes them as FENCE_*
// environment variables; see FromEnv).
type Config struct {
	// Service is the leased service's name. Required.
	Service string `yaml:"service"`
	// Upstream is the service's base URL (http://127.0.0.1:18188). Required.
	Upstream string `yaml:"upstream"`
	// Listen is the proxy's address. Default DefaultListen.
	Listen string `yaml:"listen"`
	// Redis is the lease manager's Redis URL. Required.
	Redis string `yaml:"redis"`
	// Prefix is the lease key prefix (lease.Config.Prefix). Default DefaultPrefix.
	Prefix string `yaml:"prefix"`
	// Capacity and TTL must equal the service's lease settings: Validate's script
	// also reaps and hands slots on with them. Defaults DefaultCapacity, DefaultTTL.
	Capacity int           `yaml:"capacity"`
	TTL      time.Duration `yaml:"ttl"`
	// ValidateTimeout bounds one Validate call. Default DefaultValidateTimeout.
	ValidateTimeout time.Duration `yaml:"validate_timeout"`
	// Revalidate is how often the token of an open WebSocket is checked again;
	// the connection is closed once it is stale or not live. Default
	// DefaultRevalidate.
	Revalidate time.Duration `yaml:"revalidate"`
}

// WithDefaults fills zero fields.
func (c Config) WithDefaults() Config {
	c.Listen = cmp.Or(c.Listen, DefaultListen)
	c.Prefix = cmp.Or(c.Prefix, DefaultPrefix)
	c.Capacity = defaults.Positive(c.Capacity, DefaultCapacity)
	c.TTL = defaults.Positive(c.TTL, DefaultTTL)
	c.ValidateTimeout = defaults.Positive(c.ValidateTimeout, DefaultValidateTimeout)
	c.Revalidate = defaults.Positive(c.Revalidate, DefaultRevalidate)
	return c
}

// Validate reports the first missing or malformed field.
func (c Config) Validate() error {
	if c.Service == "" {
		return errors.New("fenceproxy: service is required")
	}
	if c.Redis == "" {
		return errors.New("fenceproxy: redis is required")
	}
	u, err := url.Parse(c.Upstream)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("fenceproxy: upstream %q: want an http(s) URL", c.Upstream)
	}
	return nil
}

// Validator is what the proxy asks about a token (*lease.Manager).
type Validator interface {
	Validate(ctx context.Context, service string, token uint64, secret string) (holder string, ok bool, err error)
}

// Refusal is the JSON body of a refused request.
type Refusal struct {
	Error   string `json:"error"`
	Reason  string `json:"reason"`
	Service string `json:"service"`
	Token   uint64 `json:"token,omitempty"`
	Newest  uint64 `json:"newest,omitempty"`
}

// State is what StatePath reports.
type State struct {
	Service  string           `json:"service"`
	Newest   uint64           `json:"newest"`
	Epoch    uint64           `json:"epoch"`
	Admitted int64            `json:"admitted"`
	Refused  map[string]int64 `json:"refused"`
}

// Proxy is the fencing http.Handler.
type Proxy struct {
	cfg   Config
	val   Validator
	rp    *httputil.ReverseProxy
	log   *slog.Logger
	mu    sync.Mutex
	state State
}

// New returns the proxy for cfg (defaults applied, validated) asking v.
func New(cfg Config, v Validator, log *slog.Logger) (*Proxy, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	up, _ := url.Parse(cfg.Upstream)
	rp := httputil.NewSingleHostReverseProxy(up)
	rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		log.Warn("upstream unreachable", "service", cfg.Service, "path", r.URL.Path, "err", err)
		writeJSON(w, http.StatusBadGateway, Refusal{Error: "upstream unreachable: " + err.Error(), Reason: "upstream", Service: cfg.Service})
	}
	// ComfyUI streams /ws and long /view bodies: flush as they come.
	rp.FlushInterval = -1
	return &Proxy{cfg: cfg, val: v, rp: rp, log: log, state: State{Service: cfg.Service, Refused: map[string]int64{}}}, nil
}

// Snapshot returns the proxy's counters.
func (p *Proxy) Snapshot() State {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.state
	s.Refused = make(map[string]int64, len(p.state.Refused))
	for k, v := range p.state.Refused {
		s.Refused[k] = v
	}
	return s
}

// stale reports whether token is fenced off by what was admitted already.
func (p *Proxy) stale(token uint64) bool {
	n := p.state.Newest
	if lease.TokenEpoch(token) < lease.TokenEpoch(n) {
		return true
	}
	return p.cfg.Capacity == 1 && token < n
}

func (p *Proxy) refuse(w http.ResponseWriter, r *http.Request, status int, reason string, token uint64, msg string) {
	p.mu.Lock()
	p.state.Refused[reason]++
	newest := p.state.Newest
	p.mu.Unlock()
	p.log.Warn("fencing proxy refused a request", "service", p.cfg.Service, "reason", reason, "token", token, "newest", newest, "method", r.Method, "path", r.URL.Path)
	writeJSON(w, status, Refusal{Error: msg, Reason: reason, Service: p.cfg.Service, Token: token, Newest: newest})
}

// ServeHTTP checks the token and forwards the request.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case HealthPath:
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "service": p.cfg.Service})
		return
	case StatePath:
		writeJSON(w, http.StatusOK, p.Snapshot())
		return
	}
	raw := r.Header.Get(lease.Header)
	token, err := strconv.ParseUint(raw, 10, 64)
	if raw == "" || err != nil || token == 0 {
		p.refuse(w, r, http.StatusConflict, ReasonMissing, 0, fmt.Sprintf("fencing proxy of %s: the request carries no valid %s header (%q)", p.cfg.Service, lease.Header, raw))
		return
	}
	secret := r.Header.Get(lease.SecretHeader)
	r.Header.Del(lease.SecretHeader) // the service never sees it
	if secret == "" {
		p.refuse(w, r, http.StatusConflict, ReasonMissing, token, fmt.Sprintf("fencing proxy of %s: the request carries lease token %d but no %s header: the token only orders grants, the grant's secret authorizes", p.cfg.Service, token, lease.SecretHeader))
		return
	}
	p.mu.Lock()
	stale := p.stale(token)
	p.mu.Unlock()
	if stale {
		p.refuse(w, r, http.StatusConflict, ReasonStale, token, fmt.Sprintf("fencing proxy of %s: lease token %d is older than a newer grant already admitted; the lease was lost", p.cfg.Service, token))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), p.cfg.ValidateTimeout)
	_, live, err := p.val.Validate(ctx, p.cfg.Service, token, secret)
	cancel()
	if err != nil {
		p.refuse(w, r, http.StatusServiceUnavailable, ReasonValidateFailed, token, fmt.Sprintf("fencing proxy of %s: cannot check lease token %d: %v", p.cfg.Service, token, err))
		return
	}
	if !live {
		p.refuse(w, r, http.StatusConflict, ReasonNotLive, token, fmt.Sprintf("fencing proxy of %s: lease token %d is not a live grant with that secret (expired, reclaimed, released, or not the grant's secret)", p.cfg.Service, token))
		return
	}
	// Re-check under the lock: a newer token may have been admitted meanwhile.
	p.mu.Lock()
	if p.stale(token) {
		p.mu.Unlock()
		p.refuse(w, r, http.StatusConflict, ReasonStale, token, fmt.Sprintf("fencing proxy of %s: lease token %d is older than a newer grant already admitted; the lease was lost", p.cfg.Service, token))
		return
	}
	if token > p.state.Newest {
		p.state.Newest, p.state.Epoch = token, lease.TokenEpoch(token)
	}
	p.state.Admitted++
	p.mu.Unlock()
	if r.Header.Get("Upgrade") == "" {
		p.rp.ServeHTTP(w, r)
		return
	}
	// A WebSocket outlives the check at its upgrade: check again while it is
	// open and close it (ReverseProxy closes the upstream side when the
	// request's context ends) once the lease is gone.
	wctx, wcancel := context.WithCancel(r.Context())
	defer wcancel()
	go p.watch(wctx, wcancel, token, secret)
	p.rp.ServeHTTP(w, r.WithContext(wctx))
}

func (p *Proxy) watch(ctx context.Context, cancel context.CancelFunc, token uint64, secret string) {
	_ = tick.Every(ctx, p.cfg.Revalidate, func() error {
		p.mu.Lock()
		stale := p.stale(token)
		p.mu.Unlock()
		vctx, vcancel := context.WithTimeout(ctx, p.cfg.ValidateTimeout)
		_, live, err := p.val.Validate(vctx, p.cfg.Service, token, secret)
		vcancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if stale || (err == nil && !live) {
			p.mu.Lock()
			p.state.Refused["websocket_closed"]++
			p.mu.Unlock()
			p.log.Warn("fencing proxy closed a WebSocket whose lease ended", "service", p.cfg.Service, "token", token, "stale", stale)
			cancel()
			return errLeaseEnded
		}
		return nil
	})
}

// errLeaseEnded ends watch's loop once it has closed the WebSocket.
var errLeaseEnded = errors.New("fenceproxy: the lease of an open WebSocket ended")

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// ParseRefusal decodes a proxy refusal from a response body, for clients that
// want to report it (nil when the body is not one).
func ParseRefusal(status int, body []byte) *Refusal {
	if status != http.StatusConflict && status != http.StatusServiceUnavailable {
		return nil
	}
	var r Refusal
	if json.Unmarshal(body, &r) != nil || r.Reason == "" || r.Service == "" {
		return nil
	}
	return &r
}

// Environment variables FromEnv reads (the GPU controller sets them).
const (
	EnvService  = "FENCE_SERVICE"
	EnvUpstream = "FENCE_UPSTREAM"
	EnvListen   = "FENCE_LISTEN"
	EnvRedis    = "FENCE_REDIS"
	EnvPrefix   = "FENCE_PREFIX"
	EnvCapacity = "FENCE_CAPACITY"
	EnvTTL      = "FENCE_TTL"
	// EnvRevalidate is Config.Revalidate (a Go duration).
	EnvRevalidate = "FENCE_REVALIDATE"
)

// FromEnv reads a Config from getenv (os.Getenv).
func FromEnv(getenv func(string) string) (Config, error) {
	c := Config{Service: getenv(EnvService), Upstream: getenv(EnvUpstream), Listen: getenv(EnvListen),
		Redis: getenv(EnvRedis), Prefix: getenv(EnvPrefix)}
	if v := getenv(EnvCapacity); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return c, fmt.Errorf("fenceproxy: %s=%q: %w", EnvCapacity, v, err)
		}
		c.Capacity = n
	}
	if v := getenv(EnvTTL); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return c, fmt.Errorf("fenceproxy: %s=%q: %w", EnvTTL, v, err)
		}
		c.TTL = d
	}
	if v := getenv(EnvRevalidate); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return c, fmt.Errorf("fenceproxy: %s=%q: %w", EnvRevalidate, v, err)
		}
		c.Revalidate = d
	}
	return c.WithDefaults(), c.WithDefaults().Validate()
}

// Env returns cfg as the environment FromEnv reads.
func (c Config) Env() []string {
	return []string{EnvService + "=" + c.Service, EnvUpstream + "=" + c.Upstream, EnvListen + "=" + c.Listen,
		EnvRedis + "=" + c.Redis, EnvPrefix + "=" + c.Prefix, EnvCapacity + "=" + strconv.Itoa(c.Capacity), EnvTTL + "=" + c.TTL.String(),
		EnvRevalidate + "=" + c.Revalidate.String()}
}

// NewManager is the lease manager the proxy validates with: one service, the
// same prefix, capacity and TTL as the fleet's.
func NewManager(cfg Config, rdb redis.UniversalClient) (*lease.Manager, error) {
	return lease.New(rdb, lease.Config{Prefix: cfg.Prefix, Services: []lease.Service{{Name: cfg.Service, Capacity: cfg.Capacity, TTL: cfg.TTL}}}, lease.Options{})
}
