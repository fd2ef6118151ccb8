// Package planning is the PlanningTools server class: the run's plan and each agent's
// own todo list, persisted in PostgreSQL.
package planning

import (
	"context"
	"errors"
	"fmt"

	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/tools"
)

// CreateArgs are create_plan's arguments.
type CreateArgs struct {
	Goal  string   `json:"goal,omitempty" jsonschema:"description=What the plan achieves"`
	Steps []string `json:"steps" jsonschema:"description=The steps in order,minItems=1,maxItems=50"`
}

// ReadArgs are read_plan's arguments.
type ReadArgs struct {
	Mode string `json:"mode,omitempty" jsonschema:"enum=next,enum=all,description=next (default) returns the next actionable step; all returns every step"`
}

// UpdateArgs are update_plan's arguments.
type UpdateArgs struct {
	Step   int    `json:"step" jsonschema:"description=1-based step number,minimum=1"`
	Status string `json:"status" jsonschema:"enum=pending,enum=in_progress,enum=completed,enum=failed,enum=skipped"`
	Result string `json:"result,omitempty" jsonschema:"description=What the step produced"`
}

// TodoArgs are todo's arguments.
type TodoArgs struct {
	Action string   `json:"action" jsonschema:"enum=write,enum=check,enum=read,description=write replaces the list; check marks item done; read shows it"`
	Items  []string `json:"items,omitempty" jsonschema:"description=The new list (write)"`
	Item   int      `json:"item,omitempty" jsonschema:"description=1-based item to mark done (check)"`
}

var statuses = map[string]bool{"pending": true, "in_progress": true, "completed": true, "failed": true, "skipped": true}

// Register adds the planning tools.
func Register(reg *tools.Registry, st *store.Store) {
	tools.Register(reg, "create_plan", "Create the run's step list (replaces any active plan).",
		func(ctx context.Context, call tools.Call, a CreateArgs) (tools.Result, error) {
			s := call.Session
			if len(a.Steps) == 0 || len(a.Steps) > 50 {
				return tools.Result{}, fmt.Errorf("create_plan: steps must have 1 to 50 entries, got %d", len(a.Steps))
			}
			p, err := st.CreatePlan(ctx, s.RunID, a.Goal, a.Steps)
			if err != nil {
				return tools.Result{}, err
			}
			return tools.JSON(p)
		}, tools.InGroup("planning"))
	tools.Register(reg, "read_plan", "Read the active plan: the next actionable step, or all steps.",
		func(ctx context.Context, call tools.Call, a ReadArgs) (tools.Result, error) {
			s := call.Session
			p, err := st.ActivePlan(ctx, s.RunID)
			if errors.Is(err, store.ErrNotFound) {
				return tools.Text("there is no plan yet: create one with create_plan"), nil
			}
			if err != nil {
				return tools.Result{}, err
			}
			switch a.Mode {
			case "", "next":
				for _, step := range p.Steps {
					if step.Status == "pending" || step.Status == "in_progress" {
						return tools.JSON(step)
					}
				}
				return tools.Text("every step of the plan is done"), nil
			case "all":
				return tools.JSON(p)
			default:
				return tools.Result{}, fmt.Errorf("read_plan: mode %q is not next or all", a.Mode)
			}
		}, tools.ReadOnly(), tools.Idempotent(), tools.InGroup("planning"))
	tools.Register(reg, "update_plan", "Mark a plan step's status and record its result.",
		func(ctx context.Context, call tools.Call, a UpdateArgs) (tools.Result, error) {
			if !statuses[a.Status] {
				return tools.Result{}, fmt.Errorf("update_plan: status %q is not one of pending, in_progress, completed, failed, skipped", a.Status)
			}
			s := call.Session
			if err := st.UpdatePlanStep(ctx, s.RunID, a.Step, a.Status, a.Result); err != nil {
				return tools.Result{}, err
			}
			return tools.Text("step %d is %s", a.Step, a.Status), nil
		}, tools.Idempotent(), tools.InGroup("planning"))
	tools.Register(reg, "todo", "Your own scratch list for this run (not the team plan): write, check or read.",
		func(ctx context.Context, call tools.Call, a TodoArgs) (tools.Result, error) {
			l := todoList{st: st, s: call.Session}
			switch a.Action {
			case "write":
				if len(a.Items) > 100 {
					return tools.Result{}, errors.New("todo: at most 100 items")
				}
				items := make([]store.TodoItem, len(a.Items))
				for i, t := range a.Items {
					items[i] = store.TodoItem{Text: t}
				}
				if err := l.set(ctx, items); err != nil {
					return tools.Result{}, err
				}
				return tools.JSON(items)
			case "check":
				items, err := l.get(ctx)
				if err != nil {
					return tools.Result{}, err
				}
				if a.Item < 1 || a.Item > len(items) {
					return tools.Result{}, fmt.Errorf("todo: item %d does not exist (the list has %d)", a.Item, len(items))
				}
				items[a.Item-1].Done = true
				if err := l.set(ctx, items); err != nil {
					return tools.Result{}, err
				}
				return tools.JSON(items)
			case "read":
				items, err := l.get(ctx)
				if err != nil {
					return tools.Result{}, err
				}
				return tools.JSON(items)
			default:
				return tools.Result{}, fmt.Errorf("todo: action %q is not write, check or read", a.Action)
			}
		}, tools.Idempotent(), tools.HoldsTodos(), tools.InGroup("planning"))
}

// todoList is the calling agent's list: the one its step holds (written with
// the save that stores the call's result), or the store's row when the call
// comes from outside a step.
type todoList struct {
	st *store.Store
	s  *tools.Session
}

func (l todoList) get(ctx context.Context) ([]store.TodoItem, error) {
	if l.s.Todos == nil {
		return l.st.Todos(ctx, l.s.RunID, l.s.Agent)
	}
	return l.s.Todos.Items(func() ([]store.TodoItem, error) { return l.st.Todos(ctx, l.s.RunID, l.s.Agent) })
}

func (l todoList) set(ctx context.Context, items []store.TodoItem) error {
	if l.s.Todos == nil {
		return l.st.SetTodos(ctx, l.s.RunID, l.s.Agent, items)
	}
	l.s.Todos.Set(items)
	return nil
}
