package worker

import (
	"fmt"

	"github.com/aetherium-engine/aetherium/egress/fingerprint"
	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/tools"
)

// sessionContent is a session's tools.PrivateContent: the fingerprints of the
// private content its history holds and the outbound arguments it already sent,
// so content split over several calls is found when the pieces together reach a
// run. Built from the saved history like the label (no store of its own), and
// only once the session has read both untrusted and private content: before
// that the flow rules never ask it.
type sessionContent struct {
	set *fingerprint.Set
	// prior are the arguments of the outbound calls the session made (answered,
	// not refused before they ran).
	prior []string
	// folded is how many history messages are in set and prior.
	folded int
	// lastText is the index of the last message whose text went into set: a
	// message carrying several private sources is fingerprinted once.
	lastText int
	// pending are outbound calls asked for and not answered yet.
	pending map[string]string
}

func newSessionContent() (*sessionContent, error) {
	set, err := fingerprint.New(fingerprint.Config{})
	if err != nil {
		return nil, fmt.Errorf("fingerprints: %w", err)
	}
	return &sessionContent{set: set, lastText: -1, pending: map[string]string{}}, nil
}

// fold adds the history's messages not folded yet.
func (c *sessionContent) fold(reg *tools.Registry, msgs []llm.Message) {
	if len(msgs) < c.folded {
		// The history was rewritten (it is not today): start over.
		fresh, err := newSessionContent()
		if err != nil {
			return // the default configuration validates
		}
		*c = *fresh
	}
	from := c.folded
	walkReads(reg, msgs, func(i int, p tools.Provenance, source, text string) {
		if i < from || p != tools.Private || i == c.lastText {
			return
		}
		c.lastText = i
		c.set.Add(source, text)
	})
	for _, m := range msgs[from:] {
		switch m.Role {
		case llm.RoleAssistant:
			for _, call := range m.ToolCalls {
				if spec, ok := reg.Spec(call.Name); ok && (spec.Outbound || spec.OutboundWhen != nil) {
					c.pending[call.ID] = string(call.Args)
				}
			}
		case llm.RoleTool:
			if args, ok := c.pending[m.ToolCallID]; ok {
				delete(c.pending, m.ToolCallID)
				if !m.Refused {
					c.prior = append(c.prior, args)
				}
			}
		}
	}
	c.folded = len(msgs)
}

// Carried implements tools.PrivateContent.
func (c *sessionContent) Carried(text string) (tools.Carried, bool) {
	m, ok := c.set.Carried(text, c.prior...)
	if !ok {
		return tools.Carried{}, false
	}
	return tools.Carried{Source: m.Source, Form: m.Form, Chars: m.Chars, Boilerplate: m.Boilerplate}, true
}
