package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aetherium-engine/aetherium/templates"
)

// Client submits runs to an aetherium API.
type Client struct {
	Base string
	HTTP *http.Client
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
	rows, err := db.Query(ctx, `SELECT status, reason, error FROM runs WHERE id = ANY($1::uuid[])`, ids)
	if err != nil {
		return c, err
	}
	defer rows.Close()
	for rows.Next() {
		var status, reason, msg string
		if err := rows.Scan(&status, &reason, &msg); err != nil {
			return c, err
		}
		c.Total++
		c.ByStatus[status]++
		if status == "failed" {
			c.Reasons[reason]++
			if len(c.Errors) < 5 {
				c.Errors = append(c.Errors, reason+": "+msg)
			}
		}
	}
	return c, rows.Err()
}

// ErrTimeout is a wait that ran out of time.
var ErrTimeout = errors.New("timed out")

// WaitTerminal polls until every run of ids is terminal, calling progress (when set)
// about once a second. Database errors (a drill restarting PostgreSQL) are retried.
func WaitTerminal(ctx context.Context, db *pgxpool.Pool, ids []string, timeout time.Duration, progress func(RunCounts)) (RunCounts, error) {
	deadline := time.Now().Add(timeout)
	lastReport := time.Now()
	var last RunCounts
	for {
		c, err := CountRuns(ctx, db, ids)
		if err == nil {
			last = c
			if c.Terminal() == len(ids) {
				return c, nil
			}
		}
		if progress != nil && time.Since(lastReport) >= time.Second {
			progress(last)
			lastReport = time.Now()
		}
		if time.Now().After(deadline) {
			return last, fmt.Errorf("%w after %s: %d of %d runs terminal (%v)", ErrTimeout, timeout, last.Terminal(), len(ids), last.ByStatus)
		}
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-time.After(25 * time.Millisecond):
		}
	}
}
