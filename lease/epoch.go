package lease

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// EpochShift places the epoch above the counter in a fencing token: token =
// epoch<<EpochShift + counter, so plain integer order is (epoch, counter) order
// as long as one epoch issues fewer than 2^32 grants per service.
const EpochShift = 32

// MaxEpoch bounds the epoch so every token stays below 10^14: the Lua scripts
// keep tokens as doubles and write them with %.14g, which is exact below that.
const MaxEpoch = 23000

// TokenEpoch and TokenCounter split a fencing token.
func TokenEpoch(token uint64) uint64   { return token >> EpochShift }
func TokenCounter(token uint64) uint64 { return token & (1<<EpochShift - 1) }

// EpochSource hands out epochs that survive anything Redis loses: strictly
// increasing across calls and processes (a PostgreSQL sequence: nextval).
type EpochSource func(ctx context.Context) (uint64, error)

// DefaultEpochCheck is how long a manager trusts the Redis dataset it last
// checked before it looks at the replication id again.
const DefaultEpochCheck = time.Second

// epochScript: KEYS 1 the epoch hash {epoch, replid}, KEYS 2.. every service's
// fence counter. ARGV 1 the replication id the caller sees, ARGV 2 a fresh epoch
// (0: only check). It answers {epoch, 1} when the hash belongs to this dataset,
// else {0, 0} for a check, and for a fresh epoch it installs max(stored, fresh)
// and lifts every counter below epoch<<32 to it, so the next INCR is in the new
// epoch. Concurrent installers cannot move the epoch back (max).
var epochScript = redis.NewScript(`
local replid, fresh = ARGV[1], tonumber(ARGV[2])
local stored = tonumber(redis.call('HGET', KEYS[1], 'epoch') or '0')
if redis.call('HGET', KEYS[1], 'replid') == replid and (stored > 0 or fresh == 0) then
  if stored > 0 then return {stored, 1} end
end
if fresh == 0 then return {0, 0} end
local e = math.max(stored, fresh)
redis.call('HSET', KEYS[1], 'epoch', e, 'replid', replid)
local floor = e * 4294967296
for i = 2, #KEYS do
  local c = tonumber(redis.call('GET', KEYS[i]) or '0')
  if c < floor then redis.call('SET', KEYS[i], string.format('%.0f', floor)) end
end
return {e, 1}
`)

type epochState struct {
	mu      sync.Mutex
	replid  string
	epoch   uint64
	checked time.Time
}

// replicationID is the id of the dataset's history: a failover to a replica, or
// a restart that lost data, gives the primary a new one (a restart that lost
// nothing may too; that costs one epoch, never safety).
//
// It is read from the node that owns the lease family's slot: in a Redis
// Cluster every master has its own history, and only the one holding the
// fence counters matters (a failover of another master changes nothing here).
func (m *Manager) replicationID(ctx context.Context) (string, error) {
	var node redis.UniversalClient = m.rdb
	if c, ok := m.rdb.(*redis.ClusterClient); ok {
		master, err := c.MasterForKey(ctx, m.epochKey())
		if err != nil {
			return "", fmt.Errorf("lease: find the master of %s: %w", m.epochKey(), err)
		}
		node = master
	}
	info, err := node.Info(ctx, "replication").Result()
	if err != nil {
		return "", fmt.Errorf("lease: read replication id: %w", err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "master_replid:"); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("lease: INFO replication has no master_replid")
}

// ensureEpoch makes sure the fence counters run in an epoch taken for the
// current Redis dataset before a grant is made. Without an EpochSource it does
// nothing (epoch 0: tokens are the bare counter, as before).
func (m *Manager) ensureEpoch(ctx context.Context) error {
	if m.opts.Epoch == nil {
		return nil
	}
	st := &m.epoch
	st.mu.Lock()
	defer st.mu.Unlock()
	if time.Since(st.checked) < m.opts.EpochCheck && st.epoch > 0 {
		return nil
	}
	replid, err := m.replicationID(ctx)
	if err != nil {
		return err
	}
	keys := []string{m.epochKey()}
	for _, n := range m.names {
		keys = append(keys, m.keys(n)[5])
	}
	res, err := epochScript.Run(ctx, m.rdb, keys, replid, 0).Int64Slice()
	if err != nil {
		return fmt.Errorf("lease: check epoch: %w", err)
	}
	if res[1] != 1 {
		fresh, err := m.opts.Epoch(ctx)
		if err != nil {
			return fmt.Errorf("lease: new fencing epoch: %w", err)
		}
		if fresh == 0 || fresh > MaxEpoch {
			return fmt.Errorf("lease: fencing epoch %d out of range 1..%d", fresh, MaxEpoch)
		}
		if res, err = epochScript.Run(ctx, m.rdb, keys, replid, fresh).Int64Slice(); err != nil {
			return fmt.Errorf("lease: install epoch: %w", err)
		}
		m.opts.Log.Info("lease fencing epoch installed", "epoch", res[0], "replid", replid, "previous", st.epoch)
	}
	st.replid, st.epoch, st.checked = replid, uint64(res[0]), time.Now()
	return nil
}

// Epoch is the fencing epoch this manager last saw installed (0 without an
// EpochSource or before the first grant).
func (m *Manager) Epoch() uint64 {
	m.epoch.mu.Lock()
	defer m.epoch.mu.Unlock()
	return m.epoch.epoch
}

// Querier is the part of a pgx pool (or connection) PostgresEpoch uses.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// PostgresEpoch takes epochs from the lease_fence_epoch sequence (migration
// 00014): durable, shared by every process, and never handing out a value twice.
func PostgresEpoch(db Querier) EpochSource {
	return func(ctx context.Context) (uint64, error) {
		var n int64
		if err := db.QueryRow(ctx, `SELECT nextval('lease_fence_epoch')`).Scan(&n); err != nil {
			return 0, fmt.Errorf("nextval lease_fence_epoch: %w", err)
		}
		return uint64(n), nil
	}
}
