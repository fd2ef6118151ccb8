package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Hook is an inbound webhook (migration 00026): deliveries to POST /hooks/<ID>
// signed with Secret under Scheme start a run of Template (or Team) as Owner,
// with Prompt rendered from the Variables mapped out of the payload.
type Hook struct {
	ID     string `json:"id"`
	Owner  string `json:"owner"`
	Name   string `json:"name"`
	Scheme string `json:"scheme"`
	// Secret keys the signature. Never encoded: the API answers it once, at
	// creation and rotation, in a type of its own.
	Secret   string          `json:"-"`
	Template string          `json:"template,omitempty"`
	Team     json.RawMessage `json:"team,omitempty"`
	Prompt   string          `json:"prompt"`
	// Variables maps a template variable to a JSON pointer into the payload.
	Variables map[string]string `json:"variables"`
	Project   string            `json:"project,omitempty"`
	Priority  int               `json:"priority,omitempty"`
	Enabled   bool              `json:"enabled"`
	CreatedAt time.Time         `json:"created_at"`
	RotatedAt *time.Time        `json:"rotated_at,omitempty"`
}

// HookDelivery is one delivery a hook received.
type HookDelivery struct {
	ID     int64  `json:"id"`
	HookID string `json:"hook_id"`
	// DeliveryID is the sender's id of the delivery (X-GitHub-Delivery, the
	// Stripe event's id, X-Aetherium-Delivery), for the record.
	DeliveryID string    `json:"delivery_id,omitempty"`
	ReceivedAt time.Time `json:"received_at"`
	// Outcome is accepted (a run was started, RunID) or refused (Reason).
	Outcome string `json:"outcome" jsonschema:"enum=accepted,enum=refused"`
	Reason  string `json:"reason,omitempty"`
	Detail  string `json:"detail,omitempty"`
	RunID   string `json:"run_id,omitempty"`
	// dedupe is the stored dedupe key (not answered: a body digest tells nothing).
	dedupe string
}

// Outcomes of a hook delivery.
const (
	HookAccepted = "accepted"
	HookRefused  = "refused"
)

// NewHookID makes a hook's id: hk_ and 128 random bits in hex. It is not a
// secret (the signature is), but it is not guessable either.
func NewHookID() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("hook id: %w", err)
	}
	return "hk_" + hex.EncodeToString(b), nil
}

const hookCols = `id, owner, name, scheme, secret, template, team, prompt, variables, project, priority, enabled, created_at, rotated_at`

func scanHook(row pgx.Row) (Hook, error) {
	var h Hook
	var team, vars []byte
	err := row.Scan(&h.ID, &h.Owner, &h.Name, &h.Scheme, &h.Secret, &h.Template, &team, &h.Prompt, &vars, &h.Project, &h.Priority, &h.Enabled, &h.CreatedAt, &h.RotatedAt)
	if err != nil {
		return h, err
	}
	if len(team) > 0 {
		h.Team = team
	}
	if err := json.Unmarshal(vars, &h.Variables); err != nil {
		return h, fmt.Errorf("hook %s variables: %w", h.ID, err)
	}
	return h, nil
}

// CreateHook inserts h with a new id (NewHookID) and returns it as stored.
func (s *Store) CreateHook(ctx context.Context, h Hook) (Hook, error) {
	id, err := NewHookID()
	if err != nil {
		return h, err
	}
	if h.Variables == nil {
		h.Variables = map[string]string{}
	}
	vars, err := json.Marshal(h.Variables)
	if err != nil {
		return h, fmt.Errorf("hook variables: %w", err)
	}
	var team any
	if len(h.Team) > 0 {
		team = []byte(h.Team)
	}
	out, err := scanHook(s.db.QueryRow(ctx, `INSERT INTO hooks (id, owner, name, scheme, secret, template, team, prompt, variables, project, priority, enabled)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) RETURNING `+hookCols,
		id, h.Owner, h.Name, h.Scheme, h.Secret, h.Template, team, h.Prompt, vars, h.Project, h.Priority, h.Enabled))
	if err != nil {
		return h, fmt.Errorf("create hook: %w", err)
	}
	return out, nil
}

// GetHook loads a hook; ErrNotFound when there is none.
func (s *Store) GetHook(ctx context.Context, id string) (Hook, error) {
	h, err := scanHook(s.db.QueryRow(ctx, `SELECT `+hookCols+` FROM hooks WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return h, ErrNotFound
	}
	if err != nil {
		return h, fmt.Errorf("hook %s: %w", id, err)
	}
	return h, nil
}

// ListHooks lists one owner's hooks ("" for everyone's), newest first.
func (s *Store) ListHooks(ctx context.Context, owner string, limit int) ([]Hook, error) {
	return queryRows(ctx, s.db, "hooks", []Hook{}, rowsOf(scanHook), `SELECT `+hookCols+` FROM hooks
		WHERE $1 = '' OR owner = $1 ORDER BY created_at DESC, id LIMIT $2`, owner, limit)
}

// DeleteHook removes a hook and its deliveries; ErrNotFound when there is none.
func (s *Store) DeleteHook(ctx context.Context, id string) error {
	tag, err := s.db.Exec(ctx, `DELETE FROM hooks WHERE id = $1`, id)
	if err != nil {
		return fmt.Errorf("delete hook %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// RotateHookSecret replaces a hook's secret (the old one stops verifying at
// once); ErrNotFound when there is no such hook.
func (s *Store) RotateHookSecret(ctx context.Context, id, secret string) (Hook, error) {
	h, err := scanHook(s.db.QueryRow(ctx, `UPDATE hooks SET secret = $2, rotated_at = now() WHERE id = $1 RETURNING `+hookCols, id, secret))
	if errors.Is(err, pgx.ErrNoRows) {
		return h, ErrNotFound
	}
	if err != nil {
		return h, fmt.Errorf("rotate hook %s: %w", id, err)
	}
	return h, nil
}

const hookDeliveryCols = `id, hook_id, delivery_id, dedupe_key, received_at, outcome, reason, detail, coalesce(run_id::text, '')`

func scanHookDelivery(row pgx.Row) (HookDelivery, error) {
	var d HookDelivery
	err := row.Scan(&d.ID, &d.HookID, &d.DeliveryID, &d.dedupe, &d.ReceivedAt, &d.Outcome, &d.Reason, &d.Detail, &d.RunID)
	return d, err
}

// ClaimHookDelivery records a verified delivery as accepted under its dedupe
// key, unless an accepted delivery of the hook holds the key already: then
// claimed is false and first is that delivery (its RunID empty while the
// claimant is still submitting). Of any number of concurrent claims of one
// key, exactly one wins (the partial unique index hook_deliveries_dedupe).
func (s *Store) ClaimHookDelivery(ctx context.Context, hookID, deliveryID, dedupeKey string) (claim HookDelivery, claimed bool, err error) {
	for range 3 {
		claim, err = scanHookDelivery(s.db.QueryRow(ctx, `INSERT INTO hook_deliveries (hook_id, delivery_id, dedupe_key, outcome)
			VALUES ($1, $2, $3, 'accepted') ON CONFLICT (hook_id, dedupe_key) WHERE outcome = 'accepted' DO NOTHING
			RETURNING `+hookDeliveryCols, hookID, deliveryID, dedupeKey))
		if err == nil {
			return claim, true, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return claim, false, fmt.Errorf("claim hook delivery: %w", err)
		}
		claim, err = scanHookDelivery(s.db.QueryRow(ctx, `SELECT `+hookDeliveryCols+` FROM hook_deliveries
			WHERE hook_id = $1 AND dedupe_key = $2 AND outcome = 'accepted'`, hookID, dedupeKey))
		if err == nil {
			return claim, false, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return claim, false, fmt.Errorf("claim hook delivery: %w", err)
		}
		// The holder was refused (its key freed) between the two statements: claim again.
	}
	return claim, false, fmt.Errorf("claim hook delivery %s: the key keeps changing hands", dedupeKey)
}

// HookDeliveryByID loads one delivery (ErrNotFound).
func (s *Store) HookDeliveryByID(ctx context.Context, id int64) (HookDelivery, error) {
	d, err := scanHookDelivery(s.db.QueryRow(ctx, `SELECT `+hookDeliveryCols+` FROM hook_deliveries WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return d, ErrNotFound
	}
	if err != nil {
		return d, fmt.Errorf("hook delivery %d: %w", id, err)
	}
	return d, nil
}

// SetHookDeliveryRun names the run an accepted delivery started.
func (s *Store) SetHookDeliveryRun(ctx context.Context, id int64, runID string) error {
	if _, err := s.db.Exec(ctx, `UPDATE hook_deliveries SET run_id = $2 WHERE id = $1 AND run_id IS NULL`, id, runID); err != nil {
		return fmt.Errorf("hook delivery %d run: %w", id, err)
	}
	return nil
}

// RefuseHookDelivery turns a claimed delivery into a refusal (the run could
// not be started): its key is free again, so the sender's retry is judged anew.
func (s *Store) RefuseHookDelivery(ctx context.Context, id int64, reason, detail string) error {
	if _, err := s.db.Exec(ctx, `UPDATE hook_deliveries SET outcome = 'refused', reason = $2, detail = $3 WHERE id = $1`, id, reason, clip(detail)); err != nil {
		return fmt.Errorf("refuse hook delivery %d: %w", id, err)
	}
	return nil
}

// RecordHookRefusal records a delivery that started nothing (runID names the
// first delivery's run for a replay) and keeps only the keep newest refusals
// of the hook.
func (s *Store) RecordHookRefusal(ctx context.Context, d HookDelivery, keep int) error {
	var run any
	if d.RunID != "" {
		run = d.RunID
	}
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO hook_deliveries (hook_id, delivery_id, outcome, reason, detail, run_id) VALUES ($1, $2, 'refused', $3, $4, $5)`,
		d.HookID, d.DeliveryID, d.Reason, clip(d.Detail), run)
	b.Queue(`DELETE FROM hook_deliveries WHERE hook_id = $1 AND outcome = 'refused' AND id <= (
		SELECT id FROM hook_deliveries WHERE hook_id = $1 AND outcome = 'refused' ORDER BY id DESC OFFSET $2 LIMIT 1)`, d.HookID, keep)
	if err := s.db.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("record hook refusal: %w", err)
	}
	return nil
}

// ListHookDeliveries lists a hook's deliveries, newest first, those with an
// id below before (0: from the newest).
func (s *Store) ListHookDeliveries(ctx context.Context, hookID string, before int64, limit int) ([]HookDelivery, error) {
	return queryRows(ctx, s.db, "hook deliveries", []HookDelivery{}, rowsOf(scanHookDelivery), `SELECT `+hookDeliveryCols+` FROM hook_deliveries
		WHERE hook_id = $1 AND ($2 = 0 OR id < $2) ORDER BY id DESC LIMIT $3`, hookID, before, limit)
}

// clip bounds a recorded detail (an error message) to 500 bytes of valid UTF-8.
func clip(s string) string {
	if len(s) > 500 {
		s = s[:500]
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, ""), "\x00", "")
}
