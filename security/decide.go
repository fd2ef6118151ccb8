package security

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/tools"
)

// Limits of what a human sends with a decision.
const (
	// MaxEditedArgs bounds an edit's arguments (bytes of JSON).
	MaxEditedArgs = 256 << 10
	// MaxDecisionText bounds a reason and an answer.
	MaxDecisionText = 2000
)

// Apply checks and records one human decision on an approval, once, and resumes
// the session waiting for it. Errors: store.ErrForbidden, store.ErrWrongKind, a
// *BadDecisionError, and the store's ErrNotFound, ErrDecided, ErrExpired,
// ErrRunClosed.
func (a *Approvals) Apply(ctx context.Context, id string, d store.HumanDecision) (store.Approval, error) {
	cur, err := a.store.GetApproval(ctx, id)
	if err != nil {
		return cur, err
	}
	run, err := a.store.GetRun(ctx, cur.RunID)
	if err != nil {
		return cur, fmt.Errorf("approval %s: %w", id, err)
	}
	if len(d.Reason) > MaxDecisionText {
		return cur, store.BadDecision("reason", "over %d bytes", MaxDecisionText)
	}
	sd := store.Decision{By: d.By, Reason: d.Reason}
	switch d.Verb {
	case store.VerbAnswer:
		if cur.Kind != store.KindQuestion {
			return cur, fmt.Errorf("%w: %s is a held %s call: approve, edit or deny it", store.ErrWrongKind, id, cur.Tool)
		}
		if !d.MayApprove && d.By != run.Owner {
			return cur, fmt.Errorf("%w: only the run's owner or an approver answers its questions", store.ErrForbidden)
		}
		var q tools.Question
		if err := json.Unmarshal(cur.View, &q); err != nil {
			return cur, fmt.Errorf("approval %s: question: %w", id, err)
		}
		answer := strings.TrimSpace(d.Answer)
		if len(answer) > MaxDecisionText {
			return cur, store.BadDecision("answer", "over %d bytes", MaxDecisionText)
		}
		if why := q.Accepts(answer); why != "" {
			return cur, store.BadDecision("answer", "%s", why)
		}
		sd.Status, sd.Answer = store.ApprovalAnswered, answer
	case store.VerbApprove, store.VerbEdit, store.VerbDeny:
		if cur.Kind == store.KindQuestion {
			return cur, fmt.Errorf("%w: %s is a question: answer it", store.ErrWrongKind, id)
		}
		switch {
		case d.InClient && d.By != run.Owner:
			return cur, fmt.Errorf("%w: %s decides in its MCP client only the calls of its own runs", store.ErrForbidden, d.By)
		case d.InClient && d.Verb == store.VerbEdit:
			return cur, fmt.Errorf("%w: an MCP client approves or denies its own calls; it does not edit them", store.ErrForbidden)
		case d.InClient:
			sd.By = d.By + " (mcp client)"
		case !d.MayApprove:
			return cur, fmt.Errorf("%w: deciding a call needs the approve role", store.ErrForbidden)
		}
		if !d.InClient && d.Verb != store.VerbDeny && d.By == run.Owner && !a.cfg.AllowSelfApproval {
			return cur, fmt.Errorf("%w: %s submitted run %s, so someone else approves its calls (security.allow_self_approval)", store.ErrForbidden, d.By, run.ID)
		}
		switch d.Verb {
		case store.VerbDeny:
			sd.Status = store.ApprovalDenied
		case store.VerbApprove:
			sd.Status = store.ApprovalApproved
			if d.Grant != nil {
				if sd.Grant, err = a.newGrant(*d.Grant, cur, run, d.By, d.MayGrantBroad); err != nil {
					return cur, err
				}
			}
		case store.VerbEdit:
			args, hash, err := editedArgs(d.Args)
			if err != nil {
				return cur, err
			}
			sd.Status, sd.EditedArgs, sd.EditedArgsHash = store.ApprovalEdited, args, hash
		}
	default:
		return cur, store.BadDecision("verb", "%q is not approve, deny, edit or answer", d.Verb)
	}
	return a.record(ctx, id, sd)
}

// editedArgs checks an approver's arguments: a JSON object, bounded, that can be
// bound by hash. The gate judges what they ask for when the call resumes.
func editedArgs(raw json.RawMessage) (json.RawMessage, string, error) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0:
		return nil, "", store.BadDecision("args", "an edit needs the new arguments")
	case len(raw) > MaxEditedArgs:
		return nil, "", store.BadDecision("args", "%d bytes, over %d", len(raw), MaxEditedArgs)
	case !json.Valid(raw):
		return nil, "", store.BadDecision("args", "not valid JSON")
	case raw[0] != '{':
		return nil, "", store.BadDecision("args", "must be a JSON object of the tool's arguments")
	}
	if store.HasNUL(raw) {
		return nil, "", store.BadDecision("args", "NUL characters are not allowed")
	}
	// An unpaired surrogate escape reads as U+FFFD: stored as it came, jsonb
	// would refuse the decision.
	raw = store.JSONBSafe(raw)
	hash := hashOf(raw)
	if hash == "" {
		return nil, "", store.BadDecision("args", "the arguments cannot be bound to an approval (numbers out of range, or invalid text)")
	}
	return raw, hash, nil
}
