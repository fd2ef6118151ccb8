package lease

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// HolderState is one current grant.
type HolderState struct {
	Holder   string    `json:"holder"`
	Token    uint64    `json:"token"`
	Acquired time.Time `json:"acquired"`
	Expires  time.Time `json:"expires"`
	WaitedMS int64     `json:"waited_ms"`
	// Expired marks a grant past its expiry that the reaper has not reclaimed yet.
	Expired bool `json:"expired,omitempty"`
}

// WaiterState is one queued holder.
type WaiterState struct {
	Holder   string    `json:"holder"`
	Position int       `json:"position"`
	Since    time.Time `json:"since"`
	// Expires is when the waiter is dropped unless it asks again.
	Expires time.Time `json:"expires"`
}

// ServiceState is a consistent picture of one service.
type ServiceState struct {
	Service   string        `json:"service"`
	Capacity  int           `json:"capacity"`
	TTL       string        `json:"ttl"`
	Holders   []HolderState `json:"holders"`
	Waiters   []WaiterState `json:"waiters"`
	LastToken uint64        `json:"last_token"`
	// IdleSince is when the last holder left (nil while held or never used).
	IdleSince *time.Time `json:"idle_since,omitempty"`
	Stopping  bool       `json:"stopping,omitempty"`
	// Now is Redis's clock when the picture was taken.
	Now time.Time `json:"now"`
}

// Snapshot reads every configured service (in name order) without changing it.
func (m *Manager) Snapshot(ctx context.Context) ([]ServiceState, error) {
	out := make([]ServiceState, 0, len(m.names))
	for _, n := range m.names {
		st, err := m.State(ctx, n)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}

// State reads one service without changing it.
func (m *Manager) State(ctx context.Context, service string) (ServiceState, error) {
	r, err := m.run(ctx, snapshotScript, service)
	if err != nil {
		return ServiceState{}, err
	}
	s := m.services[service]
	res := r.result
	if len(res) != 9 {
		return ServiceState{}, fmt.Errorf("lease: %s: unexpected snapshot %v", service, res)
	}
	now := time.UnixMilli(toInt(res, 8)).UTC()
	st := ServiceState{Service: service, Capacity: s.Capacity, TTL: s.TTL.String(), Now: now,
		Holders: []HolderState{}, Waiters: []WaiterState{}, Stopping: toInt(res, 7) == 1}
	st.LastToken = uint64(toInt(res, 5))
	if v := toStr(res, 6); v != "" {
		ms, _ := strconv.ParseInt(v, 10, 64)
		t := time.UnixMilli(ms).UTC()
		st.IdleSince = &t
	}
	grants := pairs(res[1])
	holders, _ := res[0].([]any)
	for i := 0; i+1 < len(holders); i += 2 {
		h := toStr(holders, i)
		exp, _ := strconv.ParseFloat(toStr(holders, i+1), 64)
		hs := HolderState{Holder: h, Expires: time.UnixMilli(int64(exp)).UTC()}
		var tok, acq, waited int64
		_, _ = fmt.Sscanf(grants[h], "%d|%d|%d", &tok, &acq, &waited)
		hs.Token, hs.Acquired, hs.WaitedMS = uint64(tok), time.UnixMilli(acq).UTC(), waited
		hs.Expired = !hs.Expires.After(now)
		st.Holders = append(st.Holders, hs)
	}
	since := pairs(res[3])
	wexp := map[string]int64{}
	wx, _ := res[4].([]any)
	for i := 0; i+1 < len(wx); i += 2 {
		f, _ := strconv.ParseFloat(toStr(wx, i+1), 64)
		wexp[toStr(wx, i)] = int64(f)
	}
	queue, _ := res[2].([]any)
	for i := range queue {
		h := toStr(queue, i)
		ms, _ := strconv.ParseInt(since[h], 10, 64)
		st.Waiters = append(st.Waiters, WaiterState{Holder: h, Position: i + 1, Since: time.UnixMilli(ms).UTC(), Expires: time.UnixMilli(wexp[h]).UTC()})
	}
	return st, nil
}

func pairs(v any) map[string]string {
	xs, _ := v.([]any)
	out := make(map[string]string, len(xs)/2)
	for i := 0; i+1 < len(xs); i += 2 {
		out[toStr(xs, i)] = toStr(xs, i+1)
	}
	return out
}

// Event is one entry of the lease-events stream.
type Event struct {
	// ID is the stream entry id (pass it as after to read on).
	ID string `json:"id"`
	// Type is acquire, wait, renew, renew_rejected, release, cancel (a waiter
	// left the queue), expire, wait_expire (a waiter stopped asking) or stopping.
	Type    string    `json:"type"`
	Service string    `json:"service"`
	Holder  string    `json:"holder,omitempty"`
	Token   uint64    `json:"token,omitempty"`
	At      time.Time `json:"at"`
	// Fields holds the type's extra fields (waited_ms, held_ms, position,
	// expires_at, idle_ms).
	Fields map[string]string `json:"fields,omitempty"`
}

// Events returns up to count events after the entry id after ("" from the oldest
// kept), oldest first.
func (m *Manager) Events(ctx context.Context, after string, count int64) ([]Event, error) {
	start := "-"
	if after != "" {
		start = "(" + after
	}
	xs, err := m.rdb.XRangeN(ctx, m.EventsKey(), start, "+", count).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("lease: read events: %w", err)
	}
	return decodeEvents(xs), nil
}

// RecentEvents returns the last count events, oldest first.
func (m *Manager) RecentEvents(ctx context.Context, count int64) ([]Event, error) {
	xs, err := m.rdb.XRevRangeN(ctx, m.EventsKey(), "+", "-", count).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("lease: read events: %w", err)
	}
	for i, j := 0, len(xs)-1; i < j; i, j = i+1, j-1 {
		xs[i], xs[j] = xs[j], xs[i]
	}
	return decodeEvents(xs), nil
}

func decodeEvents(xs []redis.XMessage) []Event {
	out := make([]Event, 0, len(xs))
	for _, x := range xs {
		e := Event{ID: x.ID, Fields: map[string]string{}}
		for k, v := range x.Values {
			s, _ := v.(string)
			switch k {
			case "type":
				e.Type = s
			case "service":
				e.Service = s
			case "holder":
				e.Holder = s
			case "token":
				n, _ := strconv.ParseUint(s, 10, 64)
				e.Token = n
			case "at":
				n, _ := strconv.ParseInt(s, 10, 64)
				e.At = time.UnixMilli(n).UTC()
			default:
				e.Fields[k] = s
			}
		}
		if len(e.Fields) == 0 {
			e.Fields = nil
		}
		out = append(out, e)
	}
	return out
}

// Header is the HTTP header that carries a grant's fencing token to the service.
const Header = "X-Aetherium-Lease-Token"

// SecretHeader carries the grant's secret: what authorizes the request at the
// fencing proxy (the token only orders it). The proxy removes it before
// forwarding, so the service never sees it.
const SecretHeader = "X-Aetherium-Lease-Secret"

// SetHeader puts g's fencing token and secret on a request to the leased service.
func (g Grant) SetHeader(h http.Header) {
	h.Set(Header, strconv.FormatUint(g.Token, 10))
	if g.Secret != "" {
		h.Set(SecretHeader, string(g.Secret))
	}
}

type grantsKey struct{}

// WithGrants returns ctx carrying the run's grants (added to any already there),
// so lease-aware tools find theirs with GrantFrom without threading it by hand.
func WithGrants(ctx context.Context, gs ...Grant) context.Context {
	prev, _ := ctx.Value(grantsKey{}).(map[string]Grant)
	next := make(map[string]Grant, len(prev)+len(gs))
	for k, v := range prev {
		next[k] = v
	}
	for _, g := range gs {
		next[g.Service] = g
	}
	return context.WithValue(ctx, grantsKey{}, next)
}

// GrantFrom returns the grant for service carried by ctx.
func GrantFrom(ctx context.Context, service string) (Grant, bool) {
	gs, _ := ctx.Value(grantsKey{}).(map[string]Grant)
	g, ok := gs[service]
	return g, ok
}

// Record appends an event of the caller's own (the GPU controller's service_start,
// service_stop, service_start_failed) to the lease-events stream, so an operator
// reads one timeline. kv are field, value pairs.
func (m *Manager) Record(ctx context.Context, service, typ string, kv ...any) error {
	vals := append([]any{"type", typ, "service", service, "holder", "", "token", 0, "at", time.Now().UnixMilli()}, kv...)
	err := m.rdb.XAdd(ctx, &redis.XAddArgs{Stream: m.EventsKey(), MaxLen: m.cfg.EventsMaxLen, Approx: true, Values: vals}).Err()
	if err != nil {
		return fmt.Errorf("lease: record %s event: %w", typ, err)
	}
	return nil
}
