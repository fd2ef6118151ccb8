package quality

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/tools"
)

// ValidateWebAppArgs are validate_web_app's arguments.
type ValidateWebAppArgs struct {
	URL    string     `json:"url" jsonschema:"description=Base URL of the running app (http or https), e.g. http://localhost:8000"`
	Checks []WebCheck `json:"checks" jsonschema:"minItems=1,description=The checks to run; each is reported PASS or FAIL with evidence"`
}

// Check types of validate_web_app.
const (
	WebCheckStatus     = "status"
	WebCheckMaxMS      = "max_ms"
	WebCheckJSONSchema = "json_schema"
	// The browser checks load the page in headless Chromium and judge it
	// after its scripts ran.
	WebCheckSelector         = "selector"
	WebCheckText             = "text"
	WebCheckNoConsoleErrors  = "no_console_errors"
	WebCheckNoFailedRequests = "no_failed_requests"
)

// browserCheckTypes are the checks that need the page rendered.
var browserCheckTypes = map[string]bool{WebCheckSelector: true, WebCheckText: true, WebCheckNoConsoleErrors: true, WebCheckNoFailedRequests: true}

// checkTypesHint lists every check type for error messages.
const checkTypesHint = "status, max_ms, json_schema, selector, text, no_console_errors or no_failed_requests"

// WebCheck is one check of validate_web_app.
type WebCheck struct {
	Type string `json:"type" jsonschema:"enum=status,enum=max_ms,enum=json_schema,enum=selector,enum=text,enum=no_console_errors,enum=no_failed_requests,description=status: the path answers the expected status (and content type); max_ms: the path answers within max_ms milliseconds; json_schema: the path's JSON body validates against schema; selector: after the page's scripts ran (headless Chromium) the CSS selector matches an element; text: the rendered page contains text; no_console_errors: loading the page throws no uncaught exception or unhandled rejection and logs no console.error; no_failed_requests: every sub-request the page makes is answered with a status below 400"`
	// Path is on the app ("/api/users"); default "/".
	Path string `json:"path,omitempty" jsonschema:"description=Path on the app (default /)"`
	// Status is the expected HTTP status of a status check (default 200); on a
	// json_schema check, when set, it is checked too.
	Status int `json:"status,omitempty" jsonschema:"minimum=100,maximum=599,description=Expected HTTP status (status check; default 200)"`
	// ContentType, on a status check, is the expected media type (parameters
	// ignored; "json" matches any JSON type, "text/" any text type).
	ContentType string `json:"content_type,omitempty" jsonschema:"description=Expected media type, e.g. application/json or text/html (status check)"`
	// MaxMS is the bound of a max_ms check.
	MaxMS int `json:"max_ms,omitempty" jsonschema:"minimum=1,maximum=60000,description=Response time bound in milliseconds (max_ms check)"`
	// Schema is the JSON Schema (draft 2020-12 unless it names another with
	// $schema) a json_schema check validates the body against.
	Schema map[string]any `json:"schema,omitempty" jsonschema:"description=Inline JSON Schema the body must match (json_schema check)"`
	// Selector is a selector check's CSS selector.
	Selector string `json:"selector,omitempty" jsonschema:"description=CSS selector that must match an element after the page's scripts ran (selector check)"`
	// Text is a text check's text, looked for in the rendered page
	// (document.body.innerText: visible text, case-sensitive).
	Text string `json:"text,omitempty" jsonschema:"description=Text the rendered page must contain, case-sensitive (text check)"`
	// WaitMS bounds how long a selector or text may take to appear after the
	// load event (default 2000).
	WaitMS int `json:"wait_ms,omitempty" jsonschema:"minimum=0,maximum=30000,description=How long a selector or text may take to appear after the page loaded, in milliseconds (default 2000)"`
}

// WebCheckRow is one check's outcome.
type WebCheckRow struct {
	Check       string `json:"check"`
	Path        string `json:"path"`
	Result      string `json:"result"` // PASS | FAIL
	Evidence    string `json:"evidence"`
	HTTPStatus  int    `json:"http_status,omitempty"`
	ContentType string `json:"content_type,omitempty"`
	MS          int64  `json:"ms"`
}

// WebAppReport is validate_web_app's answer.
type WebAppReport struct {
	URL string `json:"url"`
	// Via is the route the requests took: ViaSandbox or ViaEgress.
	Via    string        `json:"via"`
	Passed bool          `json:"passed"`
	Rows   []WebCheckRow `json:"rows"`
}

// Table is the report for a person to read.
func (r WebAppReport) Table() string {
	var b strings.Builder
	b.WriteString("| check | path | result | evidence |\n| --- | --- | --- | --- |\n")
	for _, row := range r.Rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", row.Check, mdCell(row.Path), row.Result, mdCell(row.Evidence))
	}
	verdict := "FAIL"
	if r.Passed {
		verdict = "PASS"
	}
	fmt.Fprintf(&b, "\nOverall: %s\n", verdict)
	return b.String()
}

func registerValidateWebApp(reg *tools.Registry, d WebAppDeps, cfg WebAppConfig) {
	tools.Register(reg, "validate_web_app", "Check a running web app (e.g. http://localhost:8000) against a list of checks, each reported PASS/FAIL with evidence: "+
		"status (a path answers the expected status and content type), max_ms (a path answers within a time bound), "+
		"json_schema (a JSON endpoint's body validates against an inline JSON Schema); and in headless Chromium, after the page's scripts ran: "+
		"selector (a CSS selector matches), text (the rendered page contains a text), no_console_errors, no_failed_requests (every sub-request answered below 400). Redirects off the app's origin are refused.",
		tabled("validate_web_app", func(ctx context.Context, call tools.Call, a ValidateWebAppArgs) (WebAppReport, error) {
			return validateWebApp(ctx, call, d, cfg, a)
		}), tools.Outbound(), tools.ReadOnly(), tools.Idempotent(), tools.LoopbackInSandbox(d.Sandbox != nil), tools.Reads(tools.Untrusted), tools.InGroup("quality"))
}

// preparedCheck is a check whose arguments were validated, schema compiled.
type preparedCheck struct {
	WebCheck
	schema *jsonschema.Schema
}

func validateWebApp(ctx context.Context, call tools.Call, d WebAppDeps, cfg WebAppConfig, a ValidateWebAppArgs) (WebAppReport, error) {
	base, err := parseAppURL(a.URL)
	if err != nil {
		return WebAppReport{}, err
	}
	if len(a.Checks) == 0 {
		return WebAppReport{}, errors.New("checks: give at least one check (" + checkTypesHint + ")")
	}
	if len(a.Checks) > cfg.MaxChecks {
		return WebAppReport{}, fmt.Errorf("checks: %d checks, the limit is %d", len(a.Checks), cfg.MaxChecks)
	}
	// Every check is validated before the first request, so a typo does not
	// cost a half-run report.
	prepared := make([]preparedCheck, 0, len(a.Checks))
	for i, c := range a.Checks {
		p, err := prepareCheck(c)
		if err != nil {
			return WebAppReport{}, fmt.Errorf("checks[%d]: %w", i, err)
		}
		if _, err := joinAppPath(base, p.Path); err != nil {
			return WebAppReport{}, fmt.Errorf("checks[%d]: %w", i, err)
		}
		prepared = append(prepared, p)
	}
	client, via, err := appClient(call.Session, d, base)
	if err != nil {
		return WebAppReport{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.CallTimeout)
	defer cancel()
	rep := WebAppReport{URL: base.String(), Via: via, Passed: true}
	pages, err := loadPages(ctx, call.Session, d, base, prepared)
	if err != nil {
		return WebAppReport{}, err
	}
	for _, c := range prepared {
		var row WebCheckRow
		if browserCheckTypes[c.Type] {
			row = browserRow(c, pages[c.Path])
		} else if row, err = runWebCheck(ctx, client, cfg, base, c); err != nil {
			return WebAppReport{}, err
		}
		if row.Result != "PASS" {
			rep.Passed = false
		}
		rep.Rows = append(rep.Rows, row)
	}
	return rep, nil
}

func prepareCheck(c WebCheck) (preparedCheck, error) {
	c.Type = strings.TrimSpace(c.Type)
	if c.Path == "" {
		c.Path = "/"
	}
	p := preparedCheck{WebCheck: c}
	switch c.Type {
	case WebCheckStatus:
		if p.Status == 0 {
			p.Status = http.StatusOK
		}
		if p.Status < 100 || p.Status > 599 {
			return p, fmt.Errorf("status %d is not an HTTP status", p.Status)
		}
	case WebCheckMaxMS:
		if c.MaxMS <= 0 || c.MaxMS > 60000 {
			return p, fmt.Errorf("max_ms check needs max_ms between 1 and 60000 (got %d)", c.MaxMS)
		}
	case WebCheckJSONSchema:
		if len(c.Schema) == 0 {
			return p, errors.New("json_schema check needs a schema (an inline JSON Schema object)")
		}
		sch, err := compileInlineSchema(c.Schema)
		if err != nil {
			return p, fmt.Errorf("schema: %w", err)
		}
		p.schema = sch
	case WebCheckSelector:
		if strings.TrimSpace(c.Selector) == "" {
			return p, errors.New("selector check needs a selector (a CSS selector)")
		}
		if len(c.Selector) > maxBrowserArg {
			return p, fmt.Errorf("selector: %d bytes, the limit is %d", len(c.Selector), maxBrowserArg)
		}
	case WebCheckText:
		if c.Text == "" {
			return p, errors.New("text check needs a text")
		}
		if len(c.Text) > maxBrowserArg {
			return p, fmt.Errorf("text: %d bytes, the limit is %d", len(c.Text), maxBrowserArg)
		}
	case WebCheckNoConsoleErrors, WebCheckNoFailedRequests:
	case "":
		return p, errors.New("type is empty: want " + checkTypesHint)
	default:
		return p, fmt.Errorf("type %q: want %s", c.Type, checkTypesHint)
	}
	if c.WaitMS < 0 || c.WaitMS > 30000 {
		return p, fmt.Errorf("wait_ms %d: want 0 to 30000", c.WaitMS)
	}
	return p, nil
}

// refusingLoader keeps a schema's $ref from reaching the network or the
// worker's files: an inline schema must be self-contained.
type refusingLoader struct{}

func (refusingLoader) Load(u string) (any, error) {
	return nil, fmt.Errorf("$ref to %s: only references inside the inline schema are resolved", u)
}

// compileInlineSchema compiles an agent's schema with a real JSON Schema
// validator. The map is re-encoded and decoded with the library's own decoder,
// which keeps numbers exact (json.Number).
func compileInlineSchema(s map[string]any) (*jsonschema.Schema, error) {
	raw, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(refusingLoader{})
	const loc = "inline://schema.json"
	if err := c.AddResource(loc, doc); err != nil {
		return nil, err
	}
	sch, err := c.Compile(loc)
	if err != nil {
		return nil, fmt.Errorf("invalid JSON Schema: %w", err)
	}
	return sch, nil
}

// runWebCheck runs one check. Only a refusal of the egress policy is an error
// (it ends the call, so the gate records it as the egress refusal it is); an app
// that fails to answer is a FAIL row.
func runWebCheck(ctx context.Context, client *http.Client, cfg WebAppConfig, base *url.URL, c preparedCheck) (WebCheckRow, error) {
	row := WebCheckRow{Check: c.Type, Path: c.Path, Result: "FAIL"}
	u, _ := joinAppPath(base, c.Path) // validated before the first request
	accept := "*/*"
	if c.Type == WebCheckJSONSchema {
		accept = "application/json"
	}
	timeout := cfg.RequestTimeout
	if c.Type == WebCheckMaxMS {
		// Waiting much past the bound proves nothing more; a little slack keeps
		// the evidence (how slow it was) for a response just over it.
		timeout = min(timeout, time.Duration(c.MaxMS)*time.Millisecond*2+time.Second)
	}
	resp, err := getApp(ctx, client, u, accept, timeout, cfg.MaxBodyBytes)
	if err != nil {
		if errors.Is(err, egress.ErrEgressDenied) {
			return row, fmt.Errorf("check %s %s: %w", c.Type, c.Path, err)
		}
		row.Evidence = err.Error()
		return row, nil
	}
	row.HTTPStatus, row.ContentType, row.MS = resp.Status, resp.ContentType, resp.Elapsed.Milliseconds()
	got := fmt.Sprintf("GET %s → %d %s in %d ms", c.Path, resp.Status, orNone(resp.ContentType), row.MS)
	if resp.Connect >= time.Millisecond {
		got += fmt.Sprintf(" (+%d ms connecting, not counted)", resp.Connect.Milliseconds())
	}
	switch c.Type {
	case WebCheckStatus:
		var why []string
		if resp.Status != c.Status {
			why = append(why, fmt.Sprintf("status %d, want %d", resp.Status, c.Status))
		}
		if c.ContentType != "" && !mediaMatches(resp.ContentType, c.ContentType) {
			why = append(why, fmt.Sprintf("content type %s, want %s", orNone(resp.ContentType), c.ContentType))
		}
		if len(why) == 0 {
			row.Result = "PASS"
			row.Evidence = got
		} else {
			row.Evidence = got + ": " + strings.Join(why, "; ")
		}
	case WebCheckMaxMS:
		if resp.Elapsed <= time.Duration(c.MaxMS)*time.Millisecond {
			row.Result = "PASS"
			row.Evidence = fmt.Sprintf("%s (bound %d ms)", got, c.MaxMS)
		} else {
			row.Evidence = fmt.Sprintf("%s: over the %d ms bound", got, c.MaxMS)
		}
	case WebCheckJSONSchema:
		row.Evidence = jsonSchemaEvidence(got, resp, c)
		if row.Evidence == got {
			row.Result = "PASS"
		}
	}
	return row, nil
}

// jsonSchemaEvidence returns got unchanged when the body validates, else got
// with the reason.
func jsonSchemaEvidence(got string, resp appResponse, c preparedCheck) string {
	if c.Status != 0 && resp.Status != c.Status {
		return fmt.Sprintf("%s: status %d, want %d", got, resp.Status, c.Status)
	}
	if c.Status == 0 && resp.Status/100 != 2 {
		return fmt.Sprintf("%s: not a success status", got)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(resp.Body))
	if err != nil {
		return fmt.Sprintf("%s: the body is not JSON (%v)", got, err)
	}
	if err := c.schema.Validate(inst); err != nil {
		msg := err.Error()
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			msg = validationCauses(ve)
		}
		return fmt.Sprintf("%s: the body does not match the schema: %s", got, msg)
	}
	return got
}

// validationCauses flattens a validation error to its leaf causes ("at /0/id:
// got string, want integer"), the part an agent can act on, capped.
func validationCauses(ve *jsonschema.ValidationError) string {
	pr := message.NewPrinter(language.English)
	var leaves []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			loc := "/" + strings.Join(e.InstanceLocation, "/")
			leaves = append(leaves, fmt.Sprintf("at %s: %s", loc, e.ErrorKind.LocalizedString(pr)))
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	const maxLeaves = 10
	if len(leaves) > maxLeaves {
		leaves = append(leaves[:maxLeaves], fmt.Sprintf("… %d more", len(leaves)-maxLeaves))
	}
	return strings.Join(leaves, "; ")
}

// mediaMatches compares a response's media type with an expected one: exact
// (case-insensitive, parameters ignored), "json" for any JSON type, or a
// "text/" prefix.
func mediaMatches(got, want string) bool {
	want = strings.ToLower(strings.TrimSpace(want))
	if i := strings.IndexByte(want, ';'); i >= 0 {
		want = strings.TrimSpace(want[:i])
	}
	switch {
	case want == "json":
		return isJSONMedia(got)
	case strings.HasSuffix(want, "/"):
		return strings.HasPrefix(got, want)
	}
	return got == want
}

func orNone(s string) string {
	if s == "" {
		return "(no content type)"
	}
	return s
}
