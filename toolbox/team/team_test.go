package team_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/testdb"

	"github.com/aetherium-engine/aetherium/mailbox"
	"github.com/aetherium-engine/aetherium/toolbox/team"
	"github.com/aetherium-engine/aetherium/tools"
)

type env struct {
	mb     *mailbox.Mailbox
	router *tools.Router
}

func setup(t *testing.T, roster team.Roster) *env {
	t.Helper()
	opt, err := redis.ParseURL(testdb.Redis(t))
	require.NoError(t, err)
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	mb := mailbox.New(rdb, mailbox.Config{}, mailbox.Options{})
	reg := tools.NewRegistry()
	team.Register(reg, mb, roster)
	return &env{mb: mb, router: tools.NewRouter(reg)}
}

func session(agent string) *tools.Session {
	return &tools.Session{
		RunID: "run-1", SessionID: "sess-" + agent, Agent: agent, Role: "worker",
		Access: tools.Access{Groups: []string{"team"}, Tools: []string{"send_message_to"}},
	}
}

func call(s *tools.Session, e *env, id string, args map[string]any) (tools.Result, error) {
	raw, _ := json.Marshal(args)
	return e.router.Dispatch(context.Background(), tools.Call{ID: id, Name: "send_message_to", Args: raw, Session: s})
}

func roster(names ...string) team.Roster {
	return func(context.Context, *tools.Session) ([]string, error) { return names, nil }
}

func TestSendMessageLandsInTargetMailbox(t *testing.T) {
	t.Parallel()
	e := setup(t, roster("supervisor", "frontend", "backend"))
	res, err := call(session("frontend"), e, "call-1", map[string]any{"to": "backend", "message": "the API needs a /health route"})
	require.NoError(t, err)
	var rc team.Receipt
	require.NoError(t, json.Unmarshal([]byte(res.Content), &rc))
	require.Equal(t, "backend", rc.DeliveredTo)

	// The same call replayed after a crash does not send a second copy.
	_, err = call(session("frontend"), e, "call-1", map[string]any{"to": "backend", "message": "the API needs a /health route"})
	require.NoError(t, err)

	msgs, ack, err := e.mb.Read(context.Background(), "run-1", "backend", "w1")
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	require.Equal(t, "frontend", msgs[0].From)
	require.Equal(t, "the API needs a /health route", msgs[0].Body)
	require.Equal(t, rc.MessageID, msgs[0].ID)
	require.NoError(t, ack(context.Background()))
}

func TestSendMessageErrors(t *testing.T) {
	t.Parallel()
	e := setup(t, roster("supervisor", "frontend", "backend"))
	cases := []struct {
		name string
		args map[string]any
		want string
		is   error
	}{
		{"unknown agent", map[string]any{"to": "designer", "message": "hi"}, `unknown agent "designer": your teammates are backend, supervisor`, team.ErrUnknownAgent},
		{"self", map[string]any{"to": "frontend", "message": "hi"}, "is you", nil},
		{"empty message", map[string]any{"to": "backend", "message": "  "}, "message is empty", nil},
		{"missing target", map[string]any{"message": "hi"}, "missing required field(s): to", tools.ErrInvalidArgs},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := call(session("frontend"), e, "c-"+tc.name, tc.args)
			require.ErrorContains(t, err, tc.want)
			if tc.is != nil {
				require.ErrorIs(t, err, tc.is)
			}
		})
	}
	msgs, _, err := e.mb.Read(context.Background(), "run-1", "designer", "w")
	require.NoError(t, err)
	require.Empty(t, msgs, "nothing was sent to the unknown agent")
}

func TestSendMessageFailsAtCallTimeWithoutDeps(t *testing.T) {
	t.Parallel()
	reg := tools.NewRegistry()
	team.Register(reg, nil, nil)
	spec, ok := reg.Spec("send_message_to")
	require.True(t, ok)
	require.Equal(t, "team", spec.Group)
	require.Equal(t, tools.Standard, spec.Tier)
	_, err := tools.NewRouter(reg).Dispatch(context.Background(), tools.Call{ID: "1", Name: "send_message_to", Args: json.RawMessage(`{"to":"b","message":"m"}`), Session: session("frontend")})
	require.ErrorContains(t, err, "not configured")

	e := setup(t, func(context.Context, *tools.Session) ([]string, error) { return nil, errors.New("store down") })
	_, err = call(session("frontend"), e, "c", map[string]any{"to": "backend", "message": "hi"})
	require.ErrorContains(t, err, "list the team: store down")
}
