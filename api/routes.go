package api

import (
	"net/http"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"

	"github.com/aetherium-engine/aetherium/store"
)

// routes is the route table. New registers exactly these routes (with the token
// check of their roles) and GET /api/openapi.json describes exactly these, with
// schemas reflected from the types in returns/body: what is served and what is
// documented cannot part. A new endpoint is one more row here, naming the types
// its handler decodes and encodes (a named struct, not a fiber.Map), e.g.
//
//	get("/api/runs/:id/files", "A run's workspace files", s.listFiles).roles(RoleRead).
//		query("path", "A folder of the workspace.", stringSchema).
//		returns(200, fileList{}).errors(400, 404),
//
// plus a step in TestEveryOperationAnswersAsDocumented. A non-JSON answer is
// returnsText (or returnsStream for server-sent events); a body is body or
// optionalBody. A route that must stay out of the document (a UI, not the API)
// is registered in New under a prefix listed in NotInOpenAPI with its reason.
func (s *Server) routes() []route {
	runParam := func(r route) route { return r.pathParam("id", "The run's id.", uuidSchema) }
	approvalParam := func(r route) route {
		return r.pathParam("id", "The approval's id (apr_…).", map[string]any{"type": "string", "pattern": "^apr_", "maxLength": 64})
	}
	grantParam := func(r route) route {
		return r.pathParam("id", "The grant's id (grt_…).", map[string]any{"type": "string", "pattern": "^grt_", "maxLength": 64})
	}
	return []route{
		get("/healthz", "Liveness", s.healthz).returns(200, healthStatus{}),
		get("/readyz", "Readiness: PostgreSQL and Redis answer a ping", s.readyz).
			returns(200, readiness{}).returns(503, readiness{}),
		get("/metrics", "Prometheus metrics of the API process", s.metricsHandler()).roles(RoleMetrics).
			describe("Absent when the process runs without metrics. Without a token on api.metrics_addr, a listener of its own.").
			returnsText(200, "text/plain", "The Prometheus text exposition format."),
		get(OpenAPIPath, "This OpenAPI 3.1 document", s.serveOpenAPI).
			describe("Readable without a token: it is the same for every deployment and holds no data or configuration.").
			returns(200, map[string]any{}),

		idempotent(post("/api/orchestrator/run", "Submit a run with an inline team", s.submitInline)).roles(RoleSubmit).
			body(inlineRequest{}).returns(202, submitResponse{}).errors(404, 422, 429, 507),
		idempotent(post("/api/orchestrator/run-from-template", "Submit a run of a shipped template", s.submitTemplate)).roles(RoleSubmit).
			body(templateRequest{}).returns(202, submitResponse{}).errors(404, 422, 429, 507),
		get("/api/runs", "List runs, newest first", s.listRuns).roles(RoleRead).
			query("status", "Only runs in this status.", enumOf(statuses)).
			query("limit", "Page size (default 50).", intRange(1, 500)).
			query("cursor", "next_cursor of the previous page.", uuidSchema).
			query("q", "Only runs whose id, prompt, template, project, owner or team name contains this text (ignoring case).", map[string]any{"type": "string", "maxLength": maxRunSearch}).
			query("owner", "Only this principal's runs (another's needs read_all: else 403).", map[string]any{"type": "string", "maxLength": maxRunSearch}).
			query("team", "Only runs of this team (its name, or its template).", map[string]any{"type": "string", "maxLength": maxRunSearch}).
			query("project", "Only runs in this project (its slug).", map[string]any{"type": "string", "maxLength": maxRunSearch}).
			query("kind", "job: submitted runs; mcp: MCP client sessions.", map[string]any{"type": "string", "enum": []string{"job", "mcp"}}).
			returns(200, runList{}).errors(400, 403),
		runParam(get("/api/runs/:id", "A run", s.getRun)).roles(RoleRead, RoleApprove).
			describe("The approver reads the summary of a run that asked for an approval.").
			returns(200, runView{}).errors(400, 404),
		runParam(get("/api/runs/:id/costs", "What a run's model calls cost, by model", s.runCosts)).roles(RoleRead).
			describe("Calls, tokens (cached and cache-write among the input) and money by provider and model, by the fleet's price table.").
			returns(200, costReport{}).errors(400, 404),
		runParam(get("/api/runs/:id/sessions", "A run's agent sessions", s.runSessions)).roles(RoleRead).
			describe("One session per agent per delegation: its status, model calls, stored messages and compactions.").
			returns(200, sessionList{}).errors(400, 404),
		runParam(get("/api/runs/:id/sessions/:session/history", "A session's full stored history", s.sessionHistory)).roles(RoleRead).
			pathParam("session", "The session's id (from the run's sessions).", map[string]any{"type": "string", "maxLength": 200}).
			describe("Every message the session stored, in order, page by page, marked where a compaction summarized it for the model, with the compactions (where they cut, tokens before and after, the summary).").
			query("after", "Only messages after this seq (next_after of the previous page).", map[string]any{"type": "integer", "minimum": -1}).
			query("limit", "Page size (default 200).", intRange(1, 1000)).
			returns(200, sessionHistory{}).errors(400, 404),
		runParam(post("/api/runs/:id/cancel", "Cancel a run", s.cancelRun)).roles(RoleSubmit).
			returns(200, runView{}).errors(400, 404, 409),
		runParam(post("/api/runs/:id/promote", "Promote a staging run's workspace into its project's", s.promoteRun)).roles(RoleSubmit).
			describe("Storage tiers: the project's workspace (Production) becomes a copy of the completed staging run's (Staging), "+
				"written aside and swapped in whole; audited in the project's audit (workspace.promote). The run's owner or an admin "+
				"who may use the project (another's run: the missing-run 404, or 403 when the caller sees it). "+
				"409 for a run that is not a completed staging run, a deleted project, or a project with runs in flight; "+
				"422 when the files exceed the project's quota (the project's workspace unchanged); 501 in a process without the workspaces. "+
				"An API process alone (the split deployment) has a worker make the copy (a run:promote task) while it holds the project: "+
				"503 when no worker took it within replay.wait (withdrawn, nothing changed).").
			returns(200, Promotion{}).errors(400, 403, 404, 409, 422, 501, 503, 507),
		runParam(get("/api/runs/:id/request", "A run's submission, as it can be posted again (clone)", s.getRunRequest)).roles(RoleRead).
			describe("The endpoint and the body that submit the same run again: a template run's template, prompt, variables, "+
				"project and priority (run-from-template), or an inline run's team (as stored: rendered), prompt, variables, project "+
				"and priority (run). Visible to the run's owner and read_all (not to the approver of one of its calls, who reads its summary). 409 for an MCP client's session run, which was not submitted.").
			returns(200, RunRequest{}).errors(400, 404, 409),
		idempotent(runParam(post("/api/runs/:id/retry", "Submit a run's request again as a new run of the caller", s.retryRun))).roles(RoleSubmit).
			describe("The request of GET /api/runs/:id/request, submitted as the caller through the submit's own checks "+
				"(package submit: validation, the priority cap, fairness, api.max_runs_in_flight, budgets): a new run owned by the caller, "+
				"its run.queued event's trigger retry:<id>. "+
				"The caller must see the run (else the missing-run 404). Each POST makes a new run, unless its Idempotency-Key was used before. "+
				"409 for an MCP client's session run.").
			returns(202, submitResponse{}).errors(400, 403, 404, 409, 422, 429, 507),
		runParam(post("/api/runs/:id/replay", "Replay a finished run from its record, and report where the engine now decides differently", s.replayRun)).roles(RoleRead).
			describe("Every session of the run judged again by the engine (the gate's layers, delegations, the reply checks, the per-message cap, "+
				"the circuit breaker, max_steps) with the model's answers and the tools' results served from the record: no tool runs, "+
				"nothing of the run changes (no audit row, event or approval). The report names the first step that differs, both sides shown, "+
				"and every step with its state hashes. Visible to the run's owner and read_all. 409 for a run not finished; "+
				"422 for a record the engine cannot walk (a corrupt history) or one over replay.max_messages. "+
				"An API process without the worker's engine hands the replay to a worker (a run:replay task, its id deterministic per run and "+
				"permissions revision) and waits replay.wait for its report: 503 with Retry-After when the worker has not answered, "+
				"and the same request later collects the report (kept replay.keep).").
			returns(200, ReplayReport{}).errors(400, 404, 409, 422, 501, 503),
		runParam(post("/api/runs/:id/fork", "Fork a finished run at a step: a new run that shares its record up to the step and runs live from it", s.forkRun)).roles(RoleSubmit).
			describe("A new run of the caller (through package submit's checks) whose supervisor's history, delegations and workspace are the record's up to "+
				"step at (the replay report's numbering, a step of the supervisor's session): nothing of the shared steps runs again (no model call, "+
				"no tool, no audit row); the workspace is rebuilt by re-applying the recorded workspace and plan edits. team, model or prompt change the team "+
				"from the fork on. Visible to the run's owner and read_all (else 404). 400 for a step out of range or one a run cannot start at, "+
				"a team that does not validate; 409 for a run not finished or whose shared steps the engine now decides differently; "+
				"422 for a corrupt record or one over replay.max_messages. An API process without the worker's engine hands the fork to a worker "+
				"and waits replay.wait: 503 with Retry-After when the worker has not answered; the same request (caller and body) within "+
				"replay.keep is answered with the fork it started, not a second one.").
			body(ForkRequest{}).returns(202, ForkResponse{}).errors(400, 404, 409, 422, 429, 501, 503),
		runParam(get("/api/runs/:id/events", "A run's events as a server-sent event stream, or (format=json) as a JSON list", s.streamEvents)).roles(RoleRead).
			describe("Replays from Last-Event-ID (or ?last_event_id), then streams live until the terminal event. "+
				"Each event has id (the event id), event (its type) and data (a StreamEvent, named by x-event-data); "+
				"an idle stream sends a keepalive comment. 204 when a resumed stream has nothing past the terminal event. "+
				"With format=json, the stored events as a JSON page instead (an EventPage, oldest first, after= and limit=; never 204 or 429): "+
				"read pages with after=next_after until one is shorter than limit; terminal says the run's terminal event is among those read.").
			header("Last-Event-ID", "Resume after this event id.", map[string]any{"type": "string"}).
			query("last_event_id", "Last-Event-ID for clients that cannot set headers.", map[string]any{"type": "string"}).
			query("format", "json: the stored events as a JSON page (EventPage) instead of the stream.", map[string]any{"type": "string", "enum": []string{"json"}}).
			query("after", "format=json: only events after this event id (next_after of the previous page).", map[string]any{"type": "integer", "minimum": 0}).
			query("limit", "format=json: page size (default 500).", intRange(1, MaxEventPage)).
			returnsStream(200, "text/event-stream", "The event stream; with format=json, a JSON page of the stored events.", streamEvent{}).
			returns(200, eventPage{}).
			returns(204, nil).errors(400, 404, 429),
		runParam(get("/api/runs/:id/delegations", "A run's delegations", s.getDelegations)).roles(RoleRead).
			returns(200, delegationList{}).errors(400, 404),
		runParam(get("/api/runs/:id/audit", "A run's tool-call audit", s.runAudit)).roles(RoleRead).
			returns(200, auditList{}).errors(400, 404),
		runParam(get("/api/runs/:id/egress", "Connections the run's sandbox made through the egress proxy", s.runEgress)).roles(RoleRead).
			returns(200, egressList{}).errors(400, 404),
		runParam(get("/api/runs/:id/plan", "A run's active plan ({\"plan\": null} before its supervisor made one)", s.getPlan)).roles(RoleRead).
			returns(200, PlanResponse{}).errors(400, 404),
		runParam(get("/api/runs/:id/files", "A run's workspace files", s.listFiles)).roles(RoleRead).
			describe("Regular files only, .aetherium/ left out, at most MaxListedFiles (truncated says so). "+
				"501 when this API process does not see the workspaces.").
			returns(200, FileList{}).errors(400, 404, 501),
		runParam(get("/api/runs/:id/file", "One workspace file, as a download", s.downloadFile)).roles(RoleRead).
			describe("Served as an attachment (application/octet-stream, nosniff, a sandboxing CSP): an agent wrote it, "+
				"so it is never rendered on the API's origin. A path that climbs out, is absolute, reaches .aetherium/ "+
				"or leaves through a symlink is a 400.").
			query("path", "The file, relative to the workspace root (slash-separated).", stringSchema).
			returnsText(200, "application/octet-stream", "The file's bytes.").errors(400, 404, 501),

		get("/api/audit", "The tool-call audit across the caller's runs, newest first", s.listAudit).roles(RoleRead).
			query("run_id", "Only this run's rows.", uuidSchema).
			query("agent", "Only this agent's rows.", stringSchema).
			query("tool", "Only this tool's rows.", stringSchema).
			query("decision", "Only rows with this decision.", enumOf(auditDecisions)).
			query("tier", "Only rows of this tier.", enumOf(auditTiers)).
			query("limit", "Page size (default 200).", intRange(1, 1000)).
			query("before", "next_before of the previous page.", map[string]any{"type": "integer", "minimum": 1}).
			returns(200, AuditPage{}).errors(400),

		get("/api/approvals", "List approvals and questions, oldest first (decided=true: the history, latest decision first)", s.listApprovals).roles(RoleRead, RoleApprove).
			query("status", "Only approvals in this status.", enumOf(approvalStatuses)).
			query("kind", "Only held calls (call) or ask_user questions (question).", enumOf(approvalKinds)).
			query("decided", "Only decided approvals, latest decision first.", map[string]any{"type": "boolean"}).
			query("run_id", "Only the approvals of this run.", stringSchema).
			query("limit", "At most this many (default 100).", intRange(1, 1000)).
			returns(200, approvalList{}).errors(400),
		approvalParam(get("/api/approvals/:id", "An approval as the approver decides on it", s.getApproval)).roles(RoleRead, RoleApprove).
			returns(200, store.Approval{}).errors(400, 404),
		approvalParam(post("/api/approvals/:id/approve", "Approve a held call, optionally with a scoped grant", s.decide(store.VerbApprove))).roles(RoleApprove).
			optionalBody(decisionRequest{}).returns(200, store.Approval{}).errors(400, 403, 404, 409, 501),
		approvalParam(post("/api/approvals/:id/deny", "Reject a held call; the reason reaches the agent as a human's feedback", s.decide(store.VerbDeny))).roles(RoleApprove).
			optionalBody(decisionRequest{}).returns(200, store.Approval{}).errors(400, 403, 404, 409, 501),
		approvalParam(post("/api/approvals/:id/edit", "Approve a held call with edited arguments, which pass the whole gate again", s.decide(store.VerbEdit))).roles(RoleApprove).
			body(editRequest{}).returns(200, store.Approval{}).errors(400, 403, 404, 409, 501),
		approvalParam(post("/api/approvals/:id/answer", "Answer an agent's ask_user question (its run's owner or an approver)", s.decide(store.VerbAnswer))).roles(RoleSubmit, RoleApprove).
			body(answerRequest{}).returns(200, store.Approval{}).errors(400, 403, 404, 409, 501),
		get("/api/grants", "List scoped grants, newest first", s.listGrants).roles(RoleRead, RoleApprove).
			query("status", "Only grants in this status.", enumOf(grantStatuses)).
			query("limit", "At most this many (default 100).", intRange(1, 1000)).
			returns(200, grantList{}).errors(400, 501),
		grantParam(post("/api/grants/:id/revoke", "Revoke a grant: the next matching call asks again", s.changeGrant(false))).roles(RoleSubmit, RoleApprove).
			returns(200, store.Grant{}).errors(400, 403, 404, 409, 501),
		grantParam(post("/api/grants/:id/confirm", "Rebind a grant suspended by a change of the permissions to the permissions in force", s.changeGrant(true))).roles(RoleApprove).
			returns(200, store.Grant{}).errors(400, 403, 404, 409, 501),

		get("/api/tools/mcp-schemas", "The tool catalog, filtered as the router filters it for an agent", s.schemas).roles(RoleRead).
			query("servers", "Comma-separated server groups.", stringSchema).
			query("tools", "Comma-separated tool names.", stringSchema).
			query("role", "The agent's role (worker when servers or tools are given).", map[string]any{"type": "string", "enum": []string{"supervisor", "worker"}}).
			returns(200, toolCatalog{}).errors(400),
		get("/api/templates", "Names of the shipped templates", s.listTemplates).roles(RoleRead).
			returns(200, templateList{}),
		get("/api/templates/:name", "What a form needs to submit a template: its variables", s.getTemplate).roles(RoleRead).
			pathParam("name", "The template's name.", stringSchema).
			returns(200, TemplateInfo{}).errors(404, 422),

		post("/api/projects", "Create a project", s.createProject).roles(RoleSubmit).
			body(projectRequest{}).returns(201, store.Project{}).errors(409),
		get("/api/projects", "List projects", s.listProjects).roles(RoleRead).returns(200, projectList{}),
		get("/api/projects/:slug", "A project", s.getProject).roles(RoleRead).
			returns(200, store.Project{}).errors(400, 404),
		get("/api/projects/:slug/costs", "What a project's runs' model calls cost, by model", s.projectCosts).roles(RoleRead).
			query("since", "Only calls from this day on (YYYY-MM-DD, UTC).", map[string]any{"type": "string", "format": "date"}).
			returns(200, costReport{}).errors(400, 404),
		del("/api/projects/:slug", "Delete a project with its workspace, knowledge and memory", s.deleteProject).roles(RoleSubmit).
			query("confirm", "The project's slug again (required).", stringSchema).
			returns(204, nil).errors(400, 404, 409),
		get("/api/projects/:slug/memory", "A project's memory", s.listMemory).roles(RoleRead).
			returns(200, memoryList{}).errors(400, 404),
		post("/api/projects/:slug/memory", "Add a long-term memory entry", s.addMemory).roles(RoleSubmit).
			body(memoryRequest{}).returns(201, store.MemoryEntry{}).errors(404),
		del("/api/projects/:slug/memory/:id", "Delete a memory entry", s.deleteMemory).roles(RoleSubmit).
			pathParam("id", "The entry's id.", map[string]any{"type": "string", "pattern": "^[0-9]+$"}).
			returns(204, nil).errors(400, 404),

		get("/api/fleet", "The fleet at a glance: workers, queues, runs in flight, leases, limits, asynqmon", s.getFleet).roles(RoleRead).
			describe("workers: the asynq worker servers registered in Redis (Inspector.Servers), with their concurrency, queues and active tasks; "+
				"queues: the fleet's queues (Inspector.GetQueueInfo; processed and failed are today's, UTC); "+
				"runs: the runs queued, running and waiting (MCP client sessions apart) — every principal's for read_all, "+
				"else only the caller's own, as GET /api/runs scopes them; "+
				"leases: each GPU service's capacity, live grants and waiters; "+
				"limits: the configured operative limits (name, value, why); "+
				"monitoring: where asynqmon is served and whether it is read-only. 503 when Redis is unreachable.").
			returns(200, FleetView{}).errors(503),
		post(MonitoringSessionPath, "Open asynqmon in this browser: a short-lived cookie for /monitoring", s.createMonitoringSession).roles(RoleAdmin).
			describe("204 with Set-Cookie: "+MonitoringCookie+"=<ticket>; Path="+MonitoringPath+"; HttpOnly; SameSite=Strict; "+
				"Max-Age=api.monitoring_session_ttl (default 10 minutes; Secure over TLS). The ticket is signed (HMAC-SHA256) and names "+
				"the token's principal; /monitoring re-checks on every request that the principal still holds admin with the same token. "+
				"Only /monitoring reads the cookie: every /api route takes the bearer token alone.").
			returns(204, nil),
		del(MonitoringSessionPath, "Drop the asynqmon cookie from this browser", s.deleteMonitoringSession).roles(RoleAdmin).
			describe("204 with a Set-Cookie that expires it. A copy of the cookie stays valid until its expiry; revoking the token ends it.").
			returns(204, nil),
		post("/api/schedules", "Create a schedule: a run that starts itself on a cron expression", s.createSchedule).roles(RoleSubmit).
			describe("The cron expression, time zone, jitter, policies, template or team, variables and project are checked now; "+
				"the owner's roles (priority cap, project access) are read again at every tick. docs/schedules.md has the semantics.").
			header(IdempotencyKeyHeader, "At most once: the same key and body within a day answer with the key's first schedule "+
				"(201, "+IdempotentReplayedHeader+": true); the key with another body is a 422. Keys are per principal, at most 255 printable characters.",
				map[string]any{"type": "string", "maxLength": 255}).
			body(scheduleRequest{}).returns(201, scheduleView{}).errors(404, 409, 422),
		get("/api/schedules", "List schedules (the caller's; every owner's with read_all)", s.listSchedules).roles(RoleRead).
			returns(200, scheduleList{}),
		scheduleParam(get("/api/schedules/:id", "A schedule with its next fire times", s.getSchedule)).roles(RoleRead).
			query("next", "How many next fire times to show (default 5).", intRange(0, MaxNextFires)).
			returns(200, scheduleView{}).errors(400, 404),
		scheduleParam(patchRoute("/api/schedules/:id", "Change a schedule (the fields given)", s.patchSchedule)).roles(RoleSubmit).
			describe("A change of cron or time zone starts from the next tick after now.").
			body(schedulePatch{}).returns(200, scheduleView{}).errors(403, 404, 409),
		scheduleParam(del("/api/schedules/:id", "Delete a schedule and its fires (its runs are kept)", s.deleteSchedule)).roles(RoleSubmit).
			returns(204, nil).errors(400, 403, 404),
		scheduleParam(post("/api/schedules/:id/pause", "Pause a schedule: no tick fires until it is resumed", s.setPaused(true))).roles(RoleSubmit).
			returns(200, scheduleView{}).errors(400, 403, 404),
		scheduleParam(post("/api/schedules/:id/resume", "Resume a schedule from its next tick after now (ticks passed while paused are not caught up)", s.setPaused(false))).roles(RoleSubmit).
			returns(200, scheduleView{}).errors(400, 403, 404),
		scheduleParam(get("/api/schedules/:id/fires", "A schedule's ticks as the schedulers decided them, latest first", s.listFires)).roles(RoleRead).
			describe("Each tick claimed once (UNIQUE schedule and tick): submitted with its run, deferred, skipped, missed or failed with a reason.").
			query("limit", "Page size (default 100).", intRange(1, 1000)).
			query("before", "next_before of the previous page.", map[string]any{"type": "string", "format": "date-time"}).
			returns(200, fireList{}).errors(400, 404),

		get("/api/leases", "GPU services with their lease holders and waiters", LeasesHandlerScoped(s.d.Leases, s.visibleHolders)).roles(RoleRead).
			describe("Holders, waiters and events of runs the caller cannot see show \"(hidden)\".").
			query("events", "Add this many latest lease events (default 0).", intRange(0, 1000)).
			returns(200, leaseSnapshot{}).errors(400, 503),

		// Inbound webhooks (hooks.go, docs/hooks.md): the delivery endpoint outside
		// /api, without a token (the signature authenticates it), and the hooks'
		// management, owner-scoped like projects.
		hookParam(post("/hooks/:id", "Deliver an event to an inbound webhook: a verified delivery starts a run", s.deliverHook)).
			describe("No bearer token: the delivery is signed with the hook's secret under its scheme (github: X-Hub-Signature-256; "+
				"stripe: Stripe-Signature; hmac: X-Aetherium-Signature with X-Aetherium-Timestamp and X-Aetherium-Delivery). "+
				"Any content type; a JSON body, or a form with a payload field. 202: the run it started; "+
				"200: a replay of an accepted delivery, answered with the first delivery's run (nothing started). "+
				"Every refusal is recorded with its reason (GET /api/hooks/{id}/deliveries).").
			with(hookSignatureHeaders).optionalBody(map[string]any{}).
			returns(202, hookDeliveryResponse{}).returns(200, hookDeliveryResponse{}).errors(400, 401, 403, 404, 409, 413, 422, 429, 507),
		post("/api/hooks", "Create an inbound webhook (its secret is answered this once)", s.createHook).roles(RoleSubmit).
			body(hookRequest{}).returns(201, hookWithSecret{}).errors(400, 403, 404, 422),
		get("/api/hooks", "List inbound webhooks, newest first", s.listHooks).roles(RoleRead, RoleSubmit).
			returns(200, hookList{}),
		hookParam(get("/api/hooks/:id", "An inbound webhook (never its secret)", s.getHook)).roles(RoleRead, RoleSubmit).
			returns(200, hookView{}).errors(404),
		hookParam(del("/api/hooks/:id", "Delete an inbound webhook and its deliveries", s.deleteHook)).roles(RoleSubmit).
			returns(204, nil).errors(403, 404),
		hookParam(post("/api/hooks/:id/rotate", "Replace a hook's secret (answered this once; the old one stops verifying at once)", s.rotateHook)).roles(RoleSubmit).
			optionalBody(rotateRequest{}).returns(200, hookWithSecret{}).errors(400, 403, 404),
		hookParam(get("/api/hooks/:id/deliveries", "A hook's deliveries, newest first, accepted and refused", s.listHookDeliveries)).roles(RoleRead, RoleSubmit).
			query("limit", "Page size (default 100).", intRange(1, 1000)).
			query("before", "next_before of the previous page.", map[string]any{"type": "integer", "minimum": 1}).
			returns(200, hookDeliveryList{}).errors(400, 404),
	}
}

// idempotent documents a submission's Idempotency-Key (package submit).
func idempotent(r route) route {
	return r.header(IdempotencyKeyHeader, "At most once: the same key and request within a day answer with the key's first run "+
		"(202, "+IdempotentReplayedHeader+": true); the key with another request is a 422. Keys are per principal, at most 255 printable characters.",
		map[string]any{"type": "string", "maxLength": 255})
}

// metricsHandler is nil without metrics: the route table then skips /metrics.
func (s *Server) metricsHandler() fiber.Handler {
	if s.d.Metrics == nil {
		return nil
	}
	return adaptor.HTTPHandler(s.d.Metrics.Handler())
}

func (s *Server) healthz(c *fiber.Ctx) error { return c.JSON(healthStatus{Status: "ok"}) }

// register adds the table's routes to the app, each behind the token check of its roles.
func (s *Server) register(app *fiber.App) {
	for _, r := range s.routes() {
		if r.handler == nil {
			continue
		}
		handlers := []fiber.Handler{r.handler}
		if r.anyRole != nil {
			handlers = append([]fiber.Handler{s.auth(r.anyRole...)}, handlers...)
		}
		if r.method == http.MethodGet {
			app.Get(r.path, handlers...) // with its HEAD, as Fiber does
			continue
		}
		app.Add(r.method, r.path, handlers...)
	}
}
