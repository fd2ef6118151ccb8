// Package requiredoutput is the required_output rule (issue 20), a reply
// check of the worker (hook.ReplyCheck) the composition root registers: a
// node whose template names a required_output {file, min_spoken_words} has
// its final answer sent back, with the reason, while the file is missing or
// holds fewer spoken words than asked — counted by media/script, the parser
// tts_render speaks with — up to the circuit breaker, like the QA rule.
package requiredoutput

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/aetherium-engine/aetherium/confine"
	mediascript "github.com/aetherium-engine/aetherium/media/script"
	"github.com/aetherium-engine/aetherium/templates"
	"github.com/aetherium-engine/aetherium/toolbox/workspace"
	"github.com/aetherium-engine/aetherium/worker/hook"
)

// Check is the required_output rule as a reply check: an answer given while
// the node's required output is missing or short is sent back.
func Check(_ context.Context, r hook.Reply) error {
	if r.ViaReplyTool {
		return nil // a supervisor's reply is not held to it (only the QA rule judges a reply)
	}
	if reason := requiredOutputRefusal(r.Workspace, r.Node.RequiredOutput); reason != "" {
		return &hook.SendBack{Reason: reason, What: "answers"}
	}
	return nil
}

// maxRequiredBytes bounds what the rule reads of the file (tts_render's
// default script limit is far below).
const maxRequiredBytes = 4 << 20

// requiredOutputRefusal is why a final answer cannot be accepted while the
// workspace ws does not hold ro, or "" when it does.
func requiredOutputRefusal(ws string, ro *templates.RequiredOutput) string {
	if ro == nil {
		return ""
	}
	rel, err := workspace.Clean(ro.File)
	if err != nil {
		// Validation refuses such a template; a stored run from before is told why.
		return fmt.Sprintf("Your answer is not accepted: the required output %q is not a workspace path (%v).", ro.File, err)
	}
	words, err := spokenWordsIn(ws, rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Sprintf("Your answer is not accepted: the required output %s does not exist. Write it, then answer again.", rel)
	case err != nil:
		return fmt.Sprintf("Your answer is not accepted: the required output %s cannot be read (%v).", rel, err)
	case words < ro.MinSpokenWords:
		return fmt.Sprintf("Your answer is not accepted: %s has %d spoken words, and at least %d are required "+
			"(only speaker lines count: `NAME: words`, `**NAME:** words`, or words below a `[NAME]` or `**Name:**` line; "+
			"headings, stage directions and notes do not). Lengthen it, then answer again.", rel, words, ro.MinSpokenWords)
	}
	return ""
}

// spokenWordsIn counts the spoken words of rel, read confined (package
// confine): a regular file inside the workspace and outside engine state, never a
// FIFO or socket an agent left there, at most maxRequiredBytes.
func spokenWordsIn(ws, rel string) (int, error) {
	root, err := confine.OpenRoot(ws, confine.Config{MaxBytes: maxRequiredBytes})
	if err != nil {
		return 0, fmt.Errorf("workspace: %w", err)
	}
	defer root.Close()
	b, err := root.ReadFile(rel)
	if err != nil {
		return 0, err
	}
	return mediascript.SpokenWords(string(b)), nil
}
