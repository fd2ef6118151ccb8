package store_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/testdb"
	"github.com/aetherium-engine/aetherium/store"
)

func TestToolResults(t *testing.T) {
	t.Parallel()
	st := testdb.Store(t)
	ctx := context.Background()
	runs := []string{uuid.NewString(), uuid.NewString()}
	for _, id := range runs {
		require.NoError(t, st.CreateRun(ctx, store.Run{ID: id, Prompt: "p", Team: json.RawMessage(`{}`), Variables: json.RawMessage(`{}`)}))
	}
	// Two and a half chunks of bytes PostgreSQL's text would refuse: NUL, invalid
	// UTF-8, a rune cut by a chunk boundary.
	body := bytes.Repeat([]byte("ab\x00\xff\xe2\x82\xacz"), store.ResultChunkBytes*5/2/8)
	r := store.ToolResult{ID: store.NewResultID(), RunID: runs[0], SessionID: "s:" + runs[0], CallID: "c1", Tool: "run_shell"}
	size, err := st.PutResult(ctx, r, bytes.NewReader(body))
	require.NoError(t, err)
	require.Equal(t, int64(len(body)), size)
	// The same call stored again (a redelivered step) is a new result: both stand.
	again := r
	again.ID = store.NewResultID()
	_, err = st.PutResult(ctx, again, strings.NewReader("second attempt"))
	require.NoError(t, err)
	empty := store.ToolResult{ID: store.NewResultID(), RunID: runs[0], SessionID: r.SessionID, CallID: "c2", Tool: "t"}
	_, err = st.PutResult(ctx, empty, strings.NewReader(""))
	require.NoError(t, err)
	_, err = st.PutResult(ctx, store.ToolResult{ID: "../etc/passwd", RunID: runs[0]}, strings.NewReader("x"))
	require.ErrorIs(t, err, store.ErrBadResultID)

	n := int64(len(body))
	C := int64(store.ResultChunkBytes)
	for _, tc := range []struct {
		name            string
		run, sess, id   string
		offset, length  int64
		want            []byte
		wantErr         error
		wantErrContains string
	}{
		{name: "head", run: runs[0], sess: r.SessionID, id: r.ID, offset: 0, length: 100, want: body[:100]},
		{name: "across a chunk boundary", run: runs[0], sess: r.SessionID, id: r.ID, offset: C - 10, length: 30, want: body[C-10 : C+20]},
		{name: "across two boundaries", run: runs[0], sess: r.SessionID, id: r.ID, offset: C - 1, length: C + 2, want: body[C-1 : 2*C+1]},
		{name: "the tail, clamped", run: runs[0], sess: r.SessionID, id: r.ID, offset: n - 5, length: 1 << 20, want: body[n-5:]},
		{name: "at the end", run: runs[0], sess: r.SessionID, id: r.ID, offset: n, length: 10, want: []byte{}},
		{name: "past the end", run: runs[0], sess: r.SessionID, id: r.ID, offset: n + 1000, length: 10, want: []byte{}},
		{name: "the second attempt", run: runs[0], sess: r.SessionID, id: again.ID, offset: 0, length: 100, want: []byte("second attempt")},
		{name: "empty", run: runs[0], sess: r.SessionID, id: empty.ID, offset: 0, length: 100, want: []byte{}},
		{name: "another session", run: runs[0], sess: "s:other", id: r.ID, offset: 0, length: 10, wantErr: store.ErrNotFound},
		{name: "another run", run: runs[1], sess: r.SessionID, id: r.ID, offset: 0, length: 10, wantErr: store.ErrNotFound},
		{name: "unknown id", run: runs[0], sess: r.SessionID, id: store.NewResultID(), offset: 0, length: 10, wantErr: store.ErrNotFound},
		{name: "path-like id", run: runs[0], sess: r.SessionID, id: "r_../../x", offset: 0, length: 10, wantErr: store.ErrBadResultID},
		{name: "uppercase id", run: runs[0], sess: r.SessionID, id: strings.ToUpper(r.ID), offset: 0, length: 10, wantErr: store.ErrBadResultID},
		{name: "negative offset", run: runs[0], sess: r.SessionID, id: r.ID, offset: -1, length: 10, wantErrContains: "negative"},
		{name: "run id not a uuid", run: "x'; --", sess: r.SessionID, id: r.ID, offset: 0, length: 10, wantErr: store.ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, sz, err := st.ReadResult(ctx, tc.run, tc.sess, tc.id, tc.offset, tc.length)
			switch {
			case tc.wantErr != nil:
				require.ErrorIs(t, err, tc.wantErr)
			case tc.wantErrContains != "":
				require.ErrorContains(t, err, tc.wantErrContains)
			default:
				require.NoError(t, err)
				require.True(t, bytes.Equal(tc.want, got), "got %d bytes, want %d", len(got), len(tc.want))
				require.Positive(t, sz+1)
			}
		})
	}
}

func TestResultIDs(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 1000 {
		id := store.NewResultID()
		require.True(t, store.ValidResultID(id), id)
		require.False(t, seen[id])
		seen[id] = true
	}
	for _, bad := range []string{"", "r_", "r_123", "/tmp/r_0", "r_" + strings.Repeat("g", 32), "r_" + strings.Repeat("0", 33)} {
		require.False(t, store.ValidResultID(bad), bad)
	}
}
