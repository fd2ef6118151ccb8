package fleet_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleettest"
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
