package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// MarkWaiting records that the session's step is parked by a rate limit, once:
// since is when its wait began (the database's clock, as now is), kept until a
// save clears it. ErrLeaseLost when another delivery holds the session.
func (s *Store) MarkWaiting(ctx context.Context, sessionID, token string) (since, now time.Time, err error) {
	err = s.db.QueryRow(ctx, `UPDATE sessions SET waiting_since = coalesce(waiting_since, now())
		WHERE id = $1 AND lease_token = $2 RETURNING waiting_since, now()`, sessionID, token).Scan(&since, &now)
	if err == pgx.ErrNoRows {
		return since, now, fmt.Errorf("mark session %s waiting: %w", sessionID, ErrLeaseLost)
	}
	if err != nil {
		return since, now, fmt.Errorf("mark session %s waiting: %w", sessionID, err)
	}
	return since, now, nil
}

// SpentToday is what owner's model calls cost since midnight UTC, in
// picodollars (the daily money budget of a principal).
func (s *Store) SpentToday(ctx context.Context, owner string) (int64, error) {
	var spent int64
	err := s.db.QueryRow(ctx, `SELECT coalesce(sum(cost), 0)::bigint FROM llm_calls
		WHERE owner = $1 AND at >= date_trunc('day', now(), 'UTC')`, owner).Scan(&spent)
	if err != nil {
		return 0, fmt.Errorf("cost of %q today: %w", owner, err)
	}
	return spent, nil
}

// CostLine is what one model (of one provider) cost: its calls, tokens and
// money (picodollars). Unpriced counts the calls the price table had no price
// for (their cost is missing from Cost).
type CostLine struct {
	Provider         string `json:"provider"`
	Model            string `json:"model"`
	Calls            int64  `json:"calls"`
	Fallbacks        int64  `json:"fallbacks"`
	Unpriced         int64  `json:"unpriced"`
	InputTokens      int64  `json:"input_tokens"`
	OutputTokens     int64  `json:"output_tokens"`
	CachedTokens     int64  `json:"cached_tokens"`
	CacheWriteTokens int64  `json:"cache_write_tokens"`
	Cost             int64  `json:"cost"`
}

// CostScope selects the calls a cost summary adds up: exactly one of RunID,
// ProjectID, Owner or Team; Since (zero: all time) bounds them in time.
type CostScope struct {
	RunID, ProjectID, Owner, Team string
	Since                         time.Time
}

// Costs sums the model calls of a scope by provider and model, most expensive
// first.
func (s *Store) Costs(ctx context.Context, sc CostScope) ([]CostLine, error) {
	col, val := "", ""
	n := 0
	for _, f := range []struct{ col, val string }{{"run_id::text", sc.RunID}, {"project_id::text", sc.ProjectID}, {"owner", sc.Owner}, {"team", sc.Team}} {
		if f.val != "" {
			col, val = f.col, f.val
			n++
		}
	}
	if n != 1 {
		return nil, fmt.Errorf("costs: name exactly one of run, project, owner or team (%d given)", n)
	}
	rows, err := s.db.Query(ctx, `SELECT provider, model, count(*), count(*) FILTER (WHERE fallback), count(*) FILTER (WHERE NOT priced),
			sum(input_tokens)::bigint, sum(output_tokens)::bigint, sum(cached_tokens)::bigint, sum(cache_write_tokens)::bigint, sum(cost)::bigint
		FROM llm_calls WHERE `+col+` = $1 AND at >= $2
		GROUP BY provider, model ORDER BY sum(cost) DESC, provider, model`, val, sc.Since)
	if err != nil {
		return nil, fmt.Errorf("costs: %w", err)
	}
	lines, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (CostLine, error) {
		var l CostLine
		err := r.Scan(&l.Provider, &l.Model, &l.Calls, &l.Fallbacks, &l.Unpriced, &l.InputTokens, &l.OutputTokens, &l.CachedTokens, &l.CacheWriteTokens, &l.Cost)
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("costs: %w", err)
	}
	return lines, nil
}
