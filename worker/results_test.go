package worker

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/testdb"
	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/tools"
)

func TestHeadCut(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		s    string
		max  int
		want int
	}{
		{"short", "abc", 10, 3},
		{"ascii", "abcdef", 4, 4},
		{"before a euro sign", "abc\u20ac", 3, 3},
		{"inside a euro sign", "abc\u20acd", 4, 3},
		{"inside a euro sign, later", "abc\u20acd", 5, 3},
		{"after a euro sign", "abc\u20acd", 6, 6},
		{"inside an emoji", "a\U0001F600b", 4, 1},
		{"invalid bytes", "\x80\x80\x80\x80\x80\x80", 4, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, headCut(tc.s, tc.max))
		})
	}
}

// resultWorker is a worker whose results store is a database of its own, and a
// run and session of it.
func resultWorker(t testing.TB) (*Worker, *store.Store, *tools.Session) {
	t.Helper()
	st := testdb.Store(t)
	runID := uuid.NewString()
	require.NoError(t, st.CreateRun(context.Background(), store.Run{ID: runID, Prompt: "p", Team: json.RawMessage(`{}`), Variables: json.RawMessage(`{}`)}))
	w := &Worker{cfg: Defaults(), store: st, log: slog.Default()}
	return w, st, &tools.Session{RunID: runID, SessionID: "w:" + runID + ":1", Access: tools.Access{Groups: []string{"workspace"}, Tools: []string{ReadResultTool}}}
}

var trailerRe = regexp.MustCompile(`\n\[result truncated: (\d+) bytes in all, stored as result (r_[0-9a-f]{32}); call read_result with id r_[0-9a-f]{32} and offset (\d+) to read on\]$`)

func TestResultText(t *testing.T) {
	t.Parallel()
	w, st, sess := resultWorker(t)
	ctx := context.Background()
	head := DefaultResultHeadBytes
	for _, tc := range []struct {
		name    string
		raw     string
		want    string // the whole message, when not stored
		stored  bool
		nextOff int
	}{
		{name: "small", raw: "hello", want: "hello"},
		{name: "NUL and invalid UTF-8", raw: "a\x00b\xffc\xe2\x82", want: "a\uFFFDb\uFFFDc\uFFFD"},
		{name: "exactly the budget", raw: strings.Repeat("x", head), want: strings.Repeat("x", head)},
		{name: "one byte over", raw: strings.Repeat("x", head+1), stored: true, nextOff: head},
		{name: "a rune across the cut", raw: strings.Repeat("x", head-1) + "\u20ac" + strings.Repeat("y", 100), stored: true, nextOff: head - 1},
		{name: "binary", raw: strings.Repeat("\x00\xff\xfe\x01", head), stored: true, nextOff: head},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := w.resultText(ctx, sess, llm.ToolCall{ID: "call_" + tc.name, Name: "run_shell"}, tc.raw)
			require.True(t, utf8.ValidString(got))
			require.NotContains(t, got, "\x00")
			if !tc.stored {
				require.Equal(t, tc.want, got)
				return
			}
			m := trailerRe.FindStringSubmatch(got)
			require.NotNil(t, m, "no trailer in %q", got[max(0, len(got)-300):])
			require.Equal(t, strconv.Itoa(len(tc.raw)), m[1])
			require.Equal(t, strconv.Itoa(tc.nextOff), m[3])
			require.Equal(t, validText(tc.raw[:tc.nextOff]), got[:len(got)-len(m[0])])
			// The store keeps the raw bytes, NULs and all.
			b, size, err := st.ReadResult(ctx, sess.RunID, sess.SessionID, m[2], 0, int64(len(tc.raw)))
			require.NoError(t, err)
			require.Equal(t, int64(len(tc.raw)), size)
			require.Equal(t, tc.raw, string(b))
		})
	}
	t.Run("a read_result page is never stored again", func(t *testing.T) {
		t.Parallel()
		page := strings.Repeat("p", 64<<10)
		require.Equal(t, page, w.resultText(ctx, sess, llm.ToolCall{ID: "c", Name: ReadResultTool}, page))
	})
	t.Run("no store: truncated, not stored", func(t *testing.T) {
		t.Parallel()
		nw := &Worker{cfg: Defaults(), log: slog.Default()}
		got := nw.resultText(ctx, sess, llm.ToolCall{ID: "c", Name: "t"}, strings.Repeat("z", head*2))
		require.Equal(t, strings.Repeat("z", head)+fmt.Sprintf("\n[result truncated: %d bytes in all, only the first %d shown; it could not be stored for read_result]", head*2, head), got)
	})
	t.Run("an agent without read_result gets up to 1 MiB whole", func(t *testing.T) {
		t.Parallel()
		noRead := &tools.Session{RunID: sess.RunID, SessionID: sess.SessionID, Access: tools.Access{Tools: []string{"run_shell"}}}
		whole := strings.Repeat("w", MaxUnpagedResultBytes)
		require.Equal(t, whole, w.resultText(ctx, noRead, llm.ToolCall{ID: "c", Name: "run_shell"}, whole))
		got := w.resultText(ctx, noRead, llm.ToolCall{ID: "c", Name: "run_shell"}, whole+"\x00more")
		require.Equal(t, whole+fmt.Sprintf("\n[result truncated: %d bytes in all, only the first %d shown; this agent has no read_result tool to read on]", MaxUnpagedResultBytes+5, MaxUnpagedResultBytes), got)
		require.Equal(t, "a\uFFFD", w.resultText(ctx, nil, llm.ToolCall{ID: "c", Name: "t"}, "a\x00"))
	})
}

// TestResultText100MiB is the hostile case: a 100 MiB tool result is stored
// whole and the model gets its head.
func TestResultText100MiB(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("writes 100 MiB to PostgreSQL")
	}
	w, st, sess := resultWorker(t)
	ctx := context.Background()
	raw := hugeResult(100 << 20)
	got := w.resultText(ctx, sess, llm.ToolCall{ID: "big", Name: "run_shell"}, raw)
	require.Less(t, len(got), 3*DefaultResultHeadBytes+300, "a raw head byte becomes at most 3 (U+FFFD)")
	m := trailerRe.FindStringSubmatch(got)
	require.NotNil(t, m)
	require.Equal(t, "104857600", m[1])
	tail, size, err := st.ReadResult(ctx, sess.RunID, sess.SessionID, m[2], int64(len(raw))-1000, 4096)
	require.NoError(t, err)
	require.Equal(t, int64(len(raw)), size)
	require.Equal(t, raw[len(raw)-1000:], string(tail))
}

// hugeResult is n bytes of text with a NUL and an invalid byte in every line.
func hugeResult(n int) string {
	var b strings.Builder
	for i := 0; b.Len() < 64<<10; i++ {
		fmt.Fprintf(&b, "line %09d \x00 \xff of a very long command output\n", i)
	}
	block := b.String()
	return strings.Repeat(block, n/len(block)+1)[:n]
}

// BenchmarkResultSpill100MiB pushes a 100 MiB tool result through resultText
// (stored in PostgreSQL, the head returned) and reports what storing it cost the
// worker beyond the result itself: the bytes allocated (alloc-MiB/op), the peak
// of the heap above its start (heap-peak-growth-MiB) and the growth of the
// process's peak RSS (VmHWM) while it ran (hwm-growth-MiB: meaningful with
// -benchtime 1x, the first run of the process).
func BenchmarkResultSpill100MiB(b *testing.B) {
	w, _, sess := resultWorker(b)
	ctx := context.Background()
	raw := hugeResult(100 << 20)
	runtime.GC()
	hwm0 := vmHWM(b)
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	// The heap's live and not yet collected objects, sampled every millisecond
	// while the result is stored: its peak above the start is what storing cost.
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(sample)
	heap0 := sample[0].Value.Uint64()
	var peak atomic.Uint64
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		for {
			metrics.Read(s)
			if v := s[0].Value.Uint64(); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_ = w.resultText(ctx, sess, llm.ToolCall{ID: fmt.Sprint("big", i), Name: "run_shell"}, raw)
	}
	b.StopTimer()
	close(stop)
	<-done
	runtime.ReadMemStats(&ms1)
	b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/float64(b.N)/(1<<20), "alloc-MiB/op")
	b.ReportMetric(float64(peak.Load()-min(peak.Load(), heap0))/(1<<20), "heap-peak-growth-MiB")
	b.ReportMetric(float64(vmHWM(b)-hwm0)/(1<<20), "hwm-growth-MiB")
	b.ReportMetric(float64(hwm0)/(1<<20), "hwm-before-MiB")
	b.SetBytes(int64(len(raw)))
}

// vmHWM is the process's peak resident set size, in bytes (Linux).
func vmHWM(tb testing.TB) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		tb.Skip("no /proc/self/status")
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			require.NoError(tb, err)
			return kb << 10
		}
	}
	tb.Skip("no VmHWM")
	return 0
}
