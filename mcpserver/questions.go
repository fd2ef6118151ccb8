package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aetherium-engine/aetherium/api"
	"github.com/aetherium-engine/aetherium/store"
)

// The tools an MCP client answers the questions of ask_user with. They are the
// fleet's, not of the registry's catalog: a profile with questions: true serves
// them, and who may answer is decided by security.Approvals exactly as for the
// API (the run's owner, or the approve role), so a profile's call role does not
// enter into it.
const (
	ToolPendingQuestions = "pending_questions"
	ToolAnswerQuestion   = "answer_question"
)

// maxPendingQuestions bounds one pending_questions answer (the API's list limit).
const maxPendingQuestions = 1000

// addQuestionTools registers pending_questions and answer_question on srv; a
// registry tool of either name would be shadowed, so it is an error naming key.
func (s *Server) addQuestionTools(profile, key string, srv *mcp.Server) error {
	if s.d.Approvals == nil {
		return fmt.Errorf("%s.questions: this fleet has no permission gate, so no question of ask_user waits for an answer", key)
	}
	for _, name := range []string{ToolPendingQuestions, ToolAnswerQuestion} {
		if _, ok := s.d.Registry.Spec(name); ok {
			return fmt.Errorf("%s: the registry has a tool %s, which the MCP server serves itself (questions of ask_user)", key, name)
		}
	}
	s.addTool(profile, srv, &mcp.Tool{
		Name: ToolPendingQuestions,
		Description: "The questions agents asked with ask_user that wait for a human answer: those of your own runs, " +
			"or of every run when you hold the approve role. Answer one with answer_question.",
		InputSchema: map[string]any{"type": "object", "properties": map[string]any{
			"run_id": map[string]any{"type": "string", "description": "Only the questions of this run."},
		}},
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, s.pendingQuestions, true)
	s.addTool(profile, srv, &mcp.Tool{
		Name: ToolAnswerQuestion,
		Description: "Answer a question an agent asked with ask_user (see pending_questions): the agent resumes with the answer. " +
			"With choices and no other answers allowed, the answer must be one of the choices.",
		InputSchema: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"approval_id": map[string]any{"type": "string", "description": "The question's id (apr_…)."},
				"answer":      map[string]any{"type": "string", "description": "The answer (at most 2,000 bytes)."},
			},
			"required": []string{"approval_id", "answer"},
		},
	}, s.answerQuestion, true)
	return nil
}

// question is one pending question as pending_questions lists it.
type question struct {
	ApprovalID string    `json:"approval_id"`
	RunID      string    `json:"run_id"`
	Agent      string    `json:"agent"`
	Question   string    `json:"question"`
	Choices    []string  `json:"choices,omitempty"`
	AllowOther bool      `json:"allow_other"`
	ExpiresAt  time.Time `json:"expires_at"`
}

// questionView is the view of a question approval ({"question", "choices",
// "allow_other"}).
type questionView struct {
	Question   string   `json:"question"`
	Choices    []string `json:"choices"`
	AllowOther bool     `json:"allow_other"`
}

// pendingQuestions lists the pending questions the caller may answer: of its own
// runs, or of all runs with the approve role (as GET /api/approvals scopes them).
func (s *Server) pendingQuestions(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	principal, roles, ok := s.caller(req.Extra)
	if !ok {
		return nil, errors.New("no authenticated principal on this request")
	}
	var in struct {
		RunID string `json:"run_id"`
	}
	if err := decodeArgs(req, &in); err != nil {
		return refusal(err.Error()), nil
	}
	owner := principal
	if holds(roles, api.RoleApprove) {
		owner = ""
	}
	list, err := s.d.Store.ListApprovalsOf(ctx, store.ApprovalFilter{Owner: owner, Status: store.ApprovalPending, RunID: in.RunID,
		Kind: store.KindQuestion, Limit: maxPendingQuestions})
	if err != nil {
		return nil, fmt.Errorf("pending questions of %s: %w", principal, err)
	}
	out := struct {
		Questions []question `json:"questions"`
	}{Questions: []question{}}
	for _, a := range list {
		var v questionView
		if err := json.Unmarshal(a.View, &v); err != nil {
			return nil, fmt.Errorf("question %s: its view: %w", a.ID, err)
		}
		out.Questions = append(out.Questions, question{ApprovalID: a.ID, RunID: a.RunID, Agent: a.Agent,
			Question: v.Question, Choices: v.Choices, AllowOther: v.AllowOther, ExpiresAt: a.ExpiresAt})
	}
	raw, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("pending questions of %s: %w", principal, err)
	}
	// JSON as the text: a model reads it as well as a program does.
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(raw)}}}, nil
}

// answerQuestion records the caller's answer (security.Approvals.Apply, VerbAnswer),
// which resumes the asking agent. A refused answer is a tool error whose text
// says why, as the API's error body would.
func (s *Server) answerQuestion(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	principal, roles, ok := s.caller(req.Extra)
	if !ok {
		return nil, errors.New("no authenticated principal on this request")
	}
	// The API's roles of POST /api/approvals/{id}/answer: a read-only token
	// answers nothing, even of a run it owns.
	if !holds(roles, api.RoleSubmit) && !holds(roles, api.RoleApprove) {
		return refusal(fmt.Sprintf("forbidden: token %q lacks role %s or %s to answer questions", principal, api.RoleSubmit, api.RoleApprove)), nil
	}
	var in struct {
		ApprovalID string `json:"approval_id"`
		Answer     string `json:"answer"`
	}
	if err := decodeArgs(req, &in); err != nil {
		return refusal(err.Error()), nil
	}
	// The API's id rule (api.approvalID): anything else names no approval.
	if !strings.HasPrefix(in.ApprovalID, "apr_") || len(in.ApprovalID) > 64 {
		return refusal(fmt.Sprintf("invalid approval_id %q: an approval id is apr_… (see pending_questions)", in.ApprovalID)), nil
	}
	if strings.TrimSpace(in.Answer) == "" {
		return refusal("invalid answer: it is empty"), nil
	}
	appr, err := s.d.Approvals.Apply(ctx, in.ApprovalID, store.HumanDecision{Verb: store.VerbAnswer, By: principal, Answer: in.Answer,
		MayApprove: holds(roles, api.RoleApprove)})
	if msg, refused := decisionRefusal(in.ApprovalID, err); refused {
		return refusal(msg), nil
	}
	if err != nil {
		return nil, fmt.Errorf("answer question %s: %w", in.ApprovalID, err)
	}
	return &mcp.CallToolResult{
		Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("question %s answered by %s; the agent %s of run %s resumes with the answer",
			appr.ID, principal, appr.Agent, appr.RunID)}},
		Meta: mcp.Meta{"aetherium/approval_id": appr.ID, "aetherium/run_id": appr.RunID, "aetherium/status": appr.Status},
	}, nil
}

// decisionRefusal is the text of a decision Apply refused (the API's 4xx), and
// whether err is one: an unexpected error stays an error.
func decisionRefusal(id string, err error) (string, bool) {
	var bad *store.BadDecisionError
	switch {
	case err == nil:
		return "", false
	case errors.Is(err, store.ErrNotFound):
		return fmt.Sprintf("not found: approval %s (see pending_questions)", id), true
	case errors.Is(err, store.ErrForbidden):
		return fmt.Sprintf("forbidden: %v", err), true
	case errors.As(err, &bad):
		return fmt.Sprintf("invalid %s: %s", bad.Field, bad.Reason), true
	case errors.Is(err, store.ErrWrongKind), errors.Is(err, store.ErrDecided), errors.Is(err, store.ErrExpired), errors.Is(err, store.ErrRunClosed):
		return fmt.Sprintf("conflict: %v", err), true
	}
	return "", false
}

// decodeArgs reads a call's arguments into into; absent arguments are {}.
func decodeArgs(req *mcp.CallToolRequest, into any) error {
	raw := req.Params.Arguments
	if len(strings.TrimSpace(string(raw))) == 0 {
		return nil
	}
	if err := json.Unmarshal(raw, into); err != nil {
		return fmt.Errorf("invalid arguments: %v", err)
	}
	return nil
}
