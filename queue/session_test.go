package queue_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/queue"
)

// The stored forms of session ids (sessions.id, delegations.parent_session,
// approvals.session_id in PostgreSQL) must never change.
func TestSessionIDStringIsPinned(t *testing.T) {
	t.Parallel()
	const run = "0b4a3c52-7d1e-4f6a-9a51-3f2f0f3c9e10"
	require.Equal(t, run+":supervisor", queue.SupervisorSession(run).String())
	require.Equal(t, "d:del_0123456789abcdef01234567", queue.DelegationSession("del_0123456789abcdef01234567").String())
	require.Equal(t, queue.SessionID{Run: run}, queue.SupervisorSession(run))
	require.Equal(t, queue.SessionID{Delegation: "del_1"}, queue.DelegationSession("del_1"))
	require.True(t, queue.SupervisorSession(run).IsSupervisor())
	require.False(t, queue.DelegationSession("del_1").IsSupervisor())
}

func TestParseSessionID(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 129)
	for _, c := range []struct {
		in   string
		want queue.SessionID
		err  string // "" parses
	}{
		{in: "0b4a3c52-7d1e-4f6a-9a51-3f2f0f3c9e10:supervisor", want: queue.SessionID{Run: "0b4a3c52-7d1e-4f6a-9a51-3f2f0f3c9e10"}},
		{in: "d:del_0123456789abcdef01234567", want: queue.SessionID{Delegation: "del_0123456789abcdef01234567"}},
		{in: "run-1:supervisor", want: queue.SessionID{Run: "run-1"}},
		{in: "d:d", want: queue.SessionID{Delegation: "d"}},
		{in: "m:mcp_0123456789abcdef", want: queue.SessionID{MCPCall: "mcp_0123456789abcdef"}},
		{in: "m:", err: "MCP call id is empty"},
		{in: "m:a:b", err: `MCP call id has ":" at byte 1`},
		{in: "m:supervisor", err: `reads as run "m"'s supervisor and as MCP call "supervisor"`},
		{in: "supervisor:supervisor", want: queue.SessionID{Run: "supervisor"}},
		{in: strings.Repeat("a", 128) + ":supervisor", want: queue.SessionID{Run: strings.Repeat("a", 128)}},

		{in: "", err: `"": want <run>:supervisor, d:<delegation> or m:<mcp call>`},
		{in: "sess-1", err: `"sess-1": want <run>:supervisor, d:<delegation> or m:<mcp call>`},
		{in: "supervisor", err: "want <run>:supervisor, d:<delegation> or m:<mcp call>"},
		{in: ":supervisor", err: "run id is empty"},
		{in: "d:", err: "delegation id is empty"},
		{in: "d:supervisor", err: `reads as run "d"'s supervisor and as delegation "supervisor"`},
		{in: "d:x:supervisor", err: `run id has ":" at byte 1`},
		{in: "r:supervisor:supervisor", err: "run id has \":\" at byte 1"},
		{in: "d:a:b", err: "delegation id has \":\" at byte 1"},
		{in: "d::", err: "delegation id has \":\" at byte 0"},
		{in: "D:del_1", err: "want <run>:supervisor, d:<delegation> or m:<mcp call>"},
		{in: "r1:Supervisor", err: "want <run>:supervisor, d:<delegation> or m:<mcp call>"},
		{in: "r1:supervisor ", err: "want <run>:supervisor, d:<delegation> or m:<mcp call>"},
		{in: " r1:supervisor", err: `run id has " " at byte 0`},
		{in: "r1\n:supervisor", err: `run id has "\n" at byte 2`},
		{in: "d:del\x00", err: `delegation id has "\x00" at byte 3`},
		{in: "d:dél", err: `delegation id has "\xc3" at byte 1`},
		{in: "d:del\x7f", err: `delegation id has "\x7f" at byte 3`},
		{in: long + ":supervisor", err: "run id is longer than 128 bytes"},
		{in: "d:" + long, err: "delegation id is longer than 128 bytes"},
		{in: strings.Repeat("x", 10000), err: "…\": want <run>:supervisor, d:<delegation> or m:<mcp call>"},
	} {
		got, err := queue.ParseSessionID(c.in)
		if c.err == "" {
			require.NoError(t, err, "%q", c.in)
			require.Equal(t, c.want, got, "%q", c.in)
			require.Equal(t, c.in, got.String(), "round trip of %q", c.in)
			require.NoError(t, got.Validate(), "%q", c.in)
			continue
		}
		require.ErrorIs(t, err, queue.ErrInvalidSessionID, "%q", c.in)
		require.ErrorContains(t, err, c.err, "%q", c.in)
		require.Less(t, len(err.Error()), 400, "a hostile input is not echoed whole")
		require.Equal(t, queue.SessionID{}, got)
	}
}

func TestSessionIDValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		id  queue.SessionID
		err string
	}{
		{queue.SessionID{Run: "r1"}, ""},
		{queue.SessionID{Delegation: "del_1"}, ""},
		{queue.SessionID{}, "neither a run nor a delegation is set"},
		{queue.SessionID{Run: "r1", Delegation: "del_1"}, `both run "r1" and delegation "del_1" are set`},
		{queue.SessionID{Run: "d"}, "reads as run"},
		{queue.SessionID{Delegation: "supervisor"}, "reads as run"},
		{queue.SessionID{Run: "a:b"}, `run id has ":"`},
		{queue.SessionID{Delegation: "x:supervisor"}, `has ":"`},
		{queue.SessionID{Run: "r 1"}, `run id has " "`},
	} {
		err := c.id.Validate()
		if c.err == "" {
			require.NoError(t, err, "%+v", c.id)
			continue
		}
		require.ErrorIs(t, err, queue.ErrInvalidSessionID, "%+v", c.id)
		require.ErrorContains(t, err, c.err, "%+v", c.id)
	}
}

func TestParseRunSession(t *testing.T) {
	t.Parallel()
	got, err := queue.ParseRunSession("r1", "r1:supervisor")
	require.NoError(t, err)
	require.Equal(t, queue.SupervisorSession("r1"), got)
	got, err = queue.ParseRunSession("r1", "d:del_1")
	require.NoError(t, err, "a delegation's session does not name its run")
	require.Equal(t, queue.DelegationSession("del_1"), got)
	_, err = queue.ParseRunSession("r1", "r2:supervisor")
	require.ErrorIs(t, err, queue.ErrInvalidSessionID)
	require.ErrorContains(t, err, "another run than r1")
	_, err = queue.ParseRunSession("r1", "sess-1")
	require.ErrorIs(t, err, queue.ErrInvalidSessionID)
}

// FuzzSessionID: whatever parses prints back to the same bytes, and whatever
// validates parses back to itself; nothing panics.
func FuzzSessionID(f *testing.F) {
	for _, s := range []string{"r1:supervisor", "d:del_1", "d:supervisor", "d:x:supervisor", ":supervisor", "d:", "", "d:\x00", "a:supervisor:supervisor"} {
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, s string, delegation bool) {
		if id, err := queue.ParseSessionID(s); err == nil {
			if id.String() != s {
				t.Fatalf("%q parsed as %+v, which prints %q", s, id, id.String())
			}
			if err := id.Validate(); err != nil {
				t.Fatalf("%q parsed as %+v, which does not validate: %v", s, id, err)
			}
		}
		id := queue.SessionID{Run: s}
		if delegation {
			id = queue.SessionID{Delegation: s}
		}
		if id.Validate() != nil {
			return
		}
		back, err := queue.ParseSessionID(id.String())
		if err != nil || back != id {
			t.Fatalf("%+v validates, but its string %q parses as %+v, %v", id, id.String(), back, err)
		}
	})
}
