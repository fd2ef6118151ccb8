// Package mailbox implements agent mailboxes on Redis streams.
//
// Each (run, agent) pair has one stream read through one consumer group. A message
// stays in the group's pending list from the moment a turn reads it until that turn
// is persisted and the reader acknowledges it, so a worker that dies mid-turn leaves
// the message pending and the agent's next turn is shown it again. Acknowledged
// entries are deleted, so a stream's length is its depth (unread + unacknowledged).
//
// Guarantees and their limits:
//   - At-least-once delivery to the agent's turns, at-most-once per context: a message
//     carries a sender-chosen id; Send drops a second message with the same id (a tool
//     call replayed after a crash), Read never returns two entries with one id, and
//     SkipSeen lets the reader drop ids its persisted context already holds (the gap
//     between "turn persisted" and "acknowledged").
//   - A message shown MaxDeliveries times without being acknowledged is moved to the
//     dead-letter stream and reported through Options.OnDeadLetter.
//   - Streams are bounded: approximately MaxLen entries on send, exactly MaxLen and
//     MaxAge in Trim. Trimming drops unread messages: it is a safety bound, not a
//     retention policy.
//   - Turns of one agent are serialized by the worker, so Read takes over every entry
//     pending on other consumers (Config.ClaimIdle, default 0). Two concurrent readers
//     of one agent's stream would each see the other's unacknowledged messages.
//
// # Keys and Redis Cluster
//
// The keys of one run share the hash tag {<run id>}, so every script and
// multi-key command on a run touches one Cluster slot, and runs spread over the
// masters:
//
//	<prefix>:{<run>}:q:<agent>  STREAM  the agent's mailbox (consumer group "agents")
//	<prefix>:{<run>}:ids        SET     message ids sent in the run (dedupe)
//	<prefix>:{<run>}:agents     SET     agents that have a stream (DeleteRun, Trim)
//	<prefix>:{<run>}:closed     STRING  set by DeleteRun: later sends are refused
//	<prefix>:runs               ZSET    run → last send (ms): the maintenance index
//	<prefix>:dead               STREAM  dead letters of every run
//
// The two fleet-wide keys are never in a script or transaction with a run's
// keys; each is touched by a command of its own, ordered so that a crash in
// between errs on the safe side:
//   - Send adds the run to the index before the send script runs, so the index
//     is a superset of the runs that have streams (maintenance never misses one;
//     an entry without streams, e.g. of a refused send, ages out in Trim).
//   - Dead-lettering copies the entry to the dead stream first and then, in one
//     script on the run's slot, acknowledges and deletes it only if it is still
//     pending (else the copy is removed again). A crash between the two leaves the
//     message dead and still pending; it is dead-lettered again later, so the dead
//     stream may hold a duplicate (same id) but never loses one, and a message is
//     never deliverable after it was removed as dead.
//   - DeleteRun deletes the run's keys in one command and removes the run from
//     the index after.
//
// Maintenance walks the index and each run's agents set, never KEYS or SCAN.
package mailbox

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aetherium-engine/aetherium/internal/defaults"
)

// Group is the consumer group every agent stream is read through.
const Group = "readers"

// ReclaimConsumer owns entries Reclaim took off consumers that went away.
const ReclaimConsumer = "reclaimed"

// Sentinel errors callers branch on.
var (
	// ErrRunClosed is a send to a run whose mailboxes were deleted (the run ended).
	ErrRunClosed = errors.New("mailbox: the run has ended")
	// ErrInvalid is a message missing a required field or over the size limit.
	ErrInvalid = errors.New("mailbox: invalid message")
)

// Config bounds the mailboxes. Zero values take the documented defaults.
type Config struct {
	// Prefix namespaces every key. Default "aeth:mbox".
	Prefix string `yaml:"prefix"`
	// MaxLen bounds one agent's stream: approximately on every send, exactly in Trim.
	// Default 10000.
	MaxLen int64 `yaml:"max_len"`
	// MaxAge is how long an unread message is kept (Trim drops older ones) and how
	// long a run that receives nothing keeps its mailboxes before Trim deletes them
	// as abandoned. Default 24h.
	MaxAge time.Duration `yaml:"max_age"`
	// MaxBody caps a message body in bytes. Default 64 KiB.
	MaxBody int `yaml:"max_body"`
	// MaxDeliveries is how many times a message may be shown without being
	// acknowledged; the next read dead-letters it instead. Default 5.
	MaxDeliveries int64 `yaml:"max_deliveries"`
	// ReadLimit caps the messages one Read returns; the rest wait for the next turn.
	// Default 100.
	ReadLimit int64 `yaml:"read_limit"`
	// ClaimIdle is how long an entry must have been pending on another consumer
	// before Read takes it over. Default 0: the worker runs one turn of an agent at
	// a time, so any pending entry belongs to a turn that died.
	ClaimIdle time.Duration `yaml:"claim_idle"`
	// ReclaimIdle is how long an entry may sit pending before Reclaim moves it off its
	// consumer (and how long a consumer with nothing pending may idle before Reclaim
	// deletes it). Default 10m.
	ReclaimIdle time.Duration `yaml:"reclaim_idle"`
	// DeadMaxLen bounds the dead-letter stream (approximately). Default 10000.
	DeadMaxLen int64 `yaml:"dead_max_len"`
	// ClosedTTL is how long a deleted run keeps refusing new messages, so a late
	// send cannot recreate a stream nobody will delete. Default MaxAge.
	ClosedTTL time.Duration `yaml:"closed_ttl"`
}

func (c *Config) defaults() {
	c.Prefix = cmp.Or(c.Prefix, "aeth:mbox")
	c.MaxLen = defaults.Positive(c.MaxLen, 10000)
	c.MaxAge = defaults.Positive(c.MaxAge, 24*time.Hour)
	c.MaxBody = defaults.Positive(c.MaxBody, 64<<10)
	c.MaxDeliveries = defaults.Positive(c.MaxDeliveries, 5)
	c.ReadLimit = defaults.Positive(c.ReadLimit, 100)
	if c.ClaimIdle < 0 {
		c.ClaimIdle = 0
	}
	c.ReclaimIdle = defaults.Positive(c.ReclaimIdle, 10*time.Minute)
	c.DeadMaxLen = defaults.Positive(c.DeadMaxLen, 10000)
	c.ClosedTTL = defaults.Positive(c.ClosedTTL, c.MaxAge)
}

// Options are the mailbox's optional collaborators.
type Options struct {
	// Metrics, when set, counts sends, deliveries and dead letters.
	Metrics *Metrics
	// OnDeadLetter is called (synchronously, after the move) for every message
	// moved to the dead-letter stream; the worker turns it into a run event.
	OnDeadLetter func(ctx context.Context, d DeadLetter)
	// Log receives maintenance warnings. Default slog.Default().
	Log *slog.Logger
	// Now is the clock for send times and trimming cut-offs. Default time.Now.
	Now func() time.Time
}

// Message is one message between two agents of a run.
type Message struct {
	// ID is the sender-chosen identity of the message: a second Send with the same
	// ID in the same run is dropped, and Read shows one ID at most once. Empty gets
	// a random ID.
	ID     string    `json:"id"`
	RunID  string    `json:"run_id"`
	From   string    `json:"from"`
	To     string    `json:"to"`
	Body   string    `json:"body"`
	SentAt time.Time `json:"sent_at"`
	// Provenance is what the sender had read when it wrote (the worker's flow
	// label, JSON), opaque here: the recipient's session inherits it.
	Provenance json.RawMessage `json:"provenance,omitempty"`
	// EntryID is the Redis stream entry id (set by Send and Read).
	EntryID string `json:"entry_id,omitempty"`
	// Deliveries is how often the message has been shown, this time included;
	// above 1 it is a redelivery after a turn that did not finish.
	Deliveries int64 `json:"deliveries,omitempty"`
}

// DeadLetter is a message given up on.
type DeadLetter struct {
	Message
	Reason string `json:"reason"`
	// DeadEntryID is the entry id in the dead-letter stream.
	DeadEntryID string `json:"dead_entry_id,omitempty"`
}

// Mailbox sends and reads agent messages.
type Mailbox struct {
	rdb  redis.UniversalClient
	cfg  Config
	opts Options
}

// New returns a Mailbox on rdb.
func New(rdb redis.UniversalClient, cfg Config, opts Options) *Mailbox {
	cfg.defaults()
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Mailbox{rdb: rdb, cfg: cfg, opts: opts}
}

// Config returns the effective configuration (defaults applied).
func (mb *Mailbox) Config() Config { return mb.cfg }

// The keys of one run share the {runID} hash tag.
func (mb *Mailbox) streamKey(runID, agent string) string {
	return mb.cfg.Prefix + ":{" + runID + "}:q:" + agent
}
func (mb *Mailbox) agentsKey(runID string) string { return mb.cfg.Prefix + ":{" + runID + "}:agents" }
func (mb *Mailbox) idsKey(runID string) string    { return mb.cfg.Prefix + ":{" + runID + "}:ids" }
func (mb *Mailbox) closedKey(runID string) string { return mb.cfg.Prefix + ":{" + runID + "}:closed" }
func (mb *Mailbox) runsKey() string               { return mb.cfg.Prefix + ":runs" }

// DeadKey is the dead-letter stream an operator can read (XRANGE).
func (mb *Mailbox) DeadKey() string { return mb.cfg.Prefix + ":dead" }

// sendScript appends a message unless the run is closed or the id was already
// sent, and registers the agent's stream in the run's agents set — in one step,
// so a duplicate can never slip between the check and the append. Its keys are
// the run's only (one Cluster slot); the run index is written by Send before.
var sendScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[4]) == 1 then return {-1, ''} end
if redis.call('SADD', KEYS[2], ARGV[1]) == 0 then return {0, ''} end
redis.call('PEXPIRE', KEYS[2], ARGV[7])
local eid = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[6], '*',
  'id', ARGV[1], 'from', ARGV[2], 'to', ARGV[3], 'body', ARGV[4], 'sent_at', ARGV[5], 'provenance', ARGV[11])
-- The group starts at 0 so the first message, appended just above, is delivered.
pcall(redis.call, 'XGROUP', 'CREATE', KEYS[1], ARGV[10], '0')
-- Expiry is a safety net for when no scheduler runs Trim; Trim and DeleteRun
-- normally remove the keys long before.
redis.call('PEXPIRE', KEYS[1], ARGV[7])
redis.call('SADD', KEYS[3], ARGV[9])
redis.call('PEXPIRE', KEYS[3], ARGV[7])
return {1, eid}
`)

// SendResult says what Send did.
type SendResult struct {
	ID      string
	EntryID string
	// Duplicate is true when a message with this ID was already sent in the run
	// (nothing was appended).
	Duplicate bool
}

// Send appends m to the mailbox of m.To in run m.RunID. A second send of the same
// ID is a no-op reported as Duplicate. It does not check that m.To is an agent of
// the run: that is the caller's roster check.
func (mb *Mailbox) Send(ctx context.Context, m Message) (SendResult, error) {
	switch {
	case strings.TrimSpace(m.RunID) == "":
		return SendResult{}, fmt.Errorf("%w: run id is empty", ErrInvalid)
	case strings.TrimSpace(m.To) == "":
		return SendResult{}, fmt.Errorf("%w: recipient is empty", ErrInvalid)
	case strings.TrimSpace(m.From) == "":
		return SendResult{}, fmt.Errorf("%w: sender is empty", ErrInvalid)
	case strings.TrimSpace(m.Body) == "":
		return SendResult{}, fmt.Errorf("%w: message body is empty", ErrInvalid)
	case len(m.Body) > mb.cfg.MaxBody:
		return SendResult{}, fmt.Errorf("%w: message body is %d bytes, over the %d byte limit", ErrInvalid, len(m.Body), mb.cfg.MaxBody)
	}
	if m.ID == "" {
		m.ID = randomID()
	}
	sent := mb.opts.Now()
	if !m.SentAt.IsZero() {
		sent = m.SentAt
	}
	ttl := mb.cfg.MaxAge + mb.cfg.ClosedTTL
	if err := mb.rdb.ZAdd(ctx, mb.runsKey(), redis.Z{Score: float64(sent.UnixMilli()), Member: m.RunID}).Err(); err != nil {
		return SendResult{}, fmt.Errorf("mailbox: index run %s: %w", m.RunID, err)
	}
	keys := []string{mb.streamKey(m.RunID, m.To), mb.idsKey(m.RunID), mb.agentsKey(m.RunID), mb.closedKey(m.RunID)}
	res, err := sendScript.Run(ctx, mb.rdb, keys, m.ID, m.From, m.To, m.Body, sent.UnixMilli(),
		mb.cfg.MaxLen, ttl.Milliseconds(), m.RunID, m.To, Group, string(m.Provenance)).Slice()
	if err != nil {
		return SendResult{}, fmt.Errorf("mailbox: send to %s: %w", m.To, err)
	}
	out := SendResult{ID: m.ID}
	switch code, _ := res[0].(int64); code {
	case -1:
		return SendResult{}, fmt.Errorf("%w (run %s)", ErrRunClosed, m.RunID)
	case 0:
		out.Duplicate = true
	default:
		out.EntryID, _ = res[1].(string)
		mb.opts.Metrics.sent()
	}
	return out, nil
}

// Ack acknowledges what one Read returned. It is never nil.
type Ack func(ctx context.Context) error

// ReadOption adjusts one Read.
type ReadOption func(*readOpts)

type readOpts struct {
	seen func(id string) bool
}

// SkipSeen drops messages whose ID seen reports true (typically: the ID is already
// in the agent's persisted context because the turn that showed it was persisted
// but died before acknowledging). Skipped messages are acknowledged with the rest.
func SkipSeen(seen func(id string) bool) ReadOption {
	return func(o *readOpts) { o.seen = seen }
}

// Read returns the unread messages of agent in run, oldest first: first the ones a
// previous turn was shown but never acknowledged (redeliveries), then new ones, at
// most ReadLimit. consumer names the reader (e.g. the worker process). Call the
// returned Ack only after the turn that showed the messages is persisted; if the
// turn dies instead, the next Read shows them again. A message already shown
// MaxDeliveries times is dead-lettered instead of returned.
func (mb *Mailbox) Read(ctx context.Context, runID, agent, consumer string, opts ...ReadOption) ([]Message, Ack, error) {
	var o readOpts
	for _, f := range opts {
		f(&o)
	}
	if consumer == "" {
		consumer = "default"
	}
	key := mb.streamKey(runID, agent)
	noop := func(context.Context) error { return nil }

	// Take over what earlier turns left pending. JUSTID leaves delivery counts alone:
	// the history read below is what counts as a delivery.
	for cursor, rounds := "0-0", 0; rounds < 100; rounds++ {
		_, next, err := mb.rdb.XAutoClaimJustID(ctx, &redis.XAutoClaimArgs{
			Stream: key, Group: Group, Consumer: consumer, MinIdle: mb.cfg.ClaimIdle, Start: cursor, Count: 100,
		}).Result()
		if isNoGroup(err) {
			return nil, noop, nil // nothing was ever sent to this agent
		}
		if err != nil {
			return nil, noop, fmt.Errorf("mailbox: claim pending of %s: %w", agent, err)
		}
		if next == "0-0" || next == "" {
			break
		}
		cursor = next
	}

	var (
		shown   []Message
		toAck   []string
		seenIDs = map[string]bool{}
	)
	take := func(x redis.XMessage, deliveries int64) {
		if x.Values == nil { // trimmed while pending: nothing left to show
			toAck = append(toAck, x.ID)
			return
		}
		m := decode(runID, x)
		m.Deliveries = deliveries
		if seenIDs[m.ID] || (o.seen != nil && o.seen(m.ID)) {
			toAck = append(toAck, x.ID)
			return
		}
		seenIDs[m.ID] = true
		shown = append(shown, m)
		toAck = append(toAck, x.ID)
	}

	// Redeliveries: this consumer's pending entries (including those just claimed).
	hist, err := mb.readGroup(ctx, key, consumer, "0", mb.cfg.ReadLimit)
	if err != nil {
		return nil, noop, fmt.Errorf("mailbox: read pending of %s: %w", agent, err)
	}
	if len(hist) > 0 {
		counts, err := mb.deliveryCounts(ctx, key, consumer, hist)
		if err != nil {
			return nil, noop, err
		}
		for _, x := range hist {
			n := counts[x.ID]
			if n > mb.cfg.MaxDeliveries && x.Values != nil {
				m := decode(runID, x)
				m.Deliveries = n - 1 // this read is not a delivery: it dead-letters
				if _, err := mb.deadLetter(ctx, key, m, fmt.Sprintf("shown %d times without being acknowledged", m.Deliveries)); err != nil {
					return nil, noop, err
				}
				continue
			}
			take(x, n)
		}
	}
	if room := mb.cfg.ReadLimit - int64(len(hist)); room > 0 {
		fresh, err := mb.readGroup(ctx, key, consumer, ">", room)
		if err != nil {
			return nil, noop, fmt.Errorf("mailbox: read new messages of %s: %w", agent, err)
		}
		for _, x := range fresh {
			take(x, 1)
		}
	}
	redelivered := 0
	for _, m := range shown {
		if m.Deliveries > 1 {
			redelivered++
		}
	}
	mb.opts.Metrics.delivered(len(shown), redelivered)
	if len(toAck) == 0 {
		return shown, noop, nil
	}
	ids := toAck
	return shown, func(ctx context.Context) error { return mb.ack(ctx, key, ids) }, nil
}

// AckIDs acknowledges entries by stream entry id (Message.EntryID), for a caller
// that persisted the ids and acknowledges in a later step than the Read.
func (mb *Mailbox) AckIDs(ctx context.Context, runID, agent string, entryIDs ...string) error {
	if len(entryIDs) == 0 {
		return nil
	}
	return mb.ack(ctx, mb.streamKey(runID, agent), entryIDs)
}

// ack acknowledges and deletes: a consumed message has no further use in the
// stream (the turn's context holds it), and deleting keeps XLEN equal to depth.
func (mb *Mailbox) ack(ctx context.Context, key string, ids []string) error {
	_, err := mb.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.XAck(ctx, key, Group, ids...)
		p.XDel(ctx, key, ids...)
		return nil
	})
	if err != nil {
		return fmt.Errorf("mailbox: acknowledge %d message(s): %w", len(ids), err)
	}
	mb.opts.Metrics.acked(len(ids))
	return nil
}

func (mb *Mailbox) readGroup(ctx context.Context, key, consumer, from string, count int64) ([]redis.XMessage, error) {
	res, err := mb.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: Group, Consumer: consumer, Streams: []string{key, from}, Count: count, Block: -1,
	}).Result()
	if errors.Is(err, redis.Nil) || isNoGroup(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if len(res) == 0 {
		return nil, nil
	}
	return res[0].Messages, nil
}

func (mb *Mailbox) deliveryCounts(ctx context.Context, key, consumer string, xs []redis.XMessage) (map[string]int64, error) {
	pend, err := mb.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: key, Group: Group, Start: xs[0].ID, End: xs[len(xs)-1].ID, Count: int64(len(xs)), Consumer: consumer,
	}).Result()
	if err != nil {
		return nil, fmt.Errorf("mailbox: delivery counts: %w", err)
	}
	out := make(map[string]int64, len(pend))
	for _, p := range pend {
		out[p.ID] = p.RetryCount
	}
	return out, nil
}

// deadLetterScript removes one entry the caller has already copied to the
// dead-letter stream: acknowledge and delete, only if it is still pending (an
// entry acknowledged meanwhile is left alone: 0). The dead stream is another
// slot than the run's, so the copy cannot be in this script (package doc).
var deadLetterScript = redis.NewScript(`
if #redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1) == 0 then return 0 end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
return 1
`)

func (mb *Mailbox) deadLetter(ctx context.Context, key string, m Message, reason string) (bool, error) {
	did, err := mb.rdb.XAdd(ctx, &redis.XAddArgs{Stream: mb.DeadKey(), MaxLen: mb.cfg.DeadMaxLen, Approx: true, Values: []any{
		"run_id", m.RunID, "id", m.ID, "from", m.From, "to", m.To, "body", m.Body, "provenance", string(m.Provenance),
		"sent_at", m.SentAt.UnixMilli(), "entry_id", m.EntryID, "deliveries", m.Deliveries, "reason", reason,
	}}).Result()
	if err != nil {
		return false, fmt.Errorf("mailbox: dead-letter %s: copy: %w", m.ID, err)
	}
	moved, err := deadLetterScript.Run(ctx, mb.rdb, []string{key}, Group, m.EntryID).Int()
	if err != nil {
		return false, fmt.Errorf("mailbox: dead-letter %s: remove from %s: %w", m.ID, key, err)
	}
	if moved == 0 {
		if err := mb.rdb.XDel(ctx, mb.DeadKey(), did).Err(); err != nil {
			return false, fmt.Errorf("mailbox: dead-letter %s: withdraw the copy of an acknowledged entry: %w", m.ID, err)
		}
		return false, nil
	}
	mb.opts.Metrics.deadLettered()
	d := DeadLetter{Message: m, Reason: reason, DeadEntryID: did}
	mb.opts.Log.Warn("mailbox message dead-lettered", "run_id", m.RunID, "to", m.To, "from", m.From, "id", m.ID, "deliveries", m.Deliveries)
	if mb.opts.OnDeadLetter != nil {
		mb.opts.OnDeadLetter(ctx, d)
	}
	return true, nil
}

// DeadLetters returns up to count dead letters, oldest first, after the dead-letter
// entry id after ("" from the start).
func (mb *Mailbox) DeadLetters(ctx context.Context, after string, count int64) ([]DeadLetter, error) {
	start := "-"
	if after != "" {
		start = "(" + after
	}
	xs, err := mb.rdb.XRangeN(ctx, mb.DeadKey(), start, "+", count).Result()
	if err != nil {
		return nil, fmt.Errorf("mailbox: read dead letters: %w", err)
	}
	out := make([]DeadLetter, 0, len(xs))
	for _, x := range xs {
		runID := str(x.Values["run_id"])
		m := decode(runID, x)
		m.EntryID = str(x.Values["entry_id"])
		m.Deliveries, _ = strconv.ParseInt(str(x.Values["deliveries"]), 10, 64)
		out = append(out, DeadLetter{Message: m, Reason: str(x.Values["reason"]), DeadEntryID: x.ID})
	}
	return out, nil
}

// Depth is the number of messages in agent's mailbox that are unread or read but
// not yet acknowledged.
func (mb *Mailbox) Depth(ctx context.Context, runID, agent string) (int64, error) {
	n, err := mb.rdb.XLen(ctx, mb.streamKey(runID, agent)).Result()
	if err != nil {
		return 0, fmt.Errorf("mailbox: depth of %s: %w", agent, err)
	}
	return n, nil
}

// DeleteRun removes every mailbox of a finished run and refuses later sends to it
// for ClosedTTL. Idempotent.
func (mb *Mailbox) DeleteRun(ctx context.Context, runID string) error {
	agents, err := mb.rdb.SMembers(ctx, mb.agentsKey(runID)).Result()
	if err != nil {
		return fmt.Errorf("mailbox: list mailboxes of run %s: %w", runID, err)
	}
	// Close first: a send racing with the deletion is refused rather than
	// recreating a stream after it was deleted.
	if err := mb.rdb.Set(ctx, mb.closedKey(runID), "1", mb.cfg.ClosedTTL).Err(); err != nil {
		return fmt.Errorf("mailbox: close run %s: %w", runID, err)
	}
	keys := []string{mb.agentsKey(runID), mb.idsKey(runID)}
	for _, a := range agents {
		keys = append(keys, mb.streamKey(runID, a))
	}
	// The run's keys share its slot; the index is another slot and goes after,
	// so a crash in between leaves an index entry Trim prunes, never a stream
	// that maintenance cannot find.
	if err := mb.rdb.Del(ctx, keys...).Err(); err != nil {
		return fmt.Errorf("mailbox: delete mailboxes of run %s: %w", runID, err)
	}
	if err := mb.rdb.ZRem(ctx, mb.runsKey(), runID).Err(); err != nil {
		return fmt.Errorf("mailbox: unindex run %s: %w", runID, err)
	}
	return nil
}

func decode(runID string, x redis.XMessage) Message {
	m := Message{
		ID: str(x.Values["id"]), RunID: runID, From: str(x.Values["from"]), To: str(x.Values["to"]),
		Body: str(x.Values["body"]), EntryID: x.ID,
	}
	if ms, err := strconv.ParseInt(str(x.Values["sent_at"]), 10, 64); err == nil {
		m.SentAt = time.UnixMilli(ms).UTC()
	}
	if p := str(x.Values["provenance"]); p != "" {
		m.Provenance = json.RawMessage(p)
	}
	return m
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func isNoGroup(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOGROUP")
}

func randomID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Format renders messages for an agent's context. Each message is one line holding
// one JSON object (id, from, at, body): a body is a JSON string, so its newlines are
// escaped and no line of a body can pose as another message or another sender. The
// sender and time come from the stream entry, never from the body.
func Format(msgs []Message) string {
	if len(msgs) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "You have %d new message(s) from your teammates, one JSON object per line "+
		"(\"from\" and \"at\" are set by the mailbox; \"body\" is the sender's text):\n", len(msgs))
	for _, m := range msgs {
		line, _ := json.Marshal(formatted{ID: m.ID, From: m.From, At: m.SentAt.UTC().Format(time.RFC3339), Body: m.Body})
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.String()
}

// formatted is a message as the model sees it; the field order is fixed so that
// Marker finds a message by its id.
type formatted struct {
	ID   string `json:"id"`
	From string `json:"from"`
	At   string `json:"at"`
	Body string `json:"body"`
}

// Marker is the text that starts message id's line in Format's output. A body cannot
// contain it: inside a JSON string every quote is escaped.
func Marker(id string) string {
	q, _ := json.Marshal(id)
	return `{"id":` + string(q) + `,"from":`
}
