package queue

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalidSessionID is wrapped by every error of ParseSessionID and
// SessionID.Validate.
var ErrInvalidSessionID = errors.New("invalid session id")

// SessionID names one agent session: a run's supervisor session (Run set), the
// session of the agent working on a delegation (Delegation set), or one tool call
// of an outside MCP client (MCPCall set: its approval resumes an mcp:call task, not
// an agent). Exactly one of the three is set. A delegation's or MCP call's session
// does not name its run: their ids are unique across runs.
//
// Its String form is stored in PostgreSQL (sessions.id, delegations.parent_session,
// approvals.session_id) and never changes: "<run>:supervisor", "d:<delegation>" and
// "m:<mcp call>".
type SessionID struct {
	Run        string
	Delegation string
	MCPCall    string
}

const (
	supervisorSuffix = ":supervisor"
	delegationPrefix = "d:"
	mcpCallPrefix    = "m:"
	// maxSessionPart bounds a run or delegation id (uuids and "del_" + 24 hex
	// digits in practice).
	maxSessionPart = 128
)

// SupervisorSession is the id of a run's supervisor session.
func SupervisorSession(runID string) SessionID { return SessionID{Run: runID} }

// DelegationSession is the id of the session working on a delegation.
func DelegationSession(delegationID string) SessionID { return SessionID{Delegation: delegationID} }

// MCPCallSession is the id of the session of one MCP client's tool call.
func MCPCallSession(callID string) SessionID { return SessionID{MCPCall: callID} }

// IsSupervisor reports whether s is a run's supervisor session.
func (s SessionID) IsSupervisor() bool { return s.Delegation == "" && s.MCPCall == "" }

// IsMCPCall reports whether s is an MCP client's tool call.
func (s SessionID) IsMCPCall() bool { return s.MCPCall != "" }

// String is the stored form: "d:<delegation>" for a delegation's session, else
// "<run>:supervisor". It formats whatever s holds; Validate tells whether the
// result parses back to s.
func (s SessionID) String() string {
	if s.Delegation != "" {
		return delegationPrefix + s.Delegation
	}
	if s.MCPCall != "" {
		return mcpCallPrefix + s.MCPCall
	}
	return s.Run + supervisorSuffix
}

// Validate reports whether s names exactly one session and its String form parses
// back to s (ids are non-empty, at most 128 printable ASCII characters, without ':'
// or spaces; a run named "d" or a delegation named "supervisor" would read both
// ways and is refused).
func (s SessionID) Validate() error {
	set := 0
	for _, part := range []string{s.Run, s.Delegation, s.MCPCall} {
		if part != "" {
			set++
		}
	}
	switch {
	case set > 1 && s.MCPCall == "":
		return fmt.Errorf("%w: both run %q and delegation %q are set", ErrInvalidSessionID, s.Run, s.Delegation)
	case set > 1:
		return fmt.Errorf("%w: MCP call %q is set with run %q or delegation %q", ErrInvalidSessionID, s.MCPCall, s.Run, s.Delegation)
	case set == 0:
		return fmt.Errorf("%w: neither a run nor a delegation is set", ErrInvalidSessionID)
	}
	p, err := ParseSessionID(s.String())
	if err != nil {
		return err
	}
	if p != s {
		return fmt.Errorf("%w: %+v reads back as %+v", ErrInvalidSessionID, s, p)
	}
	return nil
}

// ParseSessionID reads a stored session id: "<run>:supervisor" or "d:<delegation>".
// Anything else, an id that reads both ways ("d:supervisor"), or an id with an
// empty, overlong, or non-printable part, or a ':' inside a part, is an error
// wrapping ErrInvalidSessionID.
func ParseSessionID(s string) (SessionID, error) {
	run, isSup := strings.CutSuffix(s, supervisorSuffix)
	del, isDel := strings.CutPrefix(s, delegationPrefix)
	if call, isMCP := strings.CutPrefix(s, mcpCallPrefix); isMCP && (!isSup || checkPart(run) != nil || checkPart(call) == nil) {
		if isSup && checkPart(run) == nil {
			return SessionID{}, fmt.Errorf("%w %q: reads as run %q's supervisor and as MCP call %q", ErrInvalidSessionID, truncate(s), run, call)
		}
		if err := checkPart(call); err != nil {
			return SessionID{}, fmt.Errorf("%w %q: MCP call id %v", ErrInvalidSessionID, truncate(s), err)
		}
		return SessionID{MCPCall: call}, nil
	}
	runErr, delErr := checkPart(run), checkPart(del)
	q := truncate(s)
	switch {
	case isSup && isDel && runErr == nil && delErr == nil:
		return SessionID{}, fmt.Errorf("%w %q: reads as run %q's supervisor and as delegation %q", ErrInvalidSessionID, q, run, del)
	case isSup && runErr == nil:
		return SessionID{Run: run}, nil
	case isDel && delErr == nil:
		return SessionID{Delegation: del}, nil
	case isSup:
		return SessionID{}, fmt.Errorf("%w %q: run id %v", ErrInvalidSessionID, q, runErr)
	case isDel:
		return SessionID{}, fmt.Errorf("%w %q: delegation id %v", ErrInvalidSessionID, q, delErr)
	}
	return SessionID{}, fmt.Errorf("%w %q: want <run>:supervisor, d:<delegation> or m:<mcp call>", ErrInvalidSessionID, q)
}

// ParseRunSession reads a session id stored with run runID (a delegation's parent
// session, an approval's session): as ParseSessionID, and a supervisor session must
// be runID's own.
func ParseRunSession(runID, s string) (SessionID, error) {
	id, err := ParseSessionID(s)
	if err != nil {
		return id, err
	}
	if id.IsSupervisor() && id.Run != runID {
		return SessionID{}, fmt.Errorf("%w %q: the supervisor session of another run than %s", ErrInvalidSessionID, s, runID)
	}
	return id, nil
}

// checkPart accepts a run or delegation id inside a session id.
func checkPart(p string) error {
	switch {
	case p == "":
		return errors.New("is empty")
	case len(p) > maxSessionPart:
		return fmt.Errorf("is longer than %d bytes", maxSessionPart)
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c <= ' ' || c > '~' || c == ':' {
			return fmt.Errorf("has %q at byte %d (printable ASCII without ':' or spaces only)", p[i:i+1], i)
		}
	}
	return nil
}

// truncate shortens a hostile input quoted in an error.
func truncate(s string) string {
	if len(s) <= 2*maxSessionPart {
		return s
	}
	return s[:2*maxSessionPart] + "…"
}
