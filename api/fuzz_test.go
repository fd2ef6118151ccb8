package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/http/httpguts"

	"github.com/aetherium-engine/aetherium/fleettest"
)

// FuzzLastEventID resumes the event stream of a finished run with arbitrary
// Last-Event-ID values, as a header and as the last_event_id query parameter, on a
// running fleet. A non-negative integer replays exactly the events after it, up to
// the terminal one, and the stream ends; a resume from the terminal event's id or
// beyond is a 204 (nothing left: an EventSource stops reconnecting); anything else
// is a 400 with a JSON error naming the field; nothing is ever a 5xx.
func FuzzLastEventID(f *testing.F) {
	fl := fleettest.Start(f, fleettest.Options{})
	runID := fl.Submit("demo", "fuzz the stream", map[string]any{"topic": "fuzz"})
	fl.WaitTerminal(runID, time.Minute)
	var ids []int64
	for _, e := range fl.Follow(runID, 0, 30*time.Second) {
		ids = append(ids, e.ID)
	}
	require.NotEmpty(f, ids)
	last := ids[len(ids)-1]
	for _, s := range []string{"", "0", "1", strconv.FormatInt(ids[len(ids)/2], 10), strconv.FormatInt(last-1, 10), strconv.FormatInt(last, 10), strconv.FormatInt(last+1000, 10), "-1", "abc", " 3 ", "+2",
		"00000000000000000000001", "9223372036854775808", "-9223372036854775808", "1e3", "0x10", "３", "2\x00", "1,2", strings.Repeat("9", 5000)} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, s string, viaQuery bool) {
		path := "/api/runs/" + runID + "/events"
		value := s
		if viaQuery {
			path += "?last_event_id=" + url.QueryEscape(s)
		} else {
			if !httpguts.ValidHeaderFieldValue(s) {
				t.Skip("not a value an HTTP client can send")
			}
			value = strings.Trim(s, " \t") // the server reads header values trimmed
		}
		n, perr := strconv.ParseInt(value, 10, 64)
		valid := value == "" || (perr == nil && n >= 0)
		if value == "" {
			n = 0
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, "GET", fl.URL+path, nil)
		require.NoError(t, err)
		if !viaQuery && s != "" {
			req.Header.Set("Last-Event-ID", s)
		}
		resp, err := fleettest.Client(t, nil).Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Less(t, resp.StatusCode, 500, "a 5xx for %q", s)
		if resp.StatusCode == http.StatusRequestHeaderFieldsTooLarge || resp.StatusCode == http.StatusRequestURITooLong {
			// Past the server's 4 KiB request-header buffer: refused before the handler.
			raw, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.Greater(t, len(path)+len(s), 3000, "only an oversized request may be refused this way: %s", raw)
			require.Contains(t, string(raw), `"error"`)
			return
		}
		if !valid {
			raw, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%q: %s", s, raw)
			var body struct {
				Error string `json:"error"`
				Field string `json:"field"`
			}
			require.NoError(t, json.Unmarshal(raw, &body), "%s", raw)
			require.NotEmpty(t, body.Error)
			require.Equal(t, "Last-Event-ID", body.Field)
			return
		}
		if n >= last {
			raw, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.Equal(t, http.StatusNoContent, resp.StatusCode, "%q: %s", s, raw)
			require.Empty(t, raw)
			return
		}
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var want, got []int64
		for _, id := range ids {
			if id > n {
				want = append(want, id)
			}
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 8<<20)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "id: "); ok {
				id, err := strconv.ParseInt(v, 10, 64)
				require.NoError(t, err)
				got = append(got, id)
			}
		}
		require.NoError(t, sc.Err(), "the stream must end after the terminal event")
		require.Equal(t, want, got, "resume after %d", n)
	})
}
