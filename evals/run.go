package evals

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"
	"time"
)

// Runner runs one task of the suite on the fleet and reports what it learnt.
type Runner func(ctx context.Context, t Task) Outcome

// Report is a suite's outcome against one team.
type Report struct {
	Suite string `json:"suite"`
	// Team names the team version the tasks ran against.
	Team     string        `json:"team"`
	Tasks    []TaskResult  `json:"tasks"`
	Duration time.Duration `json:"-"`
	Seconds  float64       `json:"seconds"`
	Totals   Totals        `json:"totals"`
}

// Totals sum a report's tasks.
type Totals struct {
	Tasks  int `json:"tasks"`
	Passed int `json:"passed"`
	// Failed counts the tasks with a failed assertion, Errors those that
	// could not be judged (no run, timeout, unreadable events).
	Failed int `json:"failed"`
	Errors int `json:"errors"`
	// Skipped counts the tasks that passed with an assertion skipped (a
	// judge without a model).
	Skipped  int     `json:"skipped"`
	CostUSD  float64 `json:"cost_usd"`
	Tokens   int64   `json:"tokens"`
	Turns    int     `json:"turns"`
	PassRate float64 `json:"pass_rate"`
}

// Failing reports whether any task failed or could not be judged.
func (r Report) Failing() bool { return r.Totals.Failed+r.Totals.Errors > 0 }

// Run runs the suite's tasks, at most cfg.Parallel at once, judges each as
// it ends (done, when not nil, hears of it: progress) and reports them in
// the suite's order.
func Run(ctx context.Context, s Suite, team string, cfg Config, run Runner, ev Evaluator, done func(TaskResult)) Report {
	cfg = cfg.WithDefaults()
	start := time.Now()
	results := make([]TaskResult, len(s.Tasks))
	sem := make(chan struct{}, cfg.Parallel)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i, t := range s.Tasks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			notRun := func() {
				results[i] = ev.Evaluate(ctx, t, Outcome{Err: fmt.Errorf("not run: interrupted before its turn (%w)", context.Cause(ctx))})
			}
			select {
			case sem <- struct{}{}:
				if ctx.Err() != nil {
					// Both were ready and select chose the slot at random: the
					// interruption wins, no task starts after it.
					<-sem
					notRun()
					return
				}
			case <-ctx.Done():
				notRun()
				return
			}
			defer func() { <-sem }()
			results[i] = ev.Evaluate(ctx, t, run(ctx, t))
			if done != nil {
				mu.Lock()
				done(results[i])
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	rep := Report{Suite: s.Name, Team: team, Tasks: results, Duration: time.Since(start)}
	rep.Seconds = rep.Duration.Seconds()
	rep.Totals = totals(results)
	return rep
}

func totals(results []TaskResult) Totals {
	t := Totals{Tasks: len(results)}
	for _, r := range results {
		switch {
		case r.Error != "":
			t.Errors++
		case !r.Pass:
			t.Failed++
		default:
			t.Passed++
			if r.hasSkipped() {
				t.Skipped++
			}
		}
		t.CostUSD += r.CostUSD
		t.Tokens += r.Tokens
		t.Turns += r.Turns
	}
	if t.Tasks > 0 {
		t.PassRate = float64(t.Passed) / float64(t.Tasks)
	}
	return t
}

func (r TaskResult) hasSkipped() bool {
	for _, a := range r.Assertions {
		if a.Status == Skipped {
			return true
		}
	}
	return false
}

// IdempotencyKey is the submission key of a task's run against a team
// (teamID: what identifies the team version, a template's name or a team
// file's hash): the same suite, task and team give the same key, so a suite
// run again after a lost connection or an interrupt picks up the runs it
// already submitted instead of starting them twice. salt, when not empty,
// makes new keys (new runs).
func IdempotencyKey(s Suite, t Task, teamID, salt string) string {
	h := sha256.New()
	// Everything the submission carries: another prompt, variable or
	// project is another request, which the API would refuse under a used key.
	_ = json.NewEncoder(h).Encode([]any{s.Name, t.Name, t.Prompt, s.VariablesOf(t), t.Project, teamID, salt})
	return "eval-" + hex.EncodeToString(h.Sum(nil))[:40]
}
