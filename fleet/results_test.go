package fleet_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/llm/tokens"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/worker"
)

var truncatedRe = regexp.MustCompile(`\[result truncated: (\d+) bytes in all, stored as result (r_[0-9a-f]{32}); call read_result with id r_[0-9a-f]{32} and offset (\d+) to read on\]`)

// Large tool results (issue 38): an agent reads a 300 KiB file; the model gets
// its head and a handle, pages on with read_result through the gate, and ids
// that are not its own get clear errors.
func TestLargeToolResultPagedWithReadResult(t *testing.T) {
	t.Parallel()
	const task = "read the big file"
	var big strings.Builder
	for i := 0; big.Len() < 300<<10; i++ {
		fmt.Fprintf(&big, "line %06d of the big file\n", i)
	}
	content := big.String()
	foreign := store.NewResultID()
	model := &chatModel{decide: func(r chatRequest) chatAnswer {
		var tools []string
		for _, m := range r.Messages {
			if m.Role == "tool" {
				tools = append(tools, m.Content)
			}
		}
		switch len(tools) {
		case 0:
			return chatAnswer{Tool: "write_file", Args: map[string]any{"path": "big.txt", "content": content}}
		case 1:
			return chatAnswer{Tool: "read_file", Args: map[string]any{"path": "big.txt"}}
		case 2:
			m := truncatedRe.FindStringSubmatch(tools[1])
			if m == nil {
				return chatAnswer{Tool: "reply", Args: map[string]any{"message": "no trailer"}}
			}
			off, _ := strconv.Atoi(m[3])
			return chatAnswer{Tool: "read_result", Args: map[string]any{"id": m[2], "offset": off, "length": 65536}}
		case 3:
			return chatAnswer{Tool: "read_result", Args: map[string]any{"id": foreign, "offset": 0}}
		case 4:
			return chatAnswer{Tool: "read_result", Args: map[string]any{"id": "../../etc/passwd", "offset": -1}}
		default:
			return chatAnswer{Tool: "reply", Args: map[string]any{"message": "paged"}}
		}
	}}
	fake := httptest.NewServer(model)
	t.Cleanup(fake.Close)
	f := fleettest.Start(t, fleettest.Options{Configure: func(c *config.Config) {
		c.LLM.OpenAI.BaseURL, c.LLM.OpenAI.APIKey, c.LLM.OpenAI.Model = fake.URL+"/v1", "test-key", "fake-model"
		// The first answer writes the 300 KiB file in its arguments: a window
		// that takes it (the unknown model's default 32k would not).
		c.LLM.Windows = tokens.Config{Models: map[string]tokens.Limits{"fake-model": {Context: 1 << 20, Output: 4096}}}
	}})
	team := map[string]any{
		"name": "big-results", "model": map[string]any{"provider": "openai", "model": "fake-model"},
		"supervisor": map[string]any{"name": "boss", "prompt": "read", "mcp_servers": []string{"orchestration", "workspace"}},
		"workers":    []map[string]any{},
	}
	id := f.SubmitTeam(team, task)
	run := f.WaitTerminal(id, 90*time.Second)
	require.Equal(t, "completed", run.Status, run.Error)
	require.Equal(t, "paged", run.Result)

	reqs := model.requestsFor(task)
	last := reqs[len(reqs)-1]
	var tools []string
	for _, m := range last.Messages {
		if m.Role == "tool" {
			tools = append(tools, m.Content)
		}
	}
	require.Len(t, tools, 5)
	// read_file's answer: the head, then the trailer.
	m := truncatedRe.FindStringSubmatch(tools[1])
	require.NotNil(t, m, tools[1][max(0, len(tools[1])-300):])
	require.Equal(t, strconv.Itoa(len(content)), m[1])
	require.Equal(t, strconv.Itoa(worker.DefaultResultHeadBytes), m[3])
	require.True(t, strings.HasPrefix(tools[1], content[:worker.DefaultResultHeadBytes]))
	require.Less(t, len(tools[1]), worker.DefaultResultHeadBytes+300)
	// read_result's page: the next 64 KiB, exactly.
	head := worker.DefaultResultHeadBytes
	page := tools[2]
	require.True(t, strings.HasPrefix(page, fmt.Sprintf("[result %s: bytes %d–%d of %d]\n", m[2], head, head+65535, len(content))), page[:200])
	require.True(t, strings.Contains(page, content[head:head+65536]), "page of %d bytes: %q … %q", len(page), page[:200], page[len(page)-200:])
	require.Contains(t, page, fmt.Sprintf("call read_result with id %s and offset %d", m[2], head+65536))
	// Someone else's id and a hostile one: clear errors, nothing read.
	require.Contains(t, tools[3], "no result "+foreign+" in this session")
	require.Contains(t, tools[4], "is not a result id")

	// Stored whole, once, owned by the run; every read_result call audited.
	ctx := context.Background()
	var n int
	var size int64
	require.NoError(t, f.Store.Pool.QueryRow(ctx, `SELECT count(*), coalesce(sum(size), 0) FROM tool_results WHERE run_id = $1`, id).Scan(&n, &size))
	require.Equal(t, 1, n)
	require.Equal(t, int64(len(content)), size)
	require.Eventually(t, func() bool {
		require.NoError(t, f.Store.Pool.QueryRow(ctx, `SELECT count(*) FROM tool_audit WHERE run_id = $1 AND tool = 'read_result'`, id).Scan(&n))
		return n == 3
	}, 10*time.Second, 50*time.Millisecond, "read_result audit rows: %d", n)
}

// A binary file read whole (NUL and invalid UTF-8 past the head): the saved
// history holds valid text, the store the raw bytes, and read_result pages it
// as text with U+FFFD.
func TestLargeBinaryToolResult(t *testing.T) {
	t.Parallel()
	const task = "read the binary file"
	bin := []byte(strings.Repeat("ok\x00\xff\xfe\x80 text \xe2\x82\xac\n", 4000)) // 60 KB
	var f *fleettest.Fleet
	var planted atomic.Bool
	model := &chatModel{decide: func(r chatRequest) chatAnswer {
		var tools []string
		for _, m := range r.Messages {
			if m.Role == "tool" {
				tools = append(tools, m.Content)
			}
		}
		switch len(tools) {
		case 0:
			// The run's workspace exists by its first model call: plant the file.
			dirs, _ := filepath.Glob(filepath.Join(f.Cfg.Workspaces, "*-*-*-*-*"))
			if len(dirs) == 1 && os.WriteFile(filepath.Join(dirs[0], "blob.bin"), bin, 0o644) == nil {
				planted.Store(true)
			}
			return chatAnswer{Tool: "read_file", Args: map[string]any{"path": "blob.bin"}}
		case 1:
			m := truncatedRe.FindStringSubmatch(tools[0])
			if m == nil {
				return chatAnswer{Tool: "reply", Args: map[string]any{"message": "no trailer"}}
			}
			off, _ := strconv.Atoi(m[3])
			return chatAnswer{Tool: "read_result", Args: map[string]any{"id": m[2], "offset": off, "length": 100}}
		default:
			return chatAnswer{Tool: "reply", Args: map[string]any{"message": "read"}}
		}
	}}
	fake := httptest.NewServer(model)
	t.Cleanup(fake.Close)
	f = fleettest.Start(t, fleettest.Options{Configure: func(c *config.Config) {
		c.LLM.OpenAI.BaseURL, c.LLM.OpenAI.APIKey, c.LLM.OpenAI.Model = fake.URL+"/v1", "test-key", "fake-model"
		// The first answer writes the 300 KiB file in its arguments: a window
		// that takes it (the unknown model's default 32k would not).
		c.LLM.Windows = tokens.Config{Models: map[string]tokens.Limits{"fake-model": {Context: 1 << 20, Output: 4096}}}
	}})
	team := map[string]any{
		"name": "binary-results", "model": map[string]any{"provider": "openai", "model": "fake-model"},
		"supervisor": map[string]any{"name": "boss", "prompt": "read", "mcp_servers": []string{"orchestration", "workspace"}},
		"workers":    []map[string]any{},
	}
	id := f.SubmitTeam(team, task)
	run := f.WaitTerminal(id, 90*time.Second)
	require.True(t, planted.Load())
	require.Equal(t, "completed", run.Status, run.Error)
	require.Equal(t, "read", run.Result)

	ctx := context.Background()
	var sessionID, resultID string
	var size int64
	require.NoError(t, f.Store.Pool.QueryRow(ctx, `SELECT session_id, id, size FROM tool_results WHERE run_id = $1`, id).Scan(&sessionID, &resultID, &size))
	require.Equal(t, int64(len(bin)), size)
	raw, _, err := f.Store.ReadResult(ctx, id, sessionID, resultID, 0, size)
	require.NoError(t, err)
	require.Equal(t, bin, raw, "the store keeps the raw bytes")

	// The saved history (jsonb) holds the head and the page as valid text.
	var contents []string
	rows, err := f.Store.Pool.Query(ctx, `SELECT e.m->>'content' FROM sessions s, jsonb_array_elements(session_history(s.id)) WITH ORDINALITY e(m, i)
		WHERE s.id = $1 AND e.m->>'role' = 'tool' ORDER BY e.i`, sessionID)
	require.NoError(t, err)
	for rows.Next() {
		var c string
		require.NoError(t, rows.Scan(&c))
		contents = append(contents, c)
	}
	require.NoError(t, rows.Err())
	require.GreaterOrEqual(t, len(contents), 2)
	for _, c := range contents {
		require.True(t, utf8.ValidString(c))
		require.NotContains(t, c, "\x00")
	}
	require.True(t, strings.HasPrefix(contents[0], "ok\uFFFD\uFFFD text \u20ac\n"), "NUL, then a run of invalid bytes, each one U+FFFD: %q", contents[0][:40])
	require.Contains(t, contents[1], fmt.Sprintf("[result %s: bytes %d–", resultID, worker.DefaultResultHeadBytes))
	require.Contains(t, contents[1], "\uFFFD")
}
