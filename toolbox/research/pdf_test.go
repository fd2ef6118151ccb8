package research_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/sandbox"
	"github.com/aetherium-engine/aetherium/sandbox/sandboxtest"
	"github.com/aetherium-engine/aetherium/toolbox/research"
	"github.com/aetherium-engine/aetherium/toolbox/research/pdftest"
	"github.com/aetherium-engine/aetherium/tools"
)

func TestPDFFileName(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 300)
	cases := []struct {
		name, url, want string
	}{
		{"report", "", "report.pdf"},
		{"report.pdf", "", "report.pdf"},
		{"Report.PDF", "", "Report.pdf"},
		{"", "https://example.org/papers/attention.pdf", "attention.pdf"},
		{"", "https://example.org/papers/attention%20is%20all.pdf?x=1", "attention_is_all.pdf"},
		{"", "https://example.org/", "document.pdf"},
		{"", "https://example.org", "document.pdf"},
		{"", "not a url\x7f", "document.pdf"},
		{"../../etc/passwd", "", "passwd.pdf"},
		{"..", "", "document.pdf"},
		{"...", "", "document.pdf"},
		{".hidden", "", "hidden.pdf"},
		{"/etc/shadow", "", "shadow.pdf"},
		{`C:\Windows\system32\evil`, "", "evil.pdf"},
		{"a\x00b", "", "a_b.pdf"},
		{"-rf", "", "rf.pdf"},
		{"--", "", "document.pdf"},
		{"über résumé", "", "ber_r_sum.pdf"},
		{"日本語", "", "document.pdf"},
		{"a  b\t\nc", "", "a_b_c.pdf"},
		{"x.pdf.pdf", "", "x.pdf.pdf"},
		{"trailing.", "", "trailing.pdf"},
		{"name_", "", "name.pdf"},
		{long, "", strings.Repeat("a", 100) + ".pdf"},
		{strings.Repeat("é", 300) + "x", "", "x.pdf"},
		{"   ", "https://h/dir/", "dir.pdf"},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%.24q|%q", tc.name, tc.url), func(t *testing.T) {
			t.Parallel()
			got := research.PDFFileName(tc.name, tc.url)
			require.Equal(t, tc.want, got)
			require.Regexp(t, `^[A-Za-z0-9][A-Za-z0-9._-]{0,99}\.pdf$`, got)
			require.Equal(t, got, filepath.Base(got))
		})
	}
}

// pdfServer serves the fixtures: /doc.pdf (three pages), /corrupt.pdf, /bomb.pdf
// (256 MiB inflated), /big.pdf (announced, over the cap), /chunked-big.pdf (the
// same without a length), /page.html (not a PDF), /empty.pdf and /slow.pdf (the
// body never ends). hits counts requests.
func pdfServer(t *testing.T, capBytes int) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	doc := pdftest.Document(
		[]string{"Aetherium PDF fixture, page one.", "Second line (with parentheses) and a \\ backslash."},
		[]string{"Page two says hello."},
		[]string{"Page three: the end."},
	)
	big := pdftest.Oversized(capBytes + 1024)
	var hits atomic.Int64
	mux := http.NewServeMux()
	serve := func(p string, body []byte, ctype string) {
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", ctype)
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			_, _ = w.Write(body)
		})
	}
	serve("/doc.pdf", doc, "application/pdf")
	serve("/corrupt.pdf", pdftest.Corrupt(), "application/pdf")
	serve("/big.pdf", big, "application/pdf")
	serve("/page.html", []byte("<!doctype html><html><body>a page</body></html>"), "text/html; charset=utf-8")
	serve("/empty.pdf", nil, "application/pdf")
	// Built before the server answers (seconds under -race), once per test binary.
	serve("/bomb.pdf", pdftest.Bomb(256<<20), "application/pdf")
	mux.HandleFunc("/chunked-big.pdf", func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i < len(big); i += 64 << 10 {
			_, _ = w.Write(big[i:min(i+64<<10, len(big))])
			w.(http.Flusher).Flush()
		}
	})
	mux.HandleFunc("/slow.pdf", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("%PDF-1.4\n"))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

// pdfTool is download_pdf on the egress client, with run as its runner, in a
// session whose workspace is ws.
func pdfTool(t *testing.T, cfg research.Config, run research.Runner, ws string) func(args research.PDFArgs) (research.PDFAnswer, error) {
	t.Helper()
	reg := tools.NewRegistry()
	research.Register(reg, egress.NewEgress(egress.EgressConfig{Timeout: 10 * time.Second}), cfg, run)
	router := tools.NewRouter(reg)
	return func(args research.PDFArgs) (research.PDFAnswer, error) {
		raw, err := json.Marshal(args)
		require.NoError(t, err)
		ctx, caller := context.Background(), &tools.Session{AllowedDomains: []string{"127.0.0.1"}, RunID: "r", SessionID: "s", Agent: "a", Workspace: ws,
			Access: tools.Access{Tools: []string{"download_pdf"}}}
		res, err := router.Dispatch(ctx, tools.Call{Session: caller, ID: "c", Name: "download_pdf", Args: raw})
		if err != nil {
			return research.PDFAnswer{}, err
		}
		var ans research.PDFAnswer
		require.NoError(t, json.Unmarshal([]byte(res.Content), &ans), res.Content)
		return ans, nil
	}
}

// fakeRunner answers like pdftotext on the fixture without Docker, and records the
// bytes it was handed.
type fakeRunner struct {
	got  atomic.Value
	runs atomic.Int64
}

func (f *fakeRunner) RunOnce(_ context.Context, job sandbox.OneShot) (sandbox.OneShotResult, error) {
	f.runs.Add(1)
	b, err := io.ReadAll(job.Stdin)
	if err != nil {
		return sandbox.OneShotResult{}, err
	}
	f.got.Store(b)
	return sandbox.OneShotResult{Stdout: "one\fpage two\f", Stderr: "aetherium-pages: 2\n"}, nil
}

func downloads(t *testing.T, ws string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(ws, research.DownloadsDir))
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// The download side, with a stand-in runner: what is refused before any parsing,
// where the file goes, and that nothing is overwritten or left behind.
func TestDownloadPDFDownload(t *testing.T) {
	t.Parallel()
	const capBytes = 256 << 10
	srv, _ := pdfServer(t, capBytes)
	cfg := research.Config{MaxPDFBytes: capBytes, PDFTimeout: 2 * time.Second}
	cases := []struct {
		name    string
		args    research.PDFArgs
		errText string
		saved   string
	}{
		{name: "saved under its URL's name", args: research.PDFArgs{URL: "/doc.pdf"}, saved: "downloads/doc.pdf"},
		{name: "saved under a sanitized name", args: research.PDFArgs{URL: "/doc.pdf", Name: "../../../etc/cron.d/x"}, saved: "downloads/x.pdf"},
		{name: "not a PDF names what came", args: research.PDFArgs{URL: "/page.html"}, errText: `not a PDF: the server sent "text/html; charset=utf-8" starting "<!doctype html>`},
		{name: "empty body", args: research.PDFArgs{URL: "/empty.pdf"}, errText: "not a PDF: the server sent \"application/pdf\" starting with nothing"},
		{name: "announced over the cap", args: research.PDFArgs{URL: "/big.pdf"}, errText: "over the download cap: 257.7 KiB announced, cap 256.0 KiB (research.max_pdf_bytes)"},
		{name: "streamed over the cap", args: research.PDFArgs{URL: "/chunked-big.pdf"}, errText: "over the download cap: more than 256.0 KiB"},
		{name: "slow body", args: research.PDFArgs{URL: "/slow.pdf"}, errText: "timed out after 2s reading the body (research.pdf_timeout)"},
		{name: "HTTP error", args: research.PDFArgs{URL: "/missing.pdf"}, errText: "HTTP 404"},
		{name: "not http", args: research.PDFArgs{URL: "file:///etc/passwd"}, errText: "download_pdf"},
		{name: "max_chars bound", args: research.PDFArgs{URL: "/doc.pdf", MaxChars: 5}, errText: "max_chars 5: want 100-200000"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ws := t.TempDir()
			run := &fakeRunner{}
			call := pdfTool(t, cfg, run, ws)
			args := tc.args
			if strings.HasPrefix(args.URL, "/") {
				args.URL = srv.URL + args.URL
			}
			ans, err := call(args)
			if tc.errText != "" {
				require.ErrorContains(t, err, tc.errText)
				require.Empty(t, downloads(t, ws), "nothing is left behind")
				require.Zero(t, run.runs.Load(), "refused before any parsing")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.saved, ans.Path)
			saved, err := os.ReadFile(filepath.Join(ws, ans.Path))
			require.NoError(t, err)
			require.Equal(t, saved, run.got.Load(), "the runner parsed the saved bytes")
			require.EqualValues(t, len(saved), ans.Bytes)
			require.Equal(t, 2, ans.Pages)
			require.Equal(t, "one\n\n--- page 2 ---\n\npage two", ans.Text)
		})
	}
}

func TestDownloadPDFNeverOverwrites(t *testing.T) {
	t.Parallel()
	srv, _ := pdfServer(t, 1<<20)
	ws := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(ws, "downloads"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(ws, "downloads", "doc.pdf"), []byte("mine"), 0o644))
	call := pdfTool(t, research.Config{}, &fakeRunner{}, ws)
	for _, want := range []string{"downloads/doc-2.pdf", "downloads/doc-3.pdf"} {
		ans, err := call(research.PDFArgs{URL: srv.URL + "/doc.pdf"})
		require.NoError(t, err)
		require.Equal(t, want, ans.Path)
	}
	mine, err := os.ReadFile(filepath.Join(ws, "downloads", "doc.pdf"))
	require.NoError(t, err)
	require.Equal(t, "mine", string(mine))
}

// downloads/ that leads out of the workspace is refused.
func TestDownloadPDFDownloadsSymlink(t *testing.T) {
	t.Parallel()
	srv, _ := pdfServer(t, 1<<20)
	ws, outside := t.TempDir(), t.TempDir()
	require.NoError(t, os.Symlink(outside, filepath.Join(ws, "downloads")))
	_, err := pdfTool(t, research.Config{}, &fakeRunner{}, ws)(research.PDFArgs{URL: srv.URL + "/doc.pdf"})
	require.Error(t, err)
	entries, err := os.ReadDir(outside)
	require.NoError(t, err)
	require.Empty(t, entries)
}

func TestDownloadPDFNeedsTheSandbox(t *testing.T) {
	t.Parallel()
	srv, hits := pdfServer(t, 1<<20)
	ws := t.TempDir()
	_, err := pdfTool(t, research.Config{}, nil, ws)(research.PDFArgs{URL: srv.URL + "/doc.pdf"})
	require.ErrorContains(t, err, "download_pdf needs the Docker sandbox")
	require.Zero(t, hits.Load(), "nothing downloaded")
	require.Empty(t, downloads(t, ws))
}

// The real thing: poppler in the browser image, in a one-shot container with no
// network, bounded in time and memory.
func TestDownloadPDFExtracts(t *testing.T) {
	t.Parallel()
	const capBytes = 2 << 20
	d := sandboxtest.Docker(t)
	image := sandboxtest.FamilyImage(t, "browser")
	srv, _ := pdfServer(t, capBytes)
	cfg := research.Config{MaxPDFBytes: capBytes, PDFImage: image, PDFMemoryBytes: 64 << 20, PDFExtractTimeout: 15 * time.Second}
	cases := []struct {
		name     string
		url      string
		maxChars int
		errText  []string // any of them
		check    func(t *testing.T, ans research.PDFAnswer)
	}{
		{name: "three pages", url: "/doc.pdf", check: func(t *testing.T, ans research.PDFAnswer) {
			require.Equal(t, 3, ans.Pages)
			require.Equal(t, "downloads/doc.pdf", ans.Path)
			require.Contains(t, ans.Text, "Aetherium PDF fixture, page one.")
			require.Contains(t, ans.Text, `Second line (with parentheses) and a \ backslash.`)
			require.Contains(t, ans.Text, "--- page 2 ---\n\nPage two says hello.")
			require.Contains(t, ans.Text, "--- page 3 ---\n\nPage three: the end.")
			require.False(t, ans.Truncated)
		}},
		{name: "truncated with a marker", url: "/doc.pdf", maxChars: 100, check: func(t *testing.T, ans research.PDFAnswer) {
			require.True(t, ans.Truncated)
			require.Greater(t, ans.Chars, 100)
			require.Contains(t, ans.Text, "[… truncated: 100 of")
		}},
		{name: "corrupt", url: "/corrupt.pdf", errText: []string{"the PDF could not be read: (9 lines before)", "Syntax Error: Couldn't read xref table"}},
		{name: "decompression bomb", url: "/bomb.pdf", errText: []string{
			"the PDF could not be read: poppler needed more than 64.0 MiB of memory (research.pdf_memory_bytes)",
			"the PDF could not be read: poppler took longer than 15s (research.pdf_extract_timeout)",
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ws := t.TempDir()
			start := time.Now()
			ans, err := pdfTool(t, cfg, d, ws)(research.PDFArgs{URL: srv.URL + tc.url, MaxChars: tc.maxChars})
			t.Logf("%s: %s: %v", tc.name, time.Since(start).Round(time.Millisecond), err)
			if tc.errText != nil {
				require.Error(t, err)
				require.Condition(t, func() bool {
					for _, w := range tc.errText {
						if strings.Contains(err.Error(), w) {
							return true
						}
					}
					return false
				}, "%v", err)
				require.Empty(t, downloads(t, ws), "a PDF that could not be read is not kept")
				return
			}
			require.NoError(t, err)
			tc.check(t, ans)
			_, err = os.Stat(filepath.Join(ws, ans.Path))
			require.NoError(t, err)
		})
	}
}

func TestPDFConfig(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		cfg  research.Config
		err  string
	}{
		{name: "defaults", cfg: research.Config{}},
		{name: "a larger cap with room", cfg: research.Config{MaxPDFBytes: 200 << 20, PDFMemoryBytes: 512 << 20}},
		{name: "memory below the cap", cfg: research.Config{MaxPDFBytes: 300 << 20}, err: "research.pdf_memory_bytes (256.0 MiB) must exceed research.max_pdf_bytes (300.0 MiB) by 32 MiB"},
		{name: "memory too small", cfg: research.Config{PDFMemoryBytes: 16 << 20}, err: "research.pdf_memory_bytes (16.0 MiB)"},
		{name: "negative", cfg: research.Config{MaxPDFBytes: -1}, err: "byte limits must not be negative"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.cfg.Validate()
			if tc.err == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.err)
		})
	}
	d := research.Config{}.WithDefaults()
	require.EqualValues(t, 50<<20, d.MaxPDFBytes)
	require.Equal(t, 30*time.Second, d.PDFExtractTimeout)
	require.Equal(t, "aetherium-browser:latest", d.PDFImage)
}
