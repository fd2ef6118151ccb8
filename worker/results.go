package worker

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"unicode/utf8"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/tools"
)

// DefaultResultHeadBytes is Config.ResultHeadBytes's default: how much of a tool
// result the model receives before the rest is stored for read_result.
const DefaultResultHeadBytes = 16 << 10

// MinResultHeadBytes is the smallest Config.ResultHeadBytes: a head must leave
// the model something to judge a result by.
const MinResultHeadBytes = 1 << 10

// MaxUnpagedResultBytes bounds the result an agent that cannot call
// read_result receives: the largest any bounded tool returns (read_file's
// default 1 MiB), so such an agent loses nothing it got before results were
// stored, and a hostile 100 MiB result is cut.
const MaxUnpagedResultBytes = 1 << 20

// ResultStore keeps tool results too large for the model's context whole
// (*store.Store implements it). A worker whose Store is not one truncates such
// results instead, saying so.
type ResultStore interface {
	PutResult(ctx context.Context, r store.ToolResult, body io.Reader) (int64, error)
}

var _ ResultStore = (*store.Store)(nil)

// ReadResultTool is the tool that pages a stored result (toolbox/workspace).
const ReadResultTool = "read_result"

// resultText is the content of the tool message for a call's raw result (or
// error text): text the model and the store can take, with large results
// spilled.
//
// A result of at most Config.ResultHeadBytes, or any result of an agent that
// cannot call read_result (see MaxUnpagedResultBytes), is made valid text: NUL (which
// PostgreSQL's jsonb refuses) and invalid UTF-8 (which the model APIs refuse)
// become U+FFFD. A larger one is stored whole, as its raw bytes (a binary
// file's, NULs and all), in the results store, chunk by chunk; the model gets its
// head, cut on a UTF-8 boundary and made valid the same way, and a trailer
// naming its size, its id and the read_result call that reads on. read_result
// returns text too: what it reads is made valid the same way, so binary bytes
// come back as U+FFFD (the workspace tools are the way to handle binary data).
//
// A result is stored before the session's next save makes the message naming
// it durable; see store.PutResult for why the id is new at every attempt and
// an orphan of a crashed attempt is harmless.
func (w *Worker) resultText(ctx context.Context, tsess *tools.Session, call llm.ToolCall, raw string) string {
	max := w.cfg.ResultHeadBytes
	if len(raw) <= max || call.Name == ReadResultTool {
		// A page of read_result is bounded by its own length argument (64 KiB at
		// most): storing it again would hand the model a handle to a handle.
		return validText(raw)
	}
	if tsess == nil || !tsess.Access.Allows(ReadResultTool) {
		// An agent without read_result (no workspace group, an explicit tools
		// list without it) could not page a stored result: it gets the result
		// whole as before, up to MaxUnpagedResultBytes, past which it is cut.
		if len(raw) <= MaxUnpagedResultBytes {
			return validText(raw)
		}
		cut := headCut(raw, MaxUnpagedResultBytes)
		return validText(raw[:cut]) + fmt.Sprintf("\n[result truncated: %d bytes in all, only the first %d shown; this agent has no %s tool to read on]", len(raw), cut, ReadResultTool)
	}
	cut := headCut(raw, max)
	head := validText(raw[:cut])
	rs, ok := w.store.(ResultStore)
	if !ok || tsess.RunID == "" || tsess.SessionID == "" {
		return head + fmt.Sprintf("\n[result truncated: %d bytes in all, only the first %d shown; it could not be stored for %s]", len(raw), cut, ReadResultTool)
	}
	id := store.NewResultID()
	size, err := rs.PutResult(ctx, store.ToolResult{ID: id, RunID: tsess.RunID, SessionID: tsess.SessionID, CallID: call.ID, Tool: call.Name}, strings.NewReader(raw))
	if err != nil {
		// The call ran: its head is still an answer. Retrying the step would run
		// it again for want of the rest, which a non-idempotent tool must not.
		w.log.LogAttrs(ctx, slog.LevelWarn, "tool result not stored", slog.String("tool", call.Name), slog.String("call_id", call.ID), slog.Any("error", err))
		return head + fmt.Sprintf("\n[result truncated: %d bytes in all, only the first %d shown; storing the rest failed]", len(raw), cut)
	}
	return head + resultTrailer(size, id, int64(cut))
}

// resultTrailer is the note after a stored result's head.
func resultTrailer(size int64, id string, next int64) string {
	return fmt.Sprintf("\n[result truncated: %d bytes in all, stored as result %s; call %s with id %s and offset %d to read on]",
		size, id, ReadResultTool, id, next)
}

// validText is s as text every store and model API takes: NUL and invalid
// UTF-8 become U+FFFD.
func validText(s string) string {
	return strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", "\uFFFD"), "\uFFFD")
}

// headCut is where to cut s to at most max bytes without splitting a UTF-8
// sequence: max itself, or up to three bytes before it when s[max] continues a
// rune that starts before the cut.
func headCut(s string, max int) int {
	if len(s) <= max {
		return len(s)
	}
	for k := max; k > 0 && k > max-utf8.UTFMax; k-- {
		if utf8.RuneStart(s[k]) {
			return k
		}
	}
	return max // not UTF-8 there: any cut is as good
}
