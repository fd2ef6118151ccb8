package mailbox

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aetherium-engine/aetherium/internal/tick"
)

// ReclaimStats reports one Reclaim pass.
type ReclaimStats struct {
	Streams          int   `json:"streams"`
	Reclaimed        int   `json:"reclaimed"`
	DeadLettered     int   `json:"dead_lettered"`
	ConsumersDeleted int   `json:"consumers_deleted"`
	Depth            int64 `json:"depth"`
}

// Reclaim is the periodic pass over every live mailbox (the scheduler calls it):
// entries pending for ReclaimIdle on a consumer are moved to ReclaimConsumer (the
// worker that read them is gone; the agent's next Read takes them over), entries
// already shown MaxDeliveries times are dead-lettered, consumers idle for
// ReclaimIdle with nothing pending are deleted, and the depth gauge is refreshed.
// Safe to run from several processes at once.
func (mb *Mailbox) Reclaim(ctx context.Context) (ReclaimStats, error) {
	var st ReclaimStats
	err := mb.eachStream(ctx, func(runID, agent, key string) error {
		st.Streams++
		// Dead-letter before claiming: a claim resets an entry's idle time.
		// Only entries idle for ReclaimIdle: one shown for the last time in a turn
		// that is still running is that turn's to acknowledge.
		pend, err := mb.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: key, Group: Group, Idle: mb.cfg.ReclaimIdle, Start: "-", End: "+", Count: 1000}).Result()
		if isNoGroup(err) {
			return nil
		}
		if err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("pending of %s: %w", key, err)
		}
		for _, p := range pend {
			if p.RetryCount < mb.cfg.MaxDeliveries {
				continue
			}
			xs, err := mb.rdb.XRange(ctx, key, p.ID, p.ID).Result()
			if err != nil {
				return fmt.Errorf("read %s %s: %w", key, p.ID, err)
			}
			if len(xs) == 0 { // trimmed: only the pending record is left
				if err := mb.ack(ctx, key, []string{p.ID}); err != nil {
					return err
				}
				continue
			}
			m := decode(runID, xs[0])
			m.Deliveries = p.RetryCount
			moved, err := mb.deadLetter(ctx, key, m, fmt.Sprintf("shown %d times without being acknowledged", p.RetryCount))
			if err != nil {
				return err
			}
			if moved {
				st.DeadLettered++
			}
		}
		for cursor, rounds := "0-0", 0; rounds < 100; rounds++ {
			ids, next, err := mb.rdb.XAutoClaimJustID(ctx, &redis.XAutoClaimArgs{
				Stream: key, Group: Group, Consumer: ReclaimConsumer, MinIdle: mb.cfg.ReclaimIdle, Start: cursor, Count: 100,
			}).Result()
			if err != nil {
				return fmt.Errorf("reclaim %s: %w", key, err)
			}
			st.Reclaimed += len(ids)
			if next == "0-0" || next == "" {
				break
			}
			cursor = next
		}
		consumers, err := mb.rdb.XInfoConsumers(ctx, key, Group).Result()
		if err != nil && !isNoGroup(err) {
			return fmt.Errorf("consumers of %s: %w", key, err)
		}
		for _, c := range consumers {
			if c.Pending > 0 || c.Idle < mb.cfg.ReclaimIdle {
				continue
			}
			n, err := delConsumerScript.Run(ctx, mb.rdb, []string{key}, Group, c.Name).Int()
			if err != nil {
				return fmt.Errorf("delete consumer %s of %s: %w", c.Name, key, err)
			}
			if n > 0 {
				st.ConsumersDeleted++
			}
		}
		n, err := mb.rdb.XLen(ctx, key).Result()
		if err != nil {
			return fmt.Errorf("length of %s: %w", key, err)
		}
		st.Depth += n
		return nil
	})
	mb.opts.Metrics.setDepth(st.Depth)
	return st, err
}

// delConsumerScript deletes a consumer only while it has nothing pending, in one
// step: XGROUP DELCONSUMER drops the consumer's pending entries, and an entry
// dropped that way is never delivered again.
var delConsumerScript = redis.NewScript(`
if #redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2]) > 0 then return 0 end
redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
return 1
`)

// TrimStats reports one Trim pass.
type TrimStats struct {
	Streams     int   `json:"streams"`
	Trimmed     int64 `json:"trimmed"`
	RunsDeleted int   `json:"runs_deleted"`
}

// Trim bounds every mailbox (the scheduler calls it): exactly MaxLen entries, none
// older than MaxAge; a run that received nothing for MaxAge is treated as abandoned
// and its mailboxes are deleted. The dead-letter stream is aged out by the
// retention sweeper (TrimDead), on its own retention.
func (mb *Mailbox) Trim(ctx context.Context) (TrimStats, error) {
	var st TrimStats
	now := mb.opts.Now()
	cutoff := now.Add(-mb.cfg.MaxAge).UnixMilli()
	minID := strconv.FormatInt(cutoff, 10) + "-0"
	stale, err := mb.rdb.ZRangeByScore(ctx, mb.runsKey(), &redis.ZRangeBy{Min: "-inf", Max: "(" + strconv.FormatInt(cutoff, 10)}).Result()
	if err != nil {
		return st, fmt.Errorf("mailbox: list abandoned runs: %w", err)
	}
	for _, runID := range stale {
		if err := mb.DeleteRun(ctx, runID); err != nil {
			return st, err
		}
		st.RunsDeleted++
	}
	err = mb.eachStream(ctx, func(_, _, key string) error {
		st.Streams++
		a, err := mb.rdb.XTrimMaxLen(ctx, key, mb.cfg.MaxLen).Result()
		if err != nil {
			return fmt.Errorf("trim %s by length: %w", key, err)
		}
		b, err := mb.rdb.XTrimMinID(ctx, key, minID).Result()
		if err != nil {
			return fmt.Errorf("trim %s by age: %w", key, err)
		}
		st.Trimmed += a + b
		return nil
	})
	return st, err
}

// TrimDead deletes the dead letters moved to the dead-letter stream before
// before (retention.dead_letters: the retention sweeper calls it; DeadMaxLen
// bounds the stream's length whatever their age). It returns how many.
func (mb *Mailbox) TrimDead(ctx context.Context, before time.Time) (int64, error) {
	minID := strconv.FormatInt(before.UnixMilli(), 10) + "-0"
	n, err := mb.rdb.XTrimMinID(ctx, mb.DeadKey(), minID).Result()
	if err != nil {
		return 0, fmt.Errorf("mailbox: trim dead letters: %w", err)
	}
	return n, nil
}

// eachStream calls fn for every agent stream of every live run.
func (mb *Mailbox) eachStream(ctx context.Context, fn func(runID, agent, key string) error) error {
	runs, err := mb.rdb.ZRange(ctx, mb.runsKey(), 0, -1).Result()
	if err != nil {
		return fmt.Errorf("mailbox: list runs: %w", err)
	}
	var errs []error
	for _, runID := range runs {
		agents, err := mb.rdb.SMembers(ctx, mb.agentsKey(runID)).Result()
		if err != nil {
			errs = append(errs, fmt.Errorf("mailbox: agents of run %s: %w", runID, err))
			continue
		}
		for _, a := range agents {
			if err := fn(runID, a, mb.streamKey(runID, a)); err != nil {
				errs = append(errs, fmt.Errorf("mailbox: %w", err))
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	return errors.Join(errs...)
}

// RunMaintenance calls Reclaim and Trim every interval until ctx ends (dev mode and
// tests; in a fleet the scheduler calls them as periodic tasks).
func (mb *Mailbox) RunMaintenance(ctx context.Context, every time.Duration) {
	_ = tick.Every(ctx, every, func() error {
		if _, err := mb.Reclaim(ctx); err != nil && ctx.Err() == nil {
			mb.opts.Log.Warn("mailbox reclaim", "err", err)
		}
		if _, err := mb.Trim(ctx); err != nil && ctx.Err() == nil {
			mb.opts.Log.Warn("mailbox trim", "err", err)
		}
		return nil
	})
}
