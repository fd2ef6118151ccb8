package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aetherium-engine/aetherium/internal/harness"
)

// restoredResumeAfter is scheduler.resume_after of the restored fleet: its
// Redis is empty, so every run that was running at the dump waits for the
// scheduler to wake it. Short, so the drill does not wait the product's 5 min.
const restoredResumeAfter = 5 * time.Second

// drillBackup: the backup and restore of docs/backup.md. pg_dump runs while
// runs are in flight (some finished, some mid-turn); the dump is restored into a
// fresh database, migrated by this build, and a new fleet starts on it with an
// empty Redis (nothing of the old queue state survives). Every run that was
// terminal in the dump is intact (the same status, result, sessions,
// delegations, model answers and audit rows as the source database), every run
// that was in flight finishes — queued runs re-enqueued by the scheduler,
// running ones woken by it (scheduler.resume_after) — and the counts prove
// nothing half-written and nothing run twice.
func drillBackup(ctx context.Context, e *env, r *report) error {
	c, err := newCluster(ctx, e, "backup", clusterOpts{workers: 2, concurrency: e.o.concurrency, latency: e.o.latency})
	if err != nil {
		return err
	}
	defer c.close()
	// A dump worth the name holds finished runs and runs mid-flight: a first
	// wave finishes, a second is mid-turn when pg_dump starts.
	n := max(2, e.o.runs)
	ids, err := c.submitTeam(ctx, n/2, 0)
	if err != nil {
		return err
	}
	if _, err := harness.WaitTerminal(ctx, c.pool, ids, 3*time.Minute, nil); err != nil {
		return fmt.Errorf("the first wave: %w", err)
	}
	second, err := c.submitTeam(ctx, n-n/2, 0)
	if err != nil {
		return err
	}
	ids = append(ids, second...)
	inFlight := 0
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline) && inFlight < 2; time.Sleep(20 * time.Millisecond) {
		inFlight = c.inFlightTurns(ctx)
	}
	done, err := terminalCount(ctx, c.pool, ids)
	if err != nil {
		return err
	}
	dump := filepath.Join(c.dir, "aetherium.dump")
	start := time.Now()
	if raw, err := exec.CommandContext(ctx, "pg_dump", "--format=custom", "--no-owner", "--file="+dump, c.dbURL).CombinedOutput(); err != nil {
		return fmt.Errorf("pg_dump: %v\n%s", err, raw)
	}
	fi, err := os.Stat(dump)
	if err != nil {
		return err
	}
	say("pg_dump under load: %d kB in %.1fs (before it: %d of %d runs terminal, %d turns in flight)", fi.Size()/1024, time.Since(start).Seconds(), done, n, inFlight)
	r.check(done > 0 && done < n && inFlight > 0, "pg_dump ran with runs finished (%d) and runs in flight (%d of %d not terminal, %d turns mid-step)", done, n-done, n, inFlight)
	// The old fleet is gone (its database stays, to compare with); nothing of
	// its Redis reaches the new fleet.
	for _, p := range c.procs() {
		p.Stop(10 * time.Second)
	}

	var atDump map[string]string
	var pending []string
	c2, err := newCluster(ctx, e, "restored", clusterOpts{
		workers: 2, concurrency: e.o.concurrency, latency: e.o.latency, restore: dump,
		fleet: func(fc *harness.FleetConfig) { fc.ResumeAfter = restoredResumeAfter },
		restored: func(ctx context.Context, pool *pgxpool.Pool) error {
			var err error
			if atDump, err = runPrints(ctx, pool, ids); err != nil {
				return err
			}
			for _, id := range ids {
				if _, ok := atDump[id]; !ok {
					pending = append(pending, id)
				}
			}
			return nil
		},
	})
	if err != nil {
		return err
	}
	defer c2.close()
	say("restored into %s and migrated: %d runs terminal in the dump, %d in flight; a new fleet on an empty Redis", c2.db, len(atDump), len(pending))
	r.check(len(atDump) >= done, "the dump holds every run terminal before it began (%d ≥ %d)", len(atDump), done)

	if !waitRuns(ctx, c2, r, ids, 4*time.Minute) {
		return nil
	}
	verifyCounts(ctx, c2, r, ids)
	say("  note: the restored scheduler re-enqueued %d queued run(s) and woke %d stalled run(s)",
		c2.requeued(), c2.logLines("woke a stalled run"))

	// Terminal in the dump: untouched by the new fleet, and what the source holds.
	after, err := runPrints(ctx, c2.pool, ids)
	if err != nil {
		return err
	}
	source, err := runPrints(ctx, c.pool, ids)
	if err != nil {
		return err
	}
	var changed, differs []string
	for id, p := range atDump {
		if after[id] != p {
			changed = append(changed, id+": "+p+" → "+after[id])
		}
		if source[id] != p {
			differs = append(differs, id+": restored "+p+", source "+source[id])
		}
	}
	slices.Sort(changed)
	slices.Sort(differs)
	r.check(len(differs) == 0, "every run terminal in the dump matches the source database (status, result, sessions, messages, delegations, answers, audit): %d differ%s", len(differs), firstOf(differs))
	r.check(len(changed) == 0, "the restored fleet left the runs terminal in the dump as they were: %d changed%s", len(changed), firstOf(changed))
	c2.alive(r)
	return nil
}

// firstOf is the first of xs, for a check's message.
func firstOf(xs []string) string {
	if len(xs) == 0 {
		return ""
	}
	return "; e.g. " + xs[0]
}

func terminalCount(ctx context.Context, pool *pgxpool.Pool, ids []string) (int, error) {
	var n int
	err := pool.QueryRow(ctx, `SELECT count(*) FROM runs WHERE id = ANY($1::uuid[]) AND status IN ('completed','failed','cancelled')`, ids).Scan(&n)
	return n, err
}

// runPrints fingerprints the terminal runs of ids: status, result, error,
// reason and the counts of what they wrote.
func runPrints(ctx context.Context, pool *pgxpool.Pool, ids []string) (map[string]string, error) {
	rows, err := pool.Query(ctx, `SELECT r.id::text, format('%s|%s|%s|%s|sessions %s|messages %s|delegations %s|answers %s|audit %s',
			r.status, md5(coalesce(r.result, '')), md5(coalesce(r.error, '')), coalesce(r.reason, ''),
			(SELECT count(*) FROM sessions s WHERE s.run_id = r.id),
			(SELECT coalesce(sum(jsonb_array_length(session_history(s.id))), 0) FROM sessions s WHERE s.run_id = r.id),
			(SELECT count(*) FROM delegations d WHERE d.run_id = r.id),
			(SELECT count(*) FROM run_events e WHERE e.run_id = r.id AND e.type = 'agent.message'),
			(SELECT count(*) FROM tool_audit a WHERE a.run_id = r.id))
		FROM runs r WHERE r.id = ANY($1::uuid[]) AND r.status IN ('completed','failed','cancelled')`, ids)
	if err != nil {
		return nil, fmt.Errorf("fingerprint runs: %w", err)
	}
	out := map[string]string{}
	var id, p string
	if _, err := pgx.ForEachRow(rows, []any{&id, &p}, func() error { out[id] = p; return nil }); err != nil {
		return nil, fmt.Errorf("fingerprint runs: %w", err)
	}
	return out, nil
}

// pgRestore restores a custom-format pg_dump archive into the (empty) database
// at url, as docs/backup.md says to.
func pgRestore(ctx context.Context, archive, url string) error {
	if raw, err := exec.CommandContext(ctx, "pg_restore", "--no-owner", "--exit-on-error", "--dbname="+url, archive).CombinedOutput(); err != nil {
		return fmt.Errorf("pg_restore %s: %v\n%s", archive, err, raw)
	}
	return nil
}
