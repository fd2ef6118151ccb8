package workspace_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/toolbox/workspace"
	"github.com/aetherium-engine/aetherium/tools"
)

// memResults is a ResultReader over results held in memory, keyed by
// run/session/id like the store's.
type memResults map[string][]byte

func (m memResults) ReadResult(_ context.Context, run, sess, id string, off, n int64) ([]byte, int64, error) {
	b, ok := m[run+"/"+sess+"/"+id]
	if !ok {
		return nil, 0, store.ErrNotFound
	}
	size := int64(len(b))
	return b[min(off, size):min(off+n, size)], size, nil
}

func TestReadResult(t *testing.T) {
	t.Parallel()
	id, other := store.NewResultID(), store.NewResultID()
	body := strings.Repeat("x", 20000) + "\u20ac" + "tail\x00\xff"
	res := memResults{"run-1/s1/" + id: []byte(body), "run-2/s9/" + other: []byte("not yours")}
	reg := tools.NewRegistry()
	workspace.RegisterResults(reg, res)
	router := tools.NewRouter(reg)
	sess := &tools.Session{RunID: "run-1", SessionID: "s1", Agent: "a", Role: "worker",
		Access: tools.Access{Groups: []string{"workspace"}, Tools: []string{"read_result"}}}
	for _, tc := range []struct {
		name    string
		args    any
		sess    *tools.Session
		want    []string // substrings of the answer
		exact   string   // the page's text, when set
		wantErr string
	}{
		{name: "first page", args: map[string]any{"id": id, "offset": 0},
			want: []string{fmt.Sprintf("[result %s: bytes 0–16383 of 20009]", id), fmt.Sprintf("call read_result with id %s and offset 16384", id)}},
		{name: "a page that would cut the euro sign", args: map[string]any{"id": id, "offset": 19990, "length": 11},
			want: []string{"bytes 19990–19999 of 20009", "and offset 20000"}, exact: strings.Repeat("x", 10)},
		{name: "the last page, NUL and invalid byte made U+FFFD", args: map[string]any{"id": id, "offset": 20000},
			want: []string{"bytes 20000–20008 of 20009", "[end of result " + id + "]"}, exact: "\u20actail\uFFFD\uFFFD"},
		{name: "past the end", args: map[string]any{"id": id, "offset": 1 << 40}, want: []string{"at or past its end"}},
		{name: "another run's id", args: map[string]any{"id": other, "offset": 0}, wantErr: "no result " + other + " in this session"},
		{name: "another session of the run", args: map[string]any{"id": id, "offset": 0},
			sess: &tools.Session{RunID: "run-1", SessionID: "s2", Access: sess.Access}, wantErr: "no result"},
		{name: "unknown id", args: map[string]any{"id": store.NewResultID(), "offset": 0}, wantErr: "no result"},
		{name: "path-like id", args: map[string]any{"id": "../../etc/passwd", "offset": 0}, wantErr: "is not a result id"},
		{name: "empty id", args: map[string]any{"id": "", "offset": 0}, wantErr: "is not a result id"},
		{name: "negative offset", args: map[string]any{"id": id, "offset": -1}, wantErr: "offset -1 is negative"},
		{name: "huge length", args: map[string]any{"id": id, "offset": 0, "length": 1 << 30}, wantErr: "out of range"},
		{name: "negative length", args: map[string]any{"id": id, "offset": 0, "length": -5}, wantErr: "out of range"},
		{name: "no id", args: map[string]any{"offset": 0}, wantErr: "invalid tool arguments"},
		{name: "no session", args: map[string]any{"id": id, "offset": 0}, sess: &tools.Session{Access: sess.Access}, wantErr: "only an agent session"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			raw, err := json.Marshal(tc.args)
			require.NoError(t, err)
			s := sess
			if tc.sess != nil {
				s = tc.sess
			}
			got, err := router.Dispatch(context.Background(), tools.Call{ID: "c", Name: "read_result", Args: raw, Session: s})
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.True(t, utf8.ValidString(got.Content))
			for _, w := range tc.want {
				require.Contains(t, got.Content, w)
			}
			if tc.exact != "" {
				_, page, _ := strings.Cut(got.Content, "]\n")
				page = page[:strings.LastIndex(page, "\n[")]
				require.Equal(t, tc.exact, page)
			}
		})
	}
}

func TestReadResultWithoutStore(t *testing.T) {
	t.Parallel()
	reg := tools.NewRegistry()
	workspace.RegisterResults(reg, nil)
	spec, ok := reg.Spec("read_result")
	require.True(t, ok)
	require.Equal(t, "workspace", spec.Group)
	require.Equal(t, tools.Standard, spec.Tier)
	require.True(t, spec.Idempotent)
	_, err := tools.NewRouter(reg).Dispatch(context.Background(), tools.Call{ID: "c", Name: "read_result",
		Args:    json.RawMessage(`{"id":"` + store.NewResultID() + `","offset":0}`),
		Session: &tools.Session{RunID: "r", SessionID: "s", Access: tools.Access{Groups: []string{"workspace"}, Tools: []string{"read_result"}}}})
	require.ErrorContains(t, err, "no result store")
}
