package comms_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/toolbox/comms"
	"github.com/aetherium-engine/aetherium/tools"
)

type event struct {
	Key, Type string
	Data      any
}

// coordinator records Emit calls; err, when set, is returned by Emit.
type coordinator struct {
	mu     sync.Mutex
	events []event
	err    error
}

func (c *coordinator) Delegate(context.Context, string, []tools.DelegateRequest) error {
	return errors.New("comms tools never delegate")
}

func (c *coordinator) Reply(context.Context, string) error {
	return errors.New("comms tools never reply")
}

func (c *coordinator) Emit(_ context.Context, key, typ string, data any) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	c.events = append(c.events, event{Key: key, Type: typ, Data: data})
	return nil
}

func (c *coordinator) recorded() []event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]event(nil), c.events...)
}

// setup returns a router over the comms tools and a context for session sessionID.
func setup(t *testing.T, sessionID string) (*tools.Router, *tools.Session, *coordinator) {
	t.Helper()
	reg := tools.NewRegistry()
	comms.Register(reg)
	co := &coordinator{}
	caller := &tools.Session{
		RunID: "run-1", SessionID: sessionID, Agent: "lead", Role: "supervisor",
		Access:      reg.Resolve(tools.Node{Role: "worker", MCPServers: []string{"comms"}}),
		Coordinator: co,
	}
	return tools.NewRouter(reg), caller, co
}

func TestRegistered(t *testing.T) {
	t.Parallel()
	reg := tools.NewRegistry()
	comms.Register(reg)
	require.Equal(t, []string{"ask_user", "notify_user", "report_progress"}, reg.Names())
	for _, n := range reg.Names() {
		s, _ := reg.Spec(n)
		require.Equal(t, "comms", s.Group)
		require.Equal(t, tools.Standard, s.Tier)
		require.True(t, s.Idempotent, n)
		require.False(t, s.Outbound, n)
	}
}

func TestNotifyUser(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		args      string
		wantLevel string
		wantErr   string
		invalid   bool
	}{
		{name: "default level is info", args: `{"message":"halfway"}`, wantLevel: "info"},
		{name: "info", args: `{"message":"m","level":"info"}`, wantLevel: "info"},
		{name: "warning", args: `{"message":"m","level":"warning"}`, wantLevel: "warning"},
		{name: "error", args: `{"message":"m","level":"error"}`, wantLevel: "error"},
		{name: "unknown level", args: `{"message":"m","level":"critical"}`, wantErr: `notify_user: level "critical" is not info, warning or error`},
		{name: "level is case sensitive", args: `{"message":"m","level":"INFO"}`, wantErr: `level "INFO"`},
		{name: "empty message", args: `{"message":""}`, wantErr: "notify_user: message is empty"},
		{name: "blank message", args: `{"message":" \n\t"}`, wantErr: "notify_user: message is empty"},
		{name: "missing message", args: `{"level":"info"}`, wantErr: "missing required field(s): message", invalid: true},
		{name: "unknown field", args: `{"message":"m","urgent":true}`, wantErr: `unknown field "urgent"`, invalid: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, caller, co := setup(t, "sess-A")
			res, err := r.Dispatch(context.Background(), tools.Call{Session: caller, ID: "call_7", Name: "notify_user", Args: json.RawMessage(tc.args)})
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				if tc.invalid {
					require.ErrorIs(t, err, tools.ErrInvalidArgs)
				}
				require.Empty(t, co.recorded(), "a refused notification emits nothing")
				return
			}
			require.NoError(t, err)
			require.Equal(t, "notified", res.Content)
			require.False(t, res.Pending)
			require.False(t, res.Final)
			var msg map[string]string
			require.NoError(t, json.Unmarshal([]byte(tc.args), &msg))
			require.Equal(t, []event{{
				Key: "notify:sess-A:call_7", Type: events.Notification,
				Data: events.NotificationData{Message: msg["message"], Level: tc.wantLevel},
			}}, co.recorded())
		})
	}
}

func TestReportProgress(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    string
		percent int
		message string
		wantErr string
		invalid bool
	}{
		{name: "zero", args: `{"percent":0}`, percent: 0},
		{name: "middle with message", args: `{"percent":42,"message":"drafting"}`, percent: 42, message: "drafting"},
		{name: "hundred", args: `{"percent":100,"message":"done"}`, percent: 100, message: "done"},
		{name: "negative", args: `{"percent":-1}`, wantErr: "report_progress: percent -1 is outside 0..100"},
		{name: "over a hundred", args: `{"percent":101}`, wantErr: "report_progress: percent 101 is outside 0..100"},
		{name: "missing percent", args: `{"message":"x"}`, wantErr: "missing required field(s): percent", invalid: true},
		{name: "fractional percent", args: `{"percent":12.5}`, wantErr: "cannot unmarshal number 12.5", invalid: true},
		{name: "string percent", args: `{"percent":"50"}`, wantErr: "cannot unmarshal string", invalid: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, caller, co := setup(t, "sess-B")
			res, err := r.Dispatch(context.Background(), tools.Call{Session: caller, ID: "call_3", Name: "report_progress", Args: json.RawMessage(tc.args)})
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				if tc.invalid {
					require.ErrorIs(t, err, tools.ErrInvalidArgs)
				}
				require.Empty(t, co.recorded())
				return
			}
			require.NoError(t, err)
			require.Contains(t, res.Content, "reported")
			require.Equal(t, []event{{
				Key: "progress:sess-B:call_3", Type: events.Progress,
				Data: events.ProgressData{Percent: tc.percent, Message: tc.message},
			}}, co.recorded())
		})
	}
}

// TestIdempotencyKeys: a redelivered call (same session, same call id) reuses its key;
// any other call gets a different one, so the event store can de-duplicate exactly.
func TestIdempotencyKeys(t *testing.T) {
	t.Parallel()
	type call struct{ session, id, tool, args string }
	calls := []call{
		{"s1", "c1", "notify_user", `{"message":"a"}`},
		{"s1", "c1", "notify_user", `{"message":"a"}`}, // redelivery
		{"s1", "c2", "notify_user", `{"message":"a"}`},
		{"s2", "c1", "notify_user", `{"message":"a"}`},
		{"s1", "c1", "report_progress", `{"percent":5}`},
		{"s1", "c1", "report_progress", `{"percent":5}`}, // redelivery
	}
	var keys []string
	for _, c := range calls {
		r, caller, co := setup(t, c.session)
		_, err := r.Dispatch(context.Background(), tools.Call{Session: caller, ID: c.id, Name: c.tool, Args: json.RawMessage(c.args)})
		require.NoError(t, err)
		ev := co.recorded()
		require.Len(t, ev, 1)
		keys = append(keys, ev[0].Key)
	}
	require.Equal(t, []string{
		"notify:s1:c1", "notify:s1:c1", "notify:s1:c2", "notify:s2:c1", "progress:s1:c1", "progress:s1:c1",
	}, keys)
}

func TestEmitErrorPropagates(t *testing.T) {
	t.Parallel()
	for _, c := range []tools.Call{
		{ID: "c", Name: "notify_user", Args: json.RawMessage(`{"message":"m"}`)},
		{ID: "c", Name: "report_progress", Args: json.RawMessage(`{"percent":1}`)},
	} {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			r, caller, co := setup(t, "s")
			co.err = errors.New("event store down")
			c.Session = caller
			_, err := r.Dispatch(context.Background(), c)
			require.ErrorIs(t, err, co.err)
		})
	}
}
