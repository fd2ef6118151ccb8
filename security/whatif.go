package security

import (
	"slices"
)

// The decisions of a what-if Verdict: what the layers a permissions file
// controls do with a call.
const (
	WhatIfAllow = "allow"
	WhatIfDeny  = "deny"
	// WhatIfAsk holds the call for a human (the flow rules' ask).
	WhatIfAsk = "ask"
)

// The layers of the gate a what-if names: the permissions file controls the
// rules and the flow section; the capability layer comes before both.
const (
	LayerCapability = "capability"
	LayerRules      = "rules"
	LayerFlow       = "flow"
)

// RecordedCall is one call of the record as the what-if replays it: the facts
// the rules match, and what the record says about the layers the rules cannot
// see again.
type RecordedCall struct {
	CallFacts
	// Layer is the gate's layer that refused the call when it ran ("" when
	// none did). A call the capability layer refused never reached the rules;
	// one the flow layer refused shows the session had read untrusted content
	// and carried private content out, which the record holds no other way.
	Layer string
	// ArgsCut says the record holds only the head of the arguments (a Standard
	// call keeps a 240-byte summary), so a pattern may miss what was cut.
	ArgsCut bool
}

// Verdict is what one permissions file does with one recorded call.
type Verdict struct {
	Decision string `json:"decision"`
	// Layer is the layer that decided a deny or an ask ("" for allow).
	Layer string `json:"layer,omitempty"`
	// Rule is the always_deny rule that denies the call (nil for none).
	Rule *RuleRef `json:"rule,omitempty"`
	// Advisory are the always_allow and ask_user rules that match: the gate
	// logs them and enforces none.
	Advisory []RuleRef `json:"advisory,omitempty"`
	// Flow is the flow settings the file gives the call's team.
	Flow FlowSettings `json:"flow"`
}

// WhatIf is what the gate's file-controlled layers decide on a recorded call
// under rs, def being the fleet's flow settings (security.flow, …): the rules
// with the gate's own matcher (the one Evaluate runs), then the flow section.
// It is pure: the rules' text is matched, never run, and nothing is read or
// written; comparing the verdicts of two files on the same call gives exactly
// the change of the file.
func WhatIf(rs *RuleSet, c RecordedCall, def FlowSettings) Verdict {
	v := Verdict{Decision: WhatIfAllow, Flow: rs.Flow(c.Team, c.Source, def)}
	if c.Layer == LayerCapability {
		// The capability layer runs before the file's layers: no rule reaches it.
		v.Decision, v.Layer = WhatIfDeny, LayerCapability
		return v
	}
	d, adv := rs.evaluate(c.CallFacts)
	v.Advisory = adv
	if d.Index >= 0 {
		v.Decision, v.Layer, v.Rule = WhatIfDeny, LayerRules, &d
		return v
	}
	if c.Layer == LayerFlow {
		// The flow layer refused it when it ran: the session had read untrusted
		// content and the call carried private content out. Under these
		// settings it would be refused, held or (flow off) let through.
		switch {
		case v.Flow.Mode == FlowOff:
		case v.Flow.PrivateContent == FlowContentAsk:
			v.Decision, v.Layer = WhatIfAsk, LayerFlow
		default:
			v.Decision, v.Layer = WhatIfDeny, LayerFlow
		}
	}
	return v
}

// The kinds of a Change.
const (
	// ChangeDeny, ChangeAsk and ChangeAllow: the candidate decides the call so
	// (and the current file otherwise).
	ChangeDeny  = WhatIfDeny
	ChangeAsk   = WhatIfAsk
	ChangeAllow = WhatIfAllow
	// ChangeRule: both deny, by another rule or reason.
	ChangeRule = "other_rule"
	// ChangeAdvisory: the same decision, other advisory rules match (logged
	// only: the gate enforces neither always_allow nor ask_user).
	ChangeAdvisory = "advisory"
	// ChangeFlow: the same decision on the record, other flow settings for the
	// call's team. Whether the flow rules would now hold the call depends on
	// what its session had read, which the record does not hold per call.
	ChangeFlow = "flow"
)

// Change is how the candidate's verdict on a call differs from the current's.
type Change struct {
	Kind   string  `json:"kind"`
	Before Verdict `json:"before"`
	After  Verdict `json:"after"`
}

// Diff compares the verdicts of the current file (before) and the candidate
// (after) on one call; ok is false when the candidate changes nothing. Rules
// are compared by content, not position: a rule moved in the file is the same
// rule.
func Diff(before, after Verdict) (c Change, ok bool) {
	c = Change{Before: before, After: after}
	switch {
	case before.Decision != after.Decision:
		c.Kind = after.Decision
	case before.Layer != after.Layer || !sameRule(before.Rule, after.Rule):
		c.Kind = ChangeRule
	case !slices.EqualFunc(before.Advisory, after.Advisory, func(a, b RuleRef) bool { return a.Rule == b.Rule }):
		c.Kind = ChangeAdvisory
	case !sameFlow(before.Flow, after.Flow):
		c.Kind = ChangeFlow
	default:
		return Change{}, false
	}
	return c, true
}

func sameRule(a, b *RuleRef) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Rule == b.Rule
}

func sameFlow(a, b FlowSettings) bool {
	return a.Mode == b.Mode && a.PrivateContent == b.PrivateContent && slices.Equal(a.Instructions, b.Instructions)
}
