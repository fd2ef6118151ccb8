package testinfra

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// Jaeger is the trace receiver the tests and the bench send spans to and read
// traces back from: the one scripts/jaeger.sh starts (scripts/services.sh).
type Jaeger struct {
	// OTLP is its OTLP/HTTP endpoint (tracing.endpoint). Env
	// AETHERIUM_TEST_JAEGER_OTLP; default http://127.0.0.1:4318.
	OTLP string
	// Query is its query API's base URL. Env AETHERIUM_TEST_JAEGER_QUERY;
	// default http://127.0.0.1:16686.
	Query string
}

// JaegerAt is the Jaeger of the environment (it may not be running).
func JaegerAt() Jaeger {
	j := Jaeger{OTLP: "http://127.0.0.1:4318", Query: "http://127.0.0.1:16686"}
	if v := os.Getenv("AETHERIUM_TEST_JAEGER_OTLP"); v != "" {
		j.OTLP = v
	}
	if v := os.Getenv("AETHERIUM_TEST_JAEGER_QUERY"); v != "" {
		j.Query = strings.TrimRight(v, "/")
	}
	return j
}

// Up reports whether the query API answers.
func (j Jaeger) Up(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.Query+"/api/services", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("jaeger %s/api/services: HTTP %d", j.Query, resp.StatusCode)
	}
	return nil
}

// RequireJaeger is the environment's Jaeger, or fails the test under CI=true
// (skips it otherwise) when its query API does not answer. AETHERIUM_JAEGER=off
// skips it even under CI=true: .ci/run's `make test` runs without Jaeger (its
// cold build is minutes of CPU, taken while the drills wait) and runs these
// tests in its traces phase, where `testtimes -check` requires them to pass.
func RequireJaeger(t testing.TB) Jaeger {
	t.Helper()
	if os.Getenv("AETHERIUM_JAEGER") == "off" {
		t.Skip("AETHERIUM_JAEGER=off: no trace receiver in this run (.ci/run runs the Jaeger tests in its traces phase)")
	}
	j := JaegerAt()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := j.Up(ctx); err != nil {
		Unavailable(t, "run scripts/services.sh, which starts scripts/jaeger.sh", "jaeger: %v", err)
	}
	return j
}

// JaegerTrace is one trace as Jaeger's query API answers GET /api/traces/<id>.
type JaegerTrace struct {
	TraceID   string                   `json:"traceID"`
	Spans     []JaegerSpan             `json:"spans"`
	Processes map[string]JaegerProcess `json:"processes"`
}

// JaegerSpan is a span of a JaegerTrace. References hold its parent (CHILD_OF)
// and its links (FOLLOWS_FROM).
type JaegerSpan struct {
	TraceID       string            `json:"traceID"`
	SpanID        string            `json:"spanID"`
	OperationName string            `json:"operationName"`
	References    []JaegerReference `json:"references"`
	StartTime     int64             `json:"startTime"` // µs since the epoch
	Duration      int64             `json:"duration"`  // µs
	Tags          []JaegerTag       `json:"tags"`
	Logs          []struct {
		Fields []JaegerTag `json:"fields"`
	} `json:"logs"`
	ProcessID string `json:"processID"`
}

// JaegerReference is a span's reference to another span.
type JaegerReference struct {
	RefType string `json:"refType"` // CHILD_OF, FOLLOWS_FROM
	TraceID string `json:"traceID"`
	SpanID  string `json:"spanID"`
}

// JaegerTag is a span attribute (or a log field).
type JaegerTag struct {
	Key   string `json:"key"`
	Type  string `json:"type"`
	Value any    `json:"value"`
}

// JaegerProcess is the resource of the spans that name it.
type JaegerProcess struct {
	ServiceName string      `json:"serviceName"`
	Tags        []JaegerTag `json:"tags"`
}

// Tag is the value of the span's tag key as text, and whether it has it.
func (s JaegerSpan) Tag(key string) (string, bool) {
	for _, t := range s.Tags {
		if t.Key == key {
			return fmt.Sprint(t.Value), true
		}
	}
	return "", false
}

// Parent is the span id of the span's parent (its CHILD_OF reference), "" for a root.
func (s JaegerSpan) Parent() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r.SpanID
		}
	}
	return ""
}

// Links are the span ids its FOLLOWS_FROM references (span links) name.
func (s JaegerSpan) Links() []string {
	var out []string
	for _, r := range s.References {
		if r.RefType == "FOLLOWS_FROM" {
			out = append(out, r.SpanID)
		}
	}
	return out
}

// Service is the service.name of the process that sent the span.
func (tr JaegerTrace) Service(s JaegerSpan) string { return tr.Processes[s.ProcessID].ServiceName }

// Trace reads a trace by its hex id from the query API; found is false while
// Jaeger has none of its spans.
func (j Jaeger) Trace(ctx context.Context, traceID string) (tr JaegerTrace, found bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.Query+"/api/traces/"+traceID, nil)
	if err != nil {
		return tr, false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return tr, false, fmt.Errorf("jaeger: get trace %s: %w", traceID, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return tr, false, nil
	}
	if resp.StatusCode != http.StatusOK {
		return tr, false, fmt.Errorf("jaeger: get trace %s: HTTP %d", traceID, resp.StatusCode)
	}
	var body struct {
		Data []JaegerTrace `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return tr, false, fmt.Errorf("jaeger: trace %s: %w", traceID, err)
	}
	if len(body.Data) == 0 {
		return tr, false, nil
	}
	return body.Data[0], true, nil
}
