package security

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"go.opentelemetry.io/otel/trace"

	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/metrics"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/tools"
	"github.com/aetherium-engine/aetherium/tracing"
)

// ApprovalQueue is what the approval flow enqueues (a *queue.Enqueuer): the
// delayed expiry of a request, and the resume of the session a decision unblocks.
type ApprovalQueue interface {
	ExpireApproval(ctx context.Context, approvalID string, at time.Time) error
	Resume(ctx context.Context, r queue.Route, session queue.SessionID, key string) error
}

// ApprovalsConfig tunes approvals.
type ApprovalsConfig struct {
	// Window is how long a human has to decide. Default 5m.
	Window time.Duration
	// FallbackTools lists the tools whose expiring approvals are approved (as
	// "supervisor-fallback") instead of timing out. Empty by default: nothing is
	// waved through. tools.NeverFallsBack tools time out whatever it lists.
	FallbackTools []string
	// GrantMaxTTL caps a grant's life (security.grant_max_ttl). Default
	// DefaultGrantMaxTTL.
	GrantMaxTTL time.Duration
	// AllowSelfApproval lets a principal approve, edit or grant a call of its own
	// run (security.allow_self_approval): for single-user setups. False by
	// default: someone else decides.
	AllowSelfApproval bool
}

// fallsBack reports whether an expiring approval of tool, asked for why, is
// approved by fallback. An ask of the flow rules never is: the session read
// untrusted content, and the supervisor that would stand in for the human is a
// model too.
func (c ApprovalsConfig) fallsBack(tool, why string) bool {
	if tools.NeverFallsBack(tool) || strings.Contains(why, untrustedRead) {
		return false
	}
	for _, t := range c.FallbackTools {
		if t == tool {
			return true
		}
	}
	return false
}

// Approvals runs the durable approval flow: request (row + expiry task + event, run
// waiting), decide (once; 409 on a second decision), expire, and resume the
// suspended session.
type Approvals struct {
	cfg ApprovalsConfig
	// rules give the policy revision grants are listed and confirmed under (nil:
	// NoPolicyRevision).
	rules   *Rules
	store   *store.Store
	events  *events.Recorder
	queue   ApprovalQueue
	metrics *metrics.Metrics
	log     *slog.Logger
	// readOnly: a replay's view (Gate.Recorded), which reads the approval a
	// call has and requests none.
	readOnly bool
}

// recorded is a's read-only view for a replaying gate.
func (a *Approvals) recorded() *Approvals {
	c := *a
	c.readOnly, c.metrics = true, nil
	return &c
}

// NewApprovals wires the approval flow. q schedules expiries and resumes the
// sessions decisions unblock.
func NewApprovals(cfg ApprovalsConfig, st *store.Store, rec *events.Recorder, q ApprovalQueue, m *metrics.Metrics, log *slog.Logger) *Approvals {
	if cfg.Window <= 0 {
		cfg.Window = 5 * time.Minute
	}
	if cfg.GrantMaxTTL <= 0 {
		cfg.GrantMaxTTL = DefaultGrantMaxTTL
	}
	if log == nil {
		log = slog.Default()
	}
	return &Approvals{cfg: cfg, store: st, events: rec, queue: q, metrics: m, log: log}
}

// UseRules gives the approvals the live permissions, whose revision grants are
// listed and confirmed under.
func (a *Approvals) UseRules(r *Rules) { a.rules = r }

// PolicyRevision is the revision of the permissions in force.
func (a *Approvals) PolicyRevision() string {
	if a.rules == nil {
		return NoPolicyRevision
	}
	return a.rules.Current().Revision()
}

// ListGrants lists grants with their status under the permissions in force.
func (a *Approvals) ListGrants(ctx context.Context, f store.GrantFilter) ([]store.Grant, error) {
	return a.store.ListGrants(ctx, f, a.PolicyRevision())
}

// GetGrant loads one grant, its status under the permissions in force.
func (a *Approvals) GetGrant(ctx context.Context, id string) (store.Grant, error) {
	return a.store.GetGrant(ctx, id, a.PolicyRevision())
}

// RevokeGrant revokes a grant: the next matching call asks again. An approver,
// or the owner whose runs it covers, may revoke it.
func (a *Approvals) RevokeGrant(ctx context.Context, id, by string, mayApprove bool) (store.Grant, error) {
	g, err := a.GetGrant(ctx, id)
	if err != nil {
		return g, err
	}
	if !mayApprove && by != g.Owner {
		return g, fmt.Errorf("%w: only an approver or %s revokes grant %s", store.ErrForbidden, g.Owner, id)
	}
	g, err = a.store.RevokeGrant(ctx, id, by, a.PolicyRevision())
	if err == nil {
		a.log.Info("grant revoked", "grant_id", id, "by", by)
	}
	return g, err
}

// ConfirmGrant rebinds a grant (suspended by a change of the permissions) to the
// revision in force: an approver's decision, under the self-approval rule.
func (a *Approvals) ConfirmGrant(ctx context.Context, id, by string, mayApprove bool) (store.Grant, error) {
	g, err := a.GetGrant(ctx, id)
	if err != nil {
		return g, err
	}
	if !mayApprove {
		return g, fmt.Errorf("%w: confirming a grant needs the approve role", store.ErrForbidden)
	}
	if by == g.Owner && !a.cfg.AllowSelfApproval {
		return g, fmt.Errorf("%w: grant %s covers %s's own runs, so someone else confirms it (security.allow_self_approval)", store.ErrForbidden, id, by)
	}
	g, err = a.store.ConfirmGrant(ctx, id, by, a.PolicyRevision())
	if err == nil {
		a.log.Info("grant confirmed", "grant_id", id, "by", by, "policy_revision", g.PolicyRevision)
	}
	return g, err
}

// ApprovalID is deterministic per call, so a redelivered step finds its approval.
func ApprovalID(sessionID, callID string) string {
	h := sha256.Sum256([]byte(sessionID + "\x00" + callID))
	return "apr_" + hex.EncodeToString(h[:12])
}

// ErrArgsChanged denies an approved call whose arguments no longer hash to the
// approved value (the stored call was altered after the human saw it).
var ErrArgsChanged = errors.New("arguments changed since approval")

func argsChangedReason(appr store.Approval, now string) string {
	if appr.ArgsHash == "" {
		return ErrArgsChanged.Error() + ": the approval predates argument binding and approved no hash; the call did not run, ask again"
	}
	return fmt.Sprintf("%s: approved sha256 %s, the call now hashes to %s; the call did not run",
		ErrArgsChanged, appr.ArgsHash, now)
}

// Ensure returns the approval of a call, requesting it when there is none yet, for
// the arguments that hash to argsHash (a redelivery finds the first request's row
// and hash, whatever its call holds now).
func (a *Approvals) Ensure(ctx context.Context, s *tools.Session, call tools.Call, tier, why string, maskedArgs json.RawMessage,
	argsHash string, view egress.ApprovalView) (store.Approval, error) {
	return a.ensure(ctx, s, call, store.Approval{Tier: tier, Why: why, Args: maskedArgs, ArgsHash: argsHash, Kind: store.KindCall}, view)
}

// ensure is Ensure for an approval of any kind (want's Kind, Tier, Why, Args,
// ArgsHash and PolicyRevision; view is marshalled into its View).
func (a *Approvals) ensure(ctx context.Context, s *tools.Session, call tools.Call, want store.Approval, view any) (store.Approval, error) {
	id := ApprovalID(s.SessionID, call.ID)
	if a.readOnly {
		// Replay: the decision the record holds; a call nobody was asked about
		// is held now, and asks nobody.
		appr, err := a.store.ApprovalForCall(ctx, s.SessionID, call.ID)
		if errors.Is(err, store.ErrNotFound) {
			return store.Approval{ID: id, Kind: want.Kind, Status: store.ApprovalPending}, nil
		}
		return appr, err
	}
	rawView, err := json.Marshal(view)
	if err != nil {
		return store.Approval{}, fmt.Errorf("approval view: %w", err)
	}
	want.ID, want.RunID, want.SessionID, want.CallID, want.Team, want.Agent, want.Tool, want.View =
		id, s.RunID, s.SessionID, call.ID, s.Team, s.Agent, call.Name, rawView
	appr, created, err := a.store.RequestApproval(ctx, want, a.cfg.Window)
	if err != nil {
		return appr, err
	}
	tier, why := want.Tier, want.Why
	key, data := "approval-requested:"+id, events.ApprovalRequestedData{ApprovalID: id, Kind: appr.Kind, Tool: call.Name, Tier: tier, Why: why, ExpiresAt: appr.ExpiresAt}
	if appr.Kind == store.KindQuestion {
		if q, ok := view.(tools.Question); ok {
			data.Question, data.Choices = q.Text, q.Choices
		}
	}
	emit := func() error {
		// Through the step's coordinator when there is one: it records the tool.call
		// events of the calls before this one first, so the stream keeps the model's order.
		if s.Coordinator != nil {
			return s.Coordinator.Emit(ctx, key, events.ApprovalRequested, data)
		}
		return a.events.Emit(ctx, s.RunID, key, events.ApprovalRequested, s.Agent, data)
	}
	if appr.Status != store.ApprovalPending {
		if !created {
			traceWait(ctx, appr)
		}
		// Decided between an earlier attempt's insert and its event (a step that
		// failed there, a human who answered at once): the stream still gets the
		// request (once, by its key) before the call's outcome.
		return appr, emit()
	}
	// The call parks: an event on its span (the wait itself is a span of the
	// resume, traceWait).
	trace.SpanFromContext(ctx).AddEvent(tracing.EventApprovalRequested, trace.WithAttributes(
		tracing.ApprovalID.String(id), tracing.ApprovalKind.String(appr.Kind)))
	// Idempotent even when not created now: a crash after the insert must still get
	// its expiry task, event and waiting status.
	if err := a.queue.ExpireApproval(ctx, id, appr.ExpiresAt); err != nil {
		return appr, fmt.Errorf("schedule approval expiry: %w", err)
	}
	if err := emit(); err != nil {
		return appr, err
	}
	if _, err := a.store.SetRunWaiting(ctx, s.RunID, true); err != nil {
		return appr, err
	}
	if created {
		a.log.Info("approval requested", "approval_id", id, "kind", appr.Kind, "run_id", s.RunID, "agent", s.Agent, "tool", call.Name, "why", why)
		a.refreshPending(ctx)
	}
	return appr, nil
}

// Decide records a human decision once; store.ErrDecided on a second one. It
// checks no role (Apply does): the caller is trusted to.
func (a *Approvals) Decide(ctx context.Context, id string, approve bool, by, reason string) (store.Approval, error) {
	status := store.ApprovalDenied
	if approve {
		status = store.ApprovalApproved
	}
	return a.record(ctx, id, store.Decision{Status: status, By: by, Reason: reason})
}

// record stores a decision and resumes the session it unblocks.
func (a *Approvals) record(ctx context.Context, id string, d store.Decision) (store.Approval, error) {
	appr, err := a.store.Decide(ctx, id, d)
	if errors.Is(err, store.ErrExpired) && appr.Status == store.ApprovalTimedOut && appr.DecidedBy == "system" {
		// Timed out by this late decision, ahead of the expiry task: resume the
		// session as that task would, and still refuse the decision.
		a.observe(appr)
		if aerr := a.afterDecision(ctx, appr); aerr != nil {
			return appr, errors.Join(err, aerr)
		}
		return appr, err
	}
	if err != nil {
		return appr, err
	}
	a.observe(appr)
	return appr, a.afterDecision(ctx, appr)
}

// Expire handles the expiry task: time the approval out (or fall back), and in any
// case make sure a decided approval resumed its session (covers a crash between a
// decision and its resume).
func (a *Approvals) Expire(ctx context.Context, t *asynq.Task) error {
	p, err := queue.Decode[queue.ApprovalExpirePayload](t)
	if err != nil {
		return err
	}
	cur, err := a.store.GetApproval(ctx, p.ApprovalID)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	} else if err != nil {
		return err
	}
	status, by, reason := store.ApprovalTimedOut, "system", "no decision within "+a.cfg.Window.String()
	if cur.Kind == store.KindCall && a.cfg.fallsBack(cur.Tool, cur.Why) {
		status, by, reason = store.ApprovalApproved, "supervisor-fallback", "approved by fallback after "+a.cfg.Window.String()
	}
	appr, err := a.store.TimeOutApproval(ctx, p.ApprovalID, status, by, reason)
	switch {
	case errors.Is(err, store.ErrRunClosed):
		return nil // its run finished: nothing to resume
	case errors.Is(err, store.ErrDecided), errors.Is(err, store.ErrExpired):
	case err != nil:
		return err
	default:
		a.observe(appr)
		a.log.Info("approval timed out", "approval_id", appr.ID, "run_id", appr.RunID, "tool", appr.Tool, "outcome", appr.Status)
	}
	return a.afterDecision(ctx, appr)
}

func (a *Approvals) observe(appr store.Approval) {
	if a.metrics == nil {
		return
	}
	a.metrics.ApprovalsDecided.WithLabelValues(appr.Status).Inc()
	if appr.DecidedAt != nil {
		a.metrics.ApprovalWait.Observe(appr.DecidedAt.Sub(appr.CreatedAt).Seconds())
	}
	a.refreshPending(context.Background())
}

func (a *Approvals) refreshPending(ctx context.Context) {
	if a.metrics == nil {
		return
	}
	if n, err := a.store.CountPendingApprovals(ctx); err == nil {
		a.metrics.ApprovalsPending.Set(float64(n))
	}
}

func (a *Approvals) afterDecision(ctx context.Context, appr store.Approval) error {
	if err := a.events.Emit(ctx, appr.RunID, "approval-decided:"+appr.ID, events.ApprovalDecided, appr.Agent, events.ApprovalDecidedData{
		ApprovalID: appr.ID, Kind: appr.Kind, Tool: appr.Tool, Status: appr.Status, DecidedBy: appr.DecidedBy, Reason: appr.DecisionReason,
		Edited: len(appr.EditedArgs) > 0, GrantID: appr.GrantID, Answer: appr.Answer,
	}); err != nil {
		return err
	}
	if n, err := a.store.PendingApprovals(ctx, appr.RunID); err != nil {
		return err
	} else if n == 0 {
		if _, err := a.store.SetRunWaiting(ctx, appr.RunID, false); err != nil {
			return err
		}
	}
	session, err := queue.ParseRunSession(appr.RunID, appr.SessionID)
	if err != nil {
		return fmt.Errorf("approval %s: %w", appr.ID, err)
	}
	run, err := a.store.GetRun(ctx, appr.RunID)
	if err != nil {
		return fmt.Errorf("approval %s: %w", appr.ID, err)
	}
	return a.queue.Resume(ctx, queue.Route{Key: run.FairKey, Priority: run.Priority}, session, "approval:"+appr.ID)
}

// traceWait records the wait for a person's decision (issue 42) when the
// call resumes with it: a span from the request to the decision, a child of
// the resumed call's span, linked to the call that asked (another step, maybe
// another process). Off, nothing.
func traceWait(ctx context.Context, appr store.Approval) {
	var opts []trace.SpanStartOption
	if l, ok := tracing.Link(appr.TraceContext); ok {
		opts = append(opts, trace.WithLinks(l))
	}
	_, span := tracing.StartChild(ctx, tracing.SpanApprovalWait, append(opts, trace.WithTimestamp(appr.CreatedAt),
		trace.WithAttributes(tracing.ApprovalID.String(appr.ID), tracing.ApprovalKind.String(appr.Kind), tracing.ApprovalStatus.String(appr.Status)))...)
	end := time.Now()
	if appr.DecidedAt != nil {
		end = *appr.DecidedAt
	}
	span.End(trace.WithTimestamp(end))
}
