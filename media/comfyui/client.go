// Package comfyui is a client of ComfyUI's HTTP and WebSocket API: POST /prompt,
// the /ws event stream, /history, /view, /upload/image, /queue, /interrupt and
// /system_stats. Every request carries the run's lease token (lease.Header), so
// the fencing proxy in front of the service can refuse a holder whose lease was
// lost; such a refusal is a *FencedError.
package comfyui

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/aetherium-engine/aetherium/gpu/fenceproxy"
	"github.com/aetherium-engine/aetherium/internal/defaults"
	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/media/workflows"
)

// Defaults of Config.
const (
	DefaultRequestTimeout = 60 * time.Second
	DefaultMaxImageBytes  = 64 << 20
)

// Config tunes the client.
type Config struct {
	// RequestTimeout bounds one HTTP request (not the wait for a generation).
	// Default DefaultRequestTimeout.
	RequestTimeout time.Duration `yaml:"request_timeout"`
	// MaxImageBytes bounds one downloaded output. Default DefaultMaxImageBytes.
	MaxImageBytes int64 `yaml:"max_image_bytes"`
}

// WithDefaults fills zero fields.
func (c Config) WithDefaults() Config {
	c.RequestTimeout = defaults.Positive(c.RequestTimeout, DefaultRequestTimeout)
	c.MaxImageBytes = defaults.Positive(c.MaxImageBytes, DefaultMaxImageBytes)
	return c
}

// Validate reports a bad field.
func (c Config) Validate() error {
	if c.RequestTimeout < 0 || c.MaxImageBytes < 0 {
		return errors.New("comfyui: request_timeout and max_image_bytes must not be negative")
	}
	return nil
}

// FencedError is a request the fencing proxy refused: the run's lease on the
// service is stale or gone.
type FencedError struct{ Refusal fenceproxy.Refusal }

func (e *FencedError) Error() string {
	return fmt.Sprintf("the fencing proxy of %s refused the request (%s): %s", e.Refusal.Service, e.Refusal.Reason, e.Refusal.Error)
}

// PromptError is ComfyUI refusing a workflow: its error and node_errors.
type PromptError struct {
	Type, Message, Details string
	// Nodes are "node id (class): message: details" lines, sorted.
	Nodes []string
}

func (e *PromptError) Error() string {
	msg := fmt.Sprintf("ComfyUI refused the workflow: %s (%s)", e.Message, e.Type)
	if e.Details != "" {
		msg += ": " + e.Details
	}
	if len(e.Nodes) > 0 {
		msg += "; node errors: " + strings.Join(e.Nodes, "; ")
	}
	return msg
}

// ExecutionError is a workflow that failed while running (execution_error).
type ExecutionError struct {
	PromptID, NodeID, NodeType, ExceptionType, Message string
}

func (e *ExecutionError) Error() string {
	return fmt.Sprintf("ComfyUI failed prompt %s in node %s (%s): %s: %s", e.PromptID, e.NodeID, e.NodeType, e.ExceptionType, e.Message)
}

// StreamError is the event stream failing while a prompt was awaited: the
// prompt may still run (follow it with History).
type StreamError struct{ Err error }

func (e *StreamError) Error() string { return "comfyui: websocket: " + e.Err.Error() }
func (e *StreamError) Unwrap() error { return e.Err }

// ErrInterrupted is a prompt stopped by POST /interrupt.
var ErrInterrupted = errors.New("comfyui: the prompt was interrupted")

// Client talks to one ComfyUI through its lease.
type Client struct {
	base     *url.URL
	grant    lease.Grant
	http     *http.Client
	cfg      Config
	clientID string
}

// New returns a client of the ComfyUI at baseURL carrying grant's token.
// clientID names the WebSocket session events are addressed to.
func New(baseURL string, grant lease.Grant, clientID string, cfg Config) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("comfyui: base URL %q: want http(s)://host[:port]", baseURL)
	}
	cfg = cfg.WithDefaults()
	return &Client{base: u, grant: grant, http: &http.Client{Timeout: cfg.RequestTimeout}, cfg: cfg, clientID: clientID}, nil
}

// ClientID is the WebSocket client id of this client.
func (c *Client) ClientID() string { return c.clientID }

func (c *Client) url(path string, q url.Values) string {
	u := *c.base
	u.Path += path
	u.RawQuery = q.Encode()
	return u.String()
}

// do sends one request and returns the body of a 2xx answer; a proxy refusal
// becomes *FencedError, other statuses an error with the body.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, ctype string, body io.Reader, limit int64) ([]byte, int, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.url(path, q), body)
	if err != nil {
		return nil, 0, err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	c.grant.SetHeader(req.Header)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("comfyui: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, resp.StatusCode, fmt.Errorf("comfyui: %s %s: read: %w", method, path, err)
	}
	if int64(len(b)) > limit {
		return nil, resp.StatusCode, fmt.Errorf("comfyui: %s %s: answer larger than %d bytes", method, path, limit)
	}
	if r := fenceproxy.ParseRefusal(resp.StatusCode, b); r != nil {
		return nil, resp.StatusCode, &FencedError{Refusal: *r}
	}
	if resp.StatusCode/100 != 2 {
		return b, resp.StatusCode, fmt.Errorf("comfyui: %s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(b[:min(len(b), 500)])))
	}
	return b, resp.StatusCode, nil
}

func (c *Client) getJSON(ctx context.Context, path string, q url.Values, v any) error {
	b, _, err := c.do(ctx, http.MethodGet, path, q, "", nil, 32<<20)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("comfyui: GET %s: decode: %w", path, err)
	}
	return nil
}

func (c *Client) postJSON(ctx context.Context, path string, in any) ([]byte, int, error) {
	b, err := json.Marshal(in)
	if err != nil {
		return nil, 0, err
	}
	return c.do(ctx, http.MethodPost, path, nil, "application/json", bytes.NewReader(b), 32<<20)
}

// Queued is POST /prompt's answer.
type Queued struct {
	PromptID string `json:"prompt_id"`
	Number   int    `json:"number"`
}

// Queue submits a workflow. A 400 with node_errors is a *PromptError.
func (c *Client) Queue(ctx context.Context, w *workflows.Workflow) (Queued, error) {
	b, status, err := c.postJSON(ctx, "/prompt", map[string]any{"prompt": w.Prompt(), "client_id": c.clientID})
	if status == http.StatusBadRequest {
		return Queued{}, parsePromptError(b)
	}
	if err != nil {
		return Queued{}, err
	}
	var q Queued
	if err := json.Unmarshal(b, &q); err != nil || q.PromptID == "" {
		return Queued{}, fmt.Errorf("comfyui: POST /prompt: unexpected answer %.200s", b)
	}
	return q, nil
}

func parsePromptError(b []byte) error {
	var r struct {
		Error struct {
			Type, Message, Details string
		} `json:"error"`
		NodeErrors map[string]struct {
			ClassType string `json:"class_type"`
			Errors    []struct {
				Message, Details string
			} `json:"errors"`
		} `json:"node_errors"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return &PromptError{Type: "unknown", Message: strings.TrimSpace(string(b[:min(len(b), 500)]))}
	}
	pe := &PromptError{Type: r.Error.Type, Message: r.Error.Message, Details: r.Error.Details}
	for id, ne := range r.NodeErrors {
		for _, e := range ne.Errors {
			pe.Nodes = append(pe.Nodes, fmt.Sprintf("node %s (%s): %s: %s", id, ne.ClassType, e.Message, e.Details))
		}
	}
	sort.Strings(pe.Nodes)
	return pe
}

// Image is one output file.
type Image struct {
	Filename  string `json:"filename"`
	Subfolder string `json:"subfolder"`
	Type      string `json:"type"`
}

// History is one prompt's /history entry.
type History struct {
	Outputs map[string]struct {
		Images []Image `json:"images"`
	} `json:"outputs"`
	Status struct {
		StatusStr string            `json:"status_str"`
		Completed bool              `json:"completed"`
		Messages  []json.RawMessage `json:"messages"`
	} `json:"status"`
}

// Images lists the outputs in node id order.
func (h *History) Images() []Image {
	ids := make([]string, 0, len(h.Outputs))
	for id := range h.Outputs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var out []Image
	for _, id := range ids {
		out = append(out, h.Outputs[id].Images...)
	}
	return out
}

// Err is the failure the history records (nil on success or while running).
func (h *History) Err(promptID string) error {
	for _, raw := range h.Status.Messages {
		var m []json.RawMessage
		if json.Unmarshal(raw, &m) != nil || len(m) != 2 {
			continue
		}
		var typ string
		_ = json.Unmarshal(m[0], &typ)
		switch typ {
		case "execution_error":
			return execErr(promptID, m[1])
		case "execution_interrupted":
			return ErrInterrupted
		}
	}
	if h.Status.StatusStr == "error" {
		return &ExecutionError{PromptID: promptID, Message: "ComfyUI reports the prompt failed"}
	}
	return nil
}

func execErr(promptID string, data json.RawMessage) error {
	var d struct {
		NodeID        string `json:"node_id"`
		NodeType      string `json:"node_type"`
		ExceptionType string `json:"exception_type"`
		Message       string `json:"exception_message"`
	}
	_ = json.Unmarshal(data, &d)
	return &ExecutionError{PromptID: promptID, NodeID: d.NodeID, NodeType: d.NodeType, ExceptionType: d.ExceptionType, Message: d.Message}
}

// History returns promptID's entry; ok is false while it has not finished.
func (c *Client) History(ctx context.Context, promptID string) (*History, bool, error) {
	var m map[string]*History
	if err := c.getJSON(ctx, "/history/"+url.PathEscape(promptID), nil, &m); err != nil {
		return nil, false, err
	}
	h, ok := m[promptID]
	return h, ok && h != nil, nil
}

// View downloads one output.
func (c *Client) View(ctx context.Context, im Image) ([]byte, error) {
	q := url.Values{"filename": {im.Filename}, "subfolder": {im.Subfolder}, "type": {im.Type}}
	b, _, err := c.do(ctx, http.MethodGet, "/view", q, "", nil, c.cfg.MaxImageBytes)
	return b, err
}

// Upload puts an input image on the server (POST /upload/image) and returns the
// name a LoadImage node refers to.
func (c *Client) Upload(ctx context.Context, name string, data []byte) (string, error) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, err := mw.CreateFormFile("image", name)
	if err != nil {
		return "", err
	}
	_, _ = fw.Write(data)
	_ = mw.WriteField("type", "input")
	_ = mw.WriteField("overwrite", "true")
	if err := mw.Close(); err != nil {
		return "", err
	}
	b, _, err := c.do(ctx, http.MethodPost, "/upload/image", nil, mw.FormDataContentType(), &buf, 1<<20)
	if err != nil {
		return "", err
	}
	var r struct{ Name, Subfolder string }
	if err := json.Unmarshal(b, &r); err != nil || r.Name == "" {
		return "", fmt.Errorf("comfyui: POST /upload/image: unexpected answer %.200s", b)
	}
	if r.Subfolder != "" {
		return r.Subfolder + "/" + r.Name, nil
	}
	return r.Name, nil
}

// QueueItem is one row of GET /queue.
type QueueItem struct{ PromptID, ClientID string }

// QueueState is GET /queue: the prompts running and pending.
type QueueState struct{ Running, Pending []QueueItem }

// Find reports where promptID is: "running", "pending" (with its 1-based
// position) or "" when it is in neither.
func (q QueueState) Find(promptID string) (string, int) {
	for _, it := range q.Running {
		if it.PromptID == promptID {
			return "running", 0
		}
	}
	for i, it := range q.Pending {
		if it.PromptID == promptID {
			return "pending", i + 1
		}
	}
	return "", 0
}

// QueueState reads the queue.
func (c *Client) QueueState(ctx context.Context) (QueueState, error) {
	var r struct {
		Running [][]json.RawMessage `json:"queue_running"`
		Pending [][]json.RawMessage `json:"queue_pending"`
	}
	if err := c.getJSON(ctx, "/queue", nil, &r); err != nil {
		return QueueState{}, err
	}
	items := func(rows [][]json.RawMessage) []QueueItem {
		var out []QueueItem
		for _, row := range rows {
			var it QueueItem
			if len(row) > 1 && json.Unmarshal(row[1], &it.PromptID) == nil {
				if len(row) > 3 {
					var extra struct {
						ClientID string `json:"client_id"`
					}
					_ = json.Unmarshal(row[3], &extra)
					it.ClientID = extra.ClientID
				}
				out = append(out, it)
			}
		}
		return out
	}
	return QueueState{Running: items(r.Running), Pending: items(r.Pending)}, nil
}

// Delete removes pending prompts (POST /queue {delete}).
func (c *Client) Delete(ctx context.Context, ids ...string) error {
	_, _, err := c.postJSON(ctx, "/queue", map[string]any{"delete": ids})
	return err
}

// Interrupt stops the running prompt (POST /interrupt; with promptID only if it
// is the one running).
func (c *Client) Interrupt(ctx context.Context, promptID string) error {
	_, _, err := c.postJSON(ctx, "/interrupt", map[string]any{"prompt_id": promptID})
	return err
}

// SystemStats is GET /system_stats, decoded loosely.
func (c *Client) SystemStats(ctx context.Context) (map[string]any, error) {
	var m map[string]any
	return m, c.getJSON(ctx, "/system_stats", nil, &m)
}

// Progress is one progress report of a running prompt.
type Progress struct {
	PromptID string
	Node     string
	Value    int
	Max      int
}

// Percent is Value/Max as 0..100.
func (p Progress) Percent() int {
	if p.Max <= 0 {
		return 0
	}
	return p.Value * 100 / p.Max
}

// Events is a WebSocket session (/ws?clientId=) delivering the events of the
// prompts queued by this client. Open it before Queue so no event is missed.
type Events struct {
	conn *websocket.Conn
}

// Connect opens the event stream.
func (c *Client) Connect(ctx context.Context) (*Events, error) {
	u := *c.base
	u.Scheme = map[string]string{"http": "ws", "https": "wss"}[u.Scheme]
	u.Path += "/ws"
	u.RawQuery = url.Values{"clientId": {c.clientID}}.Encode()
	h := http.Header{}
	c.grant.SetHeader(h)
	conn, resp, err := websocket.Dial(ctx, u.String(), &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		if resp != nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			if r := fenceproxy.ParseRefusal(resp.StatusCode, b); r != nil {
				return nil, &FencedError{Refusal: *r}
			}
		}
		return nil, fmt.Errorf("comfyui: websocket: %w", err)
	}
	conn.SetReadLimit(16 << 20)
	return &Events{conn: conn}, nil
}

// Close ends the session.
func (e *Events) Close() { _ = e.conn.CloseNow() }

// Wait reads events until promptID finishes: nil on success, *ExecutionError
// on execution_error, ErrInterrupted. progress is called for each progress event.
func (e *Events) Wait(ctx context.Context, promptID string, progress func(Progress)) error {
	for {
		typ, b, err := e.conn.Read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return &StreamError{Err: err}
		}
		if typ != websocket.MessageText {
			continue // binary previews
		}
		var m struct {
			Type string          `json:"type"`
			Data json.RawMessage `json:"data"`
		}
		if json.Unmarshal(b, &m) != nil {
			continue
		}
		var d struct {
			PromptID string  `json:"prompt_id"`
			Node     *string `json:"node"`
			Value    int     `json:"value"`
			Max      int     `json:"max"`
		}
		_ = json.Unmarshal(m.Data, &d)
		if d.PromptID != promptID {
			continue
		}
		switch m.Type {
		case "progress":
			if progress != nil {
				node := ""
				if d.Node != nil {
					node = *d.Node
				}
				progress(Progress{PromptID: promptID, Node: node, Value: d.Value, Max: d.Max})
			}
		case "executing":
			if d.Node == nil {
				return nil
			}
		case "execution_success":
			return nil
		case "execution_error":
			return execErr(promptID, m.Data)
		case "execution_interrupted":
			return ErrInterrupted
		}
	}
}
