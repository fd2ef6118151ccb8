package evals

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/aetherium-engine/aetherium/events"
)

// Event is a run's event as the API lists it (GET
// /api/runs/:id/events?format=json): the data stays raw until Trajectory
// decodes it into its type's payload (events/payloads.go).
type Event struct {
	ID    int64           `json:"id"`
	Type  string          `json:"type"`
	Agent string          `json:"agent"`
	Data  json.RawMessage `json:"data"`
}

// Call is one tool call of the trajectory and the gate's decision on it.
type Call struct {
	EventID  int64
	Agent    string
	Tool     string
	Decision string
	Layer    string
	Error    string
}

// Delegation is one delegation and how it ended ("" while open).
type Delegation struct {
	ID     string
	From   string
	To     string
	Status string
}

// Trajectory is what a run did, in event order.
type Trajectory struct {
	Calls       []Call
	Delegations []Delegation
	// Turns counts the model answers, every agent's.
	Turns int
	// Tokens sums the answers' tokens.
	Tokens int64
	// End is the run's terminal event, nil when none was recorded.
	End *events.RunEndedData
}

// ErrBadEvent is wrapped by a trajectory's refusal of an event whose data is
// not its type's payload: the events are the fleet's record, and a record
// that cannot be read is not evidence either way.
var ErrBadEvent = errors.New("unreadable event")

// NewTrajectory decodes a run's events. Event types it does not judge are
// skipped, so a fleet newer than the command still works.
func NewTrajectory(evs []Event) (Trajectory, error) {
	var tr Trajectory
	open := map[string]int{}
	for _, e := range evs {
		switch e.Type {
		case events.ToolCall:
			var d events.ToolCallData
			if err := decode(e, &d); err != nil {
				return tr, err
			}
			if d.Tool == "" {
				return tr, fmt.Errorf("%w: event %d (%s) names no tool", ErrBadEvent, e.ID, e.Type)
			}
			tr.Calls = append(tr.Calls, Call{EventID: e.ID, Agent: e.Agent, Tool: d.Tool, Decision: d.Decision, Layer: d.Layer, Error: d.Error})
		case events.Delegated:
			var d events.DelegationCreatedData
			if err := decode(e, &d); err != nil {
				return tr, err
			}
			open[d.DelegationID] = len(tr.Delegations)
			tr.Delegations = append(tr.Delegations, Delegation{ID: d.DelegationID, From: e.Agent, To: d.To})
		case events.DelegationFinished:
			var d events.DelegationFinishedData
			if err := decode(e, &d); err != nil {
				return tr, err
			}
			if i, ok := open[d.DelegationID]; ok {
				tr.Delegations[i].Status = d.Status
			}
		case events.ModelAnswered:
			var d events.ModelAnsweredData
			if err := decode(e, &d); err != nil {
				return tr, err
			}
			tr.Turns++
			tr.Tokens += int64(d.Tokens)
		case events.RunCompleted, events.RunFailed, events.RunCancelled:
			var d events.RunEndedData
			if err := decode(e, &d); err != nil {
				return tr, err
			}
			tr.End = &d
		}
	}
	return tr, nil
}

// decode reads an event's data into its payload; anything but a JSON object
// is refused (null too: every payload has fields).
func decode(e Event, into any) error {
	if t := bytes.TrimSpace(e.Data); len(t) == 0 || t[0] != '{' {
		return fmt.Errorf("%w: event %d (%s): data is not a JSON object: %.60q", ErrBadEvent, e.ID, e.Type, e.Data)
	}
	if err := json.Unmarshal(e.Data, into); err != nil {
		return fmt.Errorf("%w: event %d (%s): %v", ErrBadEvent, e.ID, e.Type, err)
	}
	return nil
}

// callsOf are the calls of agent ("" every agent's).
func (tr Trajectory) callsOf(agent string) []Call {
	if agent == "" {
		return tr.Calls
	}
	var out []Call
	for _, c := range tr.Calls {
		if c.Agent == agent {
			out = append(out, c)
		}
	}
	return out
}
