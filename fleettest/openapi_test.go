package fleettest_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/fleettest"
)

const runPath = "/api/runs/7d444840-9dc0-11d1-b245-5ffdce74fad2"

const goodRun = `{"id":"7d444840-9dc0-11d1-b245-5ffdce74fad2","status":"queued","prompt":"x","team":"t","result":"","error":"",
	"tokens_used":0,"token_budget":0,"cost_usd":"0.000000","created_at":"2026-01-01T00:00:00.000Z","updated_at":"2026-01-01T00:00:00.000Z","owner":"local","priority":3,"kind":"job","workspace_tier":"temp"}`

const goodFleet = `{"workers":[{"id":"w1","host":"h","pid":123,"concurrency":10,"queues":{"supervisor":6},"status":"active","started":"2026-01-01T00:00:00Z","active":2}],
	"queues":[{"name":"supervisor","size":1,"pending":1,"active":0,"scheduled":0,"retry":0,"archived":0,"completed":0,"processed":4,"failed":1,"paused":false,"latency_ms":12}],
	"runs":{"queued":1,"running":2,"waiting":0,"mcp_sessions":1},
	"leases":[{"service":"comfyui","capacity":1,"held":1,"waiting":0}],
	"limits":[{"name":"worker.concurrency","value":"10","why":"tasks one worker process runs at once"}],
	"monitoring":{"path":"/monitoring/","available":true,"read_only":true,"session":"/api/monitoring/session"}}`

const goodTemplateRequest = `{"endpoint":"/api/orchestrator/run-from-template","body":{"template":"demo","prompt":"x","project":"","variables":{"topic":"t"},"priority":2}}`

const goodInlineRequest = `{"endpoint":"/api/orchestrator/run","body":{"team":{"name":"t","supervisor":{"name":"boss"}},"prompt":"x","project":"p","variables":{}}}`

// The checks must catch what drifts: a field the document lacks, a status or
// content type it does not list, a route it does not have, a bad event.
// goodSchedule and goodFires are answers of the schedules' routes.
const (
	goodSchedule = `{"id":"sch_a1","owner":"alice","name":"nightly","cron":"0 3 * * *","time_zone":"Europe/Paris","template":"demo",` +
		`"prompt":"x","variables":{"topic":"t"},"jitter":"1m0s","overlap":"queue_one","catch_up":"all","catch_up_limit":3,"paused":false,` +
		`"next_fires":[{"tick":"2026-12-07T02:00:00Z","fire_at":"2026-12-07T02:00:41Z"}],"last_tick":"2026-12-06T02:00:00Z",` +
		`"last_status":"submitted","last_run_id":"7d444840-9dc0-11d1-b245-5ffdce74fad3","missed":2,` +
		`"created_at":"2026-12-01T10:00:00Z","updated_at":"2026-12-01T10:00:00Z"}`
	goodFires = `{"fires":[{"tick":"2026-12-06T02:00:00Z","fire_at":"2026-12-06T02:00:41Z","status":"submitted",` +
		`"run_id":"7d444840-9dc0-11d1-b245-5ffdce74fad3","attempts":1,"claimed_by":"host:12","claimed_at":"2026-12-06T02:00:41Z"},` +
		`{"tick":"2026-12-05T02:00:00Z","fire_at":"2026-12-05T02:00:07Z","status":"skipped","reason":"overlap","detail":"run x is in flight",` +
		`"attempts":1,"claimed_by":"host:12","claimed_at":"2026-12-05T02:00:07Z"}],"next_before":"2026-12-05T02:00:00Z"}`
)

func TestValidateResponseCatchesMismatches(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, method, path string
		status             int
		ct, body           string
		wantErr            string // "" passes
	}{
		{"a run", "GET", runPath, 200, "application/json", goodRun, ""},
		{"a field the document lacks", "GET", runPath, 200, "application/json", strings.Replace(goodRun, `"owner"`, `"colour":1,"owner"`, 1), "colour"},
		{"a required field missing", "GET", runPath, 200, "application/json", strings.Replace(goodRun, `"prompt":"x",`, "", 1), "prompt"},
		{"a status outside the enum", "GET", runPath, 200, "application/json", strings.Replace(goodRun, `"queued"`, `"sleeping"`, 1), "status"},
		{"an undocumented success status", "GET", runPath, 201, "application/json", goodRun, "does not list"},
		{"an error in the error shape", "GET", runPath, 404, "application/json", `{"error":"run x not found","field":"id"}`, ""},
		{"an undocumented error status falls to default", "GET", runPath, 418, "application/json", `{"error":"teapot"}`, ""},
		{"an error in another shape", "GET", runPath, 404, "application/json", `{"message":"nope"}`, "message"},
		{"another content type", "GET", runPath, 200, "text/html", "<p>", "content type"},
		{"a body where none is documented", "DELETE", "/api/projects/p?confirm=p", 204, "", "x", "no content"},
		{"no body where none is documented", "DELETE", "/api/projects/p?confirm=p", 204, "", "", ""},
		{"a route the document lacks", "GET", "/api/ghosts", 200, "application/json", `{}`, "not in the document"},
		{"the 404 of an unknown route", "GET", "/api/ghosts", 404, "application/json", `{"error":"no route"}`, ""},
		{"asynqmon is left out", "GET", "/monitoring/api/queues", 200, "application/json", `{"whatever":1}`, ""},
		{"HEAD of a documented GET", "HEAD", runPath, 200, "application/json", "", ""},
		{"HEAD of no route", "HEAD", "/api/ghosts", 200, "application/json", "", "not in the document"},
		{"metrics as text", "GET", "/metrics", 200, "text/plain; version=0.0.4; charset=utf-8", "# HELP x\n", ""},
		{"the fleet", "GET", "/api/fleet", 200, "application/json", goodFleet, ""},
		{"the fleet, a worker without its pid", "GET", "/api/fleet", 200, "application/json", strings.Replace(goodFleet, `"pid":123,`, "", 1), "pid"},
		{"the fleet, a latency that is not a number", "GET", "/api/fleet", 200, "application/json", strings.Replace(goodFleet, `"latency_ms":12`, `"latency_ms":"12ms"`, 1), "latency_ms"},
		{"the fleet without Redis", "GET", "/api/fleet", 503, "application/json", `{"error":"reading the worker servers: Redis is unreachable"}`, ""},
		{"a template run's request", "GET", runPath + "/request", 200, "application/json", goodTemplateRequest, ""},
		{"an inline run's request", "GET", runPath + "/request", 200, "application/json", goodInlineRequest, ""},
		{"a request to another endpoint", "GET", runPath + "/request", 200, "application/json", strings.Replace(goodTemplateRequest, "run-from-template", "runs", 1), "endpoint"},
		{"a request body field no submit takes", "GET", runPath + "/request", 200, "application/json", strings.Replace(goodTemplateRequest, `"prompt"`, `"colour":1,"prompt"`, 1), "colour"},
		{"an MCP session has no request", "GET", runPath + "/request", 409, "application/json", `{"error":"run x is an MCP client's session","field":"id"}`, ""},
		{"a retry", "POST", runPath + "/retry", 202, "application/json", `{"run_id":"7d444840-9dc0-11d1-b245-5ffdce74fad3","status":"queued","priority":3}`, ""},
		{"a monitoring session", "POST", "/api/monitoring/session", 204, "", "", ""},
		{"a monitoring session with a body", "POST", "/api/monitoring/session", 204, "", "{}", "no content"},
		{"the end of a monitoring session", "DELETE", "/api/monitoring/session", 204, "", "", ""},
		{"a schedule", "GET", "/api/schedules/sch_a1", 200, "application/json", goodSchedule, ""},
		{"a schedule created", "POST", "/api/schedules", 201, "application/json", goodSchedule, ""},
		{"a schedule, an overlap outside the enum", "GET", "/api/schedules/sch_a1", 200, "application/json", strings.Replace(goodSchedule, `"queue_one"`, `"sometimes"`, 1), "overlap"},
		{"a schedule without its next fires", "GET", "/api/schedules/sch_a1", 200, "application/json", strings.Replace(goodSchedule, `"next_fires":[{"tick":"2026-12-07T02:00:00Z","fire_at":"2026-12-07T02:00:41Z"}],`, "", 1), "next_fires"},
		{"a schedule's fires", "GET", "/api/schedules/sch_a1/fires", 200, "application/json", goodFires, ""},
		{"a fire status outside the enum", "GET", "/api/schedules/sch_a1/fires", 200, "application/json", strings.Replace(goodFires, `"skipped"`, `"maybe"`, 1), "status"},
		{"a schedule deleted", "DELETE", "/api/schedules/sch_a1", 204, "", "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req := httptest.NewRequest(tc.method, "http://127.0.0.1:1"+tc.path, nil)
			h := http.Header{}
			if tc.ct != "" {
				h.Set("Content-Type", tc.ct)
			}
			err := fleettest.ValidateResponse(req, tc.status, h, []byte(tc.body))
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

// recorder stands in for a test: it collects what the checking client reports.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Errorf(format string, a ...any) {
	r.errs = append(r.errs, format)
	r.TB.Logf(format, a...)
}

func TestClientChecksEventsAsTheyAreRead(t *testing.T) {
	t.Parallel()
	event := func(id, typ, data string) string { return "id: " + id + "\nevent: " + typ + "\ndata: " + data + "\n\n" }
	good := `{"id":7,"run_id":"7d444840-9dc0-11d1-b245-5ffdce74fad2","type":"run.queued","agent":"","data":{"team":"t","template":"","priority":3},"time":"2026-01-01T00:00:00Z"}`
	call := `{"id":9,"run_id":"7d444840-9dc0-11d1-b245-5ffdce74fad2","type":"tool.call","agent":"w","data":{"tool":"write_file","call_id":"c1",` +
		`"decision":"allowed","layer":"","error":"","result":"ok","duration_ms":3},"time":"2026-01-01T00:00:00Z"}`
	cases := []struct {
		name, stream string
		bad          bool
	}{
		{"a good event and a keepalive", event("7", "run.queued", good) + ": keepalive\n\n", false},
		{"data the document lacks", event("7", "run.queued", strings.Replace(good, `"agent"`, `"colour":1,"agent"`, 1)), true},
		{"an id that is not the data's", event("8", "run.queued", good), true},
		{"an event name that is not the data's type", event("7", "run.started", good), true},
		{"data that is not JSON", event("7", "run.queued", "{"), true},
		// The data is a union on type: each type's payload has its own schema.
		{"a tool call", event("9", "tool.call", call), false},
		{"a payload the type does not declare", event("7", "run.queued", strings.Replace(good, `"team":"t"`, `"team":"t","tool":"x"`, 1)), true},
		{"a payload missing a field of its type", event("7", "run.queued", strings.Replace(good, `,"priority":3`, "", 1)), true},
		{"another type's payload", event("9", "progress", strings.Replace(call, `"type":"tool.call"`, `"type":"progress"`, 1)), true},
		{"an undeclared type", event("7", "run.queueing", strings.ReplaceAll(good, "run.queued", "run.queueing")), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = io.WriteString(w, tc.stream)
			}))
			t.Cleanup(srv.Close)
			rec := &recorder{TB: t}
			resp, err := fleettest.Client(rec, nil).Get(srv.URL + runPath + "/events")
			require.NoError(t, err)
			_, err = io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			require.Equal(t, tc.bad, len(rec.errs) > 0, "%v", rec.errs)
		})
	}
}

// A request the API accepted must be one the document accepts: else the
// document is stricter than the handler, or lacks a parameter.
func TestValidateAcceptedRequestCatchesMismatches(t *testing.T) {
	t.Parallel()
	d := fleettest.OpenAPI(t)
	cases := []struct {
		name, method, path, body string
		wantErr                  string
	}{
		{"a listing", "GET", "/api/runs?status=queued&limit=5", "", ""},
		{"a query parameter the document lacks", "GET", "/api/runs?sort=asc", "", `"sort"`},
		{"a value outside the documented range", "GET", "/api/runs?limit=900", "", "limit"},
		{"a submit", "POST", "/api/orchestrator/run-from-template", `{"template":"demo","prompt":"x","variables":{"topic":"t"}}`, ""},
		{"a body field the document lacks", "POST", "/api/orchestrator/run-from-template", `{"template":"demo","prompt":"x","colour":1}`, "colour"},
		{"an inline team the document refuses", "POST", "/api/orchestrator/run", `{"prompt":"x","team":{"name":"t","colour":1}}`, "colour"},
		{"a decision without a body", "POST", "/api/approvals/apr_1/approve", "", ""},
		// Go clients send null for a map they never filled.
		{"null variables", "POST", "/api/orchestrator/run-from-template", `{"template":"demo","prompt":"x","variables":null}`, ""},
		{"null args of a script call", "POST", "/api/orchestrator/run", `{"prompt":"x","team":{"name":"t","script":{"agents":{"w":[{"calls":[{"tool":"todo","args":null}]}]}}}}`, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req := httptest.NewRequest(tc.method, "http://127.0.0.1:1"+tc.path, strings.NewReader(tc.body))
			if tc.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			err := d.ValidateAcceptedRequest(req, []byte(tc.body))
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}
