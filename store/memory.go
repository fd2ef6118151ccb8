package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// MemoryEntry is a row of agent_memory (ADR 5).
type MemoryEntry struct {
	ID int64 `json:"id"`
	// Project is the project's id (store.Project.ID), never its slug.
	Project   string    `json:"project"`
	Tier      string    `json:"tier"`
	Scope     string    `json:"scope"`
	Agent     string    `json:"agent,omitempty"`
	RunID     string    `json:"run_id,omitempty"`
	SessionID string    `json:"session_id,omitempty"`
	Author    string    `json:"author,omitempty"`
	Content   string    `json:"content"`
	CreatedAt time.Time `json:"created_at"`
	// Provenance is the label of the session that wrote the entry (an
	// llm.Provenance as JSON), stored with it because the entry outlives the
	// session; nil when none was stored (a person's entry, or one written
	// before migration 00032). Kept raw: its reader decides what a record that
	// does not parse means.
	Provenance json.RawMessage `json:"-"`
	// Relevance is the entry's ts_rank_cd against a recall's text, normalized to
	// 0..1 (rank/(rank+1)); zero outside RecallMemory.
	Relevance float64 `json:"relevance,omitempty"`
}

// Memory tiers.
const (
	MemoryLongTerm = "long_term"
	MemoryWorking  = "working"
)

// insertMemory writes one entry; with a session and lease token ($9, $10) only
// while that lease holds (the session's final save), with NULLs unconditionally.
// A session's entry of a tier is written once (a redelivered save adds nothing);
// working memory is overwritten.
const insertMemory = `INSERT INTO agent_memory (project, tier, scope, agent, run_id, session_id, author, content, provenance)
	SELECT $1, $2, $3, $4, NULLIF($5, '')::uuid, NULLIF($6, ''), $7, $8, $11::jsonb
	WHERE $9::text IS NULL OR EXISTS (SELECT 1 FROM sessions WHERE id = $9 AND lease_token = $10::text)
	ON CONFLICT (session_id, tier) WHERE session_id IS NOT NULL
	DO UPDATE SET content = EXCLUDED.content, provenance = EXCLUDED.provenance, created_at = now() WHERE agent_memory.tier = 'working'
	RETURNING id, created_at`

// memoryArgs are insertMemory's $1-$8; the lease ($9, $10) and the
// provenance ($11) follow.
func memoryArgs(e MemoryEntry) []any {
	return []any{e.Project, e.Tier, e.Scope, e.Agent, e.RunID, e.SessionID, e.Author, e.Content}
}

// provenanceArg is insertMemory's $11: NULL when none is stored.
func provenanceArg(e MemoryEntry) any {
	if len(e.Provenance) == 0 {
		return nil
	}
	return string(e.Provenance)
}

// AddMemory writes an entry (a person's, over the API, or working memory).
func (s *Store) AddMemory(ctx context.Context, e MemoryEntry) (MemoryEntry, error) {
	err := s.db.QueryRow(ctx, insertMemory, append(memoryArgs(e), nil, nil, provenanceArg(e))...).Scan(&e.ID, &e.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return e, fmt.Errorf("memory of session %s exists already", e.SessionID)
	}
	if err != nil {
		return e, fmt.Errorf("add memory: %w", err)
	}
	return e, nil
}

// ListMemory lists a project's long-term entries, newest first.
func (s *Store) ListMemory(ctx context.Context, project string, limit int) ([]MemoryEntry, error) {
	return s.queryMemory(ctx, `SELECT id, project, tier, scope, agent, coalesce(run_id::text, ''), coalesce(session_id, ''), author, content, created_at, 0, provenance
		FROM agent_memory WHERE project = $1 AND tier = 'long_term' ORDER BY created_at DESC, id DESC LIMIT $2`, project, limit)
}

// DeleteMemory removes one entry of project p, with an audit row naming who
// deleted it and what it said; ErrNotFound when the project has no entry id.
func (s *Store) DeleteMemory(ctx context.Context, p Project, id int64, by string) error {
	return pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		var scope, agent, content string
		err := tx.QueryRow(ctx, `DELETE FROM agent_memory WHERE project = $1 AND id = $2 RETURNING scope, agent, content`, p.ID, id).
			Scan(&scope, &agent, &content)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("delete memory: %w", err)
		}
		if len(content) > 200 {
			content = strings.ToValidUTF8(content[:200], "") + "…"
		}
		if agent != "" {
			scope += ", agent " + agent
		}
		return auditProject(ctx, tx, by, "memory.delete", p, fmt.Sprintf("entry %d (scope %s): %s", id, scope, content))
	})
}

// RecallMemory reads the candidates of a recall: the project's long-term entries
// an agent may see (project-shared, and its own), with their relevance to text,
// the most relevant and then the newest first, at most limit of each. Ranking
// with recency happens in package memory.
//
// Relevance is ts_rank_cd(tsv, q, 32) with q any word of the text (an OR query:
// a task shares some words with a memory, rarely all, and plainto_tsquery would
// AND them). It is computed from agent_memory_terms (migration 00012), where it
// reduces to 0.1 · the positions of the text's words in the entry, normalized
// to r/(r+1); TestRecallMemoryRankIsTsRankCD holds the two equal.
func (s *Store) RecallMemory(ctx context.Context, project, agent, text string, limit int) ([]MemoryEntry, error) {
	return s.queryMemory(ctx, `WITH rel AS (SELECT t.memory_id AS id, sum(t.n) AS n FROM agent_memory_terms t
			WHERE t.project = $1 AND t.lexeme = ANY(tsvector_to_array(to_tsvector('simple', $3))) AND (t.agent = '' OR t.agent = $2)
			GROUP BY t.memory_id ORDER BY n DESC, t.memory_id DESC LIMIT $4),
		recent AS (SELECT id, 0::bigint AS n FROM agent_memory
			WHERE project = $1 AND tier = 'long_term' AND (scope = 'project' OR agent = $2)
			ORDER BY created_at DESC, id DESC LIMIT $4),
		cand AS (SELECT id, max(n) * 0.1 AS r FROM (SELECT * FROM rel UNION ALL SELECT * FROM recent) u GROUP BY id)
		SELECT m.id, m.project, m.tier, m.scope, m.agent, coalesce(m.run_id::text, ''), coalesce(m.session_id, ''), m.author, m.content, m.created_at,
			(cand.r / (cand.r + 1))::real, m.provenance
		FROM cand JOIN agent_memory m USING (id)
		ORDER BY cand.r DESC, m.created_at DESC, m.id DESC`, project, agent, text, limit)
}

func (s *Store) queryMemory(ctx context.Context, q string, args ...any) ([]MemoryEntry, error) {
	rows, err := s.db.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("memory: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (MemoryEntry, error) {
		var e MemoryEntry
		var rel float32
		var prov []byte
		err := r.Scan(&e.ID, &e.Project, &e.Tier, &e.Scope, &e.Agent, &e.RunID, &e.SessionID, &e.Author, &e.Content, &e.CreatedAt, &rel, &prov)
		if prov != nil {
			e.Provenance = json.RawMessage(prov)
		}
		e.Relevance = float64(rel)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("memory: %w", err)
	}
	return out, nil
}
