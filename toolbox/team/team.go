// Package team is the TeamMessagingTools server class: send_message_to, peer-to-peer
// messages between the agents of one run through their Redis-stream mailboxes.
// Delivery is asynchronous: the message is read at the start of the target's next
// turn.
package team

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/aetherium-engine/aetherium/mailbox"
	"github.com/aetherium-engine/aetherium/tools"
)

// Roster returns the agent names of the run of s, the calling session: the only
// valid targets of a message.
type Roster func(ctx context.Context, s *tools.Session) ([]string, error)

// SendArgs are send_message_to's arguments.
type SendArgs struct {
	To      string `json:"to" jsonschema:"description=Name of the teammate (agent) to message"`
	Message string `json:"message" jsonschema:"description=What to tell them; they read it at the start of their next turn"`
}

// Receipt is send_message_to's result.
type Receipt struct {
	DeliveredTo string `json:"delivered_to"`
	MessageID   string `json:"message_id"`
	Note        string `json:"note"`
}

// ErrUnknownAgent is a message to a name that is not an agent of the run.
var ErrUnknownAgent = errors.New("send_message_to: unknown agent")

// Register adds send_message_to. mb and roster may be nil (a catalog-only
// registry): the tool then fails at call time.
func Register(reg *tools.Registry, mb *mailbox.Mailbox, roster Roster) {
	tools.Register(reg, "send_message_to",
		"Send a direct message to a teammate's mailbox. Delivery is asynchronous: they read it at the start of their next turn, with your name and the time.",
		func(ctx context.Context, call tools.Call, a SendArgs) (tools.Result, error) {
			if mb == nil || roster == nil {
				return tools.Result{}, errors.New("send_message_to: team messaging is not configured on this worker")
			}
			s := call.Session
			if s == nil {
				return tools.Result{}, errors.New("send_message_to: no session")
			}
			to := strings.TrimSpace(a.To)
			if strings.TrimSpace(a.Message) == "" {
				return tools.Result{}, errors.New("send_message_to: message is empty")
			}
			if to == s.Agent {
				return tools.Result{}, fmt.Errorf("send_message_to: %q is you; message a teammate", to)
			}
			agents, err := roster(ctx, s)
			if err != nil {
				return tools.Result{}, fmt.Errorf("send_message_to: list the team: %w", err)
			}
			if !contains(agents, to) {
				others := make([]string, 0, len(agents))
				for _, n := range agents {
					if n != s.Agent {
						others = append(others, n)
					}
				}
				sort.Strings(others)
				return tools.Result{}, fmt.Errorf("%w %q: your teammates are %s", ErrUnknownAgent, a.To, strings.Join(others, ", "))
			}
			msg := mailbox.Message{ID: messageID(s, call.ID), RunID: s.RunID, From: s.Agent, To: to, Body: a.Message}
			if rec := s.Label.Record(); rec != nil {
				// The recipient inherits what the sender had read (the flow rules):
				// a message is no way to launder a hostile page.
				if msg.Provenance, err = json.Marshal(rec); err != nil {
					return tools.Result{}, fmt.Errorf("send_message_to: %w", err)
				}
			}
			res, err := mb.Send(ctx, msg)
			if err != nil {
				return tools.Result{}, fmt.Errorf("send_message_to: %w", err)
			}
			return tools.JSON(Receipt{DeliveredTo: to, MessageID: res.ID, Note: to + " reads it at the start of their next turn"})
		}, tools.Returns[Receipt](), tools.Idempotent(), tools.InGroup("team"))
}

// messageID makes a replayed call (same session, same call id) send the same
// message, which the mailbox then drops as a duplicate.
func messageID(s *tools.Session, callID string) string {
	if callID == "" {
		return ""
	}
	h := sha256.Sum256([]byte(s.RunID + "\x00" + s.SessionID + "\x00" + s.Agent + "\x00" + callID))
	return hex.EncodeToString(h[:12])
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
