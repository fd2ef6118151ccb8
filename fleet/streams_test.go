package fleet_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/gpu/gputest"
	"github.com/aetherium-engine/aetherium/internal/testinfra"
	"github.com/aetherium-engine/aetherium/lease"
)

func dockerOrFail(t *testing.T) *client.Client {
	t.Helper()
	dc, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err == nil {
		_, err = dc.Ping(context.Background())
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("docker engine: %v (CI=true: required)", err)
		}
		t.Skipf("docker engine: %v", err)
	}
	t.Cleanup(func() { _ = dc.Close() })
	return dc
}

// randomSuffix names a test's images, containers and key prefix apart from
// other tests'.
func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func freeTCPPort(t *testing.T) int {
	t.Helper()
	p, err := testinfra.FreePort()
	require.NoError(t, err)
	return p
}

// A worker messages a teammate, who sees the message on its next turn; the team's
// GPU service is started through the Docker API by the run's lease, released when
// the run ends, and stopped by the scheduler after its idle delay.
func TestMailboxAndGPULeaseEndToEnd(t *testing.T) {
	t.Parallel()
	dc := dockerOrFail(t)
	ctx := context.Background()
	suffix := randomSuffix()
	tag := "aetherium-test/gpu-standin:" + suffix
	require.NoError(t, gputest.BuildStandin(ctx, dc, tag))
	name := "aetherium-e2e-standin-" + suffix
	t.Cleanup(func() {
		_ = dc.ContainerRemove(context.Background(), name, container.RemoveOptions{Force: true})
		_, _ = dc.ImageRemove(context.Background(), tag, image.RemoveOptions{Force: true, PruneChildren: true})
	})
	port := freeTCPPort(t)
	f := fleettest.Start(t, fleettest.Options{Configure: func(c *config.Config) {
		c.Streams.Leases = lease.Config{Prefix: "aeth:lease:" + suffix, Services: []lease.Service{{
			Name: "standin", Capacity: 1, TTL: 20 * time.Second, Image: tag, Container: name,
			Ports: []string{fmt.Sprintf("127.0.0.1:%d:8080", port)}, HealthURL: fmt.Sprintf("http://127.0.0.1:%d/health", port),
			StartTimeout: 30 * time.Second, IdleStop: 2 * time.Second,
		}}}
		c.Scheduler.Period = time.Second
	}})
	schedCtx, stopSched := context.WithCancel(ctx)
	t.Cleanup(stopSched)
	go func() { _ = f.RunScheduler(schedCtx) }()

	tm := map[string]any{
		"name":         "pair",
		"model":        map[string]any{"provider": "script"},
		"gpu_services": []string{"standin"},
		"supervisor":   map[string]any{"name": "boss", "prompt": "coordinate", "mcp_servers": []string{"orchestration"}},
		"workers": []map[string]any{
			{"name": "alice", "prompt": "a", "mcp_servers": []string{"team"}},
			{"name": "bob", "prompt": "b", "mcp_servers": []string{"team"}},
		},
		"script": map[string]any{"agents": map[string]any{
			"boss": []map[string]any{
				call("delegate", map[string]any{"agent": "alice", "task": "tell bob the password"}),
				call("delegate", map[string]any{"agent": "bob", "task": "act on what alice told you"}),
				call("reply", map[string]any{"message": "done"}),
			},
			"alice": []map[string]any{
				call("send_message_to", map[string]any{"to": "bob", "message": "the password is swordfish"}),
				{"say": "told bob"},
			},
			"bob": []map[string]any{{"say": "bob acted on it"}},
		}},
	}
	id := f.SubmitTeam(tm, "pair up")

	// While the run holds the lease, the service container runs and answers.
	require.Eventually(t, func() bool {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/health", port))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, 60*time.Second, 100*time.Millisecond, "the stand-in GPU service never came up")

	run := f.WaitTerminal(id, 90*time.Second)
	require.Equal(t, "completed", run.Status, run.Error)

	// Bob's turn saw Alice's message, once, with sender and time.
	var bobMsgs string
	require.NoError(t, f.Store.Pool.QueryRow(ctx, `SELECT session_history(id)::text FROM sessions WHERE run_id = $1 AND agent = 'bob'`, id).Scan(&bobMsgs))
	require.Contains(t, bobMsgs, "the password is swordfish")
	require.Contains(t, bobMsgs, `\"from\":\"alice\"`)

	// The run's cleanup released the lease; the mailboxes are gone.
	require.Eventually(t, func() bool {
		st, err := f.Leases.State(ctx, "standin")
		return err == nil && len(st.Holders) == 0
	}, 30*time.Second, 100*time.Millisecond, "lease still held after the run ended")
	depth, err := f.Mailbox.Depth(ctx, id, "bob")
	require.NoError(t, err)
	require.Zero(t, depth)
	evs, err := f.Leases.RecentEvents(ctx, 100)
	require.NoError(t, err)
	seen := map[string]bool{}
	for _, e := range evs {
		if e.Holder == id {
			seen[e.Type] = true
		}
	}
	require.True(t, seen["acquire"], "lease events: %v", seen)
	require.True(t, seen["release"], "lease events: %v", seen)

	// After the idle delay the scheduler stops the container.
	require.Eventually(t, func() bool {
		info, err := dc.ContainerInspect(ctx, name)
		return err != nil || !info.State.Running
	}, 60*time.Second, 200*time.Millisecond, "the idle GPU service was not stopped")
}
