// Package comms is the CommunicationTools server class: messages that reach the user
// mid-run through the run's event stream.
package comms

import (
	"context"
	"fmt"
	"strings"

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
			if err := s.Coordinator.Emit(ctx, "notify:"+s.SessionID+":"+call.ID, "notification",
				map[string]any{"message": a.Message, "level": a.Level}); err != nil {
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
			if err := s.Coordinator.Emit(ctx, "progress:"+s.SessionID+":"+call.ID, "progress",
				map[string]any{"percent": a.Percent, "message": a.Message}); err != nil {
				return tools.Result{}, err
			}
			return tools.Text("progress %d%% reported", a.Percent), nil
		}, tools.Idempotent(), tools.InGroup("comms"))
}
