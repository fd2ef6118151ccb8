package gpu_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/testdb"

	"github.com/aetherium-engine/aetherium/gpu"
	"github.com/aetherium-engine/aetherium/gpu/gputest"
	"github.com/aetherium-engine/aetherium/internal/testinfra"
	"github.com/aetherium-engine/aetherium/lease"
)

// The stand-in GPU service: FROM scratch + Debian's static busybox serving /www
// with busybox httpd, built locally through the Engine API (nothing is pulled).
var standin struct {
	once sync.Once
	tag  string
	err  error
	dc   *client.Client
}

func TestMain(m *testing.M) {
	code := m.Run()
	if standin.tag != "" && standin.err == nil {
		_, _ = standin.dc.ImageRemove(context.Background(), standin.tag, image.RemoveOptions{Force: true, PruneChildren: true})
	}
	os.Exit(code)
}

func unavailable(t *testing.T, format string, a ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, a...)
	if os.Getenv("CI") != "" {
		t.Fatalf("%s (CI=true: the Docker engine and busybox-static are required)", msg)
	}
	t.Skip(msg)
}

func randomHex() string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func buildStandin(ctx context.Context, dc *client.Client) (string, error) {
	tag := "aetherium-test/gpu-standin:" + randomHex()
	return tag, gputest.BuildStandin(ctx, dc, tag)
}

type env struct {
	dc      *client.Client
	tag     string
	redis   string
	metrics *gpu.Metrics
}

func setup(t *testing.T) *env {
	t.Helper()
	dc, err := gpu.NewDockerClient()
	if err != nil {
		unavailable(t, "docker client: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := dc.Ping(ctx); err != nil {
		unavailable(t, "docker engine: %v", err)
	}
	standin.once.Do(func() {
		standin.dc = dc
		standin.tag, standin.err = buildStandin(ctx, dc)
	})
	if standin.err != nil {
		unavailable(t, "%v", standin.err)
	}
	m, err := gpu.NewMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	return &env{dc: dc, tag: standin.tag, redis: testdb.Redis(t), metrics: m}
}

func freePort(t *testing.T) int {
	t.Helper()
	p, err := testinfra.FreePort()
	require.NoError(t, err)
	return p
}

// service returns a stand-in service definition on its own host port and
// container name; edit adjusts it. The container is removed at cleanup.
func (e *env) service(t *testing.T, edit func(*lease.Service)) lease.Service {
	t.Helper()
	port := freePort(t)
	s := lease.Service{
		Name: "standin", Capacity: 2, TTL: time.Minute, Image: e.tag,
		Container: "aetherium-test-gpu-" + randomHex(),
		Ports:     []string{fmt.Sprintf("127.0.0.1:%d:8080", port)},
		HealthURL: fmt.Sprintf("http://127.0.0.1:%d/health", port),
		IdleStop:  time.Second, StartTimeout: 30 * time.Second,
	}
	if edit != nil {
		edit(&s)
	}
	t.Cleanup(func() {
		_ = e.dc.ContainerRemove(context.Background(), s.Container, container.RemoveOptions{Force: true})
	})
	return s
}

func (e *env) controller(t *testing.T, services ...lease.Service) (*gpu.Controller, *lease.Manager) {
	t.Helper()
	opt, err := redis.ParseURL(e.redis)
	require.NoError(t, err)
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	lm, err := lease.New(rdb, lease.Config{Services: services}, lease.Options{})
	require.NoError(t, err)
	c, err := gpu.New(gpu.Config{HealthPoll: 50 * time.Millisecond, StopTimeout: time.Second}, gpu.Deps{Leases: lm, Docker: e.dc, Metrics: e.metrics})
	require.NoError(t, err)
	return c, lm
}

func (e *env) running(t *testing.T, name string) bool {
	t.Helper()
	info, err := e.dc.ContainerInspect(context.Background(), name)
	if err != nil {
		return false
	}
	return info.State != nil && info.State.Running
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func counter(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, c.Write(&m))
	return m.Counter.GetValue()
}

func TestFirstLeaseStartsServiceAndIdleDelayStopsIt(t *testing.T) {
	t.Parallel()
	e := setup(t)
	svc := e.service(t, nil)
	ctl, lm := e.controller(t, svc)
	ctx := context.Background()
	require.False(t, e.running(t, svc.Container), "nothing runs before the first lease")

	g1, err := ctl.Acquire(ctx, "standin", "run-1")
	require.NoError(t, err)
	require.True(t, e.running(t, svc.Container))
	code, body := get(t, svc.HealthURL)
	require.Equal(t, http.StatusOK, code, "the grant is usable: the service answers")
	require.Equal(t, "ok\n", body)

	g2, err := ctl.Acquire(ctx, "standin", "run-2")
	require.NoError(t, err, "a second holder finds it running")
	require.Greater(t, g2.Token, g1.Token)
	require.EqualValues(t, 1, counter(t, e.metrics.Starts.WithLabelValues("standin", "ok")), "started once")

	stopped, err := ctl.StopIdle(ctx)
	require.NoError(t, err)
	require.Empty(t, stopped, "held services are never stopped")
	_, err = lm.Release(ctx, "standin", "run-1", g1.Token)
	require.NoError(t, err)
	_, err = lm.Release(ctx, "standin", "run-2", g2.Token)
	require.NoError(t, err)
	released := time.Now()
	stopped, err = ctl.StopIdle(ctx)
	require.NoError(t, err)
	require.Empty(t, stopped, "the idle delay has not passed yet")

	loop, stop := context.WithCancel(ctx)
	defer stop()
	stopperDone := make(chan struct{})
	go func() { defer close(stopperDone); ctl.RunIdleStopper(loop, 100*time.Millisecond) }()
	require.Eventually(t, func() bool {
		return counter(t, e.metrics.Stops.WithLabelValues("standin")) == 1
	}, 30*time.Second, 50*time.Millisecond)
	stop()
	<-stopperDone
	require.False(t, e.running(t, svc.Container))
	require.GreaterOrEqual(t, time.Since(released), svc.IdleStop, "stopped only after the idle delay")
	require.EqualValues(t, 1, counter(t, e.metrics.Stops.WithLabelValues("standin")))

	// The next first lease starts it again.
	g3, err := ctl.Acquire(ctx, "standin", "run-3")
	require.NoError(t, err)
	code, _ = get(t, svc.HealthURL)
	require.Equal(t, http.StatusOK, code)
	require.EqualValues(t, 2, counter(t, e.metrics.Starts.WithLabelValues("standin", "ok")))
	_, err = lm.Release(ctx, "standin", "run-3", g3.Token)
	require.NoError(t, err)

	var types []string
	evs, err := lm.Events(ctx, "", 1000)
	require.NoError(t, err)
	for _, ev := range evs {
		if strings.HasPrefix(ev.Type, "service_") || ev.Type == "stopping" {
			types = append(types, ev.Type)
		}
	}
	require.Equal(t, []string{"service_start", "stopping", "service_stop", "service_start"}, types)
}

// A service that cannot start is a clear error on the caller, within the start
// timeout, and its lease is released so it does not block the next run.
func TestStartFailureIsAClearErrorNotAHang(t *testing.T) {
	t.Parallel()
	e := setup(t)
	cases := []struct {
		name string
		edit func(*lease.Service)
		want string
	}{
		{"image not on the engine", func(s *lease.Service) { s.Image = "aetherium-test/absent:" + randomHex() }, "is not on the Docker engine"},
		{"container exits at once", func(s *lease.Service) {
			s.Cmd = []string{"/bin/busybox", "sh", "-c", "echo model weights missing >&2; exit 3"}
		}, "exited (code 3)"},
		{"health never answers", func(s *lease.Service) {
			s.HealthURL = strings.Replace(s.HealthURL, "/health", "/not-there", 1)
			s.StartTimeout = 2 * time.Second
		}, "not healthy within 2s"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			svc := e.service(t, tc.edit)
			ctl, lm := e.controller(t, svc)
			ctx := context.Background()
			_, err := ctl.Acquire(ctx, "standin", "run-1")
			require.ErrorIs(t, err, gpu.ErrStartFailed)
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, "standin")
			st, err := lm.State(ctx, "standin")
			require.NoError(t, err)
			require.Empty(t, st.Holders, "the failed start gave its lease back")
		})
	}
	t.Run("exit shows the container's last output", func(t *testing.T) {
		t.Parallel()
		svc := e.service(t, func(s *lease.Service) {
			s.Cmd = []string{"/bin/busybox", "sh", "-c", "echo model weights missing >&2; exit 3"}
		})
		ctl, _ := e.controller(t, svc)
		_, err := ctl.Acquire(context.Background(), "standin", "run-1")
		require.ErrorContains(t, err, "model weights missing")
	})
}

func TestChangedDefinitionReplacesContainer(t *testing.T) {
	t.Parallel()
	e := setup(t)
	svc := e.service(t, nil)
	ctl, lm := e.controller(t, svc)
	ctx := context.Background()
	g, err := ctl.Acquire(ctx, "standin", "run-1")
	require.NoError(t, err)
	before, err := e.dc.ContainerInspect(ctx, svc.Container)
	require.NoError(t, err)
	_, err = lm.Release(ctx, "standin", "run-1", g.Token)
	require.NoError(t, err)

	svc.Env = []string{"MODEL=v2"}
	ctl2, lm2 := e.controller(t, svc)
	st, err := ctl2.Status(ctx, "standin")
	require.NoError(t, err)
	require.True(t, st.Running)
	// Stop it so the new definition must be applied on the next start.
	require.NoError(t, e.dc.ContainerStop(ctx, svc.Container, container.StopOptions{}))
	g, err = ctl2.Acquire(ctx, "standin", "run-2")
	require.NoError(t, err)
	after, err := e.dc.ContainerInspect(ctx, svc.Container)
	require.NoError(t, err)
	require.NotEqual(t, before.ID, after.ID, "a changed definition gets a new container")
	require.Contains(t, after.Config.Env, "MODEL=v2")
	_, err = lm2.Release(ctx, "standin", "run-2", g.Token)
	require.NoError(t, err)
}

// A managed GPU container is not on the engine's default bridge, where every
// container (and any team allowed private egress) reached it with no token,
// nor on any sandbox's network: it is on the GPU services' own network, and its
// published port still answers.
func TestManagedContainerIsOnTheGPUNetworkOnly(t *testing.T) {
	t.Parallel()
	e := setup(t)
	svc := e.service(t, nil)
	ctl, lm := e.controller(t, svc)
	ctx := context.Background()
	g, err := ctl.Acquire(ctx, "standin", "run-net")
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = lm.Release(context.Background(), "standin", "run-net", g.Token) })
	code, _ := get(t, svc.HealthURL)
	require.Equal(t, http.StatusOK, code, "the published port answers on the GPU network")

	info, err := e.dc.ContainerInspect(ctx, svc.Container)
	require.NoError(t, err)
	require.NotNil(t, info.NetworkSettings)
	require.NotEmpty(t, info.NetworkSettings.Networks)
	for name := range info.NetworkSettings.Networks {
		require.NotEqual(t, "bridge", name, "a GPU container on the default bridge")
		n, err := e.dc.NetworkInspect(ctx, name, network.InspectOptions{})
		require.NoError(t, err)
		// sandbox.LabelNetwork marks every sandbox network (a literal: gpu's
		// tests do not import the sandbox package).
		require.NotContains(t, n.Labels, "io.aetherium.sandbox.network", "a GPU container on sandbox network %s", name)
		require.Equal(t, "1", n.Labels["aetherium.gpu-network"], "network %s is not the GPU services' own", name)
	}
}
