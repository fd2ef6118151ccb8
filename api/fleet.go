package api

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/hibiken/asynq"

	"github.com/aetherium-engine/aetherium/queue"
)

// The fleet page (GET /api/fleet, issue 41): one picture of what the fleet is
// made of and how loaded it is, for an operator: the asynq worker servers
// (Inspector.Servers), the depth of the fleet's queues (Inspector.GetQueueInfo),
// the runs in flight, the GPU services' leases, the operative limits of the
// configuration and whether asynqmon is here.

// FleetView is the answer of GET /api/fleet.
type FleetView struct {
	// Workers are the worker servers registered in Redis (asynq's heartbeat),
	// oldest first.
	Workers []FleetWorker `json:"workers"`
	// Queues are the fleet's queues (supervisor, workers, maintenance) and any
	// other asynq knows, with zeros for a queue no task has reached yet.
	Queues []FleetQueue `json:"queues"`
	// Runs counts the runs in flight the caller may list: every principal's
	// with read_all, else the caller's own.
	Runs FleetRuns `json:"runs"`
	// Leases sums up each GPU service's leases (GET /api/leases has the holders).
	Leases []FleetLease `json:"leases"`
	// Limits are the configured operative limits, each with why it exists.
	Limits []Limit `json:"limits"`
	// Monitoring says where asynqmon is served.
	Monitoring MonitoringInfo `json:"monitoring"`
}

// FleetWorker is one worker server (one `aetherium worker` process, or the
// worker of `aetherium dev`).
type FleetWorker struct {
	ID   string `json:"id"`
	Host string `json:"host"`
	PID  int    `json:"pid"`
	// Concurrency is how many tasks the server runs at once.
	Concurrency int `json:"concurrency"`
	// Queues are the queues it serves with their priority weights.
	Queues map[string]int `json:"queues"`
	// Status is asynq's: active, or closed while it shuts down.
	Status  string `json:"status"`
	Started string `json:"started" jsonschema:"format=date-time"`
	// Active is how many tasks it is running now.
	Active int `json:"active"`
}

// FleetQueue is one asynq queue's depth and today's counters.
type FleetQueue struct {
	Name string `json:"name"`
	// Size is every task in the queue: pending, active, scheduled, retry and archived.
	Size      int `json:"size"`
	Pending   int `json:"pending"`
	Active    int `json:"active"`
	Scheduled int `json:"scheduled"`
	Retry     int `json:"retry"`
	Archived  int `json:"archived"`
	// Completed counts the finished tasks asynq still keeps (their ids, queue.DefaultRetention).
	Completed int `json:"completed"`
	// Processed and Failed count today's tasks (UTC), failed ones included in Processed.
	Processed int  `json:"processed"`
	Failed    int  `json:"failed"`
	Paused    bool `json:"paused"`
	// LatencyMS is how long the oldest pending task has waited, in milliseconds.
	LatencyMS int64 `json:"latency_ms"`
}

// FleetRuns counts runs in flight by status.
type FleetRuns struct {
	// Queued counts runs waiting to start, admitted or in their fairness key's line.
	Queued int `json:"queued"`
	// Running counts runs whose agents work.
	Running int `json:"running"`
	// Waiting counts runs waiting for a person (an approval or a question).
	Waiting int `json:"waiting"`
	// MCPSessions counts MCP clients' session runs, which the counts above leave out.
	MCPSessions int `json:"mcp_sessions"`
}

// FleetLease is one GPU service's lease load.
type FleetLease struct {
	Service  string `json:"service"`
	Capacity int    `json:"capacity"`
	// Held is how many grants are live; Waiting how many runs wait in line.
	Held    int `json:"held"`
	Waiting int `json:"waiting"`
}

// Limit is one operative limit of the configuration as an operator reads it.
type Limit struct {
	// Name is the configuration key (worker.concurrency, fairness.default.runs, …).
	Name string `json:"name"`
	// Value is its value as configured, or what its absence means.
	Value string `json:"value"`
	// Why says what it protects.
	Why string `json:"why"`
}

// MonitoringInfo says where asynqmon is served and how.
type MonitoringInfo struct {
	// Path is asynqmon's root.
	Path string `json:"path"`
	// Available is true when this API process serves asynqmon.
	Available bool `json:"available"`
	// ReadOnly is api.monitoring_read_only: asynqmon cannot change the queues.
	ReadOnly bool `json:"read_only"`
	// Session is where an admin's browser gets the cookie that opens it
	// (POST, with the bearer token).
	Session string `json:"session"`
}

// redisDown is the 503 of a fleet read that needs Redis.
func redisDown(what string, err error) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Message: fmt.Sprintf("%s: Redis is unreachable (%v); the queues, workers and leases live there", what, err)}
}

// getFleet serves GET /api/fleet.
func (s *Server) getFleet(c *fiber.Ctx) error {
	ctx := c.UserContext()
	servers, err := s.inspector.Servers()
	if err != nil {
		return redisDown("reading the worker servers", err)
	}
	out := FleetView{Workers: make([]FleetWorker, 0, len(servers)), Queues: []FleetQueue{}, Leases: []FleetLease{}, Limits: s.limits()}
	for _, sv := range servers {
		queues := sv.Queues
		if queues == nil {
			queues = map[string]int{}
		}
		out.Workers = append(out.Workers, FleetWorker{ID: sv.ID, Host: sv.Host, PID: sv.PID, Concurrency: sv.Concurrency,
			Queues: queues, Status: sv.Status, Started: sv.Started.UTC().Format(time.RFC3339), Active: len(sv.ActiveWorkers)})
	}
	slices.SortFunc(out.Workers, func(a, b FleetWorker) int {
		return cmp.Or(cmp.Compare(a.Started, b.Started), cmp.Compare(a.ID, b.ID))
	})
	known, err := s.inspector.Queues()
	if err != nil {
		return redisDown("listing the queues", err)
	}
	names := queue.Queues()
	for _, q := range known {
		if !slices.Contains(names, q) {
			names = append(names, q)
		}
	}
	for _, name := range names {
		if !slices.Contains(known, name) {
			out.Queues = append(out.Queues, FleetQueue{Name: name}) // no task has reached it yet
			continue
		}
		qi, err := s.inspector.GetQueueInfo(name)
		if err != nil {
			return redisDown("reading queue "+name, err)
		}
		out.Queues = append(out.Queues, queueView(qi))
	}
	counts, err := s.d.Store.CountRunsInFlight(ctx, ownerScope(c))
	if err != nil {
		return err
	}
	out.Runs = FleetRuns{Queued: counts.Queued, Running: counts.Running, Waiting: counts.Waiting, MCPSessions: counts.MCPSessions}
	if s.d.Leases != nil {
		states, err := s.d.Leases.Snapshot(ctx)
		if err != nil {
			return redisDown("reading leases", err)
		}
		for _, st := range states {
			out.Leases = append(out.Leases, FleetLease{Service: st.Service, Capacity: st.Capacity, Held: len(st.Holders), Waiting: len(st.Waiters)})
		}
	}
	out.Monitoring = MonitoringInfo{Path: MonitoringPath + "/", Available: s.mon != nil, ReadOnly: s.cfg.monitoringReadOnly(), Session: MonitoringSessionPath}
	return c.JSON(out)
}

func queueView(qi *asynq.QueueInfo) FleetQueue {
	return FleetQueue{Name: qi.Queue, Size: qi.Size, Pending: qi.Pending, Active: qi.Active, Scheduled: qi.Scheduled,
		Retry: qi.Retry, Archived: qi.Archived, Completed: qi.Completed, Processed: qi.Processed, Failed: qi.Failed,
		Paused: qi.Paused, LatencyMS: qi.Latency.Milliseconds()}
}

// limits are the API's own operative limits, then the deployment's
// (Deps.Limits, from the other sections of the configuration).
func (s *Server) limits() []Limit {
	inFlight := "unlimited"
	if s.cfg.MaxRunsInFlight > 0 {
		inFlight = strconv.Itoa(s.cfg.MaxRunsInFlight)
	}
	out := []Limit{
		{Name: "api.max_runs_in_flight", Value: inFlight, Why: "runs one principal may have queued, running or waiting; a submit over it is 429"},
		{Name: "api.max_streams_per_principal", Value: strconv.Itoa(s.cfg.MaxStreamsPerPrincipal), Why: "event streams one principal may hold open on one API process"},
		{Name: "api.max_streams", Value: strconv.Itoa(s.cfg.MaxStreams), Why: "event streams one API process holds open, every principal together"},
		{Name: "api.body_limit", Value: strconv.Itoa(s.cfg.BodyLimit) + " bytes", Why: "the largest request body the API reads"},
	}
	return append(out, s.d.Limits...)
}
