package workspace

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/tools"
)

// Pages of read_result.
const (
	// DefaultResultPage is how many bytes read_result returns without a length.
	DefaultResultPage = 16 << 10
	// MaxResultPage is the most one read_result call returns.
	MaxResultPage = 64 << 10
)

// ResultReader reads pages of the tool results the worker stored whole
// (*store.Store): ErrNotFound for an id unknown or not the session's.
type ResultReader interface {
	ReadResult(ctx context.Context, runID, sessionID, id string, offset, length int64) ([]byte, int64, error)
}

// ReadResultArgs are read_result's arguments.
type ReadResultArgs struct {
	ID     string `json:"id" jsonschema:"description=The id a truncated tool result names (r_ followed by 32 hex digits)"`
	Offset int64  `json:"offset" jsonschema:"description=Byte offset to read from: the one the truncation note or the previous page gives,minimum=0"`
	Length int64  `json:"length,omitempty" jsonschema:"description=How many bytes to read (default 16384; at most 65536),minimum=1,maximum=65536"`
}

// RegisterResults adds read_result, which pages a tool result too large for the
// model's context: the worker stored it whole (worker.result_head_bytes) and the
// model got its head and this tool's id. A standard, read-only tool of the
// workspace group. It reads only the calling session's own results (the store
// checks the run and the session; an id of anyone else's is "no such result",
// like an unknown one, and ids are 128 random bits). It declares it reads
// private data: the rest of a result is what the session's own earlier call
// returned (whose provenance the session already carries), and the flow rules
// fingerprint what it returns as the session's private reads. A nil reader
// registers the tool, which then fails (a catalog-only registry).
func RegisterResults(reg *tools.Registry, r ResultReader) {
	tools.Register(reg, "read_result", "Read on in a tool result that was too large to show whole: a truncated result names its id and the offset to continue from. "+
		"Returns text: bytes that are not UTF-8 (binary data) come back as U+FFFD.",
		func(ctx context.Context, call tools.Call, a ReadResultArgs) (tools.Result, error) {
			return readResult(ctx, r, call, a)
		}, tools.ReadOnly(), tools.Idempotent(), tools.Reads(tools.Private), tools.InGroup("workspace"))
}

func readResult(ctx context.Context, r ResultReader, call tools.Call, a ReadResultArgs) (tools.Result, error) {
	switch {
	case r == nil:
		return tools.Result{}, errors.New("read_result: no result store in this process")
	case call.Session == nil || call.Session.RunID == "" || call.Session.SessionID == "":
		return tools.Result{}, errors.New("read_result: only an agent session of a run has stored results")
	case !store.ValidResultID(a.ID):
		return tools.Result{}, fmt.Errorf("read_result: id %q is not a result id: %v", strings.ToValidUTF8(clip(a.ID, 80), "?"), store.ErrBadResultID)
	case a.Offset < 0:
		return tools.Result{}, fmt.Errorf("read_result: offset %d is negative; the first byte is offset 0", a.Offset)
	case a.Length < 0 || a.Length > MaxResultPage:
		return tools.Result{}, fmt.Errorf("read_result: length %d is out of range: 1 to %d (0 or absent: %d)", a.Length, MaxResultPage, DefaultResultPage)
	}
	n := a.Length
	if n == 0 {
		n = DefaultResultPage
	}
	b, size, err := r.ReadResult(ctx, call.Session.RunID, call.Session.SessionID, a.ID, a.Offset, n)
	if errors.Is(err, store.ErrNotFound) {
		return tools.Result{}, fmt.Errorf("read_result: no result %s in this session (ids come from a truncated result's note)", a.ID)
	}
	if err != nil {
		return tools.Result{}, tools.Infrastructure(err)
	}
	if a.Offset >= size {
		return tools.Text("result %s has %d bytes: offset %d is at or past its end; nothing more to read", a.ID, size, a.Offset), nil
	}
	end := a.Offset + int64(len(b))
	if end < size {
		// Stop before a rune the next page completes, so pages join cleanly.
		b = b[:pageCut(b)]
		end = a.Offset + int64(len(b))
	}
	var out strings.Builder
	fmt.Fprintf(&out, "[result %s: bytes %d–%d of %d]\n", a.ID, a.Offset, end-1, size)
	out.WriteString(strings.ToValidUTF8(strings.ReplaceAll(string(b), "\x00", "\uFFFD"), "\uFFFD"))
	if end < size {
		fmt.Fprintf(&out, "\n[%d bytes left: call read_result with id %s and offset %d to read on]", size-end, a.ID, end)
	} else {
		fmt.Fprintf(&out, "\n[end of result %s]", a.ID)
	}
	return tools.Result{Content: out.String()}, nil
}

// pageCut is the length of b without a trailing incomplete UTF-8 sequence
// (a rune the bytes after b complete); b itself when it has none, or when
// that would leave nothing.
func pageCut(b []byte) int {
	for k := len(b) - 1; k >= 0 && k >= len(b)-utf8.UTFMax; k-- {
		if utf8.RuneStart(b[k]) {
			if !utf8.FullRune(b[k:]) && k > 0 {
				return k
			}
			return len(b)
		}
	}
	return len(b)
}
