package device

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aetherium-engine/aetherium/internal/tick"
)

// ErrBusy is returned when another call holds the headset. The error is a
// *BusyError naming the holder.
var ErrBusy = errors.New("headset busy")

// ErrLockLost is the cause of a call's context ending because its hold on the
// headset lapsed (Redis unreachable longer than the TTL, or the key was removed).
var ErrLockLost = errors.New("lost the hold on the headset")

// Holder is who holds the headset; stored as the lock's value.
type Holder struct {
	Owner string    `json:"owner"`
	RunID string    `json:"run_id,omitempty"`
	Agent string    `json:"agent,omitempty"`
	Tool  string    `json:"tool,omitempty"`
	Since time.Time `json:"since"`
	Token string    `json:"token"`
}

// BusyError is ErrBusy with the holder.
type BusyError struct{ Holder Holder }

func (e *BusyError) Error() string {
	h := e.Holder
	if h.Since.IsZero() {
		return fmt.Sprintf("%v: held by %s", ErrBusy, h.Owner)
	}
	return fmt.Sprintf("%v: held by %s since %s (%s ago); try again when it is done",
		ErrBusy, h.Owner, h.Since.UTC().Format(time.RFC3339), time.Since(h.Since).Round(time.Second))
}

// Is makes errors.Is(err, ErrBusy) true.
func (e *BusyError) Is(target error) bool { return target == ErrBusy }

// Lock is the one-holder-at-a-time lock on the headset: a Redis key with the
// holder as its value and a TTL, taken with SET NX and renewed or released only by
// the token that took it. Every command and script touches that one key, so the
// lock works unchanged on a Redis Cluster (and through Sentinel failover, with
// the caveat of asynchronous replication: a hold acknowledged by a primary that
// dies before replicating it is lost, and a second caller may take the headset).
type Lock struct {
	rdb redis.UniversalClient
	key string
	ttl time.Duration
}

// NewLock returns the lock at key with the given TTL.
func NewLock(rdb redis.UniversalClient, key string, ttl time.Duration) *Lock {
	return &Lock{rdb: rdb, key: key, ttl: ttl}
}

// The value is compared whole, so only the acquisition that wrote it can touch it.
var (
	renewScript   = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("PEXPIRE", KEYS[1], ARGV[2]) else return 0 end`)
	releaseScript = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) else return 0 end`)
)

// Lease is one acquisition of the lock.
type Lease struct {
	lock   *Lock
	Holder Holder
	value  string
}

// Acquire takes the headset for h, or fails at once with a *BusyError: a device
// call never queues behind another (the wearer is in the middle of something).
func (l *Lock) Acquire(ctx context.Context, h Holder) (*Lease, error) {
	tok := make([]byte, 12)
	if _, err := rand.Read(tok); err != nil {
		return nil, err
	}
	h.Token = hex.EncodeToString(tok)
	h.Since = time.Now().UTC().Truncate(time.Millisecond)
	raw, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	ok, err := l.rdb.SetNX(ctx, l.key, raw, l.ttl).Result()
	if err != nil {
		return nil, fmt.Errorf("headset lock: %w", err)
	}
	if ok {
		return &Lease{lock: l, Holder: h, value: string(raw)}, nil
	}
	cur, err := l.rdb.Get(ctx, l.key).Result()
	if errors.Is(err, redis.Nil) {
		// Released between SET and GET: say busy anyway rather than spin; the caller
		// (an agent) simply tries again.
		return nil, &BusyError{Holder: Holder{Owner: "another call (just released)"}}
	}
	if err != nil {
		return nil, fmt.Errorf("headset lock: %w", err)
	}
	var other Holder
	if json.Unmarshal([]byte(cur), &other) != nil || other.Owner == "" {
		other = Holder{Owner: "an unknown holder"}
	}
	return nil, &BusyError{Holder: other}
}

// Current returns the holder, if any.
func (l *Lock) Current(ctx context.Context) (Holder, bool, error) {
	cur, err := l.rdb.Get(ctx, l.key).Result()
	if errors.Is(err, redis.Nil) {
		return Holder{}, false, nil
	}
	if err != nil {
		return Holder{}, false, fmt.Errorf("headset lock: %w", err)
	}
	var h Holder
	if err := json.Unmarshal([]byte(cur), &h); err != nil {
		return Holder{}, true, fmt.Errorf("headset lock value: %w", err)
	}
	return h, true, nil
}

// Renew extends the lease by the TTL; ErrLockLost when it is no longer ours.
func (le *Lease) Renew(ctx context.Context) error {
	n, err := renewScript.Run(ctx, le.lock.rdb, []string{le.lock.key}, le.value, le.lock.ttl.Milliseconds()).Int()
	if err != nil {
		return fmt.Errorf("headset lock renew: %w", err)
	}
	if n == 0 {
		return ErrLockLost
	}
	return nil
}

// Release gives the headset back; releasing twice, or after expiry, is a no-op.
func (le *Lease) Release(ctx context.Context) error {
	if err := releaseScript.Run(ctx, le.lock.rdb, []string{le.lock.key}, le.value).Err(); err != nil {
		return fmt.Errorf("headset lock release: %w", err)
	}
	return nil
}

// Hold keeps the lease alive until stop is called, renewing every third of the TTL.
// The returned context ends with cause ErrLockLost when a renewal finds the lease
// gone, or when renewals keep failing until the TTL has passed: a call must not go
// on driving the headset once someone else may hold it. stop releases the lease.
func (le *Lease) Hold(ctx context.Context) (context.Context, func()) {
	hctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		lastOK := time.Now()
		_ = tick.Every(hctx, le.lock.ttl/3, func() error {
			rctx, rcancel := context.WithTimeout(hctx, le.lock.ttl/3)
			err := le.Renew(rctx)
			rcancel()
			switch {
			case err == nil:
				lastOK = time.Now()
			case errors.Is(err, ErrLockLost):
				cancel(err)
				return err
			case time.Since(lastOK) >= le.lock.ttl:
				lost := fmt.Errorf("%w: renewals failed for %s: %v", ErrLockLost, le.lock.ttl, err)
				cancel(lost)
				return lost
			}
			return nil
		})
	}()
	return hctx, func() {
		cancel(context.Canceled)
		<-done
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer rcancel()
		_ = le.Release(rctx)
	}
}
