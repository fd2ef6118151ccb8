package fleet_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/logctx"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Every log line a run's steps write carries its run id, agent and asynq task id.
func TestRunLogLinesCarryRunContext(t *testing.T) {
	t.Parallel()
	var buf syncBuffer
	log := slog.New(logctx.NewHandler(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	f := fleettest.Start(t, fleettest.Options{Log: log})
	id := f.Submit("demo", "x", map[string]any{"topic": "t"})
	require.Equal(t, "completed", f.WaitTerminal(id, 60*time.Second).Status)

	lines := 0
	sc := bufio.NewScanner(bytes.NewReader([]byte(buf.String())))
	for sc.Scan() {
		var rec map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &rec))
		if rec["session"] == nil { // lines from a step of a session
			continue
		}
		lines++
		require.Equal(t, id, rec["run_id"], "line %s", sc.Text())
		require.NotEmpty(t, rec["agent"], "line %s", sc.Text())
		require.NotEmpty(t, rec["task_id"], "line %s", sc.Text())
	}
	require.Positive(t, lines, "the supervisor waiting for its delegation logs at debug level")
}
