package fair

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Defaults of Config.
const (
	DefaultPrefix        = "aeth:fair"
	DefaultAging         = 30 * time.Second
	DefaultDispatchLease = 15 * time.Second
	DefaultRunLease      = 30 * time.Second
	DefaultWorkerTTL     = 15 * time.Second
	DefaultScan          = 64
)

// Bounds of a Task, and of the names the dispatcher keeps.
const (
	// MaxID bounds Task.ID and worker names: both end up in Redis key names or
	// members, and a hostile caller must not make them grow without bound.
	MaxID = 512
	// MaxKey is the longest fairness key kept as it is; longer ones (and
	// those starting with "h:", so nobody can collide with a hashed key on
	// purpose) become "h:" + hex(sha256(key)).
	MaxKey = 128
	// MaxSpec bounds Task.Spec.
	MaxSpec = 64 << 10
	// MaxWeight bounds Task.Weight so that SCALE/weight (the step of a key's
	// finish tag) stays at least 1.
	MaxWeight = 1_000_000
	// MaxRunning bounds the ids of one Heartbeat (one script call): far more
	// than any worker's asynq concurrency.
	MaxRunning = 10_000
	// MinPriority and MaxPriority bound Task.Priority.
	MinPriority, MaxPriority = 1, 5
)

// ErrInvalid is wrapped by every error about a caller's argument; the message
// names the field.
var ErrInvalid = errors.New("fair: invalid argument")

// Config configures a Dispatcher. Zero values take the defaults above. Every
// process of a fleet must use the same Config: the values are passed to the
// scripts by each caller.
type Config struct {
	// Prefix namespaces every key; it is also the Redis Cluster hash tag of
	// the whole family (keys are "{prefix}:…"), so it must not contain braces.
	Prefix string `yaml:"prefix"`
	// Aging is how much waiting one priority level is worth: a line's head
	// that waited n×Aging competes as if n levels higher.
	Aging time.Duration `yaml:"aging"`
	// DispatchLease: a task dispatched but not Started within it goes back to
	// the head of its line (asynq lost it, or the caller crashed before
	// enqueueing).
	DispatchLease time.Duration `yaml:"dispatch_lease"`
	// RunLease: a Started task whose worker stops heartbeating is released
	// after it.
	RunLease time.Duration `yaml:"run_lease"`
	// WorkerTTL: a worker's capacity counts in the window until this long
	// after its last Heartbeat.
	WorkerTTL time.Duration `yaml:"worker_ttl"`
	// Scan bounds the work of one script call: tasks dispatched, and expired
	// leases and workers reclaimed, each at most Scan.
	Scan int `yaml:"scan"`
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.Aging == 0 {
		c.Aging = DefaultAging
	}
	if c.DispatchLease == 0 {
		c.DispatchLease = DefaultDispatchLease
	}
	if c.RunLease == 0 {
		c.RunLease = DefaultRunLease
	}
	if c.WorkerTTL == 0 {
		c.WorkerTTL = DefaultWorkerTTL
	}
	if c.Scan == 0 {
		c.Scan = DefaultScan
	}
	return c
}

// Validate reports the first unusable field. Zero values are valid (they take
// defaults).
func (c Config) Validate() error {
	if strings.ContainsAny(c.Prefix, "{}") {
		// A brace would end the hash tag early and scatter the family's keys.
		return fmt.Errorf("fair: prefix %q must not contain { or }", c.Prefix)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"aging", c.Aging}, {"dispatch_lease", c.DispatchLease}, {"run_lease", c.RunLease}, {"worker_ttl", c.WorkerTTL}} {
		if d.v < 0 {
			return fmt.Errorf("fair: %s %v is negative", d.name, d.v)
		}
		if d.v > 0 && d.v < time.Millisecond {
			// The scripts count in milliseconds of Redis's clock.
			return fmt.Errorf("fair: %s %v is below a millisecond", d.name, d.v)
		}
	}
	if c.Scan < 0 {
		return fmt.Errorf("fair: scan %d is negative", c.Scan)
	}
	return nil
}

// Task is one unit of work submitted to the dispatcher.
type Task struct {
	// ID is unique and deterministic (the asynq task id); 1..MaxID bytes.
	ID string
	// Key is the fairness key (tenant); any bytes (see MaxKey).
	Key string
	// Weight is the key's share relative to other keys; 1..MaxWeight.
	Weight int
	// Limit is the most tasks of Key in flight (dispatched or running)
	// fleet-wide; 0 is unlimited.
	Limit int
	// Priority is MinPriority..MaxPriority, higher first.
	Priority int
	// Spec is opaque to the dispatcher: what the caller needs to enqueue the
	// task into asynq; at most MaxSpec bytes.
	Spec []byte
}

// Dispatched is a task the caller must now enqueue into asynq.
type Dispatched struct {
	ID string
	// Key is the key as the dispatcher keeps it (NormalizeKey).
	Key      string
	Priority int
	Spec     []byte
	// Waited is the time since Submit, by Redis's clock.
	Waited time.Duration
}

// Stats is a consistent snapshot of the dispatcher.
type Stats struct {
	Pending  int // tasks waiting in lines
	Keys     int // keys with pending tasks
	InFlight int // tasks dispatched or running
	Window   int // sum of the capacities of live workers
	Blocked  int // keys at their limit
}

// Dispatcher is the fleet-wide fair dispatcher. It holds no state of its own:
// every process may have one, and all of them see one truth in Redis.
type Dispatcher struct {
	rdb  redis.UniversalClient
	cfg  Config
	tag  string
	keys []string
	base []any
}

// New validates cfg (defaults applied) and returns a dispatcher on rdb.
func New(rdb redis.UniversalClient, cfg Config) (*Dispatcher, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	tag := "{" + cfg.Prefix + "}:"
	d := &Dispatcher{rdb: rdb, cfg: cfg, tag: tag}
	for _, k := range []string{"V", "dl", "workers", "cap", "parked", "keys", "pending"} {
		d.keys = append(d.keys, tag+k)
	}
	d.base = []any{tag, cfg.Aging.Milliseconds(), cfg.DispatchLease.Milliseconds(),
		cfg.RunLease.Milliseconds(), cfg.WorkerTTL.Milliseconds(), cfg.Scan}
	return d, nil
}

// Config returns the effective configuration.
func (d *Dispatcher) Config() Config { return d.cfg }

// NormalizeKey is the key as the dispatcher keeps it: key itself when it is
// at most MaxKey bytes and does not start with "h:", else "h:" +
// hex(sha256(key)). Hostile keys thus stay bounded, and no raw key can take the
// name of a hashed one.
func NormalizeKey(key string) string {
	if len(key) <= MaxKey && !strings.HasPrefix(key, "h:") {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "h:" + hex.EncodeToString(sum[:])
}

func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, a...))
}

func checkID(field, id string) error {
	if id == "" {
		return invalid("%s is empty", field)
	}
	if len(id) > MaxID {
		return invalid("%s is %d bytes, over %d", field, len(id), MaxID)
	}
	return nil
}

func (t Task) validate() error {
	if err := checkID("id", t.ID); err != nil {
		return err
	}
	if t.Weight < 1 || t.Weight > MaxWeight {
		return invalid("weight %d: want 1..%d", t.Weight, MaxWeight)
	}
	if t.Limit < 0 {
		return invalid("limit %d is negative", t.Limit)
	}
	if t.Priority < MinPriority || t.Priority > MaxPriority {
		return invalid("priority %d: want %d..%d", t.Priority, MinPriority, MaxPriority)
	}
	if len(t.Spec) > MaxSpec {
		return invalid("spec is %d bytes, over %d", len(t.Spec), MaxSpec)
	}
	return nil
}

func (d *Dispatcher) run(ctx context.Context, op string, sc *redis.Script, args ...any) ([]any, error) {
	argv := append(append(make([]any, 0, len(d.base)+len(args)), d.base...), args...)
	raw, err := sc.Run(ctx, d.rdb, d.keys, argv...).Slice()
	if err != nil {
		return nil, fmt.Errorf("fair: %s: %w", op, err)
	}
	return raw, nil
}

// dispatched decodes a dispatching script's reply.
func dispatched(raw []any) []Dispatched {
	if len(raw) < 5 {
		return nil
	}
	out := make([]Dispatched, 0, len(raw)/5)
	for i := 0; i+4 < len(raw); i += 5 {
		id, _ := raw[i].(string)
		key, _ := raw[i+1].(string)
		spec, _ := raw[i+3].(string)
		out = append(out, Dispatched{ID: id, Key: key, Priority: int(toInt(raw[i+2])),
			Spec: []byte(spec), Waited: time.Duration(toInt(raw[i+4])) * time.Millisecond})
	}
	return out
}

func toInt(v any) int64 {
	switch v := v.(type) {
	case int64:
		return v
	case string:
		n, _ := strconv.ParseInt(v, 10, 64)
		return n
	}
	return 0
}

// Submit adds t to the tail of its key's line at its priority (an ID already
// pending, dispatched or running is left as it is), then dispatches as much
// as the window allows. It returns the tasks the caller must now enqueue into
// asynq, idempotently (deterministic asynq TaskID): possibly other keys',
// possibly none. The key's weight and limit become t's.
func (d *Dispatcher) Submit(ctx context.Context, t Task) ([]Dispatched, error) {
	if err := t.validate(); err != nil {
		return nil, err
	}
	raw, err := d.run(ctx, "submit "+t.ID, submitScript, t.ID, NormalizeKey(t.Key), t.Weight, t.Limit, t.Priority, t.Spec)
	if err != nil {
		return nil, err
	}
	return dispatched(raw), nil
}

// Started marks id running for worker with a lease of RunLease. An id the
// dispatcher does not know (an asynq retry of a task whose entry was
// released, a task enqueued directly) is registered as running for key, so it
// counts against the window and the key's limit — and may take the key over
// its limit (package doc, Limits).
func (d *Dispatcher) Started(ctx context.Context, worker, id, key string) error {
	if err := checkID("worker", worker); err != nil {
		return err
	}
	if err := checkID("id", id); err != nil {
		return err
	}
	_, err := d.run(ctx, "started "+id, startedScript, worker, id, NormalizeKey(key))
	return err
}

// Done releases id whatever its state (an unknown id is a no-op) and
// dispatches what the freed slot allows.
func (d *Dispatcher) Done(ctx context.Context, id string) ([]Dispatched, error) {
	if err := checkID("id", id); err != nil {
		return nil, err
	}
	raw, err := d.run(ctx, "done "+id, doneScript, id)
	if err != nil {
		return nil, err
	}
	return dispatched(raw), nil
}

// Heartbeat registers worker's capacity (its asynq concurrency) for
// WorkerTTL, extends the run lease of the ids it runs (marking a dispatched
// one running), reclaims expired entries and dispatches. Each worker process
// calls it every few seconds, well inside WorkerTTL and RunLease.
func (d *Dispatcher) Heartbeat(ctx context.Context, worker string, capacity int, running []string) ([]Dispatched, error) {
	if err := checkID("worker", worker); err != nil {
		return nil, err
	}
	if capacity < 0 {
		return nil, invalid("capacity %d is negative", capacity)
	}
	if len(running) > MaxRunning {
		return nil, invalid("running lists %d ids, over %d", len(running), MaxRunning)
	}
	args := []any{worker, capacity}
	for _, id := range running {
		if err := checkID("running id", id); err != nil {
			return nil, err
		}
		args = append(args, id)
	}
	raw, err := d.run(ctx, "heartbeat "+worker, heartbeatScript, args...)
	if err != nil {
		return nil, err
	}
	return dispatched(raw), nil
}

// Leave removes worker's capacity from the window (a clean shutdown). Its
// running tasks stay until Done or their run lease expires.
func (d *Dispatcher) Leave(ctx context.Context, worker string) error {
	if err := checkID("worker", worker); err != nil {
		return err
	}
	_, err := d.run(ctx, "leave "+worker, leaveScript, worker)
	return err
}

// Pump reclaims expired entries and dispatches, for a periodic tick.
func (d *Dispatcher) Pump(ctx context.Context) ([]Dispatched, error) {
	raw, err := d.run(ctx, "pump", pumpScript)
	if err != nil {
		return nil, err
	}
	return dispatched(raw), nil
}

// Cancel removes a pending task (a cancelled run's) and reports whether it was
// pending. A dispatched or running task is left to Done.
func (d *Dispatcher) Cancel(ctx context.Context, id string) (bool, error) {
	if err := checkID("id", id); err != nil {
		return false, err
	}
	raw, err := d.run(ctx, "cancel "+id, cancelScript, id)
	if err != nil {
		return false, err
	}
	return len(raw) == 1 && toInt(raw[0]) == 1, nil
}

// Stats reads a consistent snapshot.
func (d *Dispatcher) Stats(ctx context.Context) (Stats, error) {
	raw, err := d.run(ctx, "stats", statsScript)
	if err != nil {
		return Stats{}, err
	}
	if len(raw) != 5 {
		return Stats{}, fmt.Errorf("fair: stats: unexpected reply %v", raw)
	}
	return Stats{Pending: int(toInt(raw[0])), Keys: int(toInt(raw[1])), InFlight: int(toInt(raw[2])),
		Window: int(toInt(raw[3])), Blocked: int(toInt(raw[4]))}, nil
}

// InFlightOf returns key's count of tasks dispatched or running.
func (d *Dispatcher) InFlightOf(ctx context.Context, key string) (int, error) {
	raw, err := d.run(ctx, "in flight", inFlightScript, NormalizeKey(key))
	if err != nil {
		return 0, err
	}
	if len(raw) != 1 {
		return 0, fmt.Errorf("fair: in flight: unexpected reply %v", raw)
	}
	return int(toInt(raw[0])), nil
}
