package cli

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aetherium-engine/aetherium/templates"
)

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func apiURL() string {
	if u := os.Getenv("AETHERIUM_API_URL"); u != "" {
		return strings.TrimRight(u, "/")
	}
	addr := os.Getenv("AETHERIUM_API_ADDR")
	if addr == "" {
		addr = "127.0.0.1:8080"
	}
	return "http://" + addr
}

const runUsage = `usage: aetherium run (--template NAME | --team FILE) --prompt TEXT [--var k=v]… [--project SLUG] [--priority N] [--idempotency-key KEY] [--follow]
Submit a run; --follow streams its events until it ends (Ctrl-C stops following, not the run).
The submission carries an Idempotency-Key (a new one each time unless --idempotency-key
gives it), so a connection lost before the API answered is retried without starting the
run twice; the same key and request again answer with the first run.`

// submitAttempts is how often run sends its submission when the connection
// fails before an answer (the Idempotency-Key makes the resend safe).
const submitAttempts = 3

func runCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	setUsage(fs, runUsage)
	base := fs.String("api", apiURL(), "API base URL (AETHERIUM_API_URL)")
	tmpl := fs.String("template", "", "template name from the templates directory")
	teamFile := fs.String("team", "", "inline team: a template YAML file sent with the run")
	prompt := fs.String("prompt", "", "the task for the team (required)")
	project := fs.String("project", "", "the project the run works in (its workspace, knowledge and memory); default a private scratch project")
	follow := fs.Bool("follow", false, "stream the run's events until it ends; exit 1 unless it completes")
	priority := fs.Int("priority", 0, "the run's priority, 1 (lowest) to 5; default 3 (at most what your roles allow: fairness.max_priority)")
	key := fs.String("idempotency-key", "", "submit at most once under this key (a day, per principal): the same key and request answer with the first run; default a new key")
	var vars multiFlag
	fs.Var(&vars, "var", "template variable key=value (repeatable)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "aetherium run: "+format+"\n", a...)
		return 1
	}
	if (*tmpl == "") == (*teamFile == "") {
		return fail("give exactly one of --template or --team")
	}
	if strings.TrimSpace(*prompt) == "" {
		return fail("--prompt is required")
	}
	variables := map[string]any{}
	for _, v := range vars {
		k, val, ok := strings.Cut(v, "=")
		if !ok || k == "" {
			return fail("--var %q: want key=value", v)
		}
		variables[k] = val
	}
	var path string
	var body map[string]any
	if *tmpl != "" {
		path, body = "/api/orchestrator/run-from-template", map[string]any{"template": *tmpl, "prompt": *prompt, "variables": variables, "project": *project}
	} else {
		t, err := readTeamFile(*teamFile)
		if err != nil {
			return fail("%v", err)
		}
		path, body = "/api/orchestrator/run", map[string]any{"team": t, "prompt": *prompt, "variables": variables, "project": *project}
	}
	if *priority != 0 {
		body["priority"] = *priority
	}
	var accepted struct {
		RunID    string `json:"run_id"`
		Priority int    `json:"priority"`
		Position int    `json:"position"`
	}
	if *key == "" {
		*key = "cli-" + randomKey()
	}
	replayed, err := submitOnce(ctx, *base+path, *key, body, &accepted)
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintf(stderr, "aetherium run: interrupted before the API answered: the run may or may not have been submitted; "+
				"the same command with --idempotency-key %s submits it at most once\n", *key)
			return 130
		}
		return fail("%v", err)
	}
	if replayed {
		fmt.Fprintf(stdout, "run %s was already submitted under idempotency key %s (priority %d)\n", accepted.RunID, *key, accepted.Priority)
	} else {
		fmt.Fprintf(stdout, "run %s queued (priority %d)\n", accepted.RunID, accepted.Priority)
	}
	if accepted.Position > 0 {
		fmt.Fprintf(stdout, "its fairness key is at its run limit: waiting in line at position %d; it starts when one of the key's runs ends\n", accepted.Position)
	}
	if !*follow {
		return 0
	}
	status, result, err := followRun(ctx, *base, accepted.RunID, stdout)
	if ctx.Err() != nil {
		return stoppedFollowing(stderr, accepted.RunID)
	}
	if err != nil {
		return fail("%v", err)
	}
	fmt.Fprintf(stdout, "\nrun %s %s\n", accepted.RunID, status)
	if result != "" {
		fmt.Fprintf(stdout, "result: %s\n", result)
	}
	if status != "completed" {
		return 1
	}
	return 0
}

// readTeamFile reads an inline team: a template YAML file.
func readTeamFile(path string) (templates.Template, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return templates.Template{}, err
	}
	t, err := templates.ParseYAML(raw)
	if err != nil {
		return t, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

func postJSON(ctx context.Context, url string, body, into any) error {
	return doJSON(ctx, http.MethodPost, url, body, into)
}

// submitOnce posts a submission under an Idempotency-Key, sending it again
// when the connection fails before an answer; replayed reports an answer that
// is the key's earlier run.
func submitOnce(ctx context.Context, url, key string, body, into any) (replayed bool, err error) {
	header := http.Header{"Idempotency-Key": {key}}
	for attempt := 1; ; attempt++ {
		var answer http.Header
		answer, err = doJSONHeader(ctx, http.MethodPost, url, header, body, into)
		var transport *transportError
		if err == nil || !errors.As(err, &transport) || attempt == submitAttempts || ctx.Err() != nil {
			return answer.Get("Idempotent-Replayed") == "true", err
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(time.Duration(attempt) * time.Second):
		}
	}
}

// randomKey is a fresh idempotency key.
func randomKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// transportError is a request that got no answer (the connection failed).
type transportError struct{ err error }

func (e *transportError) Error() string { return e.err.Error() }
func (e *transportError) Unwrap() error { return e.err }

// doJSON sends body (JSON, when not nil) and decodes a 2xx answer into into (when
// not nil); another status is an error with the API's message.
func doJSON(ctx context.Context, method, url string, body, into any) error {
	_, err := doJSONHeader(ctx, method, url, nil, body, into)
	return err
}

// doJSONHeader is doJSON with request headers, returning the answer's.
func doJSONHeader(ctx context.Context, method, url string, header http.Header, body, into any) (http.Header, error) {
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	authorize(req)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, &transportError{fmt.Errorf("%s %s: %w (is the API running? AETHERIUM_API_URL)", method, url, err)}
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		return resp.Header, apiError(resp.StatusCode, data)
	}
	if into == nil || len(bytes.TrimSpace(data)) == 0 {
		return resp.Header, nil
	}
	return resp.Header, json.Unmarshal(data, into)
}

// apiError is a refusal of the API as a person reads it: the status and the
// API's message ({"error": …}), not its JSON body; a body that is not the
// API's (a proxy's page) is shown as text, on one line and shortened.
func apiError(status int, body []byte) error {
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		return &statusError{status: status, msg: fmt.Sprintf("HTTP %d: %s", status, printable(e.Error))}
	}
	text := oneLine(printable(string(body)), 300)
	if text == "" {
		text = http.StatusText(status)
	}
	return &statusError{status: status, msg: fmt.Sprintf("HTTP %d: %s", status, text)}
}

// statusError is an answer of the API other than 2xx: its status, and its
// words as apiError puts them.
type statusError struct {
	status int
	msg    string
}

func (e *statusError) Error() string { return e.msg }

// collectAttempts bounds how often postCollecting asks again: each attempt
// waits the server's replay.wait (2 minutes by default).
const collectAttempts = 30

// postCollecting is postJSON for a request the API may hand to a worker
// (replay, fork in a split deployment): a 503 with Retry-After is a worker
// still at it, and the same request collects the answer, so it asks again
// after the wait it was given, saying so on progress.
func postCollecting(ctx context.Context, url string, body, into any, progress io.Writer) error {
	for attempt := 1; ; attempt++ {
		header, err := doJSONHeader(ctx, http.MethodPost, url, nil, body, into)
		var se *statusError
		if err == nil || !errors.As(err, &se) || se.status != http.StatusServiceUnavailable || header.Get("Retry-After") == "" || attempt == collectAttempts {
			return err
		}
		wait, perr := strconv.Atoi(header.Get("Retry-After"))
		if perr != nil || wait < 0 {
			return err
		}
		fmt.Fprintf(progress, "still running on a worker; asking again in %ds…\n", wait)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(wait) * time.Second):
		}
	}
}

// stoppedFollowing is what an interrupt (Ctrl-C) while following a run
// prints: one line, because nothing went wrong: the run is the fleet's and
// goes on; exit code 130, a shell's for SIGINT.
func stoppedFollowing(stderr io.Writer, runID string) int {
	fmt.Fprintf(stderr, "\nstopped following; run %s goes on. Follow it again: aetherium events %s · cancel it: aetherium runs cancel %s\n", runID, runID, runID)
	return 130
}

// authorize adds the bearer token (apiToken) to a request to the API.
func authorize(req *http.Request) {
	if tok := apiToken(req.URL); tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
}

type sseEvent struct {
	ID    int64           `json:"id"`
	Type  string          `json:"type"`
	Agent string          `json:"agent"`
	Data  json.RawMessage `json:"data"`
	Time  time.Time       `json:"time"`
}

// followRun streams events (reconnecting with Last-Event-ID) until the terminal one.
func followRun(ctx context.Context, base, runID string, out io.Writer) (status, result string, err error) {
	var last int64
	tty := isTTY(out)
	start := time.Now()
	events, failures := 0, 0
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/runs/"+runID+"/events", nil)
		req.Header.Set("Accept", "text/event-stream")
		authorize(req)
		if last > 0 {
			req.Header.Set("Last-Event-ID", fmt.Sprint(last))
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				clearProgress(out, tty)
				return "", "", ctx.Err()
			}
			failures++
			if failures > 10 {
				return "", "", fmt.Errorf("event stream: %w", err)
			}
			select {
			case <-ctx.Done():
				clearProgress(out, tty)
				return "", "", ctx.Err()
			case <-time.After(time.Duration(failures) * 300 * time.Millisecond):
			}
			continue
		}
		if resp.StatusCode != http.StatusOK {
			data, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			return "", "", fmt.Errorf("event stream: %w", apiError(resp.StatusCode, data))
		}
		failures = 0
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			line := sc.Text()
			payload, ok := strings.CutPrefix(line, "data: ")
			if !ok {
				continue
			}
			var e sseEvent
			if err := json.Unmarshal([]byte(payload), &e); err != nil {
				continue
			}
			last = e.ID
			events++
			if tty {
				fmt.Fprint(out, "\r\033[K")
			}
			fmt.Fprintln(out, describe(e))
			if tty {
				fmt.Fprintf(out, "⏳ %s elapsed · %d events · last: %s", time.Since(start).Round(100*time.Millisecond), events, e.Type)
			}
			if e.Type == "run.completed" || e.Type == "run.failed" || e.Type == "run.cancelled" {
				resp.Body.Close()
				var d struct {
					Status, Result, Error, Reason string
				}
				_ = json.Unmarshal(e.Data, &d)
				if tty {
					fmt.Fprint(out, "\r\033[K")
				}
				if d.Status != "completed" && d.Error != "" {
					return d.Status, d.Reason + ": " + d.Error, nil
				}
				return d.Status, d.Result, nil
			}
		}
		resp.Body.Close()
		if ctx.Err() != nil {
			clearProgress(out, tty)
			return "", "", ctx.Err()
		}
	}
}

// clearProgress erases the progress line of a terminal.
func clearProgress(out io.Writer, tty bool) {
	if tty {
		fmt.Fprint(out, "\r\033[K")
	}
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		// Cut at a rune's start: half a character is not text.
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		return s[:n] + "…"
	}
	return s
}

func isTTY(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
