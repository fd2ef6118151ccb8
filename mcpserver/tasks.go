package mcpserver

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/store"
)

// Tasks of the io.modelcontextprotocol/tasks extension are MCP calls: the task
// id is the call's id, its state the call's row (and its approval's), so any
// API process answers any task. tasks/get reads through a cache of rows that
// the events hub invalidates (the worker announces every change of a call's
// row) and the process's sweep checks: a client polling a call that waits
// minutes for a human costs no query per poll, only a read of its row when the
// hub confirms the subscription (an announcement may have fallen before it).

func mcpCallChannel(id string) string { return events.MCPCallChannel(id) }

func newHandle() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func decodeBase64(s string) ([]byte, error) { return base64.StdEncoding.DecodeString(s) }

// taskCache holds the rows of the calls whose tasks are being polled.
type taskCache struct {
	mu      sync.Mutex
	entries map[string]*cachedCall
}

type cachedCall struct {
	call  store.MCPCall
	fresh bool
	used  time.Time
	stop  func()
	// checkRun: the run may have ended (first read, the run's end announced, or
	// the sweep woke it): the next read checks it.
	checkRun bool
}

// stale makes the next read of id's row go to PostgreSQL.
func (c *taskCache) stale(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[id]; ok {
		e.fresh = false
	}
}

// taskIdle is how long a cached row outlives its last poll.
const taskIdle = 2 * time.Minute

// row returns the call's row, from the cache while no announcement said it
// changed. A row read from PostgreSQL is cached, watched on the hub, and
// evicted after taskIdle without a poll.
func (s *Server) row(ctx context.Context, id string) (store.MCPCall, error) {
	c := &s.tasks
	c.mu.Lock()
	e, ok := c.entries[id]
	if ok && e.fresh {
		e.used = time.Now()
		call := e.call
		c.mu.Unlock()
		return call, nil
	}
	checkRun := !ok || e.checkRun
	c.mu.Unlock()
	if !ok {
		// Watch before the read, so no announcement falls between them.
		e = &cachedCall{used: time.Now()}
		if err := s.watchTask(id, e); err != nil {
			s.d.Log.Warn("mcp task: watch", "call", id, "err", err)
		}
	}
	call, err := s.d.Store.GetMCPCall(ctx, id)
	if err != nil {
		if e.stop != nil && !ok {
			e.stop()
		}
		return call, err
	}
	s.sweeper.note(id, call.UpdatedAt)
	if call.Status == store.MCPCallWaiting && checkRun {
		s.resumeIfRunEnded(ctx, call)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[string]*cachedCall{}
	}
	if cur, exists := c.entries[id]; exists && cur != e {
		if e.stop != nil {
			e.stop()
		}
		e = cur
	}
	// Only a watched entry may be served from the cache: without a watch (Redis
	// away) every poll reads.
	e.call, e.fresh, e.used, e.checkRun = call, e.stop != nil, time.Now(), false
	c.entries[id] = e
	return call, nil
}

// watchTask marks e stale on every announcement of the call and on the sweep's
// wake (the row changed, or its run ended: the next read then checks the run),
// and evicts it once it goes unpolled for taskIdle. The run's end is left to
// the sweep: a task's wait costs no subscription of its own to the run.
func (s *Server) watchTask(id string, e *cachedCall) error {
	ctx, cancel := context.WithCancel(context.Background())
	wake, stop, err := s.d.Hub.WatchChannel(ctx, events.MCPCallChannel(id))
	if err != nil {
		cancel()
		return err
	}
	sweepWake, stopSweep, _ := s.sweeper.watch(id)
	e.stop = func() { stop(); stopSweep(); cancel() }
	go func() {
		t := time.NewTicker(taskIdle / 2)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-wake:
			case <-sweepWake:
				s.tasks.mu.Lock()
				e.checkRun = true
				s.tasks.mu.Unlock()
			case <-t.C:
				s.tasks.mu.Lock()
				idle := time.Since(e.used) > taskIdle
				if idle && s.tasks.entries[id] == e {
					delete(s.tasks.entries, id)
				}
				s.tasks.mu.Unlock()
				if idle {
					e.stop()
					return
				}
				continue
			}
			s.tasks.mu.Lock()
			e.fresh = false
			s.tasks.mu.Unlock()
		}
	}()
	return nil
}

// resumeIfRunEnded resumes a waiting call whose run ended: the end closes its
// approval without a decision, so no decision will resume it, and the worker
// finishes it as a call of an ended run (one task per call: the key).
func (s *Server) resumeIfRunEnded(ctx context.Context, call store.MCPCall) {
	run, err := s.d.Store.GetRun(ctx, call.RunID)
	if err != nil || !store.Terminal(run.Status) {
		return
	}
	if err := s.d.Queue.MCPCall(ctx, queue.Route{Key: run.FairKey, Priority: run.Priority}, call.ID, "run-ended"); err != nil {
		s.d.Log.Warn("mcp: resume call of ended run", "call", call.ID, "run", run.ID, "err", err)
	}
}

// taskStatus maps a call's row to the extension's task status.
func taskStatus(c store.MCPCall, clientDecides bool) string {
	switch {
	case c.Status == store.MCPCallDone && c.Decision == store.MCPDecisionWithdrawn:
		return "cancelled"
	case c.Status == store.MCPCallDone:
		return "completed"
	case c.Status == store.MCPCallWaiting && clientDecides && c.ApprovalID != "":
		return "input_required"
	default:
		return "working"
	}
}

// taskView is the DetailedTask of a call (tasks/get, notifications/tasks,
// CreateTaskResult).
func (s *Server) taskView(ctx context.Context, c store.MCPCall, caps clientCaps, p Profile) map[string]any {
	status := taskStatus(c, p.ApproveInClient && caps.Elicitation)
	updated := c.UpdatedAt
	if updated.IsZero() {
		updated = c.CreatedAt
	}
	v := map[string]any{
		"taskId": c.ID, "status": status,
		"createdAt": c.CreatedAt.UTC().Format(time.RFC3339Nano), "lastUpdatedAt": updated.UTC().Format(time.RFC3339Nano),
		"ttlMs": s.window().Milliseconds(), "pollIntervalMs": s.cfg.TaskPoll.Milliseconds(),
	}
	switch status {
	case "working":
		if c.Status == store.MCPCallWaiting {
			v["statusMessage"] = waitingMessage(c)
		} else {
			v["statusMessage"] = c.Tool + " is " + c.Status
		}
	case "input_required":
		form, err := s.approvalForm(ctx, c)
		if err != nil {
			v["status"], v["statusMessage"] = "working", waitingMessage(c)
			break
		}
		v["inputRequests"], v["statusMessage"] = form, "waits for your decision on approval "+c.ApprovalID
	case "completed":
		v["result"] = callResult(s.result(c))
	case "cancelled":
		v["statusMessage"] = c.Result
	}
	return v
}

// replyTask answers a CreateTaskResult: the call is durable (its row exists)
// before the answer leaves.
func (q *mreq) replyTask(c store.MCPCall) {
	v := q.srv.taskView(q.r.Context(), c, q.caps, q.p)
	v["resultType"] = "task"
	delete(v, "result")
	delete(v, "inputRequests")
	// Beyond the extension's shape: a client that reads every tools/call answer
	// as a CallToolResult (mcp-go v1.6.0 requires content) still shows what
	// happened, and finds the task's id where the 2025 tasks put it.
	v["content"] = []map[string]any{{"type": "text", "text": fmt.Sprintf("%s continues as task %s: %s; poll tasks/get", c.Tool, c.ID, v["statusMessage"])}}
	v["_meta"] = map[string]any{"io.modelcontextprotocol/related-task": map[string]any{"taskId": c.ID}}
	q.reply(v)
}

// taskOf loads a task the caller may see: a call of its own in this profile.
func (s *Server) taskOf(q *mreq) (store.MCPCall, map[string]elicitAnswer, bool) {
	var tp struct {
		TaskID         string                  `json:"taskId"`
		InputResponses map[string]elicitAnswer `json:"inputResponses"`
	}
	if err := json.Unmarshal(q.params, &tp); err != nil || tp.TaskID == "" {
		q.fail(codeInvalidParams, "params.taskId is required", nil)
		return store.MCPCall{}, nil, false
	}
	c, err := s.row(q.r.Context(), tp.TaskID)
	if err != nil || c.Principal != q.principal || baseProfile(c.Profile) != q.profile {
		// Another principal's task is as unknown as a task that never was.
		q.fail(codeInvalidParams, fmt.Sprintf("no task %q", tp.TaskID), nil)
		return store.MCPCall{}, nil, false
	}
	return c, tp.InputResponses, true
}

func (s *Server) taskGet(q *mreq) {
	c, _, ok := s.taskOf(q)
	if !ok {
		return
	}
	q.reply(s.taskView(q.r.Context(), c, q.caps, q.p))
}

func (s *Server) taskUpdate(q *mreq) {
	c, answers, ok := s.taskOf(q)
	if !ok {
		return
	}
	// Keys not outstanding (never issued, answered, superseded) are ignored, as
	// the extension asks.
	if ans, found := answers[approvalKey(c.ApprovalID)]; found && c.Status == store.MCPCallWaiting && q.p.ApproveInClient {
		// The ack is owed either way; the task's state tells the client what
		// became of the call.
		_ = s.decideInClient(q.r.Context(), q.principal, c, ans)
	}
	q.reply(map[string]any{})
}

func (s *Server) taskCancel(q *mreq) {
	c, _, ok := s.taskOf(q)
	if !ok {
		return
	}
	out, withdrawn := s.withdraw(c.ID, q.principal, "tasks/cancel")
	if !withdrawn && out.Status == store.MCPCallDone {
		q.fail(codeInvalidParams, fmt.Sprintf("task %s is already %s", c.ID, taskStatus(out, false)), nil)
		return
	}
	if !withdrawn {
		q.fail(codeInvalidParams, fmt.Sprintf("task %s runs on a worker now and cannot be withdrawn: it finishes and is audited", c.ID), nil)
		return
	}
	q.reply(map[string]any{})
}

// withdraw ends a call its client gave up on (store.WithdrawMCPCall) and tells
// every process watching it. It runs on a context of its own: the client's is
// usually what just ended.
func (s *Server) withdraw(id, principal, why string) (store.MCPCall, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, ok, err := s.d.Store.WithdrawMCPCall(ctx, id, principal+" (mcp client)", why)
	if err != nil {
		s.d.Log.Warn("mcp: withdraw call", "call", id, "err", err)
		return out, false
	}
	if ok {
		s.d.Log.Info("mcp call withdrawn", "call", id, "principal", principal, "why", why)
		// This process's own change: its next read is the row's, not an
		// announcement's round trip (published off the caller's path) later.
		s.tasks.stale(id)
		if s.d.Events != nil {
			s.d.Events.AnnounceMCPCall(ctx, id)
		}
	}
	return out, ok
}

// abandon withdraws a call whose client went away (or cancelled it). A call a
// worker holds at that moment cannot be withdrawn yet, but may be about to park
// on an approval that nobody would then wait for: this process follows it, on a
// context of its own, until it parks (and withdraws it then) or finishes. A
// process that dies meanwhile leaves the approval to expire, as before.
func (s *Server) abandon(call store.MCPCall, principal, why string) {
	out, ok := s.withdraw(call.ID, principal, why)
	if ok || out.Status == store.MCPCallDone || out.ID == "" {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.window())
		defer cancel()
		cur, err := s.follow(ctx, call, s.window(), 0, func(cur store.MCPCall, _ bool) bool {
			return cur.Status == store.MCPCallWaiting || cur.Status == store.MCPCallDone || cur.Status == store.MCPCallQueued
		})
		if err == nil && cur.Status != store.MCPCallDone {
			s.withdraw(call.ID, principal, why)
		}
	}()
}

// errWaitTimeout ends a follow whose limit passed.
var errWaitTimeout = errors.New("mcp wait: limit passed")

// follow reads a call's row at once and whenever the worker announces a change
// of it (or its run's end, or Config.Poll passes: the safety net of a lost
// announcement), calling step with each row read (fresh) and on every tick of
// every (a progress notification); step says when to stop. It returns the last
// row, ctx.Err() when the client goes away, errWaitTimeout after limit.
func (s *Server) follow(ctx context.Context, call store.MCPCall, limit, every time.Duration, step func(cur store.MCPCall, fresh bool) bool) (store.MCPCall, error) {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	callWake, stopCall, err := s.d.Hub.WatchChannel(ctx, events.MCPCallChannel(call.ID))
	if err != nil {
		s.d.Log.Warn("mcp wait: watch call", "call", call.ID, "err", err)
	}
	defer stopCall()
	endWake, stopEnd, err := s.d.Hub.WatchChannel(ctx, events.EndChannel(call.RunID))
	if err != nil {
		s.d.Log.Warn("mcp wait: watch run end", "call", call.ID, "err", err)
	}
	defer stopEnd()
	sweepWake, stopSweep, swept := s.sweeper.watch(call.ID)
	defer stopSweep()
	if !swept {
		poll := time.NewTicker(s.cfg.Poll)
		defer poll.Stop()
		sweepWake = tickWake(ctx, poll.C)
	}
	var tick <-chan time.Time
	if every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		tick = t.C
	}
	resumed, checkRun := false, true
	cur := call
	for read := true; ; {
		if read {
			c, err := s.d.Store.GetMCPCall(ctx, call.ID)
			if err != nil {
				if ctx.Err() != nil {
					return cur, ctx.Err()
				}
				return cur, err
			}
			cur = c
			s.sweeper.note(call.ID, c.UpdatedAt)
			if cur.Status == store.MCPCallWaiting && !resumed && checkRun {
				if run, rerr := s.d.Store.GetRun(ctx, call.RunID); rerr == nil && store.Terminal(run.Status) {
					if qerr := s.d.Queue.MCPCall(ctx, queue.Route{Key: run.FairKey, Priority: run.Priority}, call.ID, "run-ended"); qerr != nil {
						return cur, fmt.Errorf("resume mcp call %s of ended run %s: %w", call.ID, run.ID, qerr)
					}
					resumed = true
				}
				checkRun = false
			}
			if step(cur, true) {
				return cur, nil
			}
			read = false
		}
		select {
		case <-ctx.Done():
			return cur, ctx.Err()
		case <-deadline.C:
			return cur, errWaitTimeout
		case <-callWake:
			read = true
		case <-endWake:
			read, checkRun = true, true
		case <-sweepWake:
			read, checkRun = true, true
		case <-tick:
			if step(cur, false) {
				return cur, nil
			}
		}
	}
}

// tickWake turns a ticker into a wake channel.
func tickWake(ctx context.Context, c <-chan time.Time) <-chan struct{} {
	out := make(chan struct{}, 1)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-c:
				select {
				case out <- struct{}{}:
				default:
				}
			}
		}
	}()
	return out
}

// window is how long a call may wait for its outcome: the approval window and
// the call timeout.
func (s *Server) window() time.Duration { return s.d.ApprovalWindow + s.cfg.CallTimeout }
