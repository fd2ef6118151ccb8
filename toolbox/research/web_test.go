package research_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/toolbox/research"
	"github.com/aetherium-engine/aetherium/tools"
)

// webTools is a router with the research tools on the egress client; upstreams are
// test servers on loopback (allowed without an allowlist entry, as private
// addresses, like any deployment's default).
func webTools(t *testing.T, cfg research.Config) func(tool string, args any, out any) error {
	t.Helper()
	reg := tools.NewRegistry()
	research.Register(reg, egress.NewEgress(egress.EgressConfig{Timeout: 10 * time.Second}), cfg, nil)
	router := tools.NewRouter(reg)
	return func(tool string, args any, out any) error {
		raw, err := json.Marshal(args)
		require.NoError(t, err)
		ctx, caller := context.Background(), &tools.Session{AllowedDomains: []string{"127.0.0.1", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"}, RunID: "r", SessionID: "s", Agent: "a",
			Access: tools.Access{Tools: []string{"web_search", "web_fetch"}}}
		res, err := router.Dispatch(ctx, tools.Call{Session: caller, ID: "c", Name: tool, Args: raw})
		if err != nil {
			return err
		}
		require.NoError(t, json.Unmarshal([]byte(res.Content), out), res.Content)
		return nil
	}
}

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	require.NoError(t, err)
	return b
}

// deadURL is a loopback address nobody listens on.
func deadURL(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return "http://" + addr
}

// searchBackends serves a SearXNG JSON API at /ok, /empty, /broken, /slow, /500 and
// DuckDuckGo's HTML at /ddg, counting the requests each receives.
type searchBackends struct {
	srv  *httptest.Server
	hits map[string]*atomic.Int64
	last atomic.Value // the last query string received
}

func startSearchBackends(t *testing.T) *searchBackends {
	t.Helper()
	b := &searchBackends{hits: map[string]*atomic.Int64{}}
	mux := http.NewServeMux()
	handle := func(path string, h http.HandlerFunc) {
		b.hits[path] = &atomic.Int64{}
		mux.HandleFunc(path+"/", func(w http.ResponseWriter, r *http.Request) {
			b.hits[path].Add(1)
			b.last.Store(r.URL.RawQuery)
			h(w, r)
		})
	}
	handle("/ok", func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, "/ok/search", r.URL.Path)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(fixture(t, "searxng.json"))
	})
	handle("/empty", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"query":"q","results":[],"unresponsive_engines":[["google","timeout"],["bing","access denied"]]}`)
	})
	handle("/broken", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "<html>not json</html>") })
	handle("/500", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "boom", http.StatusInternalServerError) })
	handle("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	})
	handle("/ddg", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(fixture(t, "ddg.html"))
	})
	b.srv = httptest.NewServer(mux)
	t.Cleanup(b.srv.Close)
	return b
}

func TestWebSearchBackends(t *testing.T) {
	t.Parallel()
	b := startSearchBackends(t)
	dead := deadURL(t)
	searx := []research.SearchResult{
		{Title: "Fleet tuning guide", URL: "https://docs.example.test/fleet", Snippet: "How to tune a worker fleet.", Engine: "bing"},
		{Title: "Queue (computing)", URL: "https://wiki.example.test/Queue", Snippet: "A queue is a collection…", Engine: "wikipedia"},
		{Title: "Third", URL: "https://third.example.test/", Snippet: "third", Engine: "bing"},
	}
	ddg := []research.SearchResult{
		{Title: "Fleet tuning guide", URL: "https://docs.example.test/fleet?a=1&b=2", Snippet: "How to tune a worker fleet: concurrency, leases and retries.", Engine: "duckduckgo"},
		{Title: "Queues in practice", URL: "https://blog.example.test/queues", Snippet: "At-least-once delivery and idempotent handlers.", Engine: "duckduckgo"},
		{Title: "Third result", URL: "https://third.example.test/", Snippet: "The third hit.", Engine: "duckduckgo"},
	}
	cases := []struct {
		name        string
		searx       []string
		empty       bool // FallbackOnEmpty
		noDDG       bool
		args        research.SearchArgs
		backend     string
		results     []research.SearchResult
		unresponsve []string
		skipped     int
		err         string
	}{
		{name: "SearXNG answers", searx: []string{"/ok"}, args: research.SearchArgs{Query: "fleet tuning"}, backend: "searxng /ok", results: searx, unresponsve: []string{"google (timeout)", "duckduckgo (CAPTCHA)"}},
		{name: "max_results cuts the ranking", searx: []string{"/ok"}, args: research.SearchArgs{Query: "q", MaxResults: 2}, backend: "searxng /ok", results: searx[:2], unresponsve: []string{"google (timeout)", "duckduckgo (CAPTCHA)"}},
		{name: "no SearXNG configured: DuckDuckGo", args: research.SearchArgs{Query: "fleet tuning"}, backend: "duckduckgo", results: ddg},
		{name: "dead SearXNG falls back to DuckDuckGo", searx: []string{dead}, args: research.SearchArgs{Query: "q"}, backend: "duckduckgo", results: ddg, skipped: 1},
		{name: "SearXNG errors, the next answers", searx: []string{"/500", "/broken", "/ok"}, args: research.SearchArgs{Query: "q"}, backend: "searxng /ok", results: searx, unresponsve: []string{"google (timeout)", "duckduckgo (CAPTCHA)"}, skipped: 2},
		{name: "SearXNG timing out falls back", searx: []string{"/slow"}, args: research.SearchArgs{Query: "q", MaxResults: 1}, backend: "duckduckgo", results: ddg[:1], skipped: 1},
		{name: "healthy empty answer is a clean empty result", searx: []string{"/empty"}, args: research.SearchArgs{Query: "q"}, backend: "searxng /empty", results: []research.SearchResult{}, unresponsve: []string{"google (timeout)", "bing (access denied)"}},
		{name: "empty answer falls back when configured", searx: []string{"/empty"}, empty: true, args: research.SearchArgs{Query: "q"}, backend: "duckduckgo", results: ddg, skipped: 1},
		{name: "every backend down is an error naming each", searx: []string{"/500"}, noDDG: true, args: research.SearchArgs{Query: "q"}, err: "every backend failed: searxng /500: HTTP 500 Internal Server Error"},
		{name: "empty query", args: research.SearchArgs{Query: "  "}, err: "query is empty"},
		{name: "too many results asked", args: research.SearchArgs{Query: "q", MaxResults: 21}, err: "max_results 21 is over 20"},
		{name: "bad time range", args: research.SearchArgs{Query: "q", TimeRange: "decade"}, err: `time_range "decade"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := research.Config{DuckDuckGo: b.srv.URL + "/ddg/html/", FallbackOnEmpty: tc.empty, SearchTimeout: 500 * time.Millisecond}
			if tc.noDDG {
				cfg.DuckDuckGo = "off"
			}
			for _, s := range tc.searx {
				if strings.HasPrefix(s, "/") {
					s = b.srv.URL + s
				}
				cfg.SearXNGURLs = append(cfg.SearXNGURLs, s)
			}
			call := webTools(t, cfg)
			var ans research.SearchAnswer
			err := call("web_search", tc.args, &ans)
			if tc.err != "" {
				require.ErrorContains(t, err, strings.ReplaceAll(tc.err, " /", " "+b.srv.URL+"/"))
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.results, ans.Results)
			require.Equal(t, strings.ReplaceAll(tc.backend, " /", " "+b.srv.URL+"/"), ans.Backend)
			require.Equal(t, tc.unresponsve, ans.UnresponsiveEngines)
			require.Len(t, ans.Skipped, tc.skipped, "%v", ans.Skipped)
		})
	}
}

func TestWebSearchSendsTheQuery(t *testing.T) {
	t.Parallel()
	b := startSearchBackends(t)
	call := webTools(t, research.Config{SearXNGURLs: []string{b.srv.URL + "/ok"}})
	var ans research.SearchAnswer
	require.NoError(t, call("web_search", research.SearchArgs{Query: "a&b=c #x", Language: "de-DE", TimeRange: "week"}, &ans))
	require.Equal(t, "format=json&language=de-DE&pageno=1&q=a%26b%3Dc+%23x&time_range=week", b.last.Load())
}

func TestWebFetch(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.HandleFunc("/article", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(fixture(t, "article.html"))
	})
	mux.HandleFunc("/latin1", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=iso-8859-1")
		_, _ = w.Write([]byte("<html><body><p>Caf\xe9 cr\xe8me \xe0 la carte</p></body></html>"))
	})
	mux.HandleFunc("/meta-charset", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte(`<html><head><meta charset="windows-1252"></head><body><p>“quoted” – dash</p></body></html>`[:0]))
		_, _ = w.Write([]byte("<html><head><meta charset=\"windows-1252\"></head><body><p>\x93quoted\x94 \x96 dash</p></body></html>"))
	})
	mux.HandleFunc("/json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"status":"ok","items":[1,2]}`)
	})
	mux.HandleFunc("/plain", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, strings.Repeat("line of text\n", 50))
	})
	mux.HandleFunc("/png", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write([]byte("\x89PNG\r\n\x1a\n...."))
	})
	mux.HandleFunc("/pdf", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/pdf")
		fmt.Fprint(w, "%PDF-1.4")
	})
	mux.HandleFunc("/untyped", func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = nil // net/http would sniff; the tool must too
		fmt.Fprint(w, "<!DOCTYPE html><html><body><p>sniffed page</p></body></html>")
	})
	mux.HandleFunc("/huge", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		chunk := []byte(strings.Repeat("x", 64<<10))
		for range 40 { // 2.5 MiB, no Content-Length (chunked)
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	mux.HandleFunc("/announced", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Length", fmt.Sprint(5<<20))
		_, _ = w.Write([]byte("start"))
	})
	mux.HandleFunc("/missing", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "nope", http.StatusNotFound) })
	mux.HandleFunc("/hang", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	call := webTools(t, research.Config{MaxFetchBytes: 2 << 20})

	t.Run("article: main text, structure kept, noise gone", func(t *testing.T) {
		t.Parallel()
		var ans research.FetchAnswer
		require.NoError(t, call("web_fetch", research.FetchArgs{URL: srv.URL + "/article"}, &ans))
		require.Equal(t, 200, ans.Status)
		require.Equal(t, "text/html", ans.ContentType)
		require.Equal(t, "Tuning the Fleet | Aetherium Notes", ans.Title)
		require.False(t, ans.Truncated)
		for _, want := range []string{
			"## Three knobs", "### Caveats",
			"- Concurrency: tasks per worker process.", "- Step lease: how long a session is held.",
			"1. Measure.", "2. Change one knob.", "3. Measure again.",
			"> Nothing blocks a worker waiting for another job.",
			"```\nmake drills DRILL_RUNS=20\n```",
			"Read the queue documentation[1] before changing any of them, and the lease guide[2] after.",
			"Links:\n[1] https://docs.example.test/queue\n[2] " + srv.URL + "/guide/leases",
			"Links to nowhere and mail are text only.",
		} {
			require.Contains(t, ans.Text, want)
		}
		require.NotContains(t, ans.Text, "NOISE", "scripts, styles and page chrome are stripped")
		require.NotContains(t, ans.Text, "color: red")
		require.NotContains(t, ans.Text, "<")
		require.Equal(t, len([]rune(ans.Text)), ans.Chars)
	})
	t.Run("truncated with a marker", func(t *testing.T) {
		t.Parallel()
		var ans research.FetchAnswer
		require.NoError(t, call("web_fetch", research.FetchArgs{URL: srv.URL + "/plain", MaxChars: 100}, &ans))
		require.True(t, ans.Truncated)
		require.Equal(t, 650, ans.Chars)
		require.True(t, strings.HasPrefix(ans.Text, strings.Repeat("line of text\n", 7)+"line of t"), ans.Text)
		require.Contains(t, ans.Text, "[… truncated: 100 of 650 characters shown; raise max_chars for more]")
	})
	for _, tc := range []struct{ path, want string }{
		{"/latin1", "Café crème à la carte"},
		{"/meta-charset", "“quoted” – dash"},
		{"/json", `{"status":"ok","items":[1,2]}`},
		{"/untyped", "sniffed page"},
	} {
		t.Run("text of "+tc.path, func(t *testing.T) {
			t.Parallel()
			var ans research.FetchAnswer
			require.NoError(t, call("web_fetch", research.FetchArgs{URL: srv.URL + tc.path}, &ans))
			require.Equal(t, tc.want, ans.Text)
		})
	}
	for _, tc := range []struct {
		name string
		args research.FetchArgs
		want string
	}{
		{"binary refused, naming its type", research.FetchArgs{URL: srv.URL + "/png"}, `the server sent "image/png" (web_fetch reads HTML, JSON and plain text)`},
		{"PDF points at download_pdf", research.FetchArgs{URL: srv.URL + "/pdf"}, `"application/pdf" (web_fetch reads HTML, JSON and plain text; download_pdf reads PDFs)`},
		{"over the cap while reading", research.FetchArgs{URL: srv.URL + "/huge"}, "over the download cap: more than 2.0 MiB (research.max_fetch_bytes)"},
		{"over the cap as announced", research.FetchArgs{URL: srv.URL + "/announced"}, "over the download cap: 5242880 bytes announced, cap 2.0 MiB"},
		{"non-2xx with its status line", research.FetchArgs{URL: srv.URL + "/missing"}, "HTTP 404 Not Found"},
		{"timeout", research.FetchArgs{URL: srv.URL + "/hang", TimeoutSeconds: 1}, "timed out after 1s"},
		{"connection refused", research.FetchArgs{URL: deadURL(t) + "/x"}, "connection refused"},
		{"DNS failure", research.FetchArgs{URL: "http://no-such-host.invalid/"}, "no-such-host.invalid"},
		{"not http", research.FetchArgs{URL: "file:///etc/passwd"}, ""},
		{"max_chars out of range", research.FetchArgs{URL: srv.URL + "/plain", MaxChars: 5}, "max_chars 5: want 100-200000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var ans research.FetchAnswer
			err := call("web_fetch", tc.args, &ans)
			require.Error(t, err)
			require.ErrorContains(t, err, tc.want)
		})
	}
}
