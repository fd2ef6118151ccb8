package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// PlanStep is one step of a run's plan (1-based index).
type PlanStep struct {
	Index  int    `json:"step"`
	Title  string `json:"title"`
	Status string `json:"status"`
	Result string `json:"result,omitempty"`
}

// Plan is the active plan of a run.
type Plan struct {
	ID    int64      `json:"id"`
	Goal  string     `json:"goal,omitempty"`
	Steps []PlanStep `json:"steps"`
}

// CreatePlan replaces the run's active plan with a new one.
func (s *Store) CreatePlan(ctx context.Context, runID, goal string, steps []string) (Plan, error) {
	p := Plan{Goal: goal}
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE plans SET active = false WHERE run_id = $1 AND active`, runID); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `INSERT INTO plans (run_id, goal) VALUES ($1, $2) RETURNING id`, runID, goal).Scan(&p.ID); err != nil {
			return err
		}
		for i, t := range steps {
			if _, err := tx.Exec(ctx, `INSERT INTO plan_steps (plan_id, idx, title) VALUES ($1, $2, $3)`, p.ID, i+1, t); err != nil {
				return err
			}
			p.Steps = append(p.Steps, PlanStep{Index: i + 1, Title: t, Status: "pending"})
		}
		return nil
	})
	if err != nil {
		return p, fmt.Errorf("create plan: %w", err)
	}
	return p, nil
}

// ActivePlan loads the run's active plan; ErrNotFound when there is none.
func (s *Store) ActivePlan(ctx context.Context, runID string) (Plan, error) {
	var p Plan
	err := s.db.QueryRow(ctx, `SELECT id, goal FROM plans WHERE run_id = $1 AND active`, runID).Scan(&p.ID, &p.Goal)
	if errors.Is(err, pgx.ErrNoRows) {
		return p, ErrNotFound
	}
	if err != nil {
		return p, fmt.Errorf("read plan: %w", err)
	}
	rows, err := s.db.Query(ctx, `SELECT idx, title, status, result FROM plan_steps WHERE plan_id = $1 ORDER BY idx`, p.ID)
	if err != nil {
		return p, fmt.Errorf("read plan steps: %w", err)
	}
	p.Steps, err = pgx.AppendRows(p.Steps, rows, func(r pgx.CollectableRow) (PlanStep, error) {
		var st PlanStep
		err := r.Scan(&st.Index, &st.Title, &st.Status, &st.Result)
		return st, err
	})
	return p, err
}

// UpdatePlanStep sets a step's status and result on the active plan.
func (s *Store) UpdatePlanStep(ctx context.Context, runID string, step int, status, result string) error {
	tag, err := s.db.Exec(ctx, `UPDATE plan_steps SET status = $3, result = $4, updated_at = now()
		WHERE plan_id = (SELECT id FROM plans WHERE run_id = $1 AND active) AND idx = $2`, runID, step, status, result)
	if err != nil {
		return fmt.Errorf("update plan: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("update plan: step %d: %w", step, ErrNotFound)
	}
	return nil
}

// TodoItem is one entry of an agent's scratch list.
type TodoItem struct {
	Text string `json:"text"`
	Done bool   `json:"done"`
}

// Todos reads an agent's list for a run.
func (s *Store) Todos(ctx context.Context, runID, agent string) ([]TodoItem, error) {
	var raw []byte
	err := s.db.QueryRow(ctx, `SELECT items FROM todos WHERE run_id = $1 AND agent = $2`, runID, agent).Scan(&raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return []TodoItem{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("todos: %w", err)
	}
	var items []TodoItem
	return items, json.Unmarshal(raw, &items)
}

// SetTodos replaces an agent's list.
func (s *Store) SetTodos(ctx context.Context, runID, agent string, items []TodoItem) error {
	raw, err := json.Marshal(items)
	if err != nil {
		return err
	}
	_, err = s.db.Exec(ctx, `INSERT INTO todos (run_id, agent, items) VALUES ($1, $2, $3)
		ON CONFLICT (run_id, agent) DO UPDATE SET items = EXCLUDED.items, updated_at = now()`, runID, agent, raw)
	if err != nil {
		return fmt.Errorf("set todos: %w", err)
	}
	return nil
}
