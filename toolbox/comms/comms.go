// Package comms is the CommunicationTools server class: messages that reach the user
// mid-run through the run's event stream.
package comms

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/tools"
)

// NotifyArgs are notify_user's arguments.
type NotifyArgs struct {
	Message string `json:"message" jsonschema:"description=What the user should know"`
	Level   string `json:"level,omitempty" jsonschema:"enum=info,enum=warning,enum=error,description=Default info"`
}

// ProgressArgs are report_progress's arguments.
type ProgressArgs struct {
	Percent int    `json:"percent" jsonschema:"minimum=0,maximum=100"`
	Message string `json:"message,omitempty"`
}

// AskArgs are ask_user's arguments.
type AskArgs struct {
	Question   string   `json:"question" jsonschema:"description=The question for the person running this job; say what you need and why"`
	Choices    []string `json:"choices,omitempty" jsonschema:"description=Answers to offer (at most 10); omit for a free-text answer"`
	AllowOther bool     `json:"allow_other,omitempty" jsonschema:"description=With choices: the person may answer something else too"`
}

// Limits of a question: a person reads it, and the approver's view shows it whole.
const (
	MaxQuestionBytes = 2000
	MaxChoices       = 10
	MaxChoiceBytes   = 200
)

// ParseQuestion reads and checks ask_user's arguments (the gate asks nobody a
// question that fails here).
func ParseQuestion(raw json.RawMessage) (tools.Question, error) {
	var a AskArgs
	if err := json.Unmarshal(raw, &a); err != nil {
		return tools.Question{}, fmt.Errorf("ask_user: arguments: %w", err)
	}
	q := tools.Question{Text: strings.TrimSpace(a.Question), AllowOther: a.AllowOther}
	switch {
	case q.Text == "":
		return q, errors.New("ask_user: question is empty")
	case len(q.Text) > MaxQuestionBytes:
		return q, fmt.Errorf("ask_user: question is %d bytes, over %d", len(q.Text), MaxQuestionBytes)
	case len(a.Choices) > MaxChoices:
		return q, fmt.Errorf("ask_user: %d choices, at most %d", len(a.Choices), MaxChoices)
	}
	seen := map[string]bool{}
	for i, c := range a.Choices {
		c = strings.TrimSpace(c)
		switch {
		case c == "":
			return q, fmt.Errorf("ask_user: choices[%d] is empty", i)
		case len(c) > MaxChoiceBytes:
			return q, fmt.Errorf("ask_user: choices[%d] is %d bytes, over %d", i, len(c), MaxChoiceBytes)
		case seen[c]:
			return q, fmt.Errorf("ask_user: choices[%d] %q is a duplicate", i, c)
		}
		seen[c] = true
		q.Choices = append(q.Choices, c)
	}
	if len(q.Choices) == 0 {
		q.AllowOther = false
	}
	return q, nil
}

// Register adds the comms tools.
func Register(reg *tools.Registry) {
	tools.Register(reg, "notify_user", "Send the user a notification about progress or an event.",
		func(ctx context.Context, call tools.Call, a NotifyArgs) (tools.Result, error) {
			if strings.TrimSpace(a.Message) == "" {
				return tools.Result{}, fmt.Errorf("notify_user: message is empty")
			}
			if a.Level == "" {
				a.Level = "info"
			}
			if a.Level != "info" && a.Level != "warning" && a.Level != "error" {
				return tools.Result{}, fmt.Errorf("notify_user: level %q is not info, warning or error", a.Level)
			}
			s := call.Session
			if err := s.Coordinator.Emit(ctx, "notify:"+s.SessionID+":"+call.ID, events.Notification,
				events.NotificationData{Message: a.Message, Level: a.Level}); err != nil {
				return tools.Result{}, err
			}
			return tools.Text("notified"), nil
		}, tools.Idempotent(), tools.InGroup("comms"))
	tools.Register(reg, "report_progress", "Report task progress as a percent complete.",
		func(ctx context.Context, call tools.Call, a ProgressArgs) (tools.Result, error) {
			if a.Percent < 0 || a.Percent > 100 {
				return tools.Result{}, fmt.Errorf("report_progress: percent %d is outside 0..100", a.Percent)
			}
			s := call.Session
			if err := s.Coordinator.Emit(ctx, "progress:"+s.SessionID+":"+call.ID, events.Progress,
				events.ProgressData{Percent: a.Percent, Message: a.Message}); err != nil {
				return tools.Result{}, err
			}
			return tools.Text("progress %d%% reported", a.Percent), nil
		}, tools.Idempotent(), tools.InGroup("comms"))
	tools.Register(reg, "ask_user", "Ask the person running this job a question and wait for the answer "+
		"(optionally offering choices). Use it when you cannot go on without a decision only they can make.",
		func(ctx context.Context, call tools.Call, a AskArgs) (tools.Result, error) {
			if call.Answer == nil {
				// The gate holds the call until a person answers; a router without
				// the gate has nobody to ask.
				return tools.Result{}, errors.New("ask_user: nobody can be asked here (the permission gate's questions are not enabled)")
			}
			return tools.Text("%s answered: %s", call.Answer.By, call.Answer.Text), nil
		}, tools.Idempotent(), tools.InGroup("comms"), tools.AsksHuman(ParseQuestion))
}
