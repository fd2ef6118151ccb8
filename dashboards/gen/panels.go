package gen

// The dashboards, panel by panel (ids and grid positions as Grafana reads them).
// Queries are written without the job/instance/queue matchers: board adds them
// to every selector (filter), so a new panel cannot forget them.

import "github.com/grafana/grafana-foundation-sdk/go/dashboard"

// fleetOverview is fleet-overview.json: Runs, asynq task throughput and latency per queue, queue depth and the workers that serve them.
func fleetOverview() *dashboard.DashboardBuilder {
	return board("aetherium-fleet", "Aetherium / Fleet overview", "Runs, asynq task throughput and latency per queue, queue depth and the workers that serve them.", true).
		WithPanel(number(1, "Workers up", "asynq worker servers reporting (aetherium_worker_up summed over every worker process).", pos(0, 0, 6, 5)).
			Thresholds(thresholds(step("red", nil), step("green", ptr(1)))).
			WithTarget(query("A", "sum(aetherium_worker_up)", "workers"))).
		WithPanel(number(2, "Worker slots", "Tasks the fleet can run at once (summed worker concurrency).", pos(6, 0, 6, 5)).
			WithTarget(query("A", "sum(aetherium_worker_concurrency)", "slots"))).
		WithPanel(ts(3, "Runs submitted / s", "Runs accepted by the API.", pos(12, 0, 6, 5), "reqps").
			WithTarget(query("A", "sum(rate(aetherium_runs_submitted_total[$__rate_interval]))", "submitted"))).
		WithPanel(ts(4, "Runs finished / s by status", "Runs reaching a terminal status.", pos(18, 0, 6, 5), "reqps").
			WithTarget(query("A", "sum by (status) (rate(aetherium_runs_finished_total[$__rate_interval]))", "{{status}}"))).
		WithPanel(ts(5, "Task throughput per queue", "asynq tasks handled per second, by queue and outcome (ok, error, busy).", pos(0, 5, 12, 8), "ops").
			WithTarget(query("A", "sum by (queue, outcome) (rate(aetherium_tasks_processed_total[$__rate_interval]))", "{{queue}} {{outcome}}"))).
		WithPanel(ts(6, "Task latency per queue (p50, p95)", "Task handling time by queue.", pos(12, 5, 12, 8), "s").
			WithTarget(query("A", "histogram_quantile(0.5, sum by (le, queue) (rate(aetherium_task_duration_seconds_bucket[$__rate_interval])))", "{{queue}} p50")).
			WithTarget(query("B", "histogram_quantile(0.95, sum by (le, queue) (rate(aetherium_task_duration_seconds_bucket[$__rate_interval])))", "{{queue}} p95"))).
		WithPanel(ts(7, "Queue depth", "Tasks waiting per queue and state (pending, scheduled, retry), read from Redis by the api.", pos(0, 13, 12, 8), "short").
			WithTarget(query("A", `max by (queue, state) (aetherium_queue_tasks{state=~"pending|scheduled|retry"})`, "{{queue}} {{state}}"))).
		WithPanel(ts(8, "Queue latency", "Age of the oldest pending task per queue.", pos(12, 13, 12, 8), "s").
			WithTarget(query("A", "max by (queue) (aetherium_queue_latency_seconds)", "{{queue}}"))).
		WithPanel(ts(9, "Active and archived tasks", "Tasks running now, and tasks that exhausted their retries (archived), per queue.", pos(0, 21, 12, 8), "short").
			WithTarget(query("A", `max by (queue) (aetherium_queue_tasks{state="active"})`, "{{queue}} active")).
			WithTarget(query("B", `max by (queue) (aetherium_queue_tasks{state="archived"})`, "{{queue}} archived"))).
		WithPanel(ts(10, "Processed and failed / s (Redis counters)", "Every worker's tasks per queue as asynq counts them in Redis.", pos(12, 21, 12, 8), "ops").
			WithTarget(query("A", "max by (queue) (rate(aetherium_queue_processed_total[$__rate_interval]))", "{{queue}} processed")).
			WithTarget(query("B", "max by (queue) (rate(aetherium_queue_failed_total[$__rate_interval]))", "{{queue}} failed"))).
		WithPanel(ts(11, "Run duration (p50, p95)", "Wall time from submission to terminal status.", pos(0, 29, 12, 8), "s").
			WithTarget(query("A", "histogram_quantile(0.5, sum by (le) (rate(aetherium_run_duration_seconds_bucket[$__rate_interval])))", "p50")).
			WithTarget(query("B", "histogram_quantile(0.95, sum by (le) (rate(aetherium_run_duration_seconds_bucket[$__rate_interval])))", "p95"))).
		WithPanel(ts(12, "API requests / s", "HTTP requests by route and status.", pos(12, 29, 12, 8), "reqps").
			WithTarget(query("A", "sum by (route, status) (rate(aetherium_http_requests_total[$__rate_interval]))", "{{route}} {{status}}"))).
		WithPanel(ts(13, "API latency p95", "HTTP request latency by route.", pos(0, 37, 24, 8), "s").
			WithTarget(query("A", "histogram_quantile(0.95, sum by (le, route) (rate(aetherium_http_request_duration_seconds_bucket[$__rate_interval])))", "{{route}}")))
}

// toolGate is tool-gate.json: Tool calls through the permission gate: decisions by tier, denials by layer, human approvals and DLP.
func toolGate() *dashboard.DashboardBuilder {
	return board("aetherium-gate", "Aetherium / Tool gate", "Tool calls through the permission gate: decisions by tier, denials by layer, human approvals and DLP.", false).
		WithPanel(ts(1, "Tool calls / s by tier and decision", "Every tool call, by the tool's tier and the gate's decision.", pos(0, 0, 12, 8), "ops").
			WithTarget(query("A", "sum by (tier, decision) (rate(aetherium_tool_calls_total[$__rate_interval]))", "{{tier}} {{decision}}"))).
		WithPanel(bars(2, "Denials by layer", "Calls refused, by the gate layer that refused them (capability, rules, dlp, egress, approval).", pos(12, 0, 12, 8), "short").
			XTickLabelRotation(0).
			WithTarget(query("A", "sum by (layer) (increase(aetherium_gate_denials_total[$__range]))", "{{layer}}"))).
		WithPanel(ts(3, "Busiest tools", "Top 10 tools by calls per second.", pos(0, 8, 12, 8), "ops").
			WithTarget(query("A", "topk(10, sum by (tool) (rate(aetherium_tool_calls_total[$__rate_interval])))", "{{tool}}"))).
		WithPanel(ts(4, "Tool duration p95", "Tool execution time by tool.", pos(12, 8, 12, 8), "s").
			WithTarget(query("A", "histogram_quantile(0.95, sum by (le, tool) (rate(aetherium_tool_duration_seconds_bucket[$__rate_interval])))", "{{tool}}"))).
		WithPanel(number(5, "Approvals pending", "Restricted calls waiting for a human.", pos(0, 16, 6, 5)).
			Thresholds(thresholds(step("green", nil), step("orange", ptr(1)))).
			WithTarget(query("A", "max(aetherium_approvals_pending)", "pending"))).
		WithPanel(number(6, "Approvals decided", "Approvals by outcome (approved, denied, timed_out) over the dashboard's range.", pos(6, 16, 6, 5)).
			WithTarget(query("A", "sum by (outcome) (increase(aetherium_approvals_decided_total[$__range]))", "{{outcome}}"))).
		WithPanel(ts(7, "Approval wait (p50, p95)", "Time from an approval request to its decision.", pos(12, 16, 12, 8), "s").
			WithTarget(query("A", "histogram_quantile(0.5, sum by (le) (rate(aetherium_approval_wait_seconds_bucket[$__rate_interval])))", "p50")).
			WithTarget(query("B", "histogram_quantile(0.95, sum by (le) (rate(aetherium_approval_wait_seconds_bucket[$__rate_interval])))", "p95"))).
		WithPanel(bars(8, "DLP hits by rule", "Outbound calls blocked because their arguments carried a credential, by gitleaks rule.", pos(0, 24, 12, 8), "short").
			WithTarget(query("A", "sum by (rule) (increase(aetherium_dlp_hits_total[$__range]))", "{{rule}}"))).
		WithPanel(ts(9, "Permission rules", "1 while the permissions file in force parsed; reloads by result.", pos(12, 24, 12, 8), "short").
			WithTarget(query("A", "min(aetherium_permission_rules_valid)", "valid")).
			WithTarget(query("B", "sum by (result) (increase(aetherium_permission_rules_reloads_total[$__range]))", "reloads {{result}}"))).
		WithPanel(ts(10, "Audit buffer", "Audit rows buffered, not yet written to PostgreSQL.", pos(0, 32, 12, 8), "short").
			WithTarget(query("A", "max(aetherium_audit_buffer_depth)", "rows")))
}

// streamsLeases is streams-leases.json: Agent mailboxes on Redis streams and GPU service leases.
func streamsLeases() *dashboard.DashboardBuilder {
	return board("aetherium-streams", "Aetherium / Streams and leases", "Agent mailboxes on Redis streams and GPU service leases.", false).
		WithPanel(ts(1, "Mailbox messages / s", "Messages sent, delivered (redeliveries included), redelivered, acknowledged and dead-lettered.", pos(0, 0, 12, 8), "ops").
			WithTarget(query("A", "sum(rate(aetherium_mailbox_messages_sent_total[$__rate_interval]))", "sent")).
			WithTarget(query("B", "sum(rate(aetherium_mailbox_messages_delivered_total[$__rate_interval]))", "delivered")).
			WithTarget(query("C", "sum(rate(aetherium_mailbox_messages_redelivered_total[$__rate_interval]))", "redelivered")).
			WithTarget(query("D", "sum(rate(aetherium_mailbox_messages_acked_total[$__rate_interval]))", "acked")).
			WithTarget(query("E", "sum(rate(aetherium_mailbox_messages_dead_lettered_total[$__rate_interval]))", "dead-lettered"))).
		WithPanel(ts(2, "Mailbox depth", "Unread or unacknowledged messages over all live mailboxes (measured by the reclaim pass).", pos(12, 0, 12, 8), "short").
			WithTarget(query("A", "max(aetherium_mailbox_depth)", "depth"))).
		WithPanel(ts(3, "Leases held and waiting", "Leases held and runs queued for one, by GPU service.", pos(0, 8, 12, 8), "short").
			WithTarget(query("A", "max by (service) (aetherium_lease_held)", "{{service}} held")).
			WithTarget(query("B", "max by (service) (aetherium_lease_waiting)", "{{service}} waiting"))).
		WithPanel(ts(4, "Lease grants and releases / s", "Leases granted and released by their holder, by GPU service.", pos(12, 8, 12, 8), "ops").
			WithTarget(query("A", "sum by (service) (rate(aetherium_lease_granted_total[$__rate_interval]))", "{{service}} granted")).
			WithTarget(query("B", "sum by (service) (rate(aetherium_lease_released_total[$__rate_interval]))", "{{service}} released"))).
		WithPanel(ts(5, "Lease wait (p50, p95)", "Time from joining a service's queue to being granted.", pos(0, 16, 24, 8), "s").
			WithTarget(query("A", "histogram_quantile(0.5, sum by (le, service) (rate(aetherium_lease_wait_seconds_bucket[$__rate_interval])))", "{{service}} p50")).
			WithTarget(query("B", "histogram_quantile(0.95, sum by (le, service) (rate(aetherium_lease_wait_seconds_bucket[$__rate_interval])))", "{{service}} p95")))
}

// headset is headset.json: Steam Frame performance: steady-state fps against the 72 fps bar, frame times and check results.
func headset() *dashboard.DashboardBuilder {
	return board("aetherium-headset", "Aetherium / Headset", "Steam Frame performance: steady-state fps against the 72 fps bar, frame times and check results.", false).
		WithPanel(ts(1, "Steady-state fps", "fps of the last judged run; the line is the 72 fps bar.", pos(0, 0, 12, 8), "none").
			Thresholds(thresholds(step("red", nil), step("green", ptr(72)))).
			ThresholdsStyle(thresholdsStyle("line+area")).
			LineWidth(2).
			Min(0).
			WithTarget(query("A", "max(aetherium_headset_fps)", "fps"))).
		WithPanel(heat(2, "Frame times", "Steady-state frame times of judged runs; 13.9 ms is the 72 Hz budget.", pos(12, 0, 12, 8), "s").
			WithTarget(heatmapQuery("A", "sum by (le) (increase(aetherium_headset_frame_time_seconds_bucket[$__rate_interval]))", "{{le}}"))).
		WithPanel(ts(3, "Frame time (p50, p99)", "Steady-state frame time percentiles.", pos(0, 8, 12, 8), "s").
			Thresholds(thresholds(step("green", nil), step("red", ptr(0.0139)))).
			ThresholdsStyle(thresholdsStyle("line")).
			WithTarget(query("A", "histogram_quantile(0.5, sum by (le) (rate(aetherium_headset_frame_time_seconds_bucket[$__rate_interval])))", "p50")).
			WithTarget(query("B", "histogram_quantile(0.99, sum by (le) (rate(aetherium_headset_frame_time_seconds_bucket[$__rate_interval])))", "p99"))).
		WithPanel(number(4, "72 fps checks", "Checks by result (pass, fail, insufficient_data) over the dashboard's range.", pos(12, 8, 12, 8)).
			WithTarget(query("A", "sum by (result) (increase(aetherium_headset_fps_checks_total[$__range]))", "{{result}}"))).
		WithPanel(bars(5, "Headset runs by outcome", "frame_run calls by how the run ended (exited, crashed, timed_out, error).", pos(0, 16, 24, 8), "short").
			WithTarget(query("A", "sum by (outcome) (increase(aetherium_headset_runs_total[$__range]))", "{{outcome}}")))
}

// llmUsage is llm-usage.json: Model calls by provider and model: requests, latency and tokens.
func llmUsage() *dashboard.DashboardBuilder {
	return board("aetherium-llm", "Aetherium / LLM usage", "Model calls by provider and model: requests, latency and tokens.", false).
		WithPanel(ts(1, "Requests / s", "Model calls by provider, model and outcome.", pos(0, 0, 12, 8), "reqps").
			WithTarget(query("A", "sum by (provider, model, outcome) (rate(aetherium_llm_requests_total[$__rate_interval]))", "{{provider}}/{{model}} {{outcome}}"))).
		WithPanel(ts(2, "Error ratio", "Share of model calls that failed.", pos(12, 0, 12, 8), "percentunit").
			WithTarget(query("A", `1 - sum by (provider) (rate(aetherium_llm_requests_total{outcome="ok"}[$__rate_interval])) / sum by (provider) (rate(aetherium_llm_requests_total[$__rate_interval]))`, "{{provider}}"))).
		WithPanel(ts(3, "Latency (p50, p95)", "Model call latency by provider and model.", pos(0, 8, 12, 8), "s").
			WithTarget(query("A", "histogram_quantile(0.5, sum by (le, provider, model) (rate(aetherium_llm_request_duration_seconds_bucket[$__rate_interval])))", "{{provider}}/{{model}} p50")).
			WithTarget(query("B", "histogram_quantile(0.95, sum by (le, provider, model) (rate(aetherium_llm_request_duration_seconds_bucket[$__rate_interval])))", "{{provider}}/{{model}} p95"))).
		WithPanel(ts(4, "Tokens / s", "Tokens by provider, model and direction (input, output).", pos(12, 8, 12, 8), "short").
			WithTarget(query("A", "sum by (provider, model, direction) (rate(aetherium_llm_tokens_total[$__rate_interval]))", "{{provider}}/{{model}} {{direction}}"))).
		WithPanel(bars(5, "Tokens over the range", "Tokens used by model and direction over the dashboard's range.", pos(0, 16, 24, 8), "short").
			WithTarget(query("A", "sum by (model, direction) (increase(aetherium_llm_tokens_total[$__range]))", "{{model}} {{direction}}")))
}
