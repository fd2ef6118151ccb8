// Package research is the ResearchTools server class: outbound HTTP. Every tool here
// is Outbound, so the gate checks its destination and scans its arguments first, and
// every request goes through the egress client, which re-checks the address dialed
// and every redirect.
package research

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/tools"
)

// RequestArgs are http_request's arguments.
type RequestArgs struct {
	Method         string            `json:"method" jsonschema:"enum=GET,enum=POST,enum=PUT,enum=DELETE,enum=PATCH,enum=HEAD"`
	URL            string            `json:"url" jsonschema:"description=http(s) URL; the host must be in the team's allowed_domains"`
	Headers        map[string]string `json:"headers,omitempty"`
	Body           string            `json:"body,omitempty"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty" jsonschema:"minimum=1,maximum=60,description=Default 30"`
}

// HealthArgs are http_health_check's arguments.
type HealthArgs struct {
	URL            string `json:"url"`
	TimeoutSeconds int    `json:"timeout_seconds,omitempty" jsonschema:"minimum=1,maximum=60,description=Default 10"`
}

var methods = map[string]bool{"GET": true, "POST": true, "PUT": true, "DELETE": true, "PATCH": true, "HEAD": true}

// Register adds the research tools this build ships. run parses downloads in the
// sandbox (download_pdf) and, when it also starts helper containers (BrowserHost,
// as sandbox.Docker does), runs capture_reference's browser; without it those
// tools are registered but refuse to run.
func Register(reg *tools.Registry, eg *egress.Egress, cfg Config, run Runner) *Browser {
	cfg = cfg.WithDefaults()
	timeout := func(sec int, def time.Duration) time.Duration {
		if sec <= 0 {
			return def
		}
		return min(time.Duration(sec)*time.Second, cfg.MaxTimeout)
	}
	tools.Register(reg, "http_request", "Issue an HTTP request (GET, POST, PUT, DELETE, PATCH, HEAD) to an allowed domain; returns status, headers and a capped body.",
		func(ctx context.Context, call tools.Call, a RequestArgs) (tools.Result, error) {
			if eg == nil {
				return tools.Result{}, errors.New("http_request: no egress client configured")
			}
			m := strings.ToUpper(a.Method)
			if !methods[m] {
				return tools.Result{}, fmt.Errorf("http_request: method %q is not one of GET, POST, PUT, DELETE, PATCH, HEAD", a.Method)
			}
			s := call.Session
			ctx, cancel := context.WithTimeout(ctx, timeout(a.TimeoutSeconds, 30*time.Second))
			defer cancel()
			var body io.Reader
			if a.Body != "" {
				body = strings.NewReader(a.Body)
			}
			req, err := http.NewRequestWithContext(ctx, m, a.URL, body)
			if err != nil {
				return tools.Result{}, fmt.Errorf("http_request: %w", err)
			}
			for k, v := range a.Headers {
				req.Header.Set(k, v)
			}
			resp, err := eg.ClientFor(s.AllowedDomains, s.EgressDenyPrivate).Do(req)
			if err != nil {
				return tools.Result{}, fmt.Errorf("http_request: %w", err)
			}
			defer resp.Body.Close()
			data, err := io.ReadAll(io.LimitReader(resp.Body, cfg.MaxBodyBytes+1))
			if err != nil {
				return tools.Result{}, fmt.Errorf("http_request: reading body: %w", err)
			}
			truncated := int64(len(data)) > cfg.MaxBodyBytes
			if truncated {
				data = data[:cfg.MaxBodyBytes]
			}
			hdrs := map[string]string{}
			keys := make([]string, 0, len(resp.Header))
			for k := range resp.Header {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				hdrs[k] = strings.Join(resp.Header.Values(k), ", ")
			}
			return tools.JSON(map[string]any{
				"status": resp.StatusCode, "headers": hdrs, "body": string(data), "truncated": truncated, "final_url": resp.Request.URL.String(),
			})
		}, tools.Outbound(), tools.Reads(tools.Untrusted), tools.ChangesRemote(RemoteChange), tools.InGroup("research"), tools.WithTier(tools.Elevated))
	tools.Register(reg, "http_health_check", "Ping an endpoint (GET) and return its status and latency.",
		func(ctx context.Context, call tools.Call, a HealthArgs) (tools.Result, error) {
			if eg == nil {
				return tools.Result{}, errors.New("http_health_check: no egress client configured")
			}
			s := call.Session
			ctx, cancel := context.WithTimeout(ctx, timeout(a.TimeoutSeconds, 10*time.Second))
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.URL, nil)
			if err != nil {
				return tools.Result{}, fmt.Errorf("http_health_check: %w", err)
			}
			start := time.Now()
			resp, err := eg.ClientFor(s.AllowedDomains, s.EgressDenyPrivate).Do(req)
			latency := time.Since(start)
			if err != nil {
				return tools.JSON(map[string]any{"healthy": false, "error": err.Error(), "latency_ms": latency.Milliseconds()})
			}
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			return tools.JSON(map[string]any{"healthy": resp.StatusCode < 400, "status": resp.StatusCode, "latency_ms": latency.Milliseconds()})
		}, tools.Outbound(), tools.ReadOnly(), tools.Idempotent(), tools.Reads(tools.Untrusted), tools.InGroup("research"), tools.WithTier(tools.Elevated))
	registerSearch(reg, eg, cfg)
	registerFetch(reg, eg, cfg)
	registerPDF(reg, eg, run, cfg)
	return registerCapture(reg, browserHost(run), cfg)
}

// browserHost is run's helper-container side when it has one (sandbox.Docker):
// capture_reference's browser runs there.
func browserHost(run Runner) BrowserHost {
	if h, ok := run.(BrowserHost); ok && h != nil {
		return h
	}
	return nil
}

// changing are the HTTP methods that change or destroy a remote resource.
var changing = map[string]bool{"DELETE": true, "PUT": true, "PATCH": true}

// methodOverrides are the headers and parameters servers read as the real
// method of a POST (Rails, Laravel, Google APIs, many proxies).
var methodOverrides = []string{"x-http-method-override", "x-http-method", "x-method-override"}

// RemoteChange is http_request's tools.ChangesRemote: the method of a call that
// changes or destroys a remote resource, spelled directly, in a method-override
// header, or as a _method parameter of the URL or a form body ("" otherwise).
func RemoteChange(raw json.RawMessage) string {
	var a RequestArgs
	if json.Unmarshal(raw, &a) != nil {
		return ""
	}
	if m := strings.ToUpper(strings.TrimSpace(a.Method)); changing[m] {
		return m
	}
	for k, v := range a.Headers {
		if slices.Contains(methodOverrides, strings.ToLower(strings.TrimSpace(k))) {
			if m := strings.ToUpper(strings.TrimSpace(v)); changing[m] {
				return strings.ToUpper(a.Method) + " overridden to " + m
			}
		}
	}
	var params []url.Values
	if u, err := url.Parse(a.URL); err == nil {
		params = append(params, u.Query())
	}
	if q, err := url.ParseQuery(a.Body); err == nil {
		params = append(params, q)
	}
	for _, q := range params {
		for k, vs := range q {
			if !strings.EqualFold(k, "_method") {
				continue
			}
			for _, v := range vs {
				if m := strings.ToUpper(strings.TrimSpace(v)); changing[m] {
					return strings.ToUpper(a.Method) + " with _method=" + m
				}
			}
		}
	}
	return ""
}
