package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/testdb"
	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/mailbox"
	"github.com/aetherium-engine/aetherium/store"
)

func assistant(calls ...string) llm.Message {
	m := llm.Message{Role: llm.RoleAssistant}
	for _, id := range calls {
		m.ToolCalls = append(m.ToolCalls, llm.ToolCall{ID: id, Name: "t" + id})
	}
	return m
}

func result(id string) llm.Message { return llm.Message{Role: llm.RoleTool, ToolCallID: id} }

func ids(cs []llm.ToolCall) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.ID)
	}
	return out
}

func TestPendingCalls(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		msgs []llm.Message
		want []string
	}{
		{"empty history", nil, nil},
		{"final answer", []llm.Message{{Role: llm.RoleUser}, {Role: llm.RoleAssistant, Content: "done"}}, nil},
		{"all pending, in order", []llm.Message{{Role: llm.RoleUser}, assistant("a", "b", "c")}, []string{"a", "b", "c"}},
		{"some answered", []llm.Message{assistant("a", "b", "c"), result("b")}, []string{"a", "c"}},
		{"all answered", []llm.Message{assistant("a", "b"), result("a"), result("b")}, nil},
		{"only the last assistant message counts", []llm.Message{assistant("old"), result("old"), assistant("new")}, []string{"new"}},
		{"a result of an earlier turn answers nothing now", []llm.Message{assistant("x"), assistant("y"), result("x")}, []string{"y"}},
		{"mail after the calls", []llm.Message{assistant("a"), {Role: llm.RoleUser, Content: "mail"}}, []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, ids(pendingCalls(tc.msgs)))
		})
	}
}

func TestCheckAnswer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		msg     llm.Message
		wantIDs []string
		wantErr string
	}{
		{name: "empty answer", msg: llm.Message{Content: "  "}, wantErr: "empty answer with no tool calls"},
		{name: "text answer", msg: llm.Message{Content: "done"}},
		{name: "NUL in text", msg: llm.Message{Content: "do\x00ne"}, wantErr: "the answer holds a NUL character"},
		{name: "NUL in arguments", msg: llm.Message{ToolCalls: []llm.ToolCall{{ID: "a", Name: "x", Args: json.RawMessage(`{"p":"a\u0000b"}`)}}}, wantErr: "tool call 1 holds a NUL character"},
		{name: "escaped backslash is no NUL", msg: llm.Message{ToolCalls: []llm.ToolCall{{ID: "a", Name: "x", Args: json.RawMessage(`{"p":"a\\u0000b"}`)}}}, wantIDs: []string{"a"}},
		{name: "nameless call", msg: llm.Message{ToolCalls: []llm.ToolCall{{ID: "a", Name: "x"}, {ID: "b", Name: " "}}}, wantErr: "tool call 2 has no name"},
		{name: "ids kept", msg: llm.Message{ToolCalls: []llm.ToolCall{{ID: "a", Name: "x"}, {ID: "b", Name: "y"}}}, wantIDs: []string{"a", "b"}},
		{name: "missing ids generated", msg: llm.Message{ToolCalls: []llm.ToolCall{{Name: "x"}, {Name: "y"}}}, wantIDs: []string{"call_s4_1", "call_s4_2"}},
		{name: "repeated ids made unique", msg: llm.Message{ToolCalls: []llm.ToolCall{{ID: "a", Name: "x"}, {ID: "a", Name: "y"}}}, wantIDs: []string{"a", "call_s4_2"}},
		{name: "a generated id never repeats a later given one", msg: llm.Message{ToolCalls: []llm.ToolCall{{Name: "x"}, {ID: "call_s4_1", Name: "y"}}}, wantIDs: []string{"call_s4_1_2", "call_s4_1"}},
		{name: "a missing id after a given one shaped like it", msg: llm.Message{ToolCalls: []llm.ToolCall{{ID: "call_s4_2", Name: "x"}, {Name: "y"}}}, wantIDs: []string{"call_s4_2", "call_s4_2_2"}},
		{name: "a given id shaped like a generated one, then a repeat", msg: llm.Message{ToolCalls: []llm.ToolCall{{ID: "call_s4_2", Name: "x"}, {ID: "call_s4_2", Name: "y"}}}, wantIDs: []string{"call_s4_2", "call_s4_2_2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := tc.msg
			err := checkAnswer(&m, 3)
			if tc.wantErr != "" {
				require.ErrorIs(t, err, llm.ErrMalformed)
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, llm.RoleAssistant, m.Role)
			require.Equal(t, tc.wantIDs, ids(m.ToolCalls))
			seen := map[string]bool{}
			for _, c := range m.ToolCalls {
				require.False(t, seen[c.ID], "duplicate id %s", c.ID)
				seen[c.ID] = true
				require.True(t, json.Valid(c.Args), "args default to {}")
			}
		})
	}
}

// A model's arguments with an unpaired surrogate escape are valid JSON that
// PostgreSQL's jsonb refuses: checkAnswer makes them storable (U+FFFD), so the
// session's save cannot fail on them at every redelivery.
func TestCheckAnswerMakesArgumentsStorable(t *testing.T) {
	t.Parallel()
	tx := testdb.TestTx(t)
	for _, args := range []string{`{"path":"a\ud800b"}`, `{"p":"\uDFFF","n":1.50}`, `{"p":["\ud83d"]}`, `{"p":"\ud83d\ude00 paired"}`, `{"p":"\\ud800 escaped backslash"}`} {
		m := llm.Message{ToolCalls: []llm.ToolCall{{ID: "a", Name: "x", Args: json.RawMessage(args)}}}
		require.NoError(t, checkAnswer(&m, 0), args)
		raw, err := json.Marshal(m)
		require.NoError(t, err)
		_, err = tx.Exec(context.Background(), `SAVEPOINT s`)
		require.NoError(t, err)
		_, err = tx.Exec(context.Background(), `SELECT $1::text::jsonb`, string(raw))
		require.NoError(t, err, "jsonb takes %s as %s", args, m.ToolCalls[0].Args)
		_, err = tx.Exec(context.Background(), `RELEASE SAVEPOINT s`)
		require.NoError(t, err)
		var v map[string]any
		require.NoError(t, json.Unmarshal(m.ToolCalls[0].Args, &v), "still an object")
	}
	m := llm.Message{ToolCalls: []llm.ToolCall{{ID: "a", Name: "x", Args: json.RawMessage(`{"n":1.50,"p":"\ud83d\ude00"}`)}}}
	require.NoError(t, checkAnswer(&m, 0))
	require.JSONEq(t, `{"n":1.50,"p":"😀"}`, string(m.ToolCalls[0].Args), "a paired escape is the character")
}

func TestDelegationResult(t *testing.T) {
	t.Parallel()
	done := store.Delegation{Agent: "a", Status: store.DelegationCompleted, Result: "ok"}
	failed := store.Delegation{Agent: "b", Status: store.DelegationFailed, Error: "boom"}
	running := store.Delegation{Agent: "c", Status: "running"}
	for _, tc := range []struct {
		name    string
		call    llm.ToolCall
		ds      []store.Delegation
		state   callState
		content string
		isErr   bool
	}{
		{"delegate waiting", llm.ToolCall{ID: "1", Name: "delegate"}, []store.Delegation{running}, callWaiting, "", false},
		{"delegate done", llm.ToolCall{ID: "1", Name: "delegate"}, []store.Delegation{done}, callDone, "ok", false},
		{"delegate failed", llm.ToolCall{ID: "1", Name: "delegate"}, []store.Delegation{failed}, callDone, "b failed: boom", true},
		{"spawn waits for all", llm.ToolCall{ID: "2", Name: "spawn_subagents"}, []store.Delegation{done, running}, callWaiting, "", false},
		{"spawn reports each", llm.ToolCall{ID: "2", Name: "spawn_subagents"}, []store.Delegation{done, failed}, callDone,
			`[{"agent":"a","status":"completed","result":"ok"},{"agent":"b","status":"failed","error":"boom"}]`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			msg, state, err := delegationResult(tc.call, tc.ds)
			require.NoError(t, err)
			require.Equal(t, tc.state, state)
			if state == callWaiting {
				return
			}
			require.Equal(t, llm.RoleTool, msg.Role)
			require.Equal(t, tc.call.ID, msg.ToolCallID)
			require.Equal(t, tc.content, msg.Content)
			require.Equal(t, tc.isErr, msg.IsError)
		})
	}
}

func TestReplyUnsavedAndInContext(t *testing.T) {
	t.Parallel()
	reply := llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "r", Name: "reply"}}}
	require.True(t, replyUnsaved("supervisor", store.RunCompleted, []llm.Message{reply}))
	require.False(t, replyUnsaved("supervisor", store.RunCompleted, []llm.Message{reply, result("r")}), "its result is saved")
	require.False(t, replyUnsaved("worker", store.RunCompleted, []llm.Message{reply}))
	require.False(t, replyUnsaved("supervisor", store.RunCancelled, []llm.Message{reply}))

	msgs := []llm.Message{{Role: llm.RoleUser, Content: "mail " + mailbox.Marker("17-0") + " body"}, {Role: llm.RoleAssistant, Content: mailbox.Marker("18-0")}}
	require.True(t, inContext(msgs, "17-0"))
	require.False(t, inContext(msgs, "18-0"), "only user messages carry mail")
	require.False(t, inContext(msgs, "19-0"))
}

func TestTruncateKeepsUTF8(t *testing.T) {
	t.Parallel()
	s := "aé€😀"
	for n := 0; n <= len(s)+1; n++ {
		got := truncate(s, n)
		require.True(t, utf8.ValidString(got), "n=%d: %q", n, got)
		if n >= len(s) {
			require.Equal(t, s, got)
		}
	}
	require.Equal(t, "a…", truncate(s, 2))
}

func TestControlFlowErrors(t *testing.T) {
	t.Parallel()
	lease := Snooze(3*time.Second, fmt.Errorf("%w: gpu busy", ErrLeaseWaiting))
	busy := Snooze(busyRetry, fmt.Errorf("%w: s1", ErrSessionBusy))
	cases := []struct {
		name    string
		err     error
		failure bool
		delay   time.Duration
		label   string
	}{
		{"a lease wait runs again when it asked", lease, false, 3 * time.Second, "lease_wait"},
		{"a busy session runs again soon", busy, false, busyRetry, "busy"},
		{"a shutdown hands the task back", fmt.Errorf("step: %w", context.Canceled), false, busyRetry, "error"},
		{"a failure backs off and counts", errors.New("db down"), true, 8 * time.Second, "error"},
		{"a wrapped snooze is still a snooze", fmt.Errorf("handler: %w", lease), false, 3 * time.Second, "lease_wait"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, c.failure, isFailure(c.err))
			require.Equal(t, c.delay, retryDelay(3, c.err, nil))
			require.Equal(t, c.label, outcome(c.err))
		})
	}
	require.Equal(t, "ok", outcome(nil))
}
