package research

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"golang.org/x/net/html"

	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/tools"
)

// SearchArgs are web_search's arguments.
type SearchArgs struct {
	Query      string `json:"query" jsonschema:"description=What to search for"`
	MaxResults int    `json:"max_results,omitempty" jsonschema:"minimum=1,maximum=20,description=Default 10"`
	Language   string `json:"language,omitempty" jsonschema:"description=Result language such as en or de-DE (default: any)"`
	TimeRange  string `json:"time_range,omitempty" jsonschema:"enum=day,enum=week,enum=month,enum=year,description=Only results from this period"`
}

// SearchResult is one ranked hit.
type SearchResult struct {
	Title   string `json:"title"`
	URL     string `json:"url"`
	Snippet string `json:"snippet"`
	Engine  string `json:"engine"`
}

// SearchAnswer is web_search's result.
type SearchAnswer struct {
	Query   string         `json:"query"`
	Results []SearchResult `json:"results"`
	// Backend is the backend that answered: "searxng <base URL>" or "duckduckgo".
	Backend string `json:"backend"`
	// UnresponsiveEngines are the SearXNG engines that did not answer it.
	UnresponsiveEngines []string `json:"unresponsive_engines,omitempty"`
	// Skipped says why each backend tried before the one that answered was passed over.
	Skipped []string `json:"skipped,omitempty"`
}

// errEmpty marks a healthy SearXNG answer with no result (a fallback reason only
// when research.fallback_on_empty is set).
var errEmpty = errors.New("no results")

var timeRanges = map[string]bool{"": true, "day": true, "week": true, "month": true, "year": true}

func registerSearch(reg *tools.Registry, eg *egress.Egress, cfg Config) {
	tools.Register(reg, "web_search", "Search the web (SearXNG, with a DuckDuckGo fallback); returns ranked results with title, url, snippet and engine.",
		func(ctx context.Context, call tools.Call, a SearchArgs) (tools.Result, error) {
			if eg == nil {
				return tools.Result{}, errors.New("web_search: no egress client configured")
			}
			a.Query = strings.TrimSpace(a.Query)
			if a.Query == "" {
				return tools.Result{}, errors.New("web_search: query is empty")
			}
			if a.MaxResults <= 0 {
				a.MaxResults = DefaultMaxSearch
			}
			if a.MaxResults > MaxSearchResults {
				return tools.Result{}, fmt.Errorf("web_search: max_results %d is over %d", a.MaxResults, MaxSearchResults)
			}
			if !timeRanges[a.TimeRange] {
				return tools.Result{}, fmt.Errorf("web_search: time_range %q: want day, week, month or year", a.TimeRange)
			}
			s := call.Session
			sr := searcher{client: eg.ClientFor(s.AllowedDomains, s.EgressDenyPrivate), cfg: cfg}
			ans, err := sr.search(ctx, a)
			if err != nil {
				return tools.Result{}, fmt.Errorf("web_search: %w", err)
			}
			return tools.JSON(ans)
		}, tools.Returns[SearchAnswer](), tools.Outbound(), tools.ReadOnly(), tools.Idempotent(), tools.Reads(tools.Untrusted), tools.InGroup("research"), tools.WithTier(tools.Elevated))
}

type searcher struct {
	client *http.Client
	cfg    Config
}

// search asks each SearXNG in turn, then DuckDuckGo. A backend that errors or times
// out is skipped (and the reason reported); an empty answer from a healthy SearXNG
// is the answer unless FallbackOnEmpty.
func (s searcher) search(ctx context.Context, a SearchArgs) (SearchAnswer, error) {
	var skipped []string
	var empty *SearchAnswer
	for _, base := range s.cfg.SearXNGURLs {
		ans, err := s.searxng(ctx, base, a)
		if err == nil {
			ans.Skipped = skipped
			return ans, nil
		}
		if ctx.Err() != nil {
			return SearchAnswer{}, ctx.Err()
		}
		if errors.Is(err, errEmpty) {
			if !s.cfg.FallbackOnEmpty {
				ans.Skipped = skipped
				return ans, nil
			}
			if empty == nil {
				empty = &ans
			}
		}
		skipped = append(skipped, fmt.Sprintf("searxng %s: %v", base, err))
	}
	if s.cfg.DuckDuckGo == duckDuckGoDisabledFlag {
		if empty != nil {
			empty.Skipped = skipped
			return *empty, nil
		}
		if len(skipped) == 0 {
			return SearchAnswer{}, errors.New("no backend configured (research.searxng_urls is empty and research.duckduckgo is off)")
		}
		return SearchAnswer{}, fmt.Errorf("every backend failed: %s", strings.Join(skipped, "; "))
	}
	ans, err := s.duckduckgo(ctx, a)
	if err != nil {
		if empty != nil { // DuckDuckGo failing too: the healthy empty answer stands
			empty.Skipped = append(skipped, "duckduckgo: "+err.Error())
			return *empty, nil
		}
		return SearchAnswer{}, fmt.Errorf("every backend failed: %s", strings.Join(append(skipped, "duckduckgo: "+err.Error()), "; "))
	}
	ans.Skipped = skipped
	return ans, nil
}

// get sends a GET with the backend timeout and returns the body (capped).
func (s searcher) get(ctx context.Context, u string, accept string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.SearchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", accept)
	req.Header.Set("User-Agent", s.cfg.UserAgent)
	resp, err := s.client.Do(req)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("timed out after %s", s.cfg.SearchTimeout)
		}
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("HTTP %s", resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, fmt.Errorf("reading the answer: %w", err)
	}
	return body, nil
}

// searxng queries one instance's JSON API.
func (s searcher) searxng(ctx context.Context, base string, a SearchArgs) (SearchAnswer, error) {
	q := url.Values{"q": {a.Query}, "format": {"json"}, "pageno": {"1"}}
	if a.Language != "" {
		q.Set("language", a.Language)
	}
	if a.TimeRange != "" {
		q.Set("time_range", a.TimeRange)
	}
	body, err := s.get(ctx, strings.TrimRight(base, "/")+"/search?"+q.Encode(), "application/json")
	if err != nil {
		return SearchAnswer{}, err
	}
	var raw struct {
		Results []struct {
			Title   string   `json:"title"`
			URL     string   `json:"url"`
			Content string   `json:"content"`
			Engine  string   `json:"engine"`
			Engines []string `json:"engines"`
		} `json:"results"`
		Unresponsive []json.RawMessage `json:"unresponsive_engines"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return SearchAnswer{}, fmt.Errorf("not a SearXNG JSON answer: %w", err)
	}
	ans := SearchAnswer{Query: a.Query, Backend: "searxng " + base, Results: []SearchResult{}, UnresponsiveEngines: unresponsive(raw.Unresponsive)}
	for _, r := range raw.Results {
		if len(ans.Results) == a.MaxResults {
			break
		}
		if !webURL(r.URL) {
			continue
		}
		engine := r.Engine
		if engine == "" && len(r.Engines) > 0 {
			engine = r.Engines[0]
		}
		ans.Results = append(ans.Results, SearchResult{Title: clean(r.Title), URL: r.URL, Snippet: clean(r.Content), Engine: engine})
	}
	if len(ans.Results) == 0 {
		return ans, errEmpty
	}
	return ans, nil
}

// unresponsive reads SearXNG's unresponsive_engines: [name, reason] pairs in current
// versions, [name, reason, suspended] or plain names in others.
func unresponsive(items []json.RawMessage) []string {
	var out []string
	for _, it := range items {
		var parts []any
		if json.Unmarshal(it, &parts) == nil && len(parts) > 0 {
			name := fmt.Sprint(parts[0])
			if len(parts) > 1 && fmt.Sprint(parts[1]) != "" {
				name += " (" + fmt.Sprint(parts[1]) + ")"
			}
			out = append(out, name)
			continue
		}
		var name string
		if json.Unmarshal(it, &name) == nil && name != "" {
			out = append(out, name)
		}
	}
	return out
}

// duckduckgo reads DuckDuckGo's HTML results page.
func (s searcher) duckduckgo(ctx context.Context, a SearchArgs) (SearchAnswer, error) {
	q := url.Values{"q": {a.Query}}
	if a.Language != "" {
		q.Set("kl", a.Language)
	}
	if a.TimeRange != "" {
		q.Set("df", a.TimeRange[:1]) // d, w, m, y
	}
	sep := "?"
	if strings.Contains(s.cfg.DuckDuckGo, "?") {
		sep = "&"
	}
	body, err := s.get(ctx, s.cfg.DuckDuckGo+sep+q.Encode(), "text/html")
	if err != nil {
		return SearchAnswer{}, err
	}
	results, err := parseDuckDuckGo(body, a.MaxResults)
	if err != nil {
		return SearchAnswer{}, err
	}
	return SearchAnswer{Query: a.Query, Backend: "duckduckgo", Results: results}, nil
}

// parseDuckDuckGo takes each result's a.result__a (its href a /l/?uddg= redirect or
// the URL itself) and the .result__snippet that follows it.
func parseDuckDuckGo(body []byte, max int) ([]SearchResult, error) {
	doc, err := html.Parse(strings.NewReader(string(body)))
	if err != nil {
		return nil, fmt.Errorf("not an HTML answer: %w", err)
	}
	results := []SearchResult{}
	var cur *SearchResult
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if len(results) >= max && cur == nil {
			return
		}
		if n.Type == html.ElementNode {
			switch {
			case n.Data == "a" && hasClass(n, "result__a"):
				if cur != nil && len(results) < max {
					results = append(results, *cur)
				}
				cur = nil
				if u := ddgTarget(attr(n, "href")); webURL(u) {
					cur = &SearchResult{Title: clean(textOf(n)), URL: u, Engine: "duckduckgo"}
				}
				return
			case hasClass(n, "result__snippet"):
				if cur != nil {
					cur.Snippet = clean(textOf(n))
					if len(results) < max {
						results = append(results, *cur)
					}
					cur = nil
				}
				return
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	if cur != nil && len(results) < max {
		results = append(results, *cur)
	}
	return results, nil
}

// ddgTarget resolves DuckDuckGo's redirect link to the result's URL.
func ddgTarget(href string) string {
	u, err := url.Parse(href)
	if err != nil {
		return ""
	}
	if t := u.Query().Get("uddg"); t != "" && strings.HasSuffix(u.Path, "/l/") {
		return t
	}
	if u.Scheme == "" && strings.HasPrefix(href, "//") {
		u.Scheme = "https"
	}
	return u.String()
}

func webURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

func hasClass(n *html.Node, class string) bool {
	for _, f := range strings.Fields(attr(n, "class")) {
		if f == class {
			return true
		}
	}
	return false
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func textOf(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return b.String()
}

// clean collapses whitespace (snippets come with markup line breaks).
func clean(s string) string { return strings.Join(strings.Fields(s), " ") }
