package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/api"
	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/mcpserver"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/templates"
)

// The principals of the question tests: alice and bob own a run each, the
// approver decides for every run.
const (
	aliceSecret    = "q-alice-secret"
	bobSecret      = "q-bob-secret"
	approverSecret = "q-approver-secret"
	readerSecret   = "q-reader-secret"
)

type bearer struct {
	secret string
	next   http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.secret)
	return b.next.RoundTrip(r)
}

// connect opens an MCP session on a profile with the SDK's own client.
func connect(t *testing.T, f *fleettest.Fleet, profile, secret string) *mcp.ClientSession {
	t.Helper()
	return connectURL(t, f.MCPURL+"/mcp/"+profile, secret)
}

func callTool(t *testing.T, cs *mcp.ClientSession, tool string, args any) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	require.NoError(t, err)
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String(), res.IsError
}

// ownRun creates a queued run owned by owner.
func ownRun(t *testing.T, f *fleettest.Fleet, owner string) string {
	t.Helper()
	id := uuid.NewString()
	require.NoError(t, f.Store.CreateRun(context.Background(), store.Run{ID: id, Prompt: "x", Template: "t", Team: json.RawMessage(`{}`), Owner: owner}))
	return id
}

// ask stands in for ask_user: a pending question of run.
func ask(t *testing.T, f *fleettest.Fleet, run, callID, q string, choices []string, allowOther bool) string {
	t.Helper()
	view, err := json.Marshal(map[string]any{"question": q, "choices": choices, "allow_other": allowOther})
	require.NoError(t, err)
	a, created, err := f.Store.RequestApproval(context.Background(), store.Approval{
		ID: fmt.Sprintf("apr_q_%s_%s", callID, strings.ReplaceAll(run, "-", "")[:16]), Kind: store.KindQuestion,
		RunID: run, SessionID: queue.SupervisorSession(run).String(), CallID: callID, Agent: "lead", Tool: "ask_user", Tier: "standard",
		Args: json.RawMessage(`{}`), View: view, Why: "ask_user",
	}, time.Hour)
	require.NoError(t, err)
	require.True(t, created)
	return a.ID
}

func pending(t *testing.T, cs *mcp.ClientSession, args map[string]any) []string {
	t.Helper()
	text, isErr := callTool(t, cs, mcpserver.ToolPendingQuestions, args)
	require.False(t, isErr, text)
	var out struct {
		Questions []struct {
			ApprovalID string   `json:"approval_id"`
			Question   string   `json:"question"`
			Choices    []string `json:"choices"`
		} `json:"questions"`
	}
	require.NoError(t, json.Unmarshal([]byte(text), &out), text)
	ids := []string{}
	for _, q := range out.Questions {
		require.NotEmpty(t, q.Question)
		ids = append(ids, q.ApprovalID)
	}
	return ids
}

// An MCP client lists the questions it may answer and answers them: the run's
// owner its own, the approver any; every refusal is a tool error saying why.
func TestMCPAnswersQuestions(t *testing.T) {
	t.Parallel()
	f := fleettest.Start(t, fleettest.Options{NoWorker: true, Configure: func(c *config.Config) {
		c.API.Tokens = []api.Token{
			{Name: "alice", SHA256: api.HashToken(aliceSecret), Roles: []string{api.RoleSubmit, api.RoleRead}},
			{Name: "bob", SHA256: api.HashToken(bobSecret), Roles: []string{api.RoleSubmit, api.RoleRead}},
			{Name: "approver", SHA256: api.HashToken(approverSecret), Roles: []string{api.RoleApprove, api.RoleRead}},
			{Name: "reader", SHA256: api.HashToken(readerSecret), Roles: []string{api.RoleRead}},
		}
		c.MCP.Profiles = map[string]mcpserver.Profile{
			"inbox": {Questions: true},
			"ide":   {Node: templates.Node{Tools: []string{"read_file"}}},
		}
	}})
	aliceRun, bobRun := ownRun(t, f, "alice"), ownRun(t, f, "bob")
	db := ask(t, f, aliceRun, "c1", "Which database should the service use?", []string{"postgres", "sqlite"}, false)
	name := ask(t, f, aliceRun, "c2", "What should the service be called?", nil, true)
	bobs := ask(t, f, bobRun, "c3", "Ship it?", []string{"yes", "no"}, false)
	call, _, err := f.Store.RequestApproval(context.Background(), store.Approval{ID: "apr_q_call_" + strings.ReplaceAll(aliceRun, "-", "")[:16],
		RunID: aliceRun, SessionID: queue.SupervisorSession(aliceRun).String(), CallID: "c4", Agent: "lead", Tool: "run_shell", Tier: "restricted",
		Args: json.RawMessage(`{"command":"ls"}`), View: json.RawMessage(`{"commands":["ls"]}`), Why: "test"}, time.Hour)
	require.NoError(t, err)

	alice, bob, approver := connect(t, f, "inbox", aliceSecret), connect(t, f, "inbox", bobSecret), connect(t, f, "inbox", approverSecret)
	reader := connect(t, f, "inbox", readerSecret)

	t.Run("tools", func(t *testing.T) {
		t.Parallel()
		for profile, want := range map[string][]string{
			"inbox": {mcpserver.ToolAnswerQuestion, mcpserver.ToolPendingQuestions},
			"ide":   {"read_file"}, // questions are opt-in: the catalog stays exactly the profile's
		} {
			res, err := connect(t, f, profile, aliceSecret).ListTools(context.Background(), nil)
			require.NoError(t, err)
			var names []string
			for _, tl := range res.Tools {
				names = append(names, tl.Name)
			}
			require.ElementsMatch(t, want, names, profile)
		}
	})

	// Before any answer (the parallel groups below run after it).
	t.Run("pending", func(t *testing.T) {
		require.ElementsMatch(t, []string{db, name}, pending(t, alice, nil), "alice's own questions, not the call, not bob's")
		require.ElementsMatch(t, []string{bobs}, pending(t, bob, nil))
		require.ElementsMatch(t, []string{db, name, bobs}, pending(t, approver, nil), "the approver sees every run's")
		require.ElementsMatch(t, []string{bobs}, pending(t, approver, map[string]any{"run_id": bobRun}))
		require.Empty(t, pending(t, reader, nil), "a principal without runs has no questions")
	})

	t.Run("refusals", func(t *testing.T) {
		t.Parallel()
		for _, c := range []struct {
			name string
			cs   *mcp.ClientSession
			args map[string]any
			want string
		}{
			{"read-only", reader, map[string]any{"approval_id": db, "answer": "postgres"}, `forbidden: token "reader" lacks role submit or approve`},
			{"another's run", bob, map[string]any{"approval_id": db, "answer": "postgres"}, "forbidden"},
			{"not a choice", alice, map[string]any{"approval_id": db, "answer": "mysql"}, "invalid answer"},
			{"a call", alice, map[string]any{"approval_id": call.ID, "answer": "yes"}, "conflict"},
			{"missing", alice, map[string]any{"approval_id": "apr_missing", "answer": "yes"}, "not found: approval apr_missing"},
			{"not an id", alice, map[string]any{"approval_id": "../x", "answer": "yes"}, `invalid approval_id "../x"`},
			{"empty answer", alice, map[string]any{"approval_id": db, "answer": " "}, "invalid answer: it is empty"},
			{"too long", alice, map[string]any{"approval_id": db, "answer": strings.Repeat("x", 2001)}, "invalid answer"},
		} {
			text, isErr := callTool(t, c.cs, mcpserver.ToolAnswerQuestion, c.args)
			require.True(t, isErr, "%s: %s", c.name, text)
			require.Contains(t, text, c.want, c.name)
		}
	})

	t.Run("answers", func(t *testing.T) {
		t.Parallel()
		text, isErr := callTool(t, alice, mcpserver.ToolAnswerQuestion, map[string]any{"approval_id": name, "answer": "ledger"})
		require.False(t, isErr, text)
		require.Contains(t, text, "question "+name+" answered by alice")
		text, isErr = callTool(t, approver, mcpserver.ToolAnswerQuestion, map[string]any{"approval_id": bobs, "answer": "yes"})
		require.False(t, isErr, text)
		text, isErr = callTool(t, bob, mcpserver.ToolAnswerQuestion, map[string]any{"approval_id": bobs, "answer": "no"})
		require.True(t, isErr, "a second answer: %s", text)
		require.Contains(t, text, "conflict")
		for id, want := range map[string][2]string{name: {"ledger", "alice"}, bobs: {"yes", "approver"}} {
			a, err := f.Store.GetApproval(context.Background(), id)
			require.NoError(t, err)
			require.Equal(t, "answered", a.Status)
			require.Equal(t, want[0], a.Answer)
			require.Equal(t, want[1], a.DecidedBy)
		}
	})
}

// askingTeam is an inline team whose writer asks one question with ask_user,
// then ends; its scripted model reads the answer from its history.
func askingTeam() map[string]any {
	return map[string]any{
		"name":  "asking",
		"model": map[string]any{"provider": "script"},
		"supervisor": map[string]any{
			"name": "boss", "prompt": "coordinate", "mcp_servers": []string{"orchestration"},
		},
		"workers": []map[string]any{{"name": "writer", "prompt": "write", "mcp_servers": []string{"workspace", "comms"}}},
		"script": map[string]any{"agents": map[string]any{
			"boss": []map[string]any{
				{"calls": []map[string]any{{"tool": "delegate", "args": map[string]any{"agent": "writer", "task": "go"}}}},
				{"calls": []map[string]any{{"tool": "reply", "args": map[string]any{"message": "done"}}}},
			},
			"writer": []map[string]any{
				{"calls": []map[string]any{{"tool": "ask_user", "args": map[string]any{"question": "Which database?", "choices": []string{"postgres", "sqlite"}}}}},
				{"say": "done"},
			},
		}},
	}
}

// End to end: an agent's ask_user question is found with pending_questions and
// answered with answer_question; the run resumes and its model reads the answer.
func TestMCPAnswerResumesTheAgent(t *testing.T) {
	t.Parallel()
	f := fleettest.Start(t, fleettest.Options{Configure: func(c *config.Config) {
		c.MCP.Profiles = map[string]mcpserver.Profile{"inbox": {Questions: true}}
	}})
	run := f.SubmitTeam(askingTeam(), "ask")
	cs := connect(t, f, "inbox", "")
	var id string
	require.Eventually(t, func() bool {
		ids := pending(t, cs, map[string]any{"run_id": run})
		if len(ids) == 1 {
			id = ids[0]
		}
		return id != ""
	}, 30*time.Second, 50*time.Millisecond, "the question is pending")
	text, isErr := callTool(t, cs, mcpserver.ToolAnswerQuestion, map[string]any{"approval_id": id, "answer": "sqlite"})
	require.False(t, isErr, text)
	require.Equal(t, "completed", f.WaitTerminal(run, 60*time.Second).Status)
	var msgs string
	require.NoError(t, f.Store.Pool.QueryRow(context.Background(),
		`SELECT session_history(id)::text FROM sessions WHERE run_id = $1 AND agent = 'writer'`, run).Scan(&msgs))
	require.Contains(t, msgs, "local answered: sqlite", "the model reads who answered what")
}
