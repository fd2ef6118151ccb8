package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"regexp"

	"github.com/jackc/pgx/v5"
)

// ResultChunkBytes is the size of the rows a stored tool result is cut into:
// writing holds one chunk in memory at a time, and reading a page touches at
// most two.
const ResultChunkBytes = 1 << 20

// ToolResult describes a tool result stored whole (large tool results, issue 38):
// the model got its head and pages the rest with read_result.
type ToolResult struct {
	// ID is the handle the model names: "r_" and 32 random hex digits
	// (NewResultID), unguessable.
	ID string
	// RunID and SessionID own it: read_result reads a result only for the
	// session that made the call (ReadResult checks both).
	RunID, SessionID string
	CallID, Tool     string
	// Size is the result's length in bytes.
	Size int64
}

// ErrBadResultID is a result id that is not of NewResultID's form ("r_" and 32
// lowercase hex digits): a path, a guess, a typo.
var ErrBadResultID = errors.New(`a result id is "r_" followed by 32 hex digits`)

var resultIDRe = regexp.MustCompile(`^r_[0-9a-f]{32}$`)

// NewResultID returns a fresh random result id (128 bits of crypto/rand).
func NewResultID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails (crypto/rand's contract since Go 1.24)
	return "r_" + hex.EncodeToString(b)
}

// ValidResultID reports whether id has NewResultID's form.
func ValidResultID(id string) bool { return resultIDRe.MatchString(id) }

// PutResult stores a tool result whole, read from body chunk by chunk
// (ResultChunkBytes), in one transaction: a result is all there or absent. It
// returns the result's size. r.ID must be fresh (NewResultID): each attempt of
// a call stores its own result under its own id, so nothing is overwritten and
// nothing conflicts.
//
// Why a new id per attempt rather than a key on (session, call) written with
// ON CONFLICT: a tool's result is made durable by the session's next save
// (SaveStep, fenced by the lease token), and a result is stored before that
// save. A step that dies between the two is redelivered and runs the call again;
// a stale worker whose lease expired may still finish its attempt after the
// new holder's. With a key on (session, call), overwriting would let the stale
// attempt replace the bytes the saved message names, and DO NOTHING would pair
// the second attempt's head with the first attempt's rest. With an id per
// attempt, the saved message names exactly the bytes whose head it holds; an
// attempt whose save never came leaves a row no message names, which nobody
// can read (the id is random and never shown) and which goes with its run
// (ON DELETE CASCADE).
func (s *Store) PutResult(ctx context.Context, r ToolResult, body io.Reader) (int64, error) {
	if !ValidResultID(r.ID) {
		return 0, fmt.Errorf("store result %q: %w", r.ID, ErrBadResultID)
	}
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("store result: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `INSERT INTO tool_results (id, run_id, session_id, call_id, tool, size, chunk_bytes)
		VALUES ($1, $2, $3, $4, $5, 0, $6)`, r.ID, r.RunID, r.SessionID, r.CallID, r.Tool, ResultChunkBytes); err != nil {
		return 0, fmt.Errorf("store result %s: %w", r.ID, err)
	}
	// COPY, not an INSERT per chunk: pgx's COPY reuses one encoding buffer for
	// the whole stream, where each INSERT's parameters would allocate the
	// chunk anew (2 MiB of garbage per MiB stored, which the collector lets
	// pile up to the size of the live heap: +100 MiB at the peak for a 100 MiB
	// result; BenchmarkResultSpill100MiB in package worker).
	src := &chunkSource{id: r.ID, body: body, buf: make([]byte, ResultChunkBytes), seq: -1}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"tool_result_chunks"}, []string{"result_id", "seq", "data"}, src); err != nil {
		return 0, fmt.Errorf("store result %s: %w", r.ID, err)
	}
	if src.err != nil {
		return 0, fmt.Errorf("store result %s: read: %w", r.ID, src.err)
	}
	size := src.size
	if _, err := tx.Exec(ctx, `UPDATE tool_results SET size = $2 WHERE id = $1`, r.ID, size); err != nil {
		return 0, fmt.Errorf("store result %s: %w", r.ID, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("store result %s: %w", r.ID, err)
	}
	return size, nil
}

// ReadResult returns up to length bytes of a stored result from offset, and the
// result's size, for the session that owns it. A result of another session or
// run is ErrNotFound, exactly like an unknown id, so an id of someone else's
// tells nothing. An offset at or past the end returns no bytes.
func (s *Store) ReadResult(ctx context.Context, runID, sessionID, id string, offset, length int64) ([]byte, int64, error) {
	if !ValidResultID(id) {
		return nil, 0, ErrBadResultID
	}
	if offset < 0 || length < 0 {
		return nil, 0, fmt.Errorf("read result %s: negative offset or length", id)
	}
	var size, chunk int64
	err := s.db.QueryRow(ctx, `SELECT size, chunk_bytes FROM tool_results WHERE id = $1 AND run_id::text = $2 AND session_id = $3`,
		id, runID, sessionID).Scan(&size, &chunk)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, 0, ErrNotFound
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read result %s: %w", id, err)
	}
	end := min(offset+length, size)
	if offset >= end {
		return []byte{}, size, nil
	}
	// Each chunk overlapping [offset, end) gives its part (substring is 1-based).
	rows, err := s.db.Query(ctx, `SELECT substring(data FROM (greatest($2 - seq::bigint * $4, 0) + 1)::int
			FOR (least($3 - seq::bigint * $4, $4) - greatest($2 - seq::bigint * $4, 0))::int)
		FROM tool_result_chunks WHERE result_id = $1 AND seq BETWEEN $5 AND $6 ORDER BY seq`,
		id, offset, end, chunk, offset/chunk, (end-1)/chunk)
	if err != nil {
		return nil, 0, fmt.Errorf("read result %s: %w", id, err)
	}
	out := make([]byte, 0, end-offset)
	for rows.Next() {
		var part []byte
		if err := rows.Scan(&part); err != nil {
			rows.Close()
			return nil, 0, fmt.Errorf("read result %s: %w", id, err)
		}
		out = append(out, part...)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("read result %s: %w", id, err)
	}
	if int64(len(out)) != end-offset {
		return nil, 0, fmt.Errorf("read result %s: got %d bytes of %d", id, len(out), end-offset)
	}
	return out, size, nil
}

// chunkSource feeds COPY the chunks of a result read from body, one buffer
// reused for every chunk (COPY encodes a row before it asks for the next).
type chunkSource struct {
	id   string
	body io.Reader
	buf  []byte
	n    int
	seq  int
	size int64
	done bool
	err  error
}

func (c *chunkSource) Next() bool {
	if c.done {
		return false
	}
	n, err := io.ReadFull(c.body, c.buf)
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		c.done = true
	case err != nil:
		c.done, c.err = true, err
		return false
	}
	if n == 0 {
		return false
	}
	c.n, c.size = n, c.size+int64(n)
	c.seq++
	return true
}

func (c *chunkSource) Values() ([]any, error) { return []any{c.id, c.seq, c.buf[:c.n]}, nil }

func (c *chunkSource) Err() error { return c.err }
