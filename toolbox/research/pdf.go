package research

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/sandbox"
	"github.com/aetherium-engine/aetherium/tools"
)

// Runner runs one command in a fresh container of an image of the sandbox family
// (sandbox.Docker implements it). download_pdf parses PDFs with it: never on the
// worker's host.
type Runner interface {
	RunOnce(ctx context.Context, job sandbox.OneShot) (sandbox.OneShotResult, error)
}

// PDFArgs are download_pdf's arguments.
type PDFArgs struct {
	URL      string `json:"url" jsonschema:"description=http(s) URL of the PDF; the host must be in the team's allowed_domains"`
	Name     string `json:"name,omitempty" jsonschema:"description=File name under downloads/ (letters digits . _ - kept; .pdf added); default: the URL's last path segment. An existing file is never overwritten: -2 -3 … is added"`
	MaxChars int    `json:"max_chars,omitempty" jsonschema:"minimum=100,maximum=200000,description=Characters of text returned (default 20000); longer documents are truncated with a marker"`
}

// PDFAnswer is download_pdf's result.
type PDFAnswer struct {
	URL      string `json:"url"`
	FinalURL string `json:"final_url"`
	// Path is the saved file, relative to the workspace (downloads/<name>.pdf).
	Path  string `json:"path"`
	Bytes int64  `json:"bytes"`
	Pages int    `json:"pages"`
	// Text is the extracted text, pages separated by "--- page N ---" lines.
	Text string `json:"text"`
	// Chars is the length of the whole text; Truncated says Text holds less.
	Chars     int  `json:"chars"`
	Truncated bool `json:"truncated"`
}

// ErrNotPDF refuses a download that does not start like a PDF.
var ErrNotPDF = errors.New("not a PDF")

// ErrUnreadablePDF is a PDF poppler could not read, or not within its bounds.
var ErrUnreadablePDF = errors.New("the PDF could not be read")

// DownloadsDir is where download_pdf saves, relative to the workspace.
const DownloadsDir = "downloads"

// maxPDFName caps a saved name's length (before ".pdf" and a -N suffix).
const maxPDFName = 100

// pdfScript runs in the browser image: the PDF arrives on stdin (no host path is
// mounted), pdfinfo counts its pages (on stderr, marked), pdftotext writes its text
// to stdout. Page breaks are form feeds.
const pdfScript = `set -e
cat > /tmp/doc.pdf
pdfinfo /tmp/doc.pdf > /tmp/info
sed -n 's/^Pages:[[:space:]]*/` + pagesMark + `/p' /tmp/info >&2
exec pdftotext -enc UTF-8 /tmp/doc.pdf -`

const pagesMark = "aetherium-pages: "

func registerPDF(reg *tools.Registry, eg *egress.Egress, run Runner, cfg Config) {
	tools.Register(reg, "download_pdf", "Download a PDF into the workspace (downloads/<name>.pdf) and return its page count and text, extracted in a sandbox container. Needs a human's approval.",
		func(ctx context.Context, call tools.Call, a PDFArgs) (tools.Result, error) {
			if eg == nil {
				return tools.Result{}, errors.New("download_pdf: no egress client configured")
			}
			if run == nil {
				return tools.Result{}, errors.New("download_pdf needs the Docker sandbox: PDFs are parsed in a container of the browser image, never on the worker's host (sandbox.kind docker, and `make images`)")
			}
			var err error
			if a.MaxChars, err = maxChars("download_pdf", a.MaxChars); err != nil {
				return tools.Result{}, err
			}
			if _, err := call.Workspace(); err != nil {
				return tools.Result{}, fmt.Errorf("download_pdf: %w", err)
			}
			s := call.Session
			ans, err := downloadPDF(ctx, eg.ClientFor(s.AllowedDomains, s.EgressDenyPrivate), run, cfg, s, a)
			if err != nil {
				return tools.Result{}, fmt.Errorf("download_pdf: %w", err)
			}
			return tools.JSON(ans)
		}, tools.Returns[PDFAnswer](), tools.Outbound(), tools.Reads(tools.Untrusted), tools.InGroup("research"), tools.WithTier(tools.Restricted), tools.AlwaysHuman())
}

func downloadPDF(ctx context.Context, client *http.Client, run Runner, cfg Config, s *tools.Session, a PDFArgs) (PDFAnswer, error) {
	dctx, cancel := context.WithTimeout(ctx, cfg.PDFTimeout)
	defer cancel()
	req, err := newGet(dctx, a.URL, cfg.UserAgent, "application/pdf,*/*;q=0.1")
	if err != nil {
		return PDFAnswer{}, err
	}
	// Two clocks bound the download: research.pdf_timeout, and the egress client's
	// own per-request timeout (security.egress_timeout), whichever ends first.
	timedOut := func(err error, what string) error {
		if errors.Is(dctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("GET %s: timed out after %s%s (research.pdf_timeout)", a.URL, cfg.PDFTimeout, what)
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return fmt.Errorf("GET %s: timed out%s (security.egress_timeout bounds each request): %w", a.URL, what, err)
		}
		return fmt.Errorf("GET %s%s: %w", a.URL, what, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return PDFAnswer{}, timedOut(err, "")
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return PDFAnswer{}, fmt.Errorf("GET %s: HTTP %s", a.URL, resp.Status)
	}
	if resp.ContentLength > cfg.MaxPDFBytes {
		got, limit := sizeText(resp.ContentLength), sizeText(cfg.MaxPDFBytes)
		if got == limit {
			got, limit = fmt.Sprintf("%d bytes", resp.ContentLength), fmt.Sprintf("%d bytes", cfg.MaxPDFBytes)
		}
		return PDFAnswer{}, fmt.Errorf("GET %s: %w: %s announced, cap %s (research.max_pdf_bytes)", a.URL, ErrTooLarge, got, limit)
	}
	// The magic first, before anything is written: a PDF starts with %PDF- (readers
	// accept it within the first KiB, after junk some servers prepend).
	head := make([]byte, 1024)
	n, err := io.ReadFull(resp.Body, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return PDFAnswer{}, timedOut(err, " reading the body")
	}
	head = head[:n]
	if !bytes.Contains(head, []byte("%PDF-")) {
		return PDFAnswer{}, fmt.Errorf("GET %s: %w: the server sent %s starting %s (a PDF starts with %%PDF-)",
			a.URL, ErrNotPDF, contentTypeOf(resp, head), quoteStart(head))
	}

	root, err := os.OpenRoot(s.Workspace)
	if err != nil {
		return PDFAnswer{}, fmt.Errorf("open workspace: %w", err)
	}
	defer root.Close()
	f, rel, err := createDownload(root, PDFFileName(a.Name, a.URL))
	if err != nil {
		return PDFAnswer{}, err
	}
	defer f.Close()
	// Nothing is left behind when the call fails: the agent gets an error, not a
	// file it would have to judge.
	keep := false
	defer func() {
		if !keep {
			_ = root.Remove(rel)
		}
	}()
	sw := &saveWriter{w: f}
	written, err := io.Copy(sw, io.MultiReader(bytes.NewReader(head), io.LimitReader(resp.Body, cfg.MaxPDFBytes+1-int64(len(head)))))
	if sw.err != nil {
		return PDFAnswer{}, fmt.Errorf("saving %s: %w", rel, sw.err)
	}
	if err != nil {
		return PDFAnswer{}, timedOut(err, " reading the body")
	}
	if written > cfg.MaxPDFBytes {
		return PDFAnswer{}, fmt.Errorf("GET %s: %w: more than %s (research.max_pdf_bytes)", a.URL, ErrTooLarge, sizeText(cfg.MaxPDFBytes))
	}
	if err := f.Sync(); err != nil {
		return PDFAnswer{}, fmt.Errorf("saving %s: %w", rel, err)
	}
	if o, ok := run.(interface{ Owner() (int, int, bool) }); ok {
		// The sandbox's user owns the workspace: the file is the agent's to manage.
		if uid, gid, chown := o.Owner(); chown {
			_ = root.Lchown(DownloadsDir, uid, gid)
			_ = root.Lchown(rel, uid, gid)
		}
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return PDFAnswer{}, fmt.Errorf("saving %s: %w", rel, err)
	}

	text, pages, err := extractPDF(ctx, run, cfg, s.RunID, io.LimitReader(f, written))
	if err != nil {
		return PDFAnswer{}, fmt.Errorf("%s (%s from %s, not kept): %w", rel, sizeText(written), a.URL, err)
	}
	keep = true
	ans := PDFAnswer{URL: a.URL, FinalURL: resp.Request.URL.String(), Path: rel, Bytes: written, Pages: pages}
	ans.Chars = utf8.RuneCountInString(text)
	ans.Text, ans.Truncated = truncateChars(text, a.MaxChars)
	return ans, nil
}

// createDownload creates downloads/<name> in the workspace, never through a
// symlink out of it and never over an existing file: name-2.pdf, name-3.pdf …
// are tried instead.
func createDownload(root *os.Root, name string) (*os.File, string, error) {
	if err := root.Mkdir(DownloadsDir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, "", fmt.Errorf("create %s/: %w", DownloadsDir, err)
	}
	if fi, err := root.Stat(DownloadsDir); err != nil || !fi.IsDir() {
		return nil, "", fmt.Errorf("%s/ is not a directory in the workspace", DownloadsDir)
	}
	stem := strings.TrimSuffix(name, ".pdf")
	for i := 1; i <= 100; i++ {
		file := name
		if i > 1 {
			file = stem + "-" + strconv.Itoa(i) + ".pdf"
		}
		rel := path.Join(DownloadsDir, file)
		f, err := root.OpenFile(rel, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, "", fmt.Errorf("create %s: %w", rel, err)
		}
		return f, rel, nil
	}
	return nil, "", fmt.Errorf("%s/%s and 99 numbered variants exist: choose another name", DownloadsDir, name)
}

// extractPDF runs pdfinfo and pdftotext in the browser image with no network,
// bounded in time and memory, and returns the text with page markers.
func extractPDF(ctx context.Context, run Runner, cfg Config, project string, pdf io.Reader) (string, int, error) {
	res, err := run.RunOnce(ctx, sandbox.OneShot{
		Image: cfg.PDFImage, Cmd: []string{"/bin/sh", "-c", pdfScript}, Project: project,
		Stdin: pdf, Timeout: cfg.PDFExtractTimeout, MemoryBytes: cfg.PDFMemoryBytes,
		CPUs: 1, PidsLimit: 32,
		// The copy of the PDF lives on the tmpfs (and counts against the memory).
		TmpfsBytes:     cfg.MaxPDFBytes + 8<<20,
		MaxStdoutBytes: maxPDFTextBytes,
	})
	switch {
	case errors.Is(err, sandbox.ErrTimedOut):
		return "", 0, fmt.Errorf("%w: poppler took longer than %s (research.pdf_extract_timeout)", ErrUnreadablePDF, cfg.PDFExtractTimeout)
	case errors.Is(err, sandbox.ErrOutOfMemory):
		return "", 0, fmt.Errorf("%w: poppler needed more than %s of memory (research.pdf_memory_bytes)", ErrUnreadablePDF, sizeText(cfg.PDFMemoryBytes))
	case err != nil:
		return "", 0, err
	}
	pages, diag := parseDiagnostics(res.Stderr)
	if res.ExitCode != 0 {
		if diag == "" {
			diag = fmt.Sprintf("exit status %d", res.ExitCode)
		}
		return "", 0, fmt.Errorf("%w: %s", ErrUnreadablePDF, diag)
	}
	text := pageText(res.Stdout)
	if res.StdoutTruncated {
		text += fmt.Sprintf("\n\n[… the text goes on: only its first %s were read]", sizeText(maxPDFTextBytes))
	}
	return text, pages, nil
}

// maxPDFTextBytes is the most text read back from pdftotext: far more than the
// largest max_chars.
const maxPDFTextBytes = 4 << 20

// parseDiagnostics takes the page count out of the script's stderr and returns
// the rest (poppler's complaints), trimmed to a few lines.
func parseDiagnostics(stderr string) (pages int, diag string) {
	var lines []string
	for l := range strings.Lines(stderr) {
		l = strings.TrimSpace(l)
		if v, ok := strings.CutPrefix(l, pagesMark); ok {
			pages, _ = strconv.Atoi(v)
			continue
		}
		if l != "" {
			lines = append(lines, l)
		}
	}
	// poppler's verdict comes last (after the complaints that led to it).
	if len(lines) > 4 {
		lines = append([]string{fmt.Sprintf("(%d lines before)", len(lines)-4)}, lines[len(lines)-4:]...)
	}
	return pages, strings.Join(lines, "; ")
}

// pageText turns pdftotext's form feeds into page markers.
func pageText(out string) string {
	pages := strings.Split(out, "\f")
	if len(pages) > 1 && strings.TrimSpace(pages[len(pages)-1]) == "" {
		pages = pages[:len(pages)-1]
	}
	var b strings.Builder
	for i, p := range pages {
		if i > 0 {
			fmt.Fprintf(&b, "\n\n--- page %d ---\n\n", i+1)
		}
		b.WriteString(strings.TrimRight(p, " \n"))
	}
	return b.String()
}

// PDFFileName is the name download_pdf saves a PDF under in downloads/: the
// requested name, else the URL's last path segment, else "document"; its base name
// only, every character outside [A-Za-z0-9._-] (separators, NUL, spaces, any
// non-ASCII letter) replaced by "_", no leading dot or dash (no hidden file, no
// "..", nothing a shell takes for an option), at most 100 characters, with ".pdf"
// at the end. It never names anything outside downloads/.
func PDFFileName(name, rawURL string) string {
	if strings.TrimSpace(name) == "" {
		if u, err := url.Parse(rawURL); err == nil {
			name = path.Base(u.Path)
		}
	}
	return safeName(name, ".pdf", maxPDFName, "document") + ".pdf"
}

// safeName reduces name to a file name of the workspace: its base name only,
// every character outside [A-Za-z0-9._-] replaced by "_" (runs of them by one),
// ext (any case) dropped from the end, no leading dot or dash, at most limit
// characters, no trailing dot, dash or underscore; def when nothing is left.
func safeName(name, ext string, limit int, def string) string {
	name = strings.ReplaceAll(name, "\\", "/")
	if i := strings.LastIndex(name, "/"); i >= 0 {
		name = name[i+1:]
	}
	var b strings.Builder
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-':
			b.WriteRune(r)
		case !strings.HasSuffix(b.String(), "_"):
			b.WriteByte('_')
		}
	}
	clean := b.String()
	if n := len(ext); n > 0 && len(clean) >= n && strings.EqualFold(clean[len(clean)-n:], ext) {
		clean = clean[:len(clean)-n]
	}
	clean = strings.TrimLeft(clean, "._-")
	if len(clean) > limit {
		clean = clean[:limit]
	}
	clean = strings.TrimRight(clean, "._-")
	if clean == "" {
		clean = def
	}
	return clean
}

func contentTypeOf(resp *http.Response, head []byte) string {
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		return strconv.Quote(ct)
	}
	return strconv.Quote(http.DetectContentType(head)) + " (sniffed)"
}

// quoteStart quotes the first bytes received, for the error naming them.
func quoteStart(head []byte) string {
	if len(head) == 0 {
		return "with nothing (an empty body)"
	}
	return strconv.Quote(string(head[:min(len(head), 40)]))
}

// saveWriter remembers a write error, so a full disk is told apart from a broken
// download.
type saveWriter struct {
	w   io.Writer
	err error
}

func (s *saveWriter) Write(p []byte) (int, error) {
	n, err := s.w.Write(p)
	if err != nil {
		s.err = err
	}
	return n, err
}
