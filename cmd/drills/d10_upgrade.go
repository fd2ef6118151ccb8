package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/aetherium-engine/aetherium/internal/harness"
)

// upgradeFrom is N−1 of the rolling-upgrade drill: 47fb11f, the last commit of
// main before versioned contracts (issue 46). Its task payloads are all of
// contract 1 (no "v" field) and it registers nowhere but in asynq's worker
// heartbeats, so the drill covers the upgrade every deployment of that time
// makes — the previous commit that changed a payload (598d585, the retention
// tick) has the same payload contract and the same lease layout (the shared
// hash tag, 561c02b, is older still), so this is also the newest commit with
// it. A fixed commit, not main~N: the drill must build the same N−1 on every
// run and from a fresh clone (CI clones the whole history). When a later
// change raises queue.ContractVersion again, move this to the last commit
// that writes the previous version. DRILL_UPGRADE_FROM overrides it.
const upgradeFrom = "47fb11f"

// drillUpgrade: a rolling upgrade with runs in flight. The fleet starts from
// the older build (built from git, cached by commit), schema migrated by it;
// runs are submitted; then in the documented order (docs/how-to/upgrade.md)
// the current build migrates the schema, replaces the API, then each worker
// one at a time (a new one started, an old one stopped with SIGTERM, which
// hands its steps back), then the scheduler, with a wave of runs after each
// step. Every run must complete, nothing run twice (sessions, delegation
// events, audit rows: verifyCounts), no task refused for its format (no
// archived task, no "contract is newer" or "bad payload" in any log), and the
// fleet must end writing the new contract.
func drillUpgrade(ctx context.Context, e *env, r *report) error {
	from := envStr("DRILL_UPGRADE_FROM", upgradeFrom)
	oldBin, cold, err := buildAt(ctx, e.root, from)
	if err != nil {
		return err
	}
	if cold > 0 {
		say("built N-1 (%s) in %.0fs (cold; cached for the next run)", from, cold.Seconds())
	} else {
		say("N-1 (%s) from the cache: %s", from, oldBin)
	}
	start := time.Now()
	c, err := newCluster(ctx, e, "upgrade", clusterOpts{workers: 2, concurrency: e.o.concurrency, latency: e.o.latency, bin: oldBin})
	if err != nil {
		return err
	}
	defer c.close()
	wave := max(4, e.o.runs/4)
	var ids []string
	submit := func(stage string) bool {
		got, err := c.submitTeam(ctx, wave, 30*time.Second)
		ids = append(ids, got...)
		return r.check(err == nil, "%s: the API accepted %d runs%s", stage, wave, errText(err))
	}
	if !submit("N-1 fleet") {
		return nil
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && c.inFlightTurns(ctx) < 2; {
		time.Sleep(20 * time.Millisecond)
	}
	say("runs in flight on the N-1 fleet: %d turns", c.inFlightTurns(ctx))

	// 1. Migrate with the new build while N-1 runs on the schema.
	r.check(harness.Migrate(ctx, e.bin, c.cfgPath) == nil, "the current build migrated the schema under the running N-1 fleet")
	c.bin = e.bin
	// 2. The API.
	c.api.Stop(10 * time.Second)
	if c.api, err = harness.StartAPI(c.bin, c.cfgPath, filepath.Join(c.dir, "api-new.log"), c.apiAddr); err != nil {
		return err
	}
	say("API replaced by the current build")
	if !submit("new API, N-1 workers") {
		return nil
	}
	// 3. The workers, one at a time.
	for i := range c.workers {
		nw, err := c.startWorker()
		if err != nil {
			return err
		}
		old := c.workers[i]
		old.Stop(10 * time.Second)
		c.workers[i] = nw
		say("worker %d replaced (old pid %d, new pid %d)", i, old.Pid(), nw.Pid())
		if !submit(fmt.Sprintf("after worker %d", i)) {
			return nil
		}
	}
	// 4. The scheduler.
	c.sched.Stop(10 * time.Second)
	if c.sched, err = harness.StartScheduler(c.bin, c.cfgPath, filepath.Join(c.dir, "scheduler-new.log")); err != nil {
		return err
	}
	say("scheduler replaced; the whole fleet runs the current build (%.0fs)", time.Since(start).Seconds())
	// Once the old processes' heartbeats are gone, the fleet writes the new contract.
	agreed := false
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && !agreed; {
		agreed = c.logLines(`"fleet contract version"`) > 0 && strings.Contains(readLog(c.api.Log), `"writes":2`)
		if !agreed {
			time.Sleep(100 * time.Millisecond)
		}
	}
	r.check(agreed, "the new API writes contract 2 once no N-1 process is left (its log: fleet contract version writes=2)")
	if !submit("current fleet") {
		return nil
	}
	if !waitRuns(ctx, c, r, ids, 3*time.Minute) {
		return nil
	}
	verifyCounts(ctx, c, r, ids)
	ins := c.inspector()
	defer ins.Close()
	archived := 0
	for _, q := range []string{"supervisor", "workers", "maintenance"} {
		if qi, err := ins.GetQueueInfo(q); err == nil {
			archived += qi.Archived
		}
	}
	r.check(archived == 0, "no task archived (dead-lettered) in any queue: %d", archived)
	refused := c.logLines("contract is newer") + c.logLines("bad payload") + c.logLines("format is newer")
	r.check(refused == 0, "no task refused for its format in any process log: %d", refused)
	var rows, v2 int
	if err := c.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE contract = 2) FROM fleet_processes WHERE seen_at > now() - interval '20 seconds'`).Scan(&rows, &v2); err == nil {
		r.check(rows == 4 && v2 == 4, "fleet_processes: %d live processes (api, 2 workers, scheduler), %d of them at contract 2", rows, v2)
	} else {
		r.fail("fleet_processes: %v", err)
	}
	say("upgrade drill fleet time: %.0fs (N-1 build excluded)", time.Since(start).Seconds())
	c.alive(r)
	return nil
}

func readLog(path string) string {
	raw, _ := os.ReadFile(path)
	return string(raw)
}

// buildAt builds ./cmd/aetherium of commit (CGO off, -trimpath, as `make
// build`) from a `git archive` of it, into the user cache directory keyed by
// the full commit hash ($XDG_CACHE_HOME/aetherium/drill-bin/<hash>/aetherium),
// and returns the binary and, when it was not cached, how long the build took.
func buildAt(ctx context.Context, root, commit string) (string, time.Duration, error) {
	full, err := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "--verify", commit+"^{commit}").Output()
	if err != nil {
		return "", 0, fmt.Errorf("N-1 commit %s is not in %s (a shallow clone? fetch the history): %w", commit, root, err)
	}
	hash := strings.TrimSpace(string(full))
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "aetherium", "drill-bin", hash)
	bin := filepath.Join(dir, "aetherium")
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() {
		return bin, 0, nil
	}
	start := time.Now()
	src, err := os.MkdirTemp("", "aetherium-n-1-")
	if err != nil {
		return "", 0, err
	}
	defer os.RemoveAll(src)
	archive := exec.CommandContext(ctx, "sh", "-c", `git -C "$1" archive --format=tar "$2" | tar -x -C "$3"`, "sh", root, hash, src)
	if raw, err := archive.CombinedOutput(); err != nil {
		return "", 0, fmt.Errorf("git archive %s: %v\n%s", hash, err, raw)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", 0, err
	}
	tmp := bin + ".tmp"
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", tmp, "./cmd/aetherium")
	build.Dir = src
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if raw, err := build.CombinedOutput(); err != nil {
		return "", 0, fmt.Errorf("go build ./cmd/aetherium at %s: %v\n%s", hash, err, raw)
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", 0, err
	}
	return bin, time.Since(start), nil
}
