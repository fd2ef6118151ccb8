package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aetherium-engine/aetherium/tracing"
)

// StepWrite is what a step persists together with its session: the tokens of the
// model answer just received, the events the step produced since its last save
// (tool calls, then the answer) and the audit rows of the calls whose results the
// session now holds.
type StepWrite struct {
	Tokens int
	// Call is the model call whose answer the save holds: its row in llm_calls
	// and its cost added to the run's, with the tokens.
	Call   *ModelCall
	Events []NewEvent
	Audit  []AuditRow
	// Memory, when set, is the long-term entry of a session that ends with this
	// save (ADR 5): written in the same transaction, so no extra round trip, and
	// once however often the save is redelivered.
	Memory *MemoryEntry
	// Release gives the step lease up with the save (lease_until in the past): the
	// step's last save, so the next delivery need not wait and no extra statement
	// is spent on it.
	Release bool
	// Finish records the outcome of the session's own delegation (once), with the
	// save that ends the session.
	Finish *DelegationOutcome
	// Compacted is the compaction this save stores (the session's Head, From and
	// summary messages, as Session.Compact left them): its record, written once.
	Compacted *Compaction
	// Notes, when set, overwrite the session's working memory.
	Notes *string
	// Todos, when set, replace the session's agent's todo list for its run: the
	// list the step's calls changed since its last save (tools.Todos), stored
	// with those calls' results.
	Todos *[]TodoItem
	// Delegated are the delegations the step's calls recorded since its last
	// save (by id), and TaskLabel the flow label their tasks carry
	// (llm.Provenance as JSON, "{}" when clean): what the session had read, as
	// this save leaves its history. Stored with each of them that has none yet
	// by the save's first statement, so the delegated turn reads it with the
	// delegation (Delegation.TaskLabel) instead of this session's history.
	Delegated []string
	TaskLabel json.RawMessage
}

// ModelCall is one model call's usage and cost (picodollars, llm.Money).
type ModelCall struct {
	Agent, Provider, Model string
	// Fallback: a fallback model answered, not the team's.
	Fallback                                                  bool
	InputTokens, OutputTokens, CachedTokens, CacheWriteTokens int64
	Cost                                                      int64
	// Priced is false when the price table had no price for Model (Cost 0).
	Priced bool
}

// DelegationOutcome is how a delegation ended.
type DelegationOutcome struct {
	ID, Status, Result, Error string
	// Label, when set, is stored as the delegation's ResultLabel (SaveStep
	// only): what the ending session read itself, so the resume need not read
	// its history again.
	Label json.RawMessage
}

// StepSaved is what SaveStep reports back.
type StepSaved struct {
	// RunStatus, TokensUsed and TokenBudget are the run's, after the tokens were
	// added: a step learns of a cancellation from its own saves, without a read.
	RunStatus               string
	TokensUsed, TokenBudget int64
	// Cost and CostBudget are the run's, in picodollars, after the call's cost
	// was added.
	Cost, CostBudget int64
	// Events are those stored now (a redelivery's duplicates are not), in order.
	Events []Event
}

// The statements of SaveStep have fixed texts (arrays, not VALUES lists), so each is
// prepared once per connection whatever the number of rows.
const (
	saveStepSession = `WITH s AS (
			UPDATE sessions SET notes = COALESCE($3, notes), status = $4, steps = $5, failures = $6, version = version + 1,
				lease_until = CASE WHEN $9 THEN 'epoch'::timestamptz ELSE now() + $7::interval END, updated_at = now(),
				waiting_since = NULL, head = COALESCE($11, head), context_from = COALESCE($12, context_from),
				summary = COALESCE($13::jsonb, summary)
			WHERE id = $1 AND lease_token = $2 RETURNING run_id),
		r AS (UPDATE runs SET tokens_used = tokens_used + $8::bigint, cost = cost + $10::bigint, updated_at = now()
			WHERE ($8::bigint <> 0 OR $10::bigint <> 0) AND id = (SELECT run_id FROM s) RETURNING tokens_used, cost),
		d AS (UPDATE delegations SET task_label = $15::jsonb
			WHERE $15::jsonb IS NOT NULL AND id = ANY($14::text[]) AND parent_session = $1 AND task_label IS NULL
				AND EXISTS (SELECT 1 FROM s))
		SELECT EXISTS (SELECT 1 FROM s), run.status, COALESCE((SELECT tokens_used FROM r), run.tokens_used), run.token_budget,
			COALESCE((SELECT cost FROM r), run.cost), run.cost_budget
		FROM (SELECT 1) AS one LEFT JOIN runs AS run ON run.id = (SELECT run_id FROM s)`
	// The call's row, owner, team and project taken from its run; only when the
	// session update above found the lease still ours.
	saveStepCall = `INSERT INTO llm_calls (run_id, session_id, agent, owner, team, project_id, provider, model, fallback,
			input_tokens, output_tokens, cached_tokens, cache_write_tokens, cost, priced)
		SELECT r.id, s.id, $3, r.owner, coalesce(r.team->>'name', ''), r.project_id, $4, $5, $6, $7, $8, $9, $10, $11, $12
		FROM sessions AS s JOIN runs AS r ON r.id = s.run_id
		WHERE s.id = $1 AND s.lease_token = $2`
	// The inserts run only when the session update above (same implicit
	// transaction) found the lease still ours. A delegation.finished event is
	// stored only when its delegation now holds the status it announces (saved by
	// saveStepFinish, queued before): one its run's end closed first
	// (store.FinishRun) is announced from its row with the run's terminal event.
	saveStepEvents = `INSERT INTO run_events (run_id, key, type, agent, data, trace_id)
		SELECT $3::uuid, u.key, u.type, u.agent, u.data::jsonb, $8::text
		FROM unnest($4::text[], $5::text[], $6::text[], $7::text[]) WITH ORDINALITY AS u(key, type, agent, data, n)
		WHERE EXISTS (SELECT 1 FROM sessions WHERE id = $1 AND lease_token = $2)
			AND (u.type <> 'delegation.finished' OR EXISTS (SELECT 1 FROM delegations AS d
				WHERE d.id = u.data::jsonb->>'delegation_id' AND d.status = u.data::jsonb->>'status'))
		ORDER BY u.n
		ON CONFLICT (run_id, key) DO NOTHING RETURNING id, type`
	// The messages the step added (or wrote over: Session.Rewrite), as rows from
	// seq $3 on; only when the session update above found the lease still ours.
	saveStepRows = `INSERT INTO session_messages (session_id, seq, message)
		SELECT $1, $3 + u.n - 1, u.m::jsonb FROM unnest($4::text[]) WITH ORDINALITY AS u(m, n)
		WHERE EXISTS (SELECT 1 FROM sessions WHERE id = $1 AND lease_token = $2)
		ON CONFLICT (session_id, seq) DO UPDATE SET message = excluded.message`
	saveStepCompaction = `INSERT INTO session_compactions (session_id, n, head, from_seq, through_seq, tokens_before, tokens_after, summary)
		SELECT $1, $3, $4, $5, $6, $7, $8, $9::jsonb
		WHERE EXISTS (SELECT 1 FROM sessions WHERE id = $1 AND lease_token = $2)
		ON CONFLICT (session_id, n) DO NOTHING`
	saveStepTodos = `INSERT INTO todos (run_id, agent, items)
		SELECT s.run_id, s.agent, $3::jsonb FROM sessions AS s WHERE s.id = $1 AND s.lease_token = $2
		ON CONFLICT (run_id, agent) DO UPDATE SET items = excluded.items, updated_at = now()`
	saveStepFinish = `UPDATE delegations SET status = $4, result = $5, error = $6, completed_at = now(), trace_context = $7,
			result_label = $8::jsonb
		WHERE id = $3 AND status IN ('pending','running')
			AND EXISTS (SELECT 1 FROM sessions WHERE id = $1 AND lease_token = $2)`
)

// SaveStep persists the session under the lease token (extending the lease, or
// releasing it with w.Release), adds w.Tokens to the run, and stores w.Finish,
// w.Events and w.Audit — in one round trip and one
// transaction, so a tool result is never durable without its audit row and event,
// nor an answer without its agent.message event. ErrLeaseLost (and nothing written)
// when another delivery took the session over.
func (s *Store) SaveStep(ctx context.Context, sess *Session, token string, lease time.Duration, w StepWrite) (StepSaved, error) {
	var out StepSaved
	if sess.Saved < sess.Head+sess.Summary || sess.Saved > len(sess.Messages) {
		return out, fmt.Errorf("save session %s: %d messages saved of %d (head %d, summary %d)", sess.ID, sess.Saved, len(sess.Messages), sess.Head, sess.Summary)
	}
	added, err := messageTexts(sess.Messages[sess.Saved:])
	if err != nil {
		return out, fmt.Errorf("save session %s: %w", sess.ID, err)
	}
	b := &pgx.Batch{}
	var cost int64
	if w.Call != nil {
		cost = w.Call.Cost
	}
	var head, from *int
	var summary []byte
	if c := w.Compacted; c != nil {
		if summary, err = json.Marshal(sess.Messages[sess.Head : sess.Head+sess.Summary]); err != nil {
			return out, fmt.Errorf("save session %s summary: %w", sess.ID, err)
		}
		head, from = &sess.Head, &sess.From
	}
	// No delegations (a NULL array) or no label (NULL): the CTE updates no row.
	b.Queue(saveStepSession, sess.ID, token, w.Notes, sess.Status, sess.Steps, sess.Failures, lease.String(), w.Tokens, w.Release, cost,
		head, from, summary, w.Delegated, []byte(w.TaskLabel))
	if len(added) > 0 {
		b.Queue(saveStepRows, sess.ID, token, sess.SeqOf(sess.Saved), added)
	}
	if c := w.Compacted; c != nil {
		b.Queue(saveStepCompaction, sess.ID, token, c.N, sess.Head, c.FromSeq, sess.From, c.TokensBefore, c.TokensAfter, summary)
	}
	if c := w.Call; c != nil {
		b.Queue(saveStepCall, sess.ID, token, c.Agent, c.Provider, c.Model, c.Fallback,
			c.InputTokens, c.OutputTokens, c.CachedTokens, c.CacheWriteTokens, c.Cost, c.Priced)
	}
	var todos []byte
	if w.Todos != nil {
		if todos, err = json.Marshal(*w.Todos); err != nil {
			return out, fmt.Errorf("save session %s todos: %w", sess.ID, err)
		}
		b.Queue(saveStepTodos, sess.ID, token, todos)
	}
	if w.Finish != nil {
		f := w.Finish
		b.Queue(saveStepFinish, sess.ID, token, f.ID, f.Status, f.Result, f.Error, tracing.Traceparent(ctx), []byte(f.Label))
	}
	if len(w.Events) > 0 {
		args, err := eventArrays(ctx, w.Events)
		if err != nil {
			return out, err
		}
		b.Queue(saveStepEvents, append([]any{sess.ID, token, sess.RunID}, args...)...)
	}
	if len(w.Audit) > 0 {
		b.Queue(insertAudit, append([]any{sess.ID, token}, auditColumns(ctx, w.Audit)...)...)
	}
	if w.Memory != nil {
		b.Queue(insertMemory, append(memoryArgs(*w.Memory), sess.ID, token, provenanceArg(*w.Memory))...)
	}
	br := s.db.SendBatch(ctx, b)
	var saved bool
	var status *string
	var used, budget, spent, costBudget *int64
	err = br.QueryRow().Scan(&saved, &status, &used, &budget, &spent, &costBudget)
	if err == nil && saved && status != nil {
		out.RunStatus, out.TokensUsed, out.TokenBudget, out.Cost, out.CostBudget = *status, *used, *budget, *spent, *costBudget
	}
	if err == nil && len(added) > 0 {
		_, err = br.Exec()
	}
	if err == nil && w.Compacted != nil {
		_, err = br.Exec()
	}
	if err == nil && w.Call != nil {
		_, err = br.Exec()
	}
	if err == nil && w.Todos != nil {
		_, err = br.Exec()
	}
	if err == nil && w.Finish != nil {
		_, err = br.Exec()
	}
	if err == nil && len(w.Events) > 0 {
		var rows pgx.Rows
		rows, err = br.Query()
		if err == nil {
			out.Events, err = pgx.AppendRows(out.Events, rows, insertedEvent(sess.RunID))
		}
	}
	if err == nil && len(w.Audit) > 0 {
		_, err = br.Exec()
	}
	if err == nil && w.Memory != nil {
		_, err = br.Exec() // RETURNING rows are discarded; none when the lease is lost or the entry exists
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return StepSaved{}, fmt.Errorf("save session %s: %w", sess.ID, err)
	}
	if !saved {
		return StepSaved{}, fmt.Errorf("save session %s: %w", sess.ID, ErrLeaseLost)
	}
	sess.Version++
	sess.Saved = len(sess.Messages)
	if w.Compacted != nil {
		sess.Compactions = max(sess.Compactions, w.Compacted.N)
	}
	if w.Notes != nil {
		sess.Notes = *w.Notes
	}
	return out, nil
}

// delegationArrays are delegations as the text arrays of recordDelegations
// (tools as JSON text, NULL for a worker delegation's "all of its own").
func delegationArrays(ds []Delegation) ([]any, error) {
	ids, calls, agents, tasks, kinds := make([]string, len(ds)), make([]string, len(ds)), make([]string, len(ds)), make([]string, len(ds)), make([]string, len(ds))
	tools := make([]*string, len(ds))
	for i, d := range ds {
		ids[i], calls[i], agents[i], tasks[i], kinds[i] = d.ID, d.ToolCallID, d.Agent, d.Task, d.Kind
		if d.Tools != nil {
			raw, err := json.Marshal(d.Tools)
			if err != nil {
				return nil, fmt.Errorf("delegation %s tools: %w", d.ID, err)
			}
			t := string(raw)
			tools[i] = &t
		}
	}
	return []any{ids, calls, agents, tasks, tools, kinds}, nil
}
