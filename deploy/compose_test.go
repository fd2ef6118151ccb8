package deploy_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/testinfra"
)

// The file write_file writes and run_shell reads back in the sandbox.
const (
	noteFile    = "note.txt"
	noteContent = "written by write_file in a compose worker\n"
)

// shellTeam is a script team whose worker writes a file with write_file, then reads
// it with run_shell in its sandbox (a container of the host's engine, bind-mounting
// the workspace the worker container mounted): the workspace paths of host and
// worker container agree, or the sandbox sees nothing. sleep keeps the call in
// flight long enough for a worker to be killed under it.
func shellTeam(sleep time.Duration) map[string]any {
	cmd := "cat " + noteFile
	if sleep > 0 {
		cmd = fmt.Sprintf("sleep %d && %s", int(sleep.Seconds()), cmd)
	}
	return map[string]any{
		"name": "compose-shell", "model": map[string]any{"provider": "script"},
		"supervisor": map[string]any{"name": "boss", "prompt": "coordinate", "mcp_servers": []string{"orchestration"}},
		"workers": []map[string]any{{
			"name": "writer", "prompt": "write, then read in the shell",
			"mcp_servers": []string{"workspace", "shell"}, "tools": []string{"write_file", "run_shell"},
		}},
		"script": map[string]any{"agents": map[string]any{
			"boss": []map[string]any{
				{"calls": []map[string]any{{"tool": "delegate", "args": map[string]any{"agent": "writer", "task": "write and read"}}}},
				{"calls": []map[string]any{{"tool": "reply", "args": map[string]any{"message": "done"}}}},
			},
			"writer": []map[string]any{
				{"calls": []map[string]any{{"tool": "write_file", "args": map[string]any{"path": noteFile, "content": noteContent}}}},
				{"calls": []map[string]any{{"tool": "run_shell", "args": map[string]any{"command": cmd}}}},
				{"say": "done"},
			},
		}},
	}
}

// The stand-in web site of the egress checks: a container of the sandbox image
// (busybox httpd) on the compose network, answering as site.test (allowlisted) and
// other.test (not).
const (
	siteHello = "hello from the stand-in site\n"
	// playPage's button throws: play_test must find it.
	playPage = `<!doctype html><html><body><button onclick="boom()">Boom</button></body></html>`
)

// egressTeam is a script team with allowed_domains whose writer runs one script
// of worker calls. Two of them, the shell's and the browser's, in two runs: the
// flow rules hold (for a human) a shell call of a session that read untrusted
// content (a captured page), and an outbound call of one that read untrusted
// content and private data (a shell with a network reads both).
func egressTeam(name string, hostPort int, writer []map[string]any) map[string]any {
	return scriptTeam(name, map[string]any{
		"name": "writer", "prompt": "reach the site",
		"mcp_servers": []string{"workspace", "shell", "research", "quality"},
	}, append(writer, map[string]any{"say": "done"}), map[string]any{
		"allowed_domains": []string{"site.test", "host.docker.internal"},
		"egress_ports":    []int{hostPort},
	})
}

// scriptTeam is a team of the script model whose boss delegates to its one
// worker, then replies; steps are the worker's script, extra the team's other keys.
func scriptTeam(name string, worker map[string]any, steps []map[string]any, extra map[string]any) map[string]any {
	team := map[string]any{
		"name": name, "model": map[string]any{"provider": "script"},
		"supervisor": map[string]any{"name": "boss", "prompt": "coordinate", "mcp_servers": []string{"orchestration"}},
		"workers":    []map[string]any{worker},
		"script": map[string]any{"agents": map[string]any{
			"boss": []map[string]any{
				{"calls": []map[string]any{{"tool": "delegate", "args": map[string]any{"agent": worker["name"], "task": "go"}}}},
				{"calls": []map[string]any{{"tool": "reply", "args": map[string]any{"message": "done"}}}},
			},
			worker["name"].(string): steps,
		}},
	}
	for k, v := range extra {
		team[k] = v
	}
	return team
}

// shellEgressTeam reaches the stand-in site from its shell through the egress
// service and the worker's proxy, and is refused a name the allowlist lacks and
// the host itself (the egress service's API, allowlisted by name and port: the
// address refuses it), in one run_shell.
func shellEgressTeam(hostPort int) map[string]any {
	cmd := "wget -q -O - http://site.test/hello.txt; echo rc=$?; " +
		"wget -q -O - http://other.test/hello.txt 2>&1; echo rc=$?; " +
		fmt.Sprintf("wget -q -O - http://host.docker.internal:%d/v1/state 2>&1; echo rc=$?", hostPort)
	return egressTeam("compose-shell-egress", hostPort, []map[string]any{
		{"calls": []map[string]any{{"tool": "run_shell", "args": map[string]any{"command": cmd}}}},
	})
}

// browserTeam plays a workspace page with play_test and captures a page of the
// stand-in site with capture_reference: Chromium on the run's network, its
// traffic through the egress service and the worker's proxy.
func browserTeam(hostPort int) map[string]any {
	return egressTeam("compose-browser", hostPort, []map[string]any{
		{"calls": []map[string]any{{"tool": "write_file", "args": map[string]any{"path": "index.html", "content": playPage}}}},
		{"calls": []map[string]any{{"tool": "play_test", "args": map[string]any{"page": "index.html"}}}},
		{"calls": []map[string]any{{"tool": "capture_reference", "args": map[string]any{"url": "http://site.test/palette.html"}}}},
	})
}

// gpuConfig is the fleet's configuration file (AETHERIUM_CONFIG_FILE): the comfyui
// service, the ComfyUI simulator behind its fencing proxy, both started by the
// workers on the compose network (deploy/aetherium.yaml's example). idle_stop
// outlives the checks, which read the running simulator's request log (the test
// removes both containers before down).
func gpuConfig(project string) string {
	return fmt.Sprintf(`streams:
  leases:
    services:
      - name: comfyui
        capacity: 1
        ttl: 30s
        image: aetherium/comfysim:latest
        container: %[1]s-comfyui
        network: %[1]s_default
        env: ["COMFYSIM_STEP_DELAY=20ms"]
        health_url: http://%[1]s-comfyui:8188/system_stats
        start_timeout: 60s
        idle_stop: 10m
        fence:
          image: aetherium/fenceproxy:latest
          container: %[1]s-comfyui-fence
          network: %[1]s_default
          listen: %[1]s-comfyui-fence:8190
          upstream: http://%[1]s-comfyui:8188
          redis: redis://redis:6379/0
`, project)
}

// artistTeam leases the comfyui service and draws one small image through its
// fencing proxy.
func artistTeam() map[string]any {
	return scriptTeam("compose-studio", map[string]any{"name": "artist", "prompt": "draw", "tools": []string{"comfyui_generate"}},
		[]map[string]any{
			{"calls": []map[string]any{{"tool": "comfyui_generate", "args": map[string]any{"prompt": "a hero", "width": 64, "height": 64, "filename": "hero"}}}},
			{"say": "drawn"},
		}, map[string]any{"gpu_services": []string{"comfyui"}, "image_model": "sd"})
}

// TestCompose starts docker-compose.yml with three workers and checks what issue 24
// asks of the deployment; see the package comment.
func TestCompose(t *testing.T) {
	if os.Getenv("AETHERIUM_COMPOSE_TEST") != "1" {
		t.Skip("AETHERIUM_COMPOSE_TEST=1 runs the compose deployment for real (minutes, root, the Docker engine)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	t.Cleanup(cancel)
	start := time.Now()
	logf := func(format string, a ...any) {
		t.Logf("%s [+%5.1fs] %s", time.Now().UTC().Format("15:04:05"), time.Since(start).Seconds(), fmt.Sprintf(format, a...))
	}

	require.Zero(t, os.Geteuid(), "the compose test needs root (a shared mount for the workspaces, loop devices in the workers)")
	compose, err := exec.LookPath("docker-compose")
	require.NoError(t, err, "docker-compose (Debian's package) is needed")
	_, err = exec.LookPath("docker")
	require.NoError(t, err)
	repo, err := testinfra.RepoRoot()
	require.NoError(t, err)

	logf("building the images (make sandbox-image, the browser image, scripts/deploy-images.sh; cached by hash)")
	run(t, ctx, repo, nil, "make", "sandbox-image")
	run(t, ctx, repo, nil, "bash", "sandbox/images/build.sh", "browser")
	run(t, ctx, repo, nil, "bash", "scripts/gpu-images.sh")
	run(t, ctx, repo, nil, "bash", "scripts/deploy-images.sh")
	logf("images ready")

	// The workspaces: a host directory on a shared mount, at the same path in the
	// workers (docker-compose.yml's comment).
	ws, err := os.MkdirTemp("", "aetherium-compose-ws-")
	require.NoError(t, err)
	run(t, ctx, "", nil, "mount", "--bind", ws, ws)
	run(t, ctx, "", nil, "mount", "--make-rshared", ws)
	t.Cleanup(func() { removeWorkspaces(t, ws) })

	project := "aethct" + randHex(t, 4)
	secret := randHex(t, 16)
	sum := sha256.Sum256([]byte(secret))
	apiPort, promPort, egressPort := freePort(t), freePort(t), freePort(t)
	cfgFile := t.TempDir() + "/aetherium.yaml"
	require.NoError(t, os.WriteFile(cfgFile, []byte(gpuConfig(project)), 0o644))
	gpuContainers := []string{project + "-comfyui", project + "-comfyui-fence"}
	env := append(os.Environ(),
		"AETHERIUM_CONFIG_FILE="+cfgFile,
		"AETHERIUM_HOST_WORKSPACES="+ws,
		"AETHERIUM_EGRESS_PORT="+strconv.Itoa(egressPort),
		"AETHERIUM_API_PORT="+strconv.Itoa(apiPort),
		"AETHERIUM_PROMETHEUS_PORT="+strconv.Itoa(promPort),
		"AETHERIUM_API_TOKEN_SHA256="+hex.EncodeToString(sum[:]),
	)
	dc := func(args ...string) string {
		t.Helper()
		return run(t, ctx, repo, env, compose, append([]string{"-f", "docker-compose.yml", "-p", project}, args...)...)
	}
	var scope string // the fleet's id: the sandbox scope label of what workers made
	t.Cleanup(func() {
		// Always: whatever the test did, nothing of this project stays on the engine.
		cctx, ccancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer ccancel()
		if t.Failed() {
			lc := exec.CommandContext(cctx, compose, "-f", "docker-compose.yml", "-p", project, "logs", "--no-color", "--tail", "40")
			lc.Dir, lc.Env = repo, env
			out, _ := lc.CombinedOutput()
			t.Logf("compose logs (last 40 lines each):\n%s", out)
		}
		c := exec.CommandContext(cctx, compose, "-f", "docker-compose.yml", "-p", project, "down", "-v", "--remove-orphans", "-t", "10")
		c.Dir, c.Env = repo, env
		if out, err := c.CombinedOutput(); err != nil {
			t.Logf("cleanup: down: %v\n%s", err, out)
		}
		removeLabelled(cctx, t, "label=com.docker.compose.project="+project)
		if scope != "" {
			removeLabelled(cctx, t, "label=io.aetherium.sandbox.scope="+scope)
		}
	})

	// Before down (cleanups run last first): the GPU containers hold the network.
	t.Cleanup(func() { _ = exec.Command("docker", append([]string{"rm", "-f"}, gpuContainers...)...).Run() })

	logf("docker-compose -p %s up -d --scale worker=3 (api on 127.0.0.1:%d, prometheus on :%d)", project, apiPort, promPort)
	dc("up", "-d", "--scale", "worker=3")
	api := &client{base: fmt.Sprintf("http://127.0.0.1:%d", apiPort), token: secret, http: &http.Client{Timeout: 30 * time.Second}}
	require.NoError(t, api.waitReady(ctx, 90*time.Second), "the API answers /readyz")
	code, _, err := api.do(ctx, "GET", "/api/runs", nil, false)
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, code, "beyond loopback (in its container) the API demands the token")
	pg := containerOf(t, ctx, project, "postgres")
	scope = strings.TrimSpace(psql(t, ctx, pg, "SELECT id FROM fleet_identity LIMIT 1"))
	require.NotEmpty(t, scope, "the fleet has an id (the sandbox scope)")
	logf("fleet up: scope %s", scope)
	api.pending = func(id string) string {
		return psql(t, ctx, pg, fmt.Sprintf(`SELECT string_agg(tool || ': ' || why, E'\n') FROM approvals WHERE run_id = '%s' AND status = 'pending'`, id))
	}

	// Only the egress service is in the host's network namespace, and only it
	// has NET_ADMIN.
	up := strings.Fields(run(t, ctx, "", nil, "docker", "ps", "-q", "--filter", "label=com.docker.compose.project="+project))
	inspected := run(t, ctx, "", nil, "docker", append([]string{"inspect", "-f",
		`{{index .Config.Labels "com.docker.compose.service"}} {{.HostConfig.NetworkMode}} net_admin={{range .HostConfig.CapAdd}}{{if eq . "NET_ADMIN" "CAP_NET_ADMIN"}}yes{{end}}{{end}}`}, up...)...)
	sawEgress := false
	for _, line := range strings.Split(strings.TrimSpace(inspected), "\n") {
		out := strings.Fields(line)
		require.Len(t, out, 3, "%v", out)
		sawEgress = sawEgress || out[0] == "egress"
		if out[0] == "egress" {
			require.Equal(t, []string{"host", "net_admin=yes"}, out[1:], "the egress service")
		} else {
			require.NotEqual(t, "host", out[1], "service %s", out[0])
			require.Equal(t, "net_admin=", out[2], "service %s", out[0])
		}
	}
	require.True(t, sawEgress, "the egress service runs: %s", inspected)

	// The stand-in site on the compose network (names the workers resolve).
	site := startSite(t, ctx, project)
	logf("stand-in site %s on %s_default as site.test and other.test", site[:12], project)

	// 1. The demo run, write_file → run_shell on the same file, and sandbox
	// egress with the browser tools through the egress service.
	demo := api.submitTemplate(t, ctx, "demo", map[string]any{"topic": "compose"})
	shell := api.submitTeam(t, ctx, shellTeam(0))
	shellEgress := api.submitTeam(t, ctx, shellEgressTeam(egressPort))
	browser := api.submitTeam(t, ctx, browserTeam(egressPort))
	artist := api.submitTeam(t, ctx, artistTeam())
	// A staging run of a project, promoted below (the API sees the
	// workspaces read-only: a worker makes the copy).
	code, raw, err := api.do(ctx, "POST", "/api/projects", map[string]any{"slug": "site", "name": "Site"}, true)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code, "%s", raw)
	staged := api.submit(t, ctx, "/api/orchestrator/run-from-template", map[string]any{"template": "demo", "prompt": "compose test",
		"variables": map[string]any{"topic": "staged"}, "project": "site", "staging": true})
	for id, status := range api.waitTerminal(t, ctx, []string{demo, shell, shellEgress, browser, artist, staged}, 3*time.Minute, logf) {
		require.Equal(t, "completed", status, "run %s", id)
	}
	saw := psql(t, ctx, pg, fmt.Sprintf(`SELECT m->>'content' FROM sessions s, jsonb_array_elements(session_history(s.id)) m
		WHERE s.run_id = '%s' AND m->>'role' = 'tool' AND m->>'name' = 'run_shell'`, shell))
	require.Contains(t, saw, strings.TrimSpace(noteContent), "run_shell in the sandbox read the file write_file wrote in the worker")
	logf("demo and write_file → run_shell completed; the sandbox saw %q", strings.TrimSpace(noteContent))
	checkShellEgress(t, ctx, pg, shellEgress)
	checkBrowser(t, ctx, pg, browser)
	logf("egress through the egress service: the site reached, other.test and the host refused, capture_reference and play_test worked")
	checkFenced(t, ctx, pg, artist, gpuContainers)
	logf("a fenced lease of the comfyui simulator: drawn through the fencing proxy, every request with the run's token")
	code, raw, err = api.do(ctx, "POST", "/api/runs/"+staged+"/promote", nil, true)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, "promote: %s", raw)
	require.Equal(t, "1", strings.TrimSpace(psql(t, ctx, pg, `SELECT count(*) FROM project_audit WHERE action = 'workspace.promote'`)),
		"the promotion audited once")
	logf("the staging run promoted into its project by a worker: %s", raw)

	// 2. Load, a worker killed under it, more workers.
	const n = 20
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				ids[i] = api.submitTeam(t, ctx, shellTeam(3*time.Second))
			} else {
				ids[i] = api.submitTemplate(t, ctx, "demo", map[string]any{"topic": "load"})
			}
		}()
	}
	wg.Wait()
	require.NotContains(t, ids, "", "every submission was accepted")
	workers := containersOf(t, ctx, project, "worker")
	require.Len(t, workers, 3)
	time.Sleep(1500 * time.Millisecond) // the sleeping run_shell calls are in flight
	run(t, ctx, "", nil, "docker", "kill", workers[0])
	logf("%d runs submitted; killed worker %s (SIGKILL) mid-load", n, workers[0][:12])
	dc("up", "-d", "--scale", "worker=5", "--no-recreate")
	logf("scaled to 5 workers")
	statuses := api.waitTerminal(t, ctx, ids, 5*time.Minute, logf)
	counts := map[string]int{}
	for _, s := range statuses {
		counts[s]++
	}
	logf("all %d runs terminal: %v", n, counts)
	require.Equal(t, n, counts["completed"], "every run completed after the kill: %v", counts)

	// 3. Prometheus (in compose) scrapes every running worker, found by DNS.
	running := runningIPs(t, ctx, containersOf(t, ctx, project, "worker"))
	require.Len(t, running, 5, "five workers run after the scale-up")
	prom := fmt.Sprintf("http://127.0.0.1:%d/api/v1/targets?state=active", promPort)
	require.Eventually(t, func() bool {
		up, total := workerTargets(ctx, prom)
		logf("prometheus worker targets: %d up of %d (want the %d running workers)", len(up), total, len(running))
		if total != len(running) {
			return false
		}
		sort.Strings(up)
		return strings.Join(up, ",") == strings.Join(running, ",")
	}, 90*time.Second, 5*time.Second, "one up target per running worker")

	// Each worker says it is up (aetherium_worker_up, summed by the compose
	// Prometheus), and the API's asynqmon lists each one's asynq server (the killed
	// worker's entry expires with its heartbeat).
	require.Eventually(t, func() bool {
		v := promQuery(ctx, fmt.Sprintf("http://127.0.0.1:%d", promPort), "sum(aetherium_worker_up)")
		logf("prometheus sum(aetherium_worker_up) = %s", v)
		return v == strconv.Itoa(len(running))
	}, 60*time.Second, 5*time.Second, "sum(aetherium_worker_up) counts every running worker")
	require.Eventually(t, func() bool {
		code, raw, err := api.do(ctx, "GET", "/monitoring/api/servers", nil, true)
		var body struct {
			Servers []struct {
				Queues map[string]int `json:"queue_priorities"`
			} `json:"servers"`
		}
		if err != nil || code != http.StatusOK || json.Unmarshal(raw, &body) != nil {
			logf("asynqmon servers: HTTP %d: %.200s %v", code, raw, err)
			return false
		}
		workers := 0
		for _, s := range body.Servers {
			if _, ok := s.Queues["workers"]; ok {
				workers++
			}
		}
		logf("asynqmon: %d asynq servers, %d serving the workers queue", len(body.Servers), workers)
		return workers == len(running)
	}, 90*time.Second, 5*time.Second, "asynqmon lists one asynq server per running worker")

	// 4. Workers drain on stop, inside stop_grace_period (30 s), with run_shell
	// calls in flight: each finishes its steps and exits 0 (137 would be the grace
	// period's SIGKILL); started again, the workers finish the runs.
	var inFlight []string
	for range 6 {
		inFlight = append(inFlight, api.submitTeam(t, ctx, shellTeam(3*time.Second)))
	}
	time.Sleep(1500 * time.Millisecond)
	t0 := time.Now()
	dc("stop", "worker")
	stopTook := time.Since(t0)
	for _, id := range containersOf(t, ctx, project, "worker") {
		code := strings.TrimSpace(run(t, ctx, "", nil, "docker", "inspect", "-f", "{{.State.ExitCode}}", id))
		require.Equal(t, "0", code, "worker %s drained and exited on SIGTERM", id[:12])
	}
	require.Less(t, stopTook, 30*time.Second)
	logf("5 workers stopped under load (drained, exit 0) in %.1fs", stopTook.Seconds())
	dc("start", "worker")
	for id, status := range api.waitTerminal(t, ctx, inFlight, 3*time.Minute, logf) {
		require.Equal(t, "completed", status, "run %s, in flight at the stop", id)
	}
	logf("the %d runs in flight at the stop completed after the restart", len(inFlight))

	// Nothing ran twice (cmd/drills' checks): each delegation finished once; every
	// tool result in the sessions has its audit row and no call was audited twice.
	checkOnce := func(all []string) {
		arr := "'{" + strings.Join(all, ",") + "}'::uuid[]"
		twice := psql(t, ctx, pg, `WITH f AS (SELECT d.id, (SELECT count(*) FROM run_events e WHERE e.run_id = d.run_id
			AND e.type = 'delegation.finished' AND e.data->>'delegation_id' = d.id) AS n FROM delegations d WHERE d.run_id = ANY(`+arr+`))
			SELECT count(*) FILTER (WHERE n > 1) || ' ' || count(*) FILTER (WHERE n = 0) || ' ' || count(*) FROM f`)
		require.Equal(t, []string{"0", "0", strconv.Itoa(len(all))}, strings.Fields(twice), "delegations finished twice, never, in all")
		require.Eventually(t, func() bool {
			out := psql(t, ctx, pg, `WITH msgs AS (SELECT s.id || ':' || (m->>'tool_call_id') AS call_key
				FROM sessions s, jsonb_array_elements(session_history(s.id)) m WHERE s.run_id = ANY(`+arr+`) AND m->>'role' = 'tool')
				SELECT (SELECT count(*) FROM msgs) || ' ' || (SELECT count(DISTINCT call_key) FROM msgs) || ' ' ||
					(SELECT count(*) FROM msgs WHERE NOT EXISTS (SELECT 1 FROM tool_audit a WHERE a.call_key = msgs.call_key)) || ' ' ||
					(SELECT count(*) FROM tool_audit a WHERE a.run_id = ANY(`+arr+`)) || ' ' ||
					(SELECT count(DISTINCT call_key) FROM tool_audit a WHERE a.run_id = ANY(`+arr+`))`)
			f := strings.Fields(out)
			logf("tool results %s (distinct %s), unaudited %s, audit rows %s (distinct calls %s)", f[0], f[1], f[2], f[3], f[4])
			return len(f) == 5 && f[0] == f[1] && f[2] == "0" && f[3] == f[4] && f[0] == f[3]
		}, 60*time.Second, 2*time.Second, "one tool result and one audit row per call, none twice")
	}
	checkOnce(append(append([]string{demo, shell, shellEgress, browser, artist}, ids...), inFlight...))

	// 5. down -v leaves nothing: compose's own and what workers made on the host's
	// engine (sandboxes, their networks).
	run(t, ctx, "", nil, "docker", "rm", "-f", site)
	// The GPU containers are the host engine's (compose does not know them):
	// stopped when idle, removed here, or down cannot remove the network.
	_ = exec.CommandContext(ctx, "docker", append([]string{"rm", "-f"}, gpuContainers...)...).Run()
	dc("down", "-v", "-t", "10")
	for _, f := range []string{"label=com.docker.compose.project=" + project, "label=io.aetherium.sandbox.scope=" + scope} {
		for _, kind := range [][]string{{"ps", "-aq"}, {"network", "ls", "-q"}, {"volume", "ls", "-q"}} {
			args := append(append([]string{}, kind...), "--filter", f)
			out := strings.TrimSpace(run(t, ctx, "", nil, "docker", args...))
			require.Empty(t, out, "docker %s: nothing left after down -v", strings.Join(args, " "))
		}
	}
	logf("down -v: no container, network or volume of project %s or scope %s left", project, scope)
}

// startSite runs the stand-in site: busybox httpd of the sandbox image on the
// compose project's network, as site.test and other.test, serving hello.txt and
// the capture fixture palette.html. Removed when the test ends.
func startSite(t *testing.T, ctx context.Context, project string) string {
	t.Helper()
	repo, err := testinfra.RepoRoot()
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o755))
	pal, err := os.ReadFile(repo + "/toolbox/research/testdata/capture/palette.html")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(dir+"/hello.txt", []byte(siteHello), 0o644))
	require.NoError(t, os.WriteFile(dir+"/palette.html", pal, 0o644))
	id := strings.TrimSpace(run(t, ctx, "", nil, "docker", "run", "-d", "--rm", "--user", "0:0",
		"--network", project+"_default", "--network-alias", "site.test", "--network-alias", "other.test",
		"-v", dir+":/site:ro", "aetherium-sandbox:latest", "busybox", "httpd", "-f", "-p", "80", "-h", "/site"))
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", id).Run() })
	return id
}

// checkShellEgress reads what the shell egress run's run_shell returned and what
// its sandbox's proxy recorded.
func checkShellEgress(t *testing.T, ctx context.Context, pg, id string) {
	t.Helper()
	shell := toolResults(t, ctx, pg, id, "run_shell")
	require.Len(t, shell, 1)
	t.Logf("run_shell: %s", shell[0])
	require.Equal(t, 1, strings.Count(shell[0], strings.TrimSpace(siteHello)), "the shell reached the allowlisted site through the proxy, and only it")
	require.Equal(t, 1, strings.Count(shell[0], "rc=0"), shell[0])
	require.Equal(t, 2, strings.Count(shell[0], "rc=1"), "other.test and the host refused: %s", shell[0])
	require.Equal(t, 2, strings.Count(shell[0], "403"), shell[0])
	rows := psql(t, ctx, pg, fmt.Sprintf(`SELECT host || '|' || allowed || '|' || status || '|' || reason FROM egress_connections WHERE run_id = '%s' ORDER BY id`, id))
	byHost := map[string][]string{}
	for _, l := range strings.Split(strings.TrimSpace(rows), "\n") {
		if f := strings.SplitN(l, "|", 2); len(f) == 2 {
			byHost[f[0]] = append(byHost[f[0]], f[1])
		}
	}
	t.Logf("egress records: %v", byHost)
	require.NotEmpty(t, byHost["site.test"])
	require.True(t, strings.HasPrefix(byHost["site.test"][0], "true|200|"), "%v", byHost["site.test"])
	require.Len(t, byHost["other.test"], 1)
	require.Contains(t, byHost["other.test"][0], "false|0|", "%v", byHost)
	require.Contains(t, byHost["other.test"][0], "allowed_domains")
	require.Len(t, byHost["host.docker.internal"], 1)
	require.Contains(t, byHost["host.docker.internal"][0], "false|0|")
	require.Contains(t, byHost["host.docker.internal"][0], "this host")
}

// checkBrowser reads what the browser run's capture_reference and play_test
// returned and that the page came through the proxy.
func checkBrowser(t *testing.T, ctx context.Context, pg, id string) {
	t.Helper()
	capture := toolResults(t, ctx, pg, id, "capture_reference")
	require.Len(t, capture, 1)
	var page struct {
		Palette []struct {
			Hex   string  `json:"hex"`
			Share float64 `json:"share"`
		} `json:"palette"`
		Screenshots []struct {
			Path string `json:"path"`
		} `json:"screenshots"`
	}
	require.NoError(t, json.Unmarshal([]byte(capture[0]), &page), capture[0])
	require.Len(t, page.Screenshots, 2, capture[0])
	hexes := map[string]float64{}
	for _, p := range page.Palette {
		hexes[p.Hex] = p.Share
	}
	require.InDelta(t, 0.50, hexes["#1e3a8a"], 0.03, "the fixture's palette: %s", capture[0])

	play := toolResults(t, ctx, pg, id, "play_test")
	require.Len(t, play, 1)
	var played struct {
		Errors []struct{ Kind, Message, Control string }
	}
	require.NoError(t, json.Unmarshal([]byte(play[0]), &played), play[0])
	require.Len(t, played.Errors, 1, play[0])
	require.Equal(t, `button "Boom"`, played.Errors[0].Control)

	got := psql(t, ctx, pg, fmt.Sprintf(`SELECT count(*) FROM egress_connections WHERE run_id = '%s' AND host = 'site.test' AND allowed AND status = 200`, id))
	require.NotEqual(t, "0", strings.TrimSpace(got), "the browser's requests went through the proxy")
}

// checkFenced: the artist's comfyui_generate drew through the fencing proxy on
// the compose network, the simulator saw the run's token on every request but
// the controller's health checks, and the proxy refuses a request without one.
func checkFenced(t *testing.T, ctx context.Context, pg, id string, containers []string) {
	t.Helper()
	res := toolResults(t, ctx, pg, id, "comfyui_generate")
	require.Len(t, res, 1)
	require.Contains(t, res[0], "hero", res[0])
	ip := func(c string) string {
		return strings.TrimSpace(run(t, ctx, "", nil, "docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", c))
	}
	get := func(base, path string) (int, []byte) {
		code, raw, err := (&client{base: base, http: &http.Client{Timeout: 10 * time.Second}}).do(ctx, "GET", path, nil, false)
		require.NoError(t, err)
		return code, raw
	}
	code, raw := get("http://"+ip(containers[0])+":8188", "/_sim/requests")
	require.Equal(t, http.StatusOK, code, "%s", raw)
	var reqs []struct{ Method, Path, Token string }
	require.NoError(t, json.Unmarshal(raw, &reqs))
	require.NotEmpty(t, reqs)
	for _, q := range reqs {
		if q.Path != "/system_stats" { // the controller's health checks go straight to the service
			require.NotEmpty(t, q.Token, "%s %s reached the service without a token", q.Method, q.Path)
		}
	}
	code, raw = get("http://"+ip(containers[1])+":8190", "/system_stats")
	require.Equal(t, http.StatusConflict, code, "%s", raw)
	require.Contains(t, string(raw), "missing")
}

// toolResults are the contents of a run's tool messages of one tool, in order.
func toolResults(t *testing.T, ctx context.Context, pg, id, tool string) []string {
	t.Helper()
	out := psql(t, ctx, pg, fmt.Sprintf(`SELECT translate(encode(convert_to(m->>'content', 'UTF8'), 'base64'), E'\n', '') FROM sessions s,
		jsonb_array_elements(session_history(s.id)) WITH ORDINALITY AS h(m, i)
		WHERE s.run_id = '%s' AND m->>'role' = 'tool' AND m->>'name' = '%s' ORDER BY s.id, h.i`, id, tool))
	var res []string
	for _, l := range strings.Fields(out) {
		b, err := base64.StdEncoding.DecodeString(l)
		require.NoError(t, err)
		res = append(res, string(b))
	}
	return res
}

// client speaks to the published API with the bearer token.
type client struct {
	base, token string
	http        *http.Client
	// pending, when set, names a run's pending approvals: no run of this test
	// waits for a human, so waitTerminal fails at once on one that does.
	pending func(id string) string
}

func (c *client) do(ctx context.Context, method, path string, body any, auth bool) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if auth {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, raw, err
}

func (c *client) waitReady(ctx context.Context, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		code, raw, err := c.do(ctx, "GET", "/readyz", nil, false)
		if err == nil && code == http.StatusOK {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("readyz within %v: HTTP %d %s: %v", within, code, raw, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func (c *client) submit(t *testing.T, ctx context.Context, path string, body any) string {
	t.Helper()
	code, raw, err := c.do(ctx, "POST", path, body, true)
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, code, "POST %s: %s", path, raw)
	var out struct {
		RunID string `json:"run_id"`
	}
	require.NoError(t, json.Unmarshal(raw, &out))
	require.NotEmpty(t, out.RunID)
	return out.RunID
}

func (c *client) submitTemplate(t *testing.T, ctx context.Context, name string, vars map[string]any) string {
	return c.submit(t, ctx, "/api/orchestrator/run-from-template", map[string]any{"template": name, "prompt": "compose test", "variables": vars})
}

func (c *client) submitTeam(t *testing.T, ctx context.Context, team map[string]any) string {
	return c.submit(t, ctx, "/api/orchestrator/run", map[string]any{"team": team, "prompt": "compose test"})
}

// waitTerminal polls the runs until each is completed, failed or cancelled and
// returns their statuses; it fails the test after within.
func (c *client) waitTerminal(t *testing.T, ctx context.Context, ids []string, within time.Duration, logf func(string, ...any)) map[string]string {
	t.Helper()
	deadline := time.Now().Add(within)
	out := map[string]string{}
	lastLog := time.Now()
	for {
		for _, id := range ids {
			if terminal(out[id]) {
				continue
			}
			code, raw, err := c.do(ctx, "GET", "/api/runs/"+id, nil, true)
			if err != nil || code != http.StatusOK {
				continue // an API hiccup under load: ask again
			}
			var r struct {
				Status string `json:"status"`
			}
			if json.Unmarshal(raw, &r) == nil {
				out[id] = r.Status
			}
			if r.Status == "waiting" && c.pending != nil {
				require.Fail(t, "a run waits for a human", "run %s: %s", id, c.pending(id))
			}
		}
		done := 0
		for _, id := range ids {
			if terminal(out[id]) {
				done++
			}
		}
		if done == len(ids) {
			return out
		}
		if time.Since(lastLog) > 10*time.Second {
			logf("waiting: %d of %d runs terminal", done, len(ids))
			lastLog = time.Now()
		}
		require.False(t, time.Now().After(deadline), "runs not terminal within %v: %v", within, out)
		time.Sleep(500 * time.Millisecond)
	}
}

func terminal(s string) bool { return s == "completed" || s == "failed" || s == "cancelled" }

// run runs a command and returns its stdout; a failure fails the test with its output.
func run(t *testing.T, ctx context.Context, dir string, env []string, name string, args ...string) string {
	t.Helper()
	c := exec.CommandContext(ctx, name, args...)
	c.Dir, c.Env = dir, env
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	require.NoError(t, c.Run(), "%s %s:\n%s%s", name, strings.Join(args, " "), stdout.String(), stderr.String())
	return stdout.String()
}

func psql(t *testing.T, ctx context.Context, container, sql string) string {
	t.Helper()
	return run(t, ctx, "", nil, "docker", "exec", container, "psql", "-U", "postgres", "-d", "aetherium", "-v", "ON_ERROR_STOP=1", "-tAc", sql)
}

// containersOf lists a compose service's containers (running or not) by id, in
// the order of their names.
func containersOf(t *testing.T, ctx context.Context, project, service string) []string {
	t.Helper()
	out := run(t, ctx, "", nil, "docker", "ps", "-a", "--format", "{{.Names}} {{.ID}}",
		"--filter", "label=com.docker.compose.project="+project, "--filter", "label=com.docker.compose.service="+service)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	sort.Strings(lines)
	var ids []string
	for _, l := range lines {
		if f := strings.Fields(l); len(f) == 2 {
			ids = append(ids, f[1])
		}
	}
	return ids
}

func containerOf(t *testing.T, ctx context.Context, project, service string) string {
	t.Helper()
	ids := containersOf(t, ctx, project, service)
	require.Len(t, ids, 1, "one %s container", service)
	return ids[0]
}

// runningIPs are the compose-network addresses of the running containers, sorted.
func runningIPs(t *testing.T, ctx context.Context, ids []string) []string {
	t.Helper()
	var ips []string
	for _, id := range ids {
		out := strings.Fields(run(t, ctx, "", nil, "docker", "inspect", "-f",
			"{{.State.Running}} {{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}", id))
		if len(out) >= 2 && out[0] == "true" {
			ips = append(ips, out[1])
		}
	}
	sort.Strings(ips)
	return ips
}

// workerTargets returns the IPs of the up aetherium-worker targets and how many
// worker targets there are at all.
func workerTargets(ctx context.Context, url string) (up []string, total int) {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return nil, -1
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, -1
	}
	defer resp.Body.Close()
	var body struct {
		Data struct {
			ActiveTargets []struct {
				Labels map[string]string `json:"labels"`
				Health string            `json:"health"`
			} `json:"activeTargets"`
		} `json:"data"`
	}
	if json.NewDecoder(resp.Body).Decode(&body) != nil {
		return nil, -1
	}
	for _, tg := range body.Data.ActiveTargets {
		if tg.Labels["job"] != "aetherium-worker" {
			continue
		}
		total++
		if tg.Health == "up" {
			host, _, _ := net.SplitHostPort(tg.Labels["instance"])
			up = append(up, host)
		}
	}
	return up, total
}

// promQuery evaluates an instant PromQL query and returns the first sample's value
// ("" when there is none or the query failed).
func promQuery(ctx context.Context, base, q string) string {
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/api/v1/query?query="+url.QueryEscape(q), nil)
	if err != nil {
		return ""
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var body struct {
		Data struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if json.NewDecoder(resp.Body).Decode(&body) != nil || len(body.Data.Result) == 0 {
		return ""
	}
	v, _ := body.Data.Result[0].Value[1].(string)
	return v
}

// removeLabelled force-removes the containers, then the networks and volumes
// matching a docker filter (the cleanup after a failure).
func removeLabelled(ctx context.Context, t *testing.T, filter string) {
	for _, kind := range [][2]string{{"ps -aq", "rm -f"}, {"network ls -q", "network rm"}, {"volume ls -q", "volume rm -f"}} {
		out, err := exec.CommandContext(ctx, "docker", append(strings.Fields(kind[0]), "--filter", filter)...).Output()
		if err != nil || len(bytes.TrimSpace(out)) == 0 {
			continue
		}
		t.Logf("cleanup: removing leftovers (%s, %s): %s", kind[0], filter, strings.Join(strings.Fields(string(out)), " "))
		args := append(strings.Fields(kind[1]), strings.Fields(string(out))...)
		if o, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput(); err != nil {
			t.Logf("cleanup: docker %s: %v: %s", strings.Join(args, " "), err, o)
		}
	}
}

// removeWorkspaces unmounts every mount under ws (the workspaces' loop mounts,
// deepest first), then ws itself, and removes the directory.
func removeWorkspaces(t *testing.T, ws string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Logf("cleanup: %v", err)
		return
	}
	var mounts []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fs := strings.Fields(sc.Text()); len(fs) > 4 && (fs[4] == ws || strings.HasPrefix(fs[4], ws+"/")) {
			mounts = append(mounts, fs[4])
		}
	}
	_ = f.Close()
	sort.Sort(sort.Reverse(sort.StringSlice(mounts)))
	for _, m := range mounts {
		if out, err := exec.Command("umount", m).CombinedOutput(); err != nil {
			t.Logf("cleanup: umount %s: %v: %s", m, err, out)
		}
	}
	if err := os.RemoveAll(ws); err != nil {
		t.Logf("cleanup: %v", err)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	p, err := testinfra.FreePort()
	require.NoError(t, err)
	return p
}

func randHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}
