package logctx_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/testdb"

	"github.com/aetherium-engine/aetherium/logctx"
)

// setup returns a JSON logger behind the logctx handler and a reader of its lines.
func setup(t *testing.T) (*slog.Logger, func() []map[string]any) {
	t.Helper()
	var mu sync.Mutex
	var buf bytes.Buffer
	w := writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return buf.Write(p) })
	log := slog.New(logctx.NewHandler(slog.NewJSONHandler(w, nil)))
	return log, func() []map[string]any {
		mu.Lock()
		defer mu.Unlock()
		var out []map[string]any
		for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			if line == "" {
				continue
			}
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(line), &m), line)
			out = append(out, m)
		}
		return out
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func TestHandlerAddsContextAttrs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		ctx  func() context.Context
		log  func(*slog.Logger, context.Context)
		want map[string]any
		gone []string
	}{
		{
			name: "run and agent",
			ctx:  func() context.Context { return logctx.Run(context.Background(), "run_1", "writer") },
			log:  func(l *slog.Logger, ctx context.Context) { l.InfoContext(ctx, "step") },
			want: map[string]any{"run_id": "run_1", "agent": "writer", "msg": "step"},
		},
		{
			name: "inner scope wins",
			ctx: func() context.Context {
				ctx := logctx.Tool(logctx.Run(context.Background(), "run_1", "boss"), "delegate")
				return logctx.Tool(logctx.Run(ctx, "", "writer"), "write_file")
			},
			log:  func(l *slog.Logger, ctx context.Context) { l.WarnContext(ctx, "call") },
			want: map[string]any{"run_id": "run_1", "agent": "writer", "tool": "write_file"},
		},
		{
			name: "no context attrs",
			ctx:  context.Background,
			log:  func(l *slog.Logger, ctx context.Context) { l.InfoContext(ctx, "plain", "k", "v") },
			want: map[string]any{"k": "v"},
			gone: []string{"run_id", "agent", "tool"},
		},
		{
			name: "logger without context methods",
			ctx:  func() context.Context { return logctx.With(context.Background(), slog.String("task_id", "t1")) },
			log: func(l *slog.Logger, ctx context.Context) {
				// A logger that does not hand the handler a context still gets them.
				logctx.Logger(ctx, slog.New(l.Handler())).Info("no ctx")
			},
			want: map[string]any{"task_id": "t1", "msg": "no ctx"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			log, lines := setup(t)
			tc.log(log, tc.ctx())
			got := lines()
			require.Len(t, got, 1)
			for k, v := range tc.want {
				require.Equal(t, v, got[0][k], k)
			}
			for _, k := range tc.gone {
				require.NotContains(t, got[0], k)
			}
		})
	}
}

func TestWithDoesNotLeakIntoSiblings(t *testing.T) {
	t.Parallel()
	base := logctx.Run(context.Background(), "run_1", "boss")
	a := logctx.Tool(base, "a")
	b := logctx.Tool(base, "b")
	key := func(ctx context.Context, k string) any {
		for _, at := range logctx.Attrs(ctx) {
			if at.Key == k {
				return at.Value.Any()
			}
		}
		return nil
	}
	require.Equal(t, "a", key(a, "tool"))
	require.Equal(t, "b", key(b, "tool"))
	require.Nil(t, key(base, "tool"))
	require.Len(t, logctx.Attrs(b), 3)
}

// TestTaskMiddlewareNamesTheTask runs a real asynq server: the task id is only in
// the context asynq builds for a task it is processing.
func TestTaskMiddlewareNamesTheTask(t *testing.T) {
	t.Parallel()
	log, lines := setup(t)
	opt, err := asynq.ParseRedisURI(testdb.Redis(t))
	require.NoError(t, err)
	srv := asynq.NewServer(opt, asynq.Config{Concurrency: 1, Queues: map[string]int{"q1": 1}, TaskCheckInterval: 20 * time.Millisecond,
		LogLevel: asynq.ErrorLevel})
	mux := asynq.NewServeMux()
	mux.Use(logctx.TaskMiddleware())
	done := make(chan struct{})
	mux.HandleFunc("demo:task", func(ctx context.Context, _ *asynq.Task) error {
		log.InfoContext(logctx.Run(ctx, "run_9", "writer"), "handling")
		close(done)
		return nil
	})
	require.NoError(t, srv.Start(mux))
	t.Cleanup(srv.Shutdown)
	client := asynq.NewClient(opt)
	t.Cleanup(func() { _ = client.Close() })
	_, err = client.Enqueue(asynq.NewTask("demo:task", nil), asynq.Queue("q1"), asynq.TaskID("task-42"))
	require.NoError(t, err)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("task not processed")
	}
	got := lines()
	require.Len(t, got, 1)
	for k, v := range map[string]string{"task_id": "task-42", "task_type": "demo:task", "queue": "q1", "run_id": "run_9", "agent": "writer"} {
		require.Equal(t, v, got[0][k], k)
	}
}
