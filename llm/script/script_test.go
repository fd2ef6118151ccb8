package script_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/llm/script"
)

// setup returns a provider over a two-agent screenplay.
func setup(t *testing.T) *script.Provider {
	t.Helper()
	s := script.Script{Agents: map[string][]script.Turn{
		"lead": {
			{Calls: []script.Call{
				{Tool: "create_plan", Args: map[string]any{"steps": []any{"a", "b"}}},
				{Tool: "report_progress", Args: map[string]any{"percent": 10}},
			}},
			{Calls: []script.Call{{Tool: "reply"}}},
		},
		"writer": {
			{Say: "done"},
		},
	}}
	require.Empty(t, s.Validate())
	return script.New(s, 0)
}

// conversation builds a message list with n assistant messages interleaved with
// other roles, which must not count as turns.
func conversation(n int) []llm.Message {
	msgs := []llm.Message{{Role: llm.RoleSystem, Content: "sys"}, {Role: llm.RoleUser, Content: "go"}}
	for i := 0; i < n; i++ {
		msgs = append(msgs,
			llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "x", Name: "t", Args: json.RawMessage(`{}`)}}},
			llm.Message{Role: llm.RoleTool, ToolCallID: "x", Content: "ok"},
			llm.Message{Role: llm.RoleUser, Content: "more"},
		)
	}
	return msgs
}

func TestName(t *testing.T) {
	t.Parallel()
	require.Equal(t, "script", setup(t).Name())
	var _ llm.Provider = setup(t)
}

func TestCompleteTurns(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		agent     string
		assistant int
		wantSay   string
		wantCalls []llm.ToolCall
	}{
		{
			name: "first turn calls", agent: "lead", assistant: 0,
			wantCalls: []llm.ToolCall{
				{ID: "call_1_1", Name: "create_plan", Args: json.RawMessage(`{"steps":["a","b"]}`)},
				{ID: "call_1_2", Name: "report_progress", Args: json.RawMessage(`{"percent":10}`)},
			},
		},
		{
			name: "second turn after one assistant message", agent: "lead", assistant: 1,
			wantCalls: []llm.ToolCall{{ID: "call_2_1", Name: "reply", Args: json.RawMessage(`{}`)}},
		},
		{name: "say turn", agent: "writer", assistant: 0, wantSay: "done"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := setup(t)
			resp, err := p.Complete(context.Background(), llm.Request{Agent: tc.agent, Messages: conversation(tc.assistant)})
			require.NoError(t, err)
			require.Equal(t, llm.RoleAssistant, resp.Message.Role)
			require.Equal(t, tc.wantSay, resp.Message.Content)
			require.Equal(t, "script", resp.Model)
			require.Len(t, resp.Message.ToolCalls, len(tc.wantCalls))
			for i, want := range tc.wantCalls {
				got := resp.Message.ToolCalls[i]
				require.Equal(t, want.ID, got.ID)
				require.Equal(t, want.Name, got.Name)
				require.JSONEq(t, string(want.Args), string(got.Args))
			}
			require.Positive(t, resp.Usage.InputTokens)
			require.Positive(t, resp.Usage.OutputTokens)
		})
	}
}

func TestReplayIsDeterministic(t *testing.T) {
	t.Parallel()
	p := setup(t)
	req := llm.Request{Agent: "lead", Messages: conversation(1)}
	first, err := p.Complete(context.Background(), req)
	require.NoError(t, err)
	// A redelivered step sees the same conversation and must get the same answer.
	again, err := p.Complete(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, first, again)
}

func TestExhaustedAndUnknownAgent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		agent     string
		assistant int
		want      string
	}{
		{name: "past the last turn", agent: "lead", assistant: 2, want: `agent "lead" asked for turn 3, script has 2`},
		{name: "far past the last turn", agent: "writer", assistant: 5, want: "script has 1"},
		{name: "unknown agent", agent: "ghost", assistant: 0, want: `agent "ghost" has no script`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := setup(t).Complete(context.Background(), llm.Request{Agent: tc.agent, Messages: conversation(tc.assistant)})
			require.ErrorIs(t, err, script.ErrExhausted)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		turns []script.Turn
		want  []string
	}{
		{name: "calls only", turns: []script.Turn{{Calls: []script.Call{{Tool: "reply"}}}}},
		{name: "say only", turns: []script.Turn{{Say: "hi"}}},
		{name: "both calls and say", turns: []script.Turn{{Say: "hi", Calls: []script.Call{{Tool: "reply"}}}}, want: []string{"script.agents.a[0]: a turn has either calls or say"}},
		{name: "neither", turns: []script.Turn{{Say: "ok"}, {}}, want: []string{"script.agents.a[1]: a turn has either calls or say"}},
		{name: "call without tool", turns: []script.Turn{{Calls: []script.Call{{Tool: "x"}, {}}}}, want: []string{"script.agents.a[0].calls[1]: tool is required"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			errs := script.Script{Agents: map[string][]script.Turn{"a": tc.turns}}.Validate()
			require.Len(t, errs, len(tc.want))
			for i, w := range tc.want {
				require.EqualError(t, errs[i], w)
			}
		})
	}
}

func TestLatencyHonoursCancel(t *testing.T) {
	t.Parallel()
	p := script.New(script.Script{Agents: map[string][]script.Turn{"a": {{Say: "x"}}}}, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := p.Complete(ctx, llm.Request{Agent: "a"})
		done <- err
	}()
	cancel()
	// With an hour of latency, only cancellation can end the call.
	require.ErrorIs(t, <-done, context.Canceled)

	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	_, err := p.Complete(expired, llm.Request{Agent: "a"})
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestLatencyThenAnswer(t *testing.T) {
	t.Parallel()
	p := script.New(script.Script{Agents: map[string][]script.Turn{"a": {{Say: "after a nap"}}}}, time.Millisecond)
	resp, err := p.Complete(context.Background(), llm.Request{Agent: "a"})
	require.NoError(t, err)
	require.Equal(t, "after a nap", resp.Message.Content)
}

func TestUsageGrowsWithInput(t *testing.T) {
	t.Parallel()
	p := script.New(script.Script{Agents: map[string][]script.Turn{"a": {{Say: "x"}}}}, 0)
	small, err := p.Complete(context.Background(), llm.Request{Agent: "a", Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}})
	require.NoError(t, err)
	big, err := p.Complete(context.Background(), llm.Request{Agent: "a", Messages: []llm.Message{{Role: llm.RoleUser, Content: strings.Repeat("x", 4000)}}})
	require.NoError(t, err)
	require.Greater(t, big.Usage.InputTokens, small.Usage.InputTokens+900)
	require.Equal(t, small.Usage.OutputTokens, big.Usage.OutputTokens)
}

func TestSummaryRequestsAreCondensedAndTurnsGoOnAfterACompaction(t *testing.T) {
	t.Parallel()
	p := script.New(script.Script{Agents: map[string][]script.Turn{"a": {{Say: "one"}, {Say: "two"}, {Say: "three"}}}}, 0)
	transcript := "[assistant] first answer\n  calls read_file {}\n[result of read_file] " + strings.Repeat("x", 500) + "\n[assistant] second"
	req := llm.Request{Agent: "a", Purpose: llm.PurposeSummary, MaxTokens: 100, Messages: []llm.Message{
		{Role: llm.RoleSystem, Content: "summarize"}, {Role: llm.RoleUser, Content: transcript}}}
	first, err := p.Complete(context.Background(), req)
	require.NoError(t, err)
	again, err := p.Complete(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, first.Message.Content, again.Message.Content, "deterministic")
	require.Contains(t, first.Message.Content, "[assistant] second")
	require.NotContains(t, first.Message.Content, "calls read_file", "first lines only")
	require.LessOrEqual(t, len(first.Message.Content), 400)
	require.Empty(t, first.Message.ToolCalls)

	// Two answers a summary stands for, then one in the context: the fourth turn
	// would be next, the screenplay has three.
	msgs := []llm.Message{{Role: llm.RoleSystem, Content: "p"}, {Role: llm.RoleUser, Content: "summary", Compacted: &llm.Compacted{Messages: 4, Answers: 1}},
		{Role: llm.RoleAssistant, Content: "two"}}
	resp, err := p.Complete(context.Background(), llm.Request{Agent: "a", Messages: msgs})
	require.NoError(t, err)
	require.Equal(t, "three", resp.Message.Content)
}
