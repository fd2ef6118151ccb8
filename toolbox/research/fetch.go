package research

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	readability "codeberg.org/readeck/go-readability/v2"
	"golang.org/x/net/html"
	"golang.org/x/net/html/charset"

	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/tools"
)

// FetchArgs are web_fetch's arguments.
type FetchArgs struct {
	URL            string `json:"url" jsonschema:"description=http(s) URL of the page; the host must be in the team's allowed_domains"`
	MaxChars       int    `json:"max_chars,omitempty" jsonschema:"minimum=100,maximum=200000,description=Characters of text returned (default 20000); longer pages are truncated with a marker"`
	TimeoutSeconds int    `json:"timeout_seconds,omitempty" jsonschema:"minimum=1,maximum=60,description=Default 30"`
}

// FetchAnswer is web_fetch's result.
type FetchAnswer struct {
	URL         string `json:"url"`
	FinalURL    string `json:"final_url"`
	Status      int    `json:"status"`
	ContentType string `json:"content_type"`
	Title       string `json:"title,omitempty"`
	// Extractor is how an HTML page became text: "readability" (its main content)
	// or "body" (the whole page without its chrome).
	Extractor string `json:"extractor,omitempty"`
	Text      string `json:"text"`
	// Chars is the length of the whole text; Truncated says Text holds less.
	Chars     int  `json:"chars"`
	Truncated bool `json:"truncated"`
}

// ErrNotText refuses a response web_fetch cannot turn into text.
var ErrNotText = errors.New("not a text document")

// ErrTooLarge refuses a response over the download cap.
var ErrTooLarge = errors.New("over the download cap")

func registerFetch(reg *tools.Registry, eg *egress.Egress, cfg Config) {
	tools.Register(reg, "web_fetch", "Fetch a web page and return its readable text (main content, headings and lists kept, links as footnotes); JSON and plain text come back as text.",
		func(ctx context.Context, call tools.Call, a FetchArgs) (tools.Result, error) {
			if eg == nil {
				return tools.Result{}, errors.New("web_fetch: no egress client configured")
			}
			var err error
			if a.MaxChars, err = maxChars("web_fetch", a.MaxChars); err != nil {
				return tools.Result{}, err
			}
			timeout := cfg.FetchTimeout
			if a.TimeoutSeconds > 0 {
				timeout = min(time.Duration(a.TimeoutSeconds)*time.Second, cfg.MaxTimeout)
			}
			s := call.Session
			ans, err := fetch(ctx, eg.ClientFor(s.AllowedDomains, s.EgressDenyPrivate), cfg, a, timeout)
			if err != nil {
				return tools.Result{}, fmt.Errorf("web_fetch: %w", err)
			}
			return tools.JSON(ans)
		}, tools.Returns[FetchAnswer](), tools.Outbound(), tools.ReadOnly(), tools.Idempotent(), tools.Reads(tools.Untrusted), tools.InGroup("research"), tools.WithTier(tools.Elevated))
}

// maxChars is a max_chars argument checked, with its default for 0; tool names
// the tool in the error.
func maxChars(tool string, n int) (int, error) {
	if n == 0 {
		n = DefaultMaxChars
	}
	if n < 100 || n > MaxFetchChars {
		return 0, fmt.Errorf("%s: max_chars %d: want 100-%d", tool, n, MaxFetchChars)
	}
	return n, nil
}

// newGet is a GET of a URL the model gave, which must be http(s).
func newGet(ctx context.Context, rawURL, userAgent, accept string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, err
	}
	if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
		return nil, fmt.Errorf("%q is not an http(s) URL", rawURL)
	}
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set("Accept", accept)
	return req, nil
}

func fetch(ctx context.Context, client *http.Client, cfg Config, a FetchArgs, timeout time.Duration) (FetchAnswer, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := newGet(ctx, a.URL, cfg.UserAgent, "text/html,application/xhtml+xml,application/json,text/plain;q=0.9,*/*;q=0.1")
	if err != nil {
		return FetchAnswer{}, err
	}
	resp, err := client.Do(req)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return FetchAnswer{}, fmt.Errorf("GET %s: timed out after %s", a.URL, timeout)
		}
		return FetchAnswer{}, fmt.Errorf("GET %s: %w", a.URL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return FetchAnswer{}, fmt.Errorf("GET %s: HTTP %s", a.URL, resp.Status)
	}
	if resp.ContentLength > cfg.MaxFetchBytes {
		return FetchAnswer{}, fmt.Errorf("GET %s: %w: %d bytes announced, cap %s (research.max_fetch_bytes)", a.URL, ErrTooLarge, resp.ContentLength, sizeText(cfg.MaxFetchBytes))
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, cfg.MaxFetchBytes+1))
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return FetchAnswer{}, fmt.Errorf("GET %s: timed out after %s reading the body", a.URL, timeout)
		}
		return FetchAnswer{}, fmt.Errorf("GET %s: reading the body: %w", a.URL, err)
	}
	if int64(len(body)) > cfg.MaxFetchBytes {
		return FetchAnswer{}, fmt.Errorf("GET %s: %w: more than %s (research.max_fetch_bytes)", a.URL, ErrTooLarge, sizeText(cfg.MaxFetchBytes))
	}
	ctype := resp.Header.Get("Content-Type")
	if ctype == "" {
		ctype = http.DetectContentType(body)
	}
	media, _, _ := mime.ParseMediaType(ctype)
	ans := FetchAnswer{URL: a.URL, FinalURL: resp.Request.URL.String(), Status: resp.StatusCode, ContentType: media}
	var text string
	switch kind := textKind(media); kind {
	case "html":
		text, ans.Title, ans.Extractor, err = readable(body, ctype, resp.Request.URL)
	case "text":
		text, err = decodeText(body, ctype)
	default:
		hint := ""
		if media == "application/pdf" {
			hint = "; download_pdf reads PDFs"
		}
		return FetchAnswer{}, fmt.Errorf("GET %s: %w: the server sent %q (web_fetch reads HTML, JSON and plain text%s)", a.URL, ErrNotText, media, hint)
	}
	if err != nil {
		return FetchAnswer{}, fmt.Errorf("GET %s: %w", a.URL, err)
	}
	ans.Chars = utf8.RuneCountInString(text)
	ans.Text, ans.Truncated = truncateChars(text, a.MaxChars)
	return ans, nil
}

// textKind sorts a media type: "html", "text" (returned as it is) or "" (refused).
func textKind(media string) string {
	switch {
	case media == "text/html" || media == "application/xhtml+xml":
		return "html"
	case strings.HasPrefix(media, "text/"), media == "application/json", strings.HasSuffix(media, "+json"),
		media == "application/xml", strings.HasSuffix(media, "+xml"), media == "application/javascript",
		media == "application/x-ndjson", media == "application/yaml":
		return "text"
	}
	return ""
}

// decodeText turns a text body into UTF-8 by its declared (or sniffed) charset.
func decodeText(body []byte, ctype string) (string, error) {
	r, err := charset.NewReader(bytes.NewReader(body), ctype)
	if err != nil {
		return "", fmt.Errorf("charset: %w", err)
	}
	out, err := io.ReadAll(r)
	if err != nil {
		return "", fmt.Errorf("charset: %w", err)
	}
	return strings.ToValidUTF8(string(out), "\uFFFD"), nil
}

// MaxReadabilityElements is the largest page (in elements) given to readability.
// Its scoring passes grow faster than the page (about 200 ms of CPU for a 1 MiB,
// 50,000-element article); a larger page is rendered whole, chrome left out, which
// costs a few tens of milliseconds per MiB.
const MaxReadabilityElements = 10000

// Extractors as reported in FetchAnswer.Extractor.
const (
	ExtractorReadability = "readability"
	ExtractorBody        = "body"
)

// Readable extracts a page's main content as text. When readability finds no
// article (a short page, a list of links) or the page is too large for it
// (MaxReadabilityElements), the whole body is rendered instead, chrome (nav,
// header, footer, aside, forms) left out.
func Readable(body []byte, ctype string, base *url.URL) (text, title string, err error) {
	text, title, _, err = readable(body, ctype, base)
	return text, title, err
}

func readable(body []byte, ctype string, base *url.URL) (text, title, extractor string, err error) {
	r, err := charset.NewReader(bytes.NewReader(body), ctype)
	if err != nil {
		return "", "", "", fmt.Errorf("charset: %w", err)
	}
	doc, err := html.Parse(r)
	if err != nil {
		return "", "", "", fmt.Errorf("parse HTML: %w", err)
	}
	title = clean(documentTitle(doc))
	if elements(doc, MaxReadabilityElements+1) <= MaxReadabilityElements {
		p := readability.NewParser()
		// ParseDocument works on a copy: the whole page stays for the fallback.
		if art, perr := p.ParseDocument(doc, base); perr == nil && art.Node != nil {
			if t := clean(art.Title()); t != "" {
				title = t
			}
			if txt := HTMLText(art.Node, base); strings.TrimSpace(txt) != "" {
				return txt, title, ExtractorReadability, nil
			}
		}
	}
	return HTMLText(doc, base), title, ExtractorBody, nil
}

// elements counts n's element nodes, stopping at limit.
func elements(n *html.Node, limit int) int {
	count := 0
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		for c := n.FirstChild; c != nil && count < limit; c = c.NextSibling {
			if c.Type == html.ElementNode {
				count++
			}
			walk(c)
		}
	}
	walk(n)
	return count
}

func documentTitle(n *html.Node) string {
	if n.Type == html.ElementNode && n.Data == "title" {
		return textOf(n)
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if t := documentTitle(c); t != "" {
			return t
		}
	}
	return ""
}

// truncateChars keeps the first max characters and says how much was cut.
func truncateChars(s string, max int) (string, bool) {
	if utf8.RuneCountInString(s) <= max {
		return s, false
	}
	n := 0
	for i := range s {
		if n == max {
			total := utf8.RuneCountInString(s)
			return s[:i] + fmt.Sprintf("\n\n[… truncated: %d of %d characters shown; raise max_chars for more]", max, total), true
		}
		n++
	}
	return s, false
}

func sizeText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}
