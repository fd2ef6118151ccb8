package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aetherium-engine/aetherium/llm"
)

// Session is one agent's persisted conversation.
//
// Its history is append-only in session_messages (seq 0, 1, ...); Messages is
// the model's context: the head rows (Messages[:Head]), the summary messages
// standing for the compacted rows (Messages[Head:Head+Summary]), then every row
// from seq From on. Before a first compaction Head, Summary and From are 0 and
// Messages is the whole history. Saved is how many of Messages are stored: a
// save writes Messages[Saved:] as new rows and nothing else of the history.
type Session struct {
	ID           string
	RunID        string
	Agent        string
	Role         string
	DelegationID string
	Messages     []llm.Message
	Status       string // active | waiting | done
	Steps        int
	Failures     int
	Version      int64
	Head         int
	Summary      int
	From         int
	Saved        int
	// Notes are the session's working memory (ADR 5): overwritten by the
	// agent, kept across compactions.
	Notes string
	// Compactions is how many times the session was compacted.
	Compactions int
}

// SeqOf is the row of Messages[i], for i past the head and the summary.
func (s *Session) SeqOf(i int) int {
	return s.From + i - s.Head - s.Summary
}

// Rewrite marks Messages[i:] to be written again with the next save (a
// change before the first model call, such as recalled memory put ahead of
// the task): rows are written over, never removed.
func (s *Session) Rewrite(i int) {
	if i >= s.Head+s.Summary && i < s.Saved {
		s.Saved = i
	}
}

// Compact replaces Messages[s.Head+s.Summary... cut) — and, on a first
// compaction, everything past head — by summary: the rows stay stored, the
// context starts over from row SeqOf(cut). Every message must be saved.
func (s *Session) Compact(head, cut int, summary []llm.Message) error {
	if s.Saved != len(s.Messages) {
		return fmt.Errorf("compact session %s: %d messages unsaved", s.ID, len(s.Messages)-s.Saved)
	}
	if s.Head+s.Summary > 0 {
		head = s.Head // the head is pinned once
	}
	if cut < s.Head+s.Summary || cut > len(s.Messages) || head > cut {
		return fmt.Errorf("compact session %s: cut %d outside the history (head %d, summary %d, %d messages)", s.ID, cut, s.Head, s.Summary, len(s.Messages))
	}
	from := s.SeqOf(cut)
	msgs := make([]llm.Message, 0, head+len(summary)+len(s.Messages)-cut)
	msgs = append(append(append(msgs, s.Messages[:head]...), summary...), s.Messages[cut:]...)
	s.Messages, s.Head, s.Summary, s.From, s.Saved = msgs, head, len(summary), from, len(msgs)
	return nil
}

// AcquireSession takes the step lease of session initial.ID for token when it is
// free or expired, creating the session from initial on its first delivery — one
// statement either way. ok is false when another live delivery holds it.
func (s *Store) AcquireSession(ctx context.Context, initial Session, token string, lease time.Duration) (Session, bool, error) {
	if initial.Messages == nil {
		initial.Messages = []llm.Message{}
	}
	got, err := s.AcquireStep(ctx, Acquire{Initial: initial, Token: token, Lease: lease})
	return got.Session, got.OK, err
}

// ReleaseSession gives the lease up so the next delivery need not wait for expiry.
// ErrLeaseLost (and nothing changed) when another delivery holds the session now:
// a late release — from a worker cut off past its lease — never frees the lease
// of the step that took over.
func (s *Store) ReleaseSession(ctx context.Context, id, token string) error {
	tag, err := s.db.Exec(ctx, `UPDATE sessions SET lease_until = 'epoch' WHERE id = $1 AND lease_token = $2`, id, token)
	if err != nil {
		return fmt.Errorf("release session %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("release session %s: %w", id, ErrLeaseLost)
	}
	return nil
}

// SessionStatus reads a session's status without taking the lease.
func (s *Store) SessionStatus(ctx context.Context, id string) (string, error) {
	var st string
	err := s.db.QueryRow(ctx, `SELECT status FROM sessions WHERE id = $1`, id).Scan(&st)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrNotFound
	}
	return st, err
}

// SessionMessages reads a session's saved context without taking the lease:
// the flow rules derive what a delegation's parent or child has read from it
// (a summary carries the provenance of what it stands for, so the context
// bears the label of the whole history, at a bounded cost).
func (s *Store) SessionMessages(ctx context.Context, id string) ([]llm.Message, error) {
	// One round trip and one (implicit) transaction, not two (issue 45).
	b := &pgx.Batch{}
	queueContext(b, id)
	br := s.db.SendBatch(ctx, b)
	defer br.Close()
	msgs, err := readContext(br, id)
	if err == nil {
		err = br.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("session %s messages: %w", id, err)
	}
	if msgs == nil {
		return nil, ErrNotFound
	}
	return msgs, nil
}

// queueContext queues the two statements of a session's saved context: its
// shape, then the rows it names (the second joins the session again, so it
// needs nothing from the first).
func queueContext(b *pgx.Batch, id string) {
	b.Queue(`SELECT head, context_from, summary FROM sessions WHERE id = $1`, id)
	b.Queue(`SELECT m.seq, m.message FROM sessions AS s JOIN session_messages AS m ON m.session_id = s.id
		AND (m.seq < s.head OR m.seq >= s.context_from) WHERE s.id = $1 ORDER BY m.seq`, id)
}

// readContext reads what queueContext queued: the context, or nil (and no
// error) when the session does not exist.
func readContext(br pgx.BatchResults, id string) ([]llm.Message, error) {
	var summary []llm.Message
	var head, from int
	err := br.QueryRow().Scan(&head, &from, &summary)
	if errors.Is(err, pgx.ErrNoRows) {
		rows, err := br.Query() // the rows' statement still answers
		if err != nil {
			return nil, err
		}
		rows.Close()
		return nil, rows.Err()
	}
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	sess := Session{ID: id, Head: head, From: from}
	if err := sess.assemble(rows, summary); err != nil {
		return nil, err
	}
	if sess.Messages == nil {
		sess.Messages = []llm.Message{}
	}
	return sess.Messages, nil
}

// assemble builds the context from the rows of its head and tail (in seq
// order) and the summary.
func (s *Session) assemble(rows pgx.Rows, summary []llm.Message) error {
	type row struct {
		Seq int
		Msg llm.Message
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		err := r.Scan(&x.Seq, &x.Msg)
		return x, err
	})
	if err != nil {
		return err
	}
	head := 0
	for head < len(got) && got[head].Seq < s.Head {
		head++
	}
	if head != s.Head {
		return fmt.Errorf("history has %d head rows, the session %d", head, s.Head)
	}
	msgs := make([]llm.Message, 0, len(got)+len(summary))
	for _, r := range got[:head] {
		msgs = append(msgs, r.Msg)
	}
	msgs = append(msgs, summary...)
	for i, r := range got[head:] {
		if r.Seq != s.From+i {
			return fmt.Errorf("history row %d missing (found %d)", s.From+i, r.Seq)
		}
		msgs = append(msgs, r.Msg)
	}
	s.Messages, s.Summary, s.Saved = msgs, len(summary), len(msgs)
	return nil
}

// HistoryMessage is one stored message of a session's full history.
type HistoryMessage struct {
	Seq     int         `json:"seq"`
	Message llm.Message `json:"message"`
	At      time.Time   `json:"at"`
	// Compacted: a summary stands for it in the model's context now.
	Compacted bool `json:"compacted,omitempty"`
}

// Compaction is one compaction of a session: rows FromSeq..ThroughSeq-1 were
// summarized (with the earlier summary, if any) into Summary.
type Compaction struct {
	N            int           `json:"n"`
	Head         int           `json:"head"`
	FromSeq      int           `json:"from_seq"`
	ThroughSeq   int           `json:"through_seq"`
	TokensBefore int           `json:"tokens_before"`
	TokensAfter  int           `json:"tokens_after"`
	Summary      []llm.Message `json:"summary"`
	At           time.Time     `json:"at"`
}

// SessionSummary is one session of a run as a listing shows it.
type SessionSummary struct {
	ID           string    `json:"id"`
	Agent        string    `json:"agent"`
	Role         string    `json:"role"`
	DelegationID string    `json:"delegation_id,omitempty"`
	Status       string    `json:"status"`
	Steps        int       `json:"steps"`
	Messages     int       `json:"messages"`
	Compactions  int       `json:"compactions"`
	UpdatedAt    time.Time `json:"updated_at"`
}

// RunSessions lists a run's sessions, oldest first.
func (s *Store) RunSessions(ctx context.Context, runID string) ([]SessionSummary, error) {
	rows, err := s.db.Query(ctx, `SELECT s.id, s.agent, s.role, coalesce(s.delegation_id, ''), s.status, s.steps,
			(SELECT count(*) FROM session_messages AS m WHERE m.session_id = s.id)::int,
			(SELECT count(*) FROM session_compactions AS c WHERE c.session_id = s.id)::int, s.updated_at
		FROM sessions AS s WHERE s.run_id = $1 ORDER BY s.created_at, s.id`, runID)
	if err != nil {
		return nil, fmt.Errorf("run %s sessions: %w", runID, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (SessionSummary, error) {
		var x SessionSummary
		err := r.Scan(&x.ID, &x.Agent, &x.Role, &x.DelegationID, &x.Status, &x.Steps, &x.Messages, &x.Compactions, &x.UpdatedAt)
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("run %s sessions: %w", runID, err)
	}
	return out, nil
}

// SessionRun is the run a session belongs to (ErrNotFound when there is no
// such session): the API checks a session against the run it was asked by.
func (s *Store) SessionRun(ctx context.Context, id string) (string, error) {
	var run string
	err := s.db.QueryRow(ctx, `SELECT run_id::text FROM sessions WHERE id = $1`, id).Scan(&run)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrNotFound
	}
	if err != nil {
		return "", fmt.Errorf("session %s: %w", id, err)
	}
	return run, nil
}

// SessionHistory is a session's full stored history, page by page (seq from
// after, at most limit rows), with its compactions: what the API and the
// Studio show, where the model's context was cut.
func (s *Store) SessionHistory(ctx context.Context, id string, after, limit int) ([]HistoryMessage, []Compaction, error) {
	var head, from int
	err := s.db.QueryRow(ctx, `SELECT head, context_from FROM sessions WHERE id = $1`, id).Scan(&head, &from)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, ErrNotFound
	}
	if err != nil {
		return nil, nil, fmt.Errorf("session %s history: %w", id, err)
	}
	rows, err := s.db.Query(ctx, `SELECT seq, message, created_at FROM session_messages WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`, id, after, limit)
	if err != nil {
		return nil, nil, fmt.Errorf("session %s history: %w", id, err)
	}
	msgs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (HistoryMessage, error) {
		var m HistoryMessage
		err := r.Scan(&m.Seq, &m.Message, &m.At)
		m.Compacted = m.Seq >= head && m.Seq < from
		return m, err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("session %s history: %w", id, err)
	}
	rows, err = s.db.Query(ctx, `SELECT n, head, from_seq, through_seq, tokens_before, tokens_after, summary, created_at
		FROM session_compactions WHERE session_id = $1 ORDER BY n`, id)
	if err != nil {
		return nil, nil, fmt.Errorf("session %s compactions: %w", id, err)
	}
	comps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Compaction, error) {
		var c Compaction
		err := r.Scan(&c.N, &c.Head, &c.FromSeq, &c.ThroughSeq, &c.TokensBefore, &c.TokensAfter, &c.Summary, &c.At)
		return c, err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("session %s compactions: %w", id, err)
	}
	return msgs, comps, nil
}
