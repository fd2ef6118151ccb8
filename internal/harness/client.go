package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/templates"
)

// Client submits runs to an aetherium API.
type Client struct {
	Base string
	HTTP *http.Client
	// Token, when set, is sent as the bearer token (an API with api.tokens: the
	// token's name is the principal that owns the runs submitted).
	Token string
}

// NewClient returns a client of the API at base (http://host:port).
func NewClient(base string) *Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 256, 256
	return &Client{Base: base, HTTP: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

// Do sends a JSON request; it returns the status and the raw answer.
func (c *Client) Do(ctx context.Context, method, path string, body any) (int, []byte, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, raw, err
}

func (c *Client) submit(ctx context.Context, path string, body any) (string, error) {
	code, raw, err := c.Do(ctx, "POST", path, body)
	if err != nil {
		return "", err
	}
	if code != http.StatusAccepted {
		return "", fmt.Errorf("POST %s: HTTP %d: %s", path, code, raw)
	}
	var out struct {
		RunID string `json:"run_id"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || out.RunID == "" {
		return "", fmt.Errorf("POST %s: bad answer %q", path, raw)
	}
	return out.RunID, nil
}

// Submit posts a submission body of its own to path (fields the helpers below
// do not set) and returns the run id of the 202.
func (c *Client) Submit(ctx context.Context, path string, body any) (string, error) {
	return c.submit(ctx, path, body)
}

// SubmitTeam posts a run with an inline team.
func (c *Client) SubmitTeam(ctx context.Context, team templates.Template, prompt string) (string, error) {
	return c.submit(ctx, "/api/orchestrator/run", map[string]any{"team": team, "prompt": prompt})
}

// SubmitTemplate posts a run from a named template.
func (c *Client) SubmitTemplate(ctx context.Context, name, prompt string, vars map[string]any) (string, error) {
	return c.submit(ctx, "/api/orchestrator/run-from-template", map[string]any{"template": name, "prompt": prompt, "variables": vars})
}

// SubmitMany calls submit n times from parallel goroutines and returns the run ids
// in submission order. A failed submission is retried for up to retryFor (an API
// that is briefly unavailable during a drill), then fails the whole call.
func SubmitMany(ctx context.Context, n, parallel int, retryFor time.Duration, submit func(ctx context.Context, i int) (string, error)) ([]string, error) {
	ids := make([]string, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range max(parallel, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				deadline := time.Now().Add(retryFor)
				for {
					id, err := submit(ctx, i)
					if err == nil {
						ids[i] = id
						break
					}
					if time.Now().After(deadline) || ctx.Err() != nil {
						mu.Lock()
						if firstErr == nil {
							firstErr = fmt.Errorf("submit run %d: %w", i, err)
						}
						mu.Unlock()
						return
					}
					time.Sleep(200 * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	return ids, ctx.Err()
}

// RunCounts tallies runs by status and the failed ones by reason.
type RunCounts struct {
	Total    int
	ByStatus map[string]int
	Reasons  map[string]int
	// Errors holds a few failed runs' error texts.
	Errors []string
}

// Terminal is the number of completed, failed and cancelled runs.
func (c RunCounts) Terminal() int {
	return c.ByStatus["completed"] + c.ByStatus["failed"] + c.ByStatus["cancelled"]
}

// CountRuns tallies the runs ids.
func CountRuns(ctx context.Context, db *pgxpool.Pool, ids []string) (RunCounts, error) {
	c := RunCounts{ByStatus: map[string]int{}, Reasons: map[string]int{}}
	err := scanRuns(ctx, db, ids, func(_, status, reason, msg string) { c.add(status, reason, msg) })
	return c, err
}

func (c *RunCounts) add(status, reason, msg string) {
	c.Total++
	c.ByStatus[status]++
	if status == "failed" {
		c.Reasons[reason]++
		if len(c.Errors) < 5 {
			c.Errors = append(c.Errors, reason+": "+msg)
		}
	}
}

// scanRuns calls f with each run of ids. The ids are joined as a table (unnest):
// `id = ANY($1)` planned as a bitmap scan rechecks every row against the whole
// array, 20 ms of PostgreSQL's CPU for 1,000 ids, which polling every 25 ms made
// most of a core of the load the bench was measuring.
func scanRuns(ctx context.Context, db *pgxpool.Pool, ids []string, f func(id, status, reason, msg string)) error {
	rows, err := db.Query(ctx, `SELECT r.id::text, r.status, r.reason, r.error
		FROM unnest($1::uuid[]) AS u(id) JOIN runs r ON r.id = u.id`, ids)
	if err != nil {
		return err
	}
	var id, status, reason, msg string
	_, err = pgx.ForEachRow(rows, []any{&id, &status, &reason, &msg}, func() error {
		f(id, status, reason, msg)
		return nil
	})
	return err
}

// ErrTimeout is a wait that ran out of time.
var ErrTimeout = errors.New("timed out")

// WaitTerminal polls until every run of ids is terminal, calling progress (when set)
// about once a second. Database errors (a drill restarting PostgreSQL) are retried.
// A terminal run stays terminal, so each poll asks only for the runs not yet seen
// terminal, and large sets are polled less often: the poll is load on the
// PostgreSQL being measured (the run's own timestamps, not the poll, time it).
func WaitTerminal(ctx context.Context, db *pgxpool.Pool, ids []string, timeout time.Duration, progress func(RunCounts)) (RunCounts, error) {
	deadline := time.Now().Add(timeout)
	lastReport := time.Now()
	done := RunCounts{ByStatus: map[string]int{}, Reasons: map[string]int{}}
	pending := slices.Clone(ids)
	last := done
	for {
		live := RunCounts{ByStatus: map[string]int{}, Reasons: map[string]int{}}
		ended := map[string]bool{}
		err := scanRuns(ctx, db, pending, func(id, status, reason, msg string) {
			if store.Terminal(status) {
				ended[id] = true
				done.add(status, reason, msg)
				return
			}
			live.add(status, reason, msg)
		})
		if err == nil {
			pending = slices.DeleteFunc(pending, func(id string) bool { return ended[id] })
			last = done.merge(live)
			if len(pending) == 0 {
				return last, nil
			}
		}
		if progress != nil && time.Since(lastReport) >= time.Second {
			progress(last)
			lastReport = time.Now()
		}
		if time.Now().After(deadline) {
			return last, fmt.Errorf("%w after %s: %d of %d runs terminal (%v)", ErrTimeout, timeout, last.Terminal(), len(ids), last.ByStatus)
		}
		every := 25 * time.Millisecond
		if len(pending) > 100 {
			every = 100 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-time.After(every):
		}
	}
}

// merge is c and o together (a copy; c's errors first).
func (c RunCounts) merge(o RunCounts) RunCounts {
	m := RunCounts{Total: c.Total + o.Total, ByStatus: maps.Clone(c.ByStatus), Reasons: maps.Clone(c.Reasons), Errors: slices.Clone(c.Errors)}
	for k, v := range o.ByStatus {
		m.ByStatus[k] += v
	}
	for k, v := range o.Reasons {
		m.Reasons[k] += v
	}
	m.Errors = append(m.Errors, o.Errors...)
	return m
}
