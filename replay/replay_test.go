package replay_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/replay"
	"github.com/aetherium-engine/aetherium/tools"
)

// The terminal answers from the record and nothing else: a call with no
// record, or whose recorded answer is a refusal (it never ran), is refused.
func TestTerminalServesTheRecordOnly(t *testing.T) {
	t.Parallel()
	call := tools.Call{ID: "c1", Name: "write_file"}
	tests := []struct {
		name    string
		ctx     func(n *int) context.Context
		content string
		pending bool
		err     string
		reached int
	}{
		{name: "no record", ctx: func(*int) context.Context { return context.Background() }, err: "dispatched without a record"},
		{name: "a result", ctx: func(n *int) context.Context {
			return replay.Reached(context.Background(), replay.Served{Message: &llm.Message{Role: llm.RoleTool, Content: "wrote 3 bytes"}}, n)
		}, content: "wrote 3 bytes", reached: 1},
		{name: "a tool error", ctx: func(n *int) context.Context {
			return replay.Reached(context.Background(), replay.Served{Message: &llm.Message{Role: llm.RoleTool, Content: "error: no such file", IsError: true}}, n)
		}, err: "no such file", reached: 1},
		{name: "refused then", ctx: func(n *int) context.Context {
			return replay.Reached(context.Background(), replay.Served{Message: &llm.Message{Role: llm.RoleTool, Content: "error: denied by rules: x", IsError: true, Refused: true}}, n)
		}, err: replay.ErrNotRecorded.Error(), reached: 1},
		{name: "no message", ctx: func(n *int) context.Context { return replay.Reached(context.Background(), replay.Served{}, n) },
			err: replay.ErrNotRecorded.Error(), reached: 1},
		{name: "delegated", ctx: func(n *int) context.Context {
			return replay.Reached(context.Background(), replay.Served{Message: &llm.Message{Content: "the writer's answer"}, Delegated: true}, n)
		}, pending: true, reached: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			n := 0
			res, err := replay.Terminal.Handle(tc.ctx(&n), call)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tc.content, res.Content)
			require.Equal(t, tc.pending, res.Pending)
			require.Equal(t, tc.reached, n)
		})
	}
}

// The state hash is a function of what was folded, in order.
func TestHasherChains(t *testing.T) {
	t.Parallel()
	sum := func(vs ...any) string {
		var h replay.Hasher
		for _, v := range vs {
			h.Add(v)
		}
		return h.Sum()
	}
	a, b := replay.Side{Decision: "allowed"}, replay.Side{Decision: "denied", Layer: "rules"}
	require.Equal(t, sum(a, b), sum(a, b))
	require.NotEqual(t, sum(a, b), sum(b, a))
	require.NotEqual(t, sum(a), sum(a, a))
	require.Len(t, sum(a), 64)
	require.NotEqual(t, sum(a), (&replay.Hasher{}).Sum())
}
