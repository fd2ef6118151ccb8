package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/tracing"
)

// Acquire is what a step asks of the database as it starts, in one round trip and
// one transaction (issue 21: a delegation round trip was 21 transactions, most of
// them reads and bookkeeping of this kind).
type Acquire struct {
	// Initial is the session as its first delivery creates it. With Messages nil
	// only an existing session is leased (a resumed supervisor, whose initial
	// session needs the run read first): Acquired.Exists tells whether it was there.
	Initial Session
	Token   string
	Lease   time.Duration
	// LoadRun reads the session's run (Acquired.Run).
	LoadRun bool
	// StartDelegation moves that delegation pending → running (counting the attempt).
	StartDelegation string
	// StartRun moves the run queued → running: a supervisor's first step starts
	// its run with the lease it takes, not in transactions of its own.
	StartRun bool
	// Events are stored once per key, only while the run is not terminal (a turn
	// that starts after its run ended announces nothing).
	Events []NewEvent
	// Memory, when set (its Project and Text), reads the project's memory
	// generation and the text's lexemes with the lease (Acquired.Memory): a
	// new session's recall (MemoryIndex.RecallMemoryAt) then needs no round
	// trip of its own.
	Memory *MemoryAt
	// Todos reads the session's agent's todo list for its run (Acquired.Todos):
	// a session whose tools hold it reads it here, not in a query of its own.
	Todos bool
}

// Acquired is what Acquire found.
type Acquired struct {
	Session Session
	// OK is false when another live delivery holds the lease (or, for an
	// existing-only Acquire, when there is no session yet: see Exists).
	OK bool
	// Exists is false when an existing-only Acquire found no session.
	Exists bool
	Run    Run
	// Delegations are those the session made, by tool call, in id order: a
	// resumed step answers its delegate calls from them without one read per call.
	Delegations map[string][]Delegation
	// Events are those stored now, in order.
	Events []Event
	// Memory is Acquire.Memory as read in this transaction; nil when not asked.
	Memory *MemoryAt
	// Todos is the agent's todo list when Acquire.Todos asked for it (empty
	// when it has none), read only for the lease's holder.
	Todos []TodoItem
}

const (
	acquireInsert = `INSERT INTO sessions AS s (id, run_id, agent, role, delegation_id, lease_token, lease_until)
		VALUES ($1, $2, $3, $4, $5, $6, now() + $7::interval)
		ON CONFLICT (id) DO UPDATE SET lease_token = excluded.lease_token, lease_until = excluded.lease_until
			WHERE s.lease_until < now() OR s.lease_token = excluded.lease_token
		RETURNING s.id, s.run_id::text, s.agent, s.role, s.delegation_id, s.head, s.context_from, s.summary, s.notes,
			(SELECT count(*) FROM session_compactions AS c WHERE c.session_id = s.id)::int,
			s.status, s.steps, s.failures, s.version, s.format, true`
	// A new session's first rows; a session that exists has them already.
	acquireRows = `INSERT INTO session_messages (session_id, seq, message)
		SELECT $1, u.n - 1, u.m::jsonb FROM unnest($2::text[]) WITH ORDINALITY AS u(m, n)
		WHERE EXISTS (SELECT 1 FROM sessions WHERE id = $1 AND lease_token = $3)
			AND NOT EXISTS (SELECT 1 FROM session_messages WHERE session_id = $1)
		ON CONFLICT (session_id, seq) DO NOTHING`
	// The context's rows (head and tail), only for the lease's holder.
	acquireLoad = `SELECT m.seq, m.message FROM sessions AS s
		JOIN session_messages AS m ON m.session_id = s.id AND (m.seq < s.head OR m.seq >= s.context_from)
		WHERE s.id = $1 AND s.lease_token = $2 ORDER BY m.seq`
	// The existing-only form reports a busy session (a row, not leased) apart from
	// a missing one (no row).
	acquireExisting = `WITH cur AS (SELECT id FROM sessions WHERE id = $1),
		up AS (UPDATE sessions AS s SET lease_token = $2, lease_until = now() + $3::interval
			WHERE s.id = $1 AND (s.lease_until < now() OR s.lease_token = $2)
			RETURNING s.id, s.run_id::text, s.agent, s.role, s.delegation_id, s.head, s.context_from, s.summary, s.notes,
				(SELECT count(*) FROM session_compactions AS c WHERE c.session_id = s.id)::int AS compactions,
				s.status, s.steps, s.failures, s.version, s.format)
		SELECT up.id, COALESCE(up.run_id, ''), COALESCE(up.agent, ''), COALESCE(up.role, ''), up.delegation_id,
			COALESCE(up.head, 0), COALESCE(up.context_from, 0), COALESCE(up.summary, '[]'::jsonb), COALESCE(up.notes, ''),
			COALESCE(up.compactions, 0), COALESCE(up.status, ''), COALESCE(up.steps, 0), COALESCE(up.failures, 0),
			COALESCE(up.version, 0), COALESCE(up.format, 1), up.id IS NOT NULL
		FROM cur LEFT JOIN up ON true`
	acquireDelegations = `SELECT ` + delCols + ` FROM delegations WHERE parent_session = $1 ORDER BY id`
	// The agent's list, only for the lease's holder (the session row names its
	// run and agent, which an existing-only Acquire does not know beforehand).
	acquireTodos = `SELECT t.items FROM sessions AS s JOIN todos AS t ON t.run_id = s.run_id AND t.agent = s.agent
		WHERE s.id = $1 AND s.lease_token = $2`
	acquireStart = `UPDATE delegations SET status = 'running', attempts = attempts + 1
		WHERE id = $1 AND status IN ('pending','running')`
	acquireEvents = `INSERT INTO run_events (run_id, key, type, agent, data, trace_id)
		SELECT $1::uuid, u.key, u.type, u.agent, u.data::jsonb, $6::text
		FROM unnest($2::text[], $3::text[], $4::text[], $5::text[]) WITH ORDINALITY AS u(key, type, agent, data, n)
		WHERE EXISTS (SELECT 1 FROM runs WHERE id = $1::uuid AND status NOT IN ('completed', 'failed', 'cancelled'))
		ORDER BY u.n
		ON CONFLICT (run_id, key) DO NOTHING RETURNING id, type`
)

// AcquireStep takes a session's step lease for a.Token, with what the step needs
// to start (see Acquire), in one transaction.
func (s *Store) AcquireStep(ctx context.Context, a Acquire) (Acquired, error) {
	var out Acquired
	id := a.Initial.ID
	b := &pgx.Batch{}
	if a.LoadRun {
		b.Queue(`SELECT `+runCols+` FROM runs WHERE id = $1`, a.Initial.RunID)
	}
	if a.Initial.Messages == nil {
		b.Queue(acquireExisting, id, a.Token, a.Lease.String())
	} else {
		msgs, err := messageTexts(a.Initial.Messages)
		if err != nil {
			return out, err
		}
		var del *string
		if a.Initial.DelegationID != "" {
			del = &a.Initial.DelegationID
		}
		b.Queue(acquireInsert, id, a.Initial.RunID, a.Initial.Agent, a.Initial.Role, del, a.Token, a.Lease.String())
		b.Queue(acquireRows, id, msgs, a.Token)
	}
	b.Queue(acquireLoad, id, a.Token)
	b.Queue(acquireDelegations, id)
	if a.Todos {
		b.Queue(acquireTodos, id, a.Token)
	}
	if a.StartDelegation != "" {
		b.Queue(acquireStart, a.StartDelegation)
	}
	if a.StartRun {
		b.Queue(startRun, a.Initial.RunID)
	}
	if len(a.Events) > 0 {
		args, err := eventArrays(ctx, a.Events)
		if err != nil {
			return out, err
		}
		b.Queue(acquireEvents, append([]any{a.Initial.RunID}, args...)...)
	}
	if a.Memory != nil {
		b.Queue(memoryAtQuery, a.Memory.Project, a.Memory.Text)
	}
	br := s.db.SendBatch(ctx, b)
	err := func() error {
		if a.LoadRun {
			r, err := scanRun(br.QueryRow())
			if err != nil {
				return fmt.Errorf("run %s: %w", a.Initial.RunID, err)
			}
			out.Run = r
		}
		var sess Session
		var del *string
		var summary []llm.Message
		var sid *string
		var leased bool
		var format int
		err := br.QueryRow().Scan(&sid, &sess.RunID, &sess.Agent, &sess.Role, &del, &sess.Head, &sess.From, &summary, &sess.Notes,
			&sess.Compactions, &sess.Status, &sess.Steps, &sess.Failures, &sess.Version, &format, &leased)
		if err == nil && format > SessionFormat {
			// A newer build wrote it: stepping it could misread or overwrite
			// what this build does not know. The task is retried (an upgraded
			// worker takes it), then archived with this reason.
			err = fmt.Errorf("%w: session %s is format %d", ErrFutureSession, id, format)
		}
		if a.Initial.Messages != nil {
			if _, rerr := br.Exec(); rerr != nil && err == nil {
				err = fmt.Errorf("first messages: %w", rerr)
			}
		}
		rows, lerr := br.Query()
		if lerr != nil {
			return lerr
		}
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			// Insert form: the WHERE refused (a live delivery holds it). Existing-only
			// form: there is no session yet.
			out.Exists = a.Initial.Messages != nil
		case err != nil:
			return err
		default:
			out.Exists, out.OK = true, leased
			if leased {
				sess.ID = *sid
				if del != nil {
					sess.DelegationID = *del
				}
				if err := sess.assemble(rows, summary); err != nil {
					return fmt.Errorf("messages: %w", err)
				}
				out.Session = sess
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("messages: %w", err)
		}
		rows, err = br.Query()
		if err != nil {
			return err
		}
		dels, err := pgx.CollectRows(rows, rowsOf(scanDelegation))
		if err != nil {
			return err
		}
		for _, d := range dels {
			if out.Delegations == nil {
				out.Delegations = map[string][]Delegation{}
			}
			out.Delegations[d.ToolCallID] = append(out.Delegations[d.ToolCallID], d)
		}
		if a.Todos {
			var raw []byte
			switch err := br.QueryRow().Scan(&raw); {
			case errors.Is(err, pgx.ErrNoRows):
				out.Todos = []TodoItem{}
			case err != nil:
				return fmt.Errorf("todos: %w", err)
			default:
				if err := json.Unmarshal(raw, &out.Todos); err != nil {
					return fmt.Errorf("todos: %w", err)
				}
			}
		}
		if a.StartDelegation != "" {
			if _, err := br.Exec(); err != nil {
				return fmt.Errorf("delegation %s running: %w", a.StartDelegation, err)
			}
		}
		if a.StartRun {
			if _, err := br.Exec(); err != nil {
				return fmt.Errorf("start run %s: %w", a.Initial.RunID, err)
			}
		}
		if len(a.Events) > 0 {
			rows, err := br.Query()
			if err != nil {
				return err
			}
			if out.Events, err = pgx.AppendRows(out.Events, rows, insertedEvent(a.Initial.RunID)); err != nil {
				return err
			}
		}
		if a.Memory != nil {
			m := MemoryAt{Project: a.Memory.Project, Text: a.Memory.Text}
			if err := br.QueryRow().Scan(&m.Gen, &m.Lexemes); err != nil {
				return fmt.Errorf("memory generation of %s: %w", m.Project, err)
			}
			out.Memory = &m
		}
		return nil
	}()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Acquired{}, fmt.Errorf("acquire session %s: %w", id, err)
	}
	return out, nil
}

// eventArrays are events as the text arrays of the unnest statements, then
// the trace id of ctx's span (the step's) that every one of them records.
func eventArrays(ctx context.Context, evs []NewEvent) ([]any, error) {
	keys, types, agents, data := make([]string, len(evs)), make([]string, len(evs)), make([]string, len(evs)), make([]string, len(evs))
	for i, e := range evs {
		raw, err := json.Marshal(e.Data)
		if err != nil {
			return nil, fmt.Errorf("event %s: %w", e.Type, err)
		}
		keys[i], types[i], agents[i], data[i] = e.Key, e.Type, e.Agent, string(raw)
	}
	return []any{keys, types, agents, data, tracing.TraceID(ctx)}, nil
}

// messageTexts are messages as the JSON texts of a text[] parameter (one
// session_messages row each).
func messageTexts(msgs []llm.Message) ([]string, error) {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		raw, err := json.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		out[i] = string(raw)
	}
	return out, nil
}
