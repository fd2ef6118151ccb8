package main

import (
	"context"
	"strings"
	"time"

	"github.com/hibiken/asynq"
)

// inFlightTurns counts worker sessions whose step lease is live: agent turns in
// progress on some worker right now.
func (c *cluster) inFlightTurns(ctx context.Context) int {
	var n int
	_ = c.pool.QueryRow(ctx, `SELECT count(*) FROM sessions WHERE role = 'worker' AND status <> 'done' AND lease_until > now()`).Scan(&n)
	return n
}

// recovered lists the tasks asynq handed back after their worker died: finished
// tasks whose last failure is an expired lease.
func recovered(ins *asynq.Inspector) map[string]int {
	out := map[string]int{}
	for _, q := range []string{"supervisor", "workers"} {
		for page := 1; ; page++ {
			ts, err := ins.ListCompletedTasks(q, asynq.PageSize(500), asynq.Page(page))
			if err != nil || len(ts) == 0 {
				break
			}
			for _, t := range ts {
				if strings.Contains(t.LastErr, "lease expired") {
					out[t.Type]++
				}
			}
		}
	}
	return out
}

// drillKill: while runs execute, kill -9 one of two workers in the middle of agent
// turns — just as a fresh wave of supervisors delegates; a process manager
// restarts it. asynq hands the dead worker's tasks back
// once their 30 s lease has been expired for 30 s (its recoverer runs each minute),
// the step lease lets the new delivery take the session, and the run goes on from
// its last save.
func drillKill(ctx context.Context, e *env, r *report) error {
	// Once turns are in flight on the workers, kill one of them.
	c, ids, inFlight, err := underLoad(ctx, e, "kill")
	if err != nil {
		return err
	}
	defer c.close()
	ins := c.inspector()
	defer ins.Close()
	n := e.o.runs
	victim := c.workers[0]
	// And a fresh wave of runs, killed about when their supervisors delegate: the
	// crash then also cuts steps that have just dispatched calls. The other worker
	// is frozen for that moment (SIGSTOP, as a long pause would), so the wave's
	// first steps run on the victim.
	other := c.workers[1]
	other.Pause()
	wave, err := c.submitTeam(ctx, max(10, n/5), 0)
	if err != nil {
		other.Resume()
		return err
	}
	ids = append(ids, wave...)
	// Kill as soon as a supervisor of the wave has delegated and saved its session
	// as waiting: its calls ran, their results are the delegations, and nothing
	// will run them again — their audit rows must have landed with that save.
	deadline := time.Now().Add(30 * time.Second)
	waiting := 0
	for time.Now().Before(deadline) {
		if c.pool.QueryRow(ctx, `SELECT count(*) FROM sessions WHERE run_id = ANY($1::uuid[]) AND role = 'supervisor' AND status = 'waiting'`, wave).Scan(&waiting) == nil && waiting > 0 {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	inFlight = c.inFlightTurns(ctx)
	killedAt := time.Now()
	victim.Kill()
	other.Resume()
	say("kill -9 worker pid %d with %d agent turns in flight, %d runs just started on it (%d of their supervisors had just delegated); the other worker resumed", victim.Pid(), inFlight, len(wave), waiting)
	r.check(inFlight > 0, "the kill came while agent turns were in flight (%d)", inFlight)
	// A process manager restarts the crashed worker.
	time.Sleep(time.Second)
	restarted, err := c.startWorker()
	if err != nil {
		return err
	}
	c.workers[0] = restarted
	say("restarted the worker as pid %d; waiting for asynq to hand back the dead worker's tasks (about a minute)", restarted.Pid())

	if !waitRuns(ctx, c, r, ids, 4*time.Minute) {
		return nil
	}
	say("all runs terminal %.0fs after the kill", time.Since(killedAt).Seconds())
	rec := recovered(ins)
	r.check(rec["agent:turn"] > 0, "the kill interrupted agent turns: %d turn task(s) and %d supervisor step(s) were handed back after the worker died and then finished",
		rec["agent:turn"], rec["run:supervise"])
	verifyCounts(ctx, c, r, ids)
	c.alive(r)
	return nil
}
