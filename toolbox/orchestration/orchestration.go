// Package orchestration is the OrchestrationTools server class: delegate, reply and
// spawn_subagents. Delegations are durable: the tool records them and returns a
// pending result; the calling session waits (persisted, not in a goroutine) and is
// resumed when every delegated turn has finished.
package orchestration

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aetherium-engine/aetherium/tools"
)

// DelegateArgs are delegate's arguments.
type DelegateArgs struct {
	Agent string `json:"agent" jsonschema:"description=Name of the worker agent"`
	Task  string `json:"task" jsonschema:"description=The task, self-contained"`
}

// ReplyArgs are reply's arguments.
type ReplyArgs struct {
	Message string `json:"message" jsonschema:"description=The final answer for the user"`
}

// SpawnArgs are spawn_subagents' arguments.
type SpawnArgs struct {
	Tasks []SpawnTask `json:"tasks" jsonschema:"minItems=1,maxItems=8"`
}

// SpawnTask is one subagent's work.
type SpawnTask struct {
	Task  string   `json:"task"`
	Tools []string `json:"tools,omitempty" jsonschema:"description=Tools the subagent may use (a subset of yours; default all of your non-orchestration tools)"`
}

// MaxSubagents bounds one spawn_subagents call (it multiplies model load).
const MaxSubagents = 8

// Register adds the orchestration tools.
func Register(reg *tools.Registry) {
	tools.Register(reg, tools.Delegate, "Hand a task to a named worker agent; its answer comes back as this call's result.",
		func(ctx context.Context, call tools.Call, a DelegateArgs) (tools.Result, error) {
			if strings.TrimSpace(a.Task) == "" {
				return tools.Result{}, errors.New("delegate: task is empty")
			}
			s := call.Session
			if err := s.Coordinator.Delegate(ctx, call.ID, []tools.DelegateRequest{{Agent: a.Agent, Task: a.Task}}); err != nil {
				return tools.Result{}, err
			}
			return tools.Result{Pending: true}, nil
		}, tools.Idempotent(), tools.InGroup("orchestration"))
	tools.Register(reg, tools.Reply, "Send the final response to the user; this ends the run.",
		func(ctx context.Context, call tools.Call, a ReplyArgs) (tools.Result, error) {
			if strings.TrimSpace(a.Message) == "" {
				return tools.Result{}, errors.New("reply: message is empty")
			}
			s := call.Session
			if err := s.Coordinator.Reply(ctx, a.Message); err != nil {
				return tools.Result{}, err
			}
			return tools.Result{Content: "reply sent", Final: true}, nil
		}, tools.Idempotent(), tools.InGroup("orchestration"))
	tools.Register(reg, tools.SpawnSubagents, "Run up to 8 subagents in parallel on independent tasks; their answers come back together.",
		func(ctx context.Context, call tools.Call, a SpawnArgs) (tools.Result, error) {
			if len(a.Tasks) == 0 || len(a.Tasks) > MaxSubagents {
				return tools.Result{}, fmt.Errorf("spawn_subagents: 1 to %d tasks, got %d", MaxSubagents, len(a.Tasks))
			}
			s := call.Session
			reqs := make([]tools.DelegateRequest, len(a.Tasks))
			for i, t := range a.Tasks {
				if strings.TrimSpace(t.Task) == "" {
					return tools.Result{}, fmt.Errorf("spawn_subagents: task %d is empty", i+1)
				}
				allowed, err := Cap(s.Access.Tools, t.Tools)
				if err != nil {
					return tools.Result{}, fmt.Errorf("spawn_subagents: task %d: %w", i+1, err)
				}
				reqs[i] = tools.DelegateRequest{Agent: fmt.Sprintf("%s-sub-%d", s.Agent, i+1), Task: t.Task, Tools: allowed}
			}
			if err := s.Coordinator.Delegate(ctx, call.ID, reqs); err != nil {
				return tools.Result{}, err
			}
			return tools.Result{Pending: true}, nil
		}, tools.Idempotent(), tools.InGroup("orchestration"), tools.WithTier(tools.Elevated))
}

// coordination tools never pass to a subagent: no recursion, no replying for the run.
var coordination = map[string]bool{tools.Delegate: true, tools.Reply: true, tools.SpawnSubagents: true}

// Cap returns the subagent's tools: the requested ones, each of which the parent must
// hold (no escalation through delegation); by default all the parent's work tools.
func Cap(parent, requested []string) ([]string, error) {
	held := map[string]bool{}
	for _, t := range parent {
		held[t] = true
	}
	if len(requested) == 0 {
		out := []string{}
		for _, t := range parent {
			if !coordination[t] {
				out = append(out, t)
			}
		}
		return out, nil
	}
	var out []string
	for _, t := range requested {
		if !held[t] || coordination[t] {
			return nil, fmt.Errorf("tool %q is not one the parent can pass on", t)
		}
		out = append(out, t)
	}
	return out, nil
}
