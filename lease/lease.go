package lease

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aetherium-engine/aetherium/internal/defaults"
	"github.com/aetherium-engine/aetherium/internal/tick"
)

// Sentinel errors callers branch on.
var (
	// ErrUnknownService names a service that is not configured.
	ErrUnknownService = errors.New("lease: unknown GPU service")
	// ErrWaiting means the caller is queued behind other holders: retry Acquire
	// (within Config.WaiterTTL to keep the place) or Release to leave the queue.
	// The concrete error is a *WaitError with the queue position.
	ErrWaiting = errors.New("lease: waiting for a free slot")
	// ErrLost means the grant is no longer valid (expired and reclaimed, or
	// released): the holder must stop using the service.
	ErrLost = errors.New("lease: lease lost")
)

// WaitError is returned by Acquire while the holder is queued.
type WaitError struct {
	Service string
	Holder  string
	// Position is 1 for the head of the queue.
	Position int
	// Holders and Waiting describe the service at the time of the answer.
	Holders, Waiting int
}

func (e *WaitError) Error() string {
	return fmt.Sprintf("lease: %s is busy (%d holder(s)); %s is waiting at position %d of %d", e.Service, e.Holders, e.Holder, e.Position, e.Waiting)
}

// Is makes errors.Is(err, ErrWaiting) true.
func (e *WaitError) Is(target error) bool { return target == ErrWaiting }

// Service declares one shared GPU service. Zero values take the documented defaults.
type Service struct {
	// Name identifies the service (e.g. comfyui, comfyui-qwen, comfyui-video,
	// qwen-tts): lowercase letters, digits, '.', '_' and '-'. Required.
	Name string `yaml:"name" json:"name"`
	// Capacity is how many runs may hold the service at once. Default 1.
	Capacity int `yaml:"capacity" json:"capacity"`
	// TTL is how long a grant lives without renewal; the reaper reclaims it after.
	// Default 2m.
	TTL time.Duration `yaml:"ttl" json:"ttl"`

	// Image is the Docker image the controller starts for the service. Empty: the
	// service runs elsewhere and is only leased, never started or stopped.
	Image string `yaml:"image" json:"image,omitempty"`
	// Container is the container's name. Default "aetherium-gpu-<name>".
	Container string `yaml:"container" json:"container,omitempty"`
	// Cmd overrides the image's command. Default: the image's.
	Cmd []string `yaml:"cmd" json:"cmd,omitempty"`
	// Env is KEY=value pairs for the container. Default none.
	Env []string `yaml:"env" json:"env,omitempty"`
	// Ports publishes container ports, docker-run style
	// ("127.0.0.1:8188:8188"). Default none.
	Ports []string `yaml:"ports" json:"ports,omitempty"`
	// Network is the Docker network to attach the container to. Default
	// DefaultNetwork, a bridge of the GPU services' own that the controller
	// creates: never the engine's default bridge ("bridge" is refused), where any
	// container — or a team's private egress — reached the service with no token.
	Network string `yaml:"network" json:"network,omitempty"`
	// GPUs requests GPUs from the engine: "all", a count ("1"), or empty for none.
	// Default empty.
	GPUs string `yaml:"gpus" json:"gpus,omitempty"`
	// HealthURL answers 2xx once the service is ready. Empty: ready as soon as the
	// container runs. Default empty.
	HealthURL string `yaml:"health_url" json:"health_url,omitempty"`
	// StartTimeout bounds the wait for the health URL after a start. Default 2m.
	StartTimeout time.Duration `yaml:"start_timeout" json:"start_timeout,omitempty"`
	// IdleStop stops the container after nobody held the service for this long.
	// Default 5m.
	IdleStop time.Duration `yaml:"idle_stop" json:"idle_stop,omitempty"`
	// URL is the base URL clients (tools) use to reach the service. Default
	// http://<Fence.Listen> when the service is fenced, else empty (the tool's
	// own default).
	URL string `yaml:"url" json:"url,omitempty"`
	// Fence puts the fencing proxy (cmd/fenceproxy) in front of the service; the
	// controller starts and stops it with the service. Nil: no proxy (the service
	// must check tokens itself, or is not protected).
	Fence *Fence `yaml:"fence" json:"fence,omitempty"`
}

// Fence is the fencing proxy of a service (package gpu/fenceproxy).
type Fence struct {
	// Image is the proxy's image (a FROM-scratch image of cmd/fenceproxy).
	// Required.
	Image string `yaml:"image" json:"image"`
	// Listen is the proxy's address, what clients reach ("127.0.0.1:8188").
	// Required.
	Listen string `yaml:"listen" json:"listen"`
	// Upstream is the service's base URL as the proxy reaches it
	// ("http://127.0.0.1:18188": the service publishes its port only there).
	// Required.
	Upstream string `yaml:"upstream" json:"upstream"`
	// Redis is the URL the proxy validates tokens with (the fleet's Redis, as
	// the proxy's network sees it). Required.
	Redis string `yaml:"redis" json:"redis"`
	// Network is the proxy container's network. Default "host": it reaches Redis
	// and the service's loopback-published port where the fleet does.
	Network string `yaml:"network" json:"network,omitempty"`
	// Container is the proxy container's name. Default "<Container>-fence".
	Container string `yaml:"container" json:"container,omitempty"`
}

// dialable turns a listen address into one a client can dial (":8188" →
// "127.0.0.1:8188").
func dialable(listen string) string {
	if strings.HasPrefix(listen, ":") || strings.HasPrefix(listen, "0.0.0.0:") {
		return "127.0.0.1:" + listen[strings.LastIndex(listen, ":")+1:]
	}
	return listen
}

// FenceHealthURL is the proxy's own health URL (gpu/fenceproxy.HealthPath).
func (f Fence) HealthURL() string { return "http://" + dialable(f.Listen) + "/_fence/health" }

// DefaultNetwork is the Docker network managed GPU service containers join
// (the controller creates it): not the default bridge, and not a sandbox's
// network, so no sandbox shares a segment with a GPU service.
const DefaultNetwork = "aetherium-gpu"

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

func (s *Service) defaults() error {
	if !nameRE.MatchString(s.Name) {
		return fmt.Errorf("lease: service name %q: want lowercase letters, digits, '.', '_' or '-'", s.Name)
	}
	s.Capacity = defaults.Positive(s.Capacity, 1)
	s.TTL = defaults.Positive(s.TTL, 2*time.Minute)
	if s.TTL < 10*time.Millisecond {
		return fmt.Errorf("lease: service %s: ttl %v is too short", s.Name, s.TTL)
	}
	s.Container = cmp.Or(s.Container, "aetherium-gpu-"+s.Name)
	switch s.Network {
	case "":
		s.Network = DefaultNetwork
	case "bridge", "default":
		return fmt.Errorf("lease: service %s: network %q is the engine's default bridge, which every container shares; leave it empty for %s", s.Name, s.Network, DefaultNetwork)
	}
	s.StartTimeout = defaults.Positive(s.StartTimeout, 2*time.Minute)
	s.IdleStop = defaults.Positive(s.IdleStop, 5*time.Minute)
	if f := s.Fence; f != nil {
		if f.Image == "" || f.Listen == "" || f.Upstream == "" || f.Redis == "" {
			return fmt.Errorf("lease: service %s: fence needs image, listen, upstream and redis", s.Name)
		}
		if s.Image == "" {
			return fmt.Errorf("lease: service %s: a fence is started with the service's container: set image", s.Name)
		}
		f.Network = cmp.Or(f.Network, "host")
		f.Container = cmp.Or(f.Container, s.Container+"-fence")
		s.URL = cmp.Or(s.URL, "http://"+dialable(f.Listen))
	}
	return nil
}

// Config configures the lease manager. Zero values take the documented defaults.
type Config struct {
	// Prefix namespaces every key; it is also the family's Redis Cluster hash
	// tag (keys are "{prefix}:…"), so it must not contain braces. Default
	// "aeth:lease".
	Prefix string `yaml:"prefix"`
	// Services are the leasable services of this deployment.
	Services []Service `yaml:"services"`
	// WaiterTTL is how long a queued holder keeps its place without asking again
	// (Acquire); after it, the waiter is dropped so a vanished run cannot block
	// the queue. Default 30s.
	WaiterTTL time.Duration `yaml:"waiter_ttl"`
	// PollInterval is how often AcquireWait asks again. Default 250ms.
	PollInterval time.Duration `yaml:"poll_interval"`
	// EventsMaxLen bounds the lease-events stream (approximately). Default 10000.
	EventsMaxLen int64 `yaml:"events_max_len"`
}

// Options are the manager's optional collaborators.
type Options struct {
	Metrics *Metrics
	Log     *slog.Logger
	// Epoch hands out fencing epochs (a PostgreSQL sequence in a fleet). With it,
	// tokens are (epoch, counter) and a new epoch is taken whenever Redis's
	// replication id changes (failover, data loss), so tokens keep increasing even
	// when the counter went back. Nil: tokens are the bare counter.
	Epoch EpochSource
	// EpochCheck is how long a checked replication id is trusted. Default
	// DefaultEpochCheck.
	EpochCheck time.Duration
}

// Manager grants, renews and reclaims leases. It holds no state of its own: every
// process may have one, and all of them see one truth in Redis.
type Manager struct {
	rdb      redis.UniversalClient
	cfg      Config
	services map[string]Service
	names    []string
	opts     Options
	epoch    epochState
}

// New validates cfg and returns a manager on rdb.
func New(rdb redis.UniversalClient, cfg Config, opts Options) (*Manager, error) {
	cfg.Prefix = cmp.Or(cfg.Prefix, "aeth:lease")
	if strings.ContainsAny(cfg.Prefix, "{}") {
		// A brace would end the hash tag early and scatter the family's keys.
		return nil, fmt.Errorf("lease: prefix %q must not contain { or }", cfg.Prefix)
	}
	cfg.WaiterTTL = defaults.Positive(cfg.WaiterTTL, 30*time.Second)
	cfg.PollInterval = defaults.Positive(cfg.PollInterval, 250*time.Millisecond)
	cfg.EventsMaxLen = defaults.Positive(cfg.EventsMaxLen, 10000)
	opts.Log = cmp.Or(opts.Log, slog.Default())
	opts.EpochCheck = defaults.Positive(opts.EpochCheck, DefaultEpochCheck)
	// The defaults are written into a copy: the caller's slice may back other
	// managers' configs (one per process in a test, one per tenant), and writing
	// into it raced with them.
	cfg.Services = slices.Clone(cfg.Services)
	m := &Manager{rdb: rdb, cfg: cfg, services: map[string]Service{}, opts: opts}
	for i := range cfg.Services {
		s := cfg.Services[i]
		if err := s.defaults(); err != nil {
			return nil, err
		}
		if _, dup := m.services[s.Name]; dup {
			return nil, fmt.Errorf("lease: service %s is declared twice", s.Name)
		}
		m.services[s.Name] = s
		m.names = append(m.names, s.Name)
		cfg.Services[i] = s
	}
	sort.Strings(m.names)
	m.cfg.Services = cfg.Services
	return m, nil
}

// Services returns the configured services (defaults applied), sorted by name.
func (m *Manager) Services() []Service {
	out := make([]Service, 0, len(m.names))
	for _, n := range m.names {
		out = append(out, m.services[n])
	}
	return out
}

// Service returns one configured service.
func (m *Manager) Service(name string) (Service, bool) {
	s, ok := m.services[name]
	return s, ok
}

// Config returns the effective configuration.
func (m *Manager) Config() Config { return m.cfg }

// EventsKey is the lease-events stream an operator can read (XRANGE / Events).
func (m *Manager) EventsKey() string { return m.tag() + ":events" }

// tag is the hash tag of the whole lease family: every key of every service,
// the events stream and the epoch hash sit in one Redis Cluster slot, so each
// script's keys are in one slot (package doc, "Keys and Redis Cluster").
func (m *Manager) tag() string { return "{" + m.cfg.Prefix + "}" }

func (m *Manager) epochKey() string { return m.tag() + ":epoch" }

func (m *Manager) keys(service string) []string {
	p := m.tag() + ":" + service + ":"
	return []string{p + "holders", p + "grants", p + "queue", p + "waiters", p + "wsince",
		p + "fence", p + "seq", p + "state", p + "stopping", m.EventsKey(), p + "secrets"}
}

// reply is the decoded common part of every script's answer.
type reply struct {
	held, waiting, expired, dropped int
	result                          []any
}

func (m *Manager) run(ctx context.Context, sc *redis.Script, service string, args ...any) (reply, error) {
	s, ok := m.services[service]
	if !ok {
		return reply{}, fmt.Errorf("%w: %q", ErrUnknownService, service)
	}
	// Any script may hand a slot on (and so draw a token): check the epoch first.
	if err := m.ensureEpoch(ctx); err != nil {
		return reply{}, err
	}
	argv := append([]any{service, s.Capacity, s.TTL.Milliseconds(), m.cfg.WaiterTTL.Milliseconds(), m.cfg.EventsMaxLen}, args...)
	raw, err := sc.Run(ctx, m.rdb, m.keys(service), argv...).Slice()
	if err != nil {
		return reply{}, fmt.Errorf("lease: %s: %w", service, err)
	}
	if len(raw) != 3 {
		return reply{}, fmt.Errorf("lease: %s: unexpected script reply %v", service, raw)
	}
	stats, _ := raw[0].([]any)
	promoted, _ := raw[1].([]any)
	result, _ := raw[2].([]any)
	r := reply{held: int(toInt(stats, 0)), waiting: int(toInt(stats, 1)), expired: int(toInt(stats, 2)), dropped: int(toInt(stats, 3)), result: result}
	for i := 0; i+2 < len(promoted); i += 3 {
		h, _ := promoted[i].(string)
		m.opts.Metrics.granted(service, time.Duration(toInt(promoted, i+2))*time.Millisecond)
		m.opts.Log.Debug("lease granted", "service", service, "holder", h, "token", toInt(promoted, i+1))
	}
	m.opts.Metrics.observe(service, r)
	return r, nil
}

func toInt(xs []any, i int) int64 {
	if i >= len(xs) {
		return 0
	}
	switch v := xs[i].(type) {
	case int64:
		return v
	case string:
		n, _ := strconv.ParseInt(v, 10, 64)
		return n
	}
	return 0
}

func toStr(xs []any, i int) string {
	if i >= len(xs) {
		return ""
	}
	s, _ := xs[i].(string)
	return s
}

// Grant is a held lease.
type Grant struct {
	Service string `json:"service"`
	Holder  string `json:"holder"`
	// Token is the fencing token: strictly greater than every token granted for
	// this service before. Send it to the service (Header) so it can refuse a
	// holder whose grant was reclaimed and handed on.
	// The token is public and predictable (epoch<<EpochShift + counter): it
	// orders grants, it never authorizes a request on its own.
	Token    uint64        `json:"token"`
	Acquired time.Time     `json:"acquired"`
	Expires  time.Time     `json:"expires"`
	Waited   time.Duration `json:"waited"`
	// Secret authorizes the grant's requests at the fencing proxy (SecretHeader):
	// SecretBytes random bytes drawn per grant, kept in Redis for the holder's
	// workers (Acquire and Held return it) and never marshalled, printed or
	// shown by an API.
	Secret Secret `json:"-"`
}

// SecretBytes is the size of a grant's secret (256 bits from crypto/rand).
const SecretBytes = 32

// Secret is a grant's authorization secret. It prints as a placeholder, so a
// log line or an error that formats a Grant does not carry it.
type Secret string

// String hides the value.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "(secret)"
}

// LogValue hides the value from slog.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// newSecret draws a fresh grant secret. Every call that may install one passes
// one to its script, which keeps the grant's existing secret if it has one.
func newSecret() (string, error) {
	b := make([]byte, SecretBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("lease: draw a grant secret: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// grantFrom decodes {1, token, expires, acquired, waited, …, secret at si}.
func grantFrom(service, holder string, res []any, si int) Grant {
	return Grant{
		Service: service, Holder: holder, Token: uint64(toInt(res, 1)),
		Expires:  time.UnixMilli(toInt(res, 2)).UTC(),
		Acquired: time.UnixMilli(toInt(res, 3)).UTC(),
		Waited:   time.Duration(toInt(res, 4)) * time.Millisecond,
		Secret:   Secret(toStr(res, si)),
	}
}

// Acquire asks for a lease on service for holder (one holder = one run) without
// blocking. It returns the grant when holder holds the service (asking again while
// holding returns the same grant and extends it); otherwise holder is queued, in
// FIFO order, and a *WaitError (errors.Is ErrWaiting) says where. A queued holder
// must ask again within Config.WaiterTTL to keep its place, and should Release to
// give it up. Grants are handed out in queue order: a slot that frees up goes to
// the head of the queue even before it asks again.
func (m *Manager) Acquire(ctx context.Context, service, holder string) (Grant, error) {
	if holder == "" {
		return Grant{}, errors.New("lease: empty holder")
	}
	fresh, err := newSecret()
	if err != nil {
		return Grant{}, err
	}
	r, err := m.run(ctx, acquireScript, service, holder, fresh)
	if err != nil {
		return Grant{}, err
	}
	if toInt(r.result, 0) == 1 {
		return grantFrom(service, holder, r.result, 6), nil
	}
	return Grant{}, &WaitError{Service: service, Holder: holder, Position: int(toInt(r.result, 1)), Holders: r.held, Waiting: r.waiting}
}

// AcquireWait is Acquire retried every PollInterval for at most maxWait. When the
// wait runs out it returns the last *WaitError and holder stays queued: a worker
// job should return and retry later (e.g. re-enqueue itself) rather than block on
// another run's lease.
func (m *Manager) AcquireWait(ctx context.Context, service, holder string, maxWait time.Duration) (Grant, error) {
	deadline := time.Now().Add(maxWait)
	for {
		g, err := m.Acquire(ctx, service, holder)
		if !errors.Is(err, ErrWaiting) {
			return g, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return g, err
		}
		t := time.NewTimer(min(left, m.cfg.PollInterval))
		select {
		case <-ctx.Done():
			t.Stop()
			return Grant{}, ctx.Err()
		case <-t.C:
		}
	}
}

// AcquireAll acquires every listed service for holder, in name order (the same
// order for every run, so two runs cannot each hold what the other waits for). It
// stops at the first service holder has to wait for and returns the grants held
// so far with that *WaitError; call it again later with the same arguments.
func (m *Manager) AcquireAll(ctx context.Context, services []string, holder string) ([]Grant, error) {
	names := append([]string(nil), services...)
	sort.Strings(names)
	var out []Grant
	for i, s := range names {
		if i > 0 && s == names[i-1] {
			continue
		}
		g, err := m.Acquire(ctx, s, holder)
		if err != nil {
			return out, err
		}
		out = append(out, g)
	}
	return out, nil
}

// Renew extends a grant by the service's TTL. It fails with ErrLost once the
// grant expired (whether or not the reaper got to it yet) or was released.
func (m *Manager) Renew(ctx context.Context, g Grant) (Grant, error) {
	r, err := m.run(ctx, renewScript, g.Service, g.Holder, g.Token)
	if err != nil {
		return g, err
	}
	if toInt(r.result, 0) != 1 {
		return g, fmt.Errorf("%w: %s token %d of %s", ErrLost, g.Service, g.Token, g.Holder)
	}
	g.Expires = time.UnixMilli(toInt(r.result, 1)).UTC()
	m.opts.Metrics.renewed(g.Service)
	return g, nil
}

// Keep renews g every interval (TTL/3 when 0) until ctx ends (returns ctx.Err())
// or the lease is lost (returns ErrLost). Redis errors are retried until the grant
// would have expired. Run it beside the work that uses the service and stop that
// work when it returns ErrLost.
func (m *Manager) Keep(ctx context.Context, g Grant, interval time.Duration) error {
	if interval <= 0 {
		s, ok := m.services[g.Service]
		if !ok {
			return fmt.Errorf("%w: %q", ErrUnknownService, g.Service)
		}
		interval = s.TTL / 3
	}
	return tick.Every(ctx, interval, func() error {
		ng, err := m.Renew(ctx, g)
		switch {
		case err == nil:
			g = ng
		case errors.Is(err, ErrLost):
			return err
		case ctx.Err() != nil:
			return ctx.Err()
		case time.Now().After(g.Expires):
			return fmt.Errorf("%w: could not renew before expiry: %v", ErrLost, err)
		default:
			m.opts.Log.Warn("lease renewal failed; retrying", "service", g.Service, "holder", g.Holder, "err", err)
		}
		return nil
	})
}

// Release gives up holder's lease on service (token 0: whatever grant holder has)
// or, if holder is still queued, its place in the queue. Releasing what is not
// held is a no-op, so Release is safe to repeat and to call on every run ending
// (completion, failure, cancel). A stale token never releases a newer grant.
func (m *Manager) Release(ctx context.Context, service, holder string, token uint64) (bool, error) {
	r, err := m.run(ctx, releaseScript, service, holder, token)
	if err != nil {
		return false, err
	}
	switch toInt(r.result, 0) {
	case 1:
		m.opts.Metrics.released(service)
		return true, nil
	case 2:
		return true, nil
	}
	return false, nil
}

// ReleaseAll releases holder's leases and queue places on every configured service.
func (m *Manager) ReleaseAll(ctx context.Context, holder string) error {
	var errs []error
	for _, s := range m.names {
		if _, err := m.Release(ctx, s, holder, 0); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ReapStats reports one Reap pass.
type ReapStats struct {
	Services       int `json:"services"`
	Expired        int `json:"expired"`
	WaitersDropped int `json:"waiters_dropped"`
	Held           int `json:"held"`
	Waiting        int `json:"waiting"`
}

// Reap reclaims expired grants and vanished waiters on every service and hands the
// freed slots on (the scheduler calls it periodically; any call on a service does
// the same for that service). It also refreshes the held/waiting gauges.
func (m *Manager) Reap(ctx context.Context) (ReapStats, error) {
	var st ReapStats
	var errs []error
	for _, s := range m.names {
		r, err := m.run(ctx, reapScript, s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		st.Services++
		st.Expired += r.expired
		st.WaitersDropped += r.dropped
		st.Held += r.held
		st.Waiting += r.waiting
	}
	return st, errors.Join(errs...)
}

// RunReaper calls Reap every interval until ctx ends (dev mode and tests; in a
// fleet the scheduler calls Reap as a periodic task).
func (m *Manager) RunReaper(ctx context.Context, every time.Duration) {
	_ = tick.Every(ctx, every, func() error {
		if _, err := m.Reap(ctx); err != nil && ctx.Err() == nil {
			m.opts.Log.Warn("lease reaper", "err", err)
		}
		return nil
	})
}

// Held returns holder's current grant on service with its secret, without
// renewing it or queueing the holder (a run's cleanup that must still talk to
// the service). ok is false when holder holds nothing there.
func (m *Manager) Held(ctx context.Context, service, holder string) (g Grant, ok bool, err error) {
	fresh, err := newSecret()
	if err != nil {
		return Grant{}, false, err
	}
	r, err := m.run(ctx, heldScript, service, holder, fresh)
	if err != nil || toInt(r.result, 0) != 1 {
		return Grant{}, false, err
	}
	return grantFrom(service, holder, r.result, 5), true, nil
}

// Validate reports whether token is a live grant on service whose secret is
// secret, and for whom: what a service (or its proxy) checks before acting on a
// fenced request. The token alone never validates: it is public.
func (m *Manager) Validate(ctx context.Context, service string, token uint64, secret string) (holder string, ok bool, err error) {
	r, err := m.run(ctx, validateScript, service, token)
	if err != nil {
		return "", false, err
	}
	if toInt(r.result, 0) != 1 || secret == "" {
		return "", false, nil
	}
	tok, stored, _ := strings.Cut(toStr(r.result, 2), "|")
	if tok != strconv.FormatUint(token, 10) || stored == "" ||
		subtle.ConstantTimeCompare([]byte(stored), []byte(secret)) != 1 {
		return "", false, nil
	}
	return toStr(r.result, 1), true, nil
}

// BeginStop marks service as stopping if nobody has held it for idleFor; the mark
// expires after ttl. It reports whether the caller may stop the service now. A
// grant made after the mark finds it (Stopping) and must wait for EndStop before
// starting the service again.
func (m *Manager) BeginStop(ctx context.Context, service string, idleFor, ttl time.Duration) (bool, error) {
	r, err := m.run(ctx, beginStopScript, service, idleFor.Milliseconds(), ttl.Milliseconds())
	if err != nil {
		return false, err
	}
	return toInt(r.result, 0) == 1, nil
}

// EndStop clears the stopping mark.
func (m *Manager) EndStop(ctx context.Context, service string) error {
	if _, ok := m.services[service]; !ok {
		return fmt.Errorf("%w: %q", ErrUnknownService, service)
	}
	return m.rdb.Del(ctx, m.keys(service)[8]).Err()
}

// Stopping reports whether a stop of service is in progress.
func (m *Manager) Stopping(ctx context.Context, service string) (bool, error) {
	if _, ok := m.services[service]; !ok {
		return false, fmt.Errorf("%w: %q", ErrUnknownService, service)
	}
	n, err := m.rdb.Exists(ctx, m.keys(service)[8]).Result()
	return n == 1, err
}
