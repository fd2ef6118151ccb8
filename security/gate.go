package security

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/metrics"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/tools"
)

// Gate is the permission gate as a tools.Middleware.
type Gate struct {
	reg       *tools.Registry
	rules     *Rules
	dlp       *egress.DLP
	approvals *Approvals
	metrics   *metrics.Metrics
	log       *slog.Logger
	secrets   *egress.Secrets
	policy    *egress.EgressPolicy
	flow      string
	// content is security.flow_private_content.
	content string
	// instructions are the instruction files' names and folders, lowercased.
	instructions []string
}

// GateDeps are the gate's collaborators; Rules, DLP and Approvals are required.
type GateDeps struct {
	Registry  *tools.Registry
	Rules     *Rules
	DLP       *egress.DLP
	Approvals *Approvals
	Metrics   *metrics.Metrics
	Log       *slog.Logger
	// Secrets are the team secrets: their values are scrubbed from results, errors
	// and audit rows (optional).
	Secrets *egress.Secrets
	// Policy adds the fleet's own endpoints and the private switch to the egress
	// layer. Optional: nil checks URLs with the package-level CheckURL.
	Policy *egress.EgressPolicy
	// Flow is security.flow (FlowAsk or FlowOff). Empty: DefaultFlow.
	Flow string
	// InstructionFiles is security.flow_instruction_files. Nil:
	// DefaultInstructionFiles.
	InstructionFiles []string
	// PrivateContent is security.flow_private_content (FlowContentRefuse or
	// FlowContentAsk). Empty: DefaultFlowContent.
	PrivateContent string
}

// NewGate returns the gate.
func NewGate(d GateDeps) *Gate {
	if d.Log == nil {
		d.Log = slog.Default()
	}
	return &Gate{reg: d.Registry, rules: d.Rules, dlp: d.DLP, approvals: d.Approvals, metrics: d.Metrics, log: d.Log, secrets: d.Secrets, policy: d.Policy,
		flow: cmp.Or(d.Flow, DefaultFlow), content: cmp.Or(d.PrivateContent, DefaultFlowContent), instructions: lowered(d.InstructionFiles)}
}

// summaryBytes bounds what a Standard call keeps in its audit row; summaryScanBytes
// is the head of the arguments scanned for secrets before that cut.
const (
	summaryBytes     = 240
	summaryScanBytes = 4 << 10
)

// Middleware gates every call and audits every attempt exactly once: the attempt's
// row rides back on the result (tools.Result.Audit), refusals included, and the
// caller (the agent loop) writes it with the session that holds the call's result,
// so a crash can lose neither without the other.
func (g *Gate) Middleware(next tools.Handler) tools.Handler {
	return tools.HandlerFunc(func(ctx context.Context, call tools.Call) (res tools.Result, err error) {
		s := call.Session
		if s == nil {
			return tools.Result{}, errors.New("gate: call without a session context")
		}
		start := time.Now()
		// The tier its registration declares (Standard for a name nobody
		// registered: the capability layer refuses it below, audited as such).
		tier := tools.Standard
		if sp, ok := g.reg.Spec(call.Name); ok {
			tier = sp.Tier
		}
		row := store.AuditRow{
			CallKey: s.SessionID + ":" + call.ID, RunID: s.RunID, Team: s.Team, Agent: s.Agent, Role: s.Role,
			Tool: call.Name, Tier: tier.String(),
		}
		var findings []egress.Finding
		pending := false
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("tool %s panicked: %v", call.Name, p)
				g.log.Error("tool panic", "tool", call.Name, "run_id", s.RunID, "panic", p)
			}
			if pending {
				return // no attempt yet: it is audited when it is decided and runs
			}
			if (ctx.Err() != nil && err != nil) || errors.Is(err, tools.ErrInfrastructure) {
				// Interrupted by a shutdown, or our own database or queue failed: the
				// step is redelivered and that attempt (re-run, replayed or "outcome
				// unknown") writes the call's one row.
				return
			}
			g.fillAudit(&row, call, tier, res, err, findings, start)
			res.Audit = &row
		}()
		deny := func(layer, reason string, sentinel error) (tools.Result, error) {
			if g.metrics != nil {
				g.metrics.GateDenials.WithLabelValues(layer).Inc()
			}
			return tools.Result{}, &tools.Denied{Layer: layer, Reason: reason, Err: sentinel}
		}

		// 1. capability
		if err := tools.CheckCapability(g.reg, s.Access, s.Agent, call.Name); err != nil {
			var d *tools.Denied
			errors.As(err, &d)
			return deny(d.Layer, d.Reason, d.Err)
		}
		spec, _ := g.reg.Spec(call.Name)

		// 2. rules
		rule, advisory := g.rules.Current().Evaluate(CallFacts{Tool: call.Name, Team: s.Team, Agent: s.Agent, Source: s.TeamSource, Workspace: s.Workspace, Args: call.Args})
		for _, r := range advisory {
			g.log.Info("permission rule matched (advisory)", "action", r.Action, "tool", call.Name, "agent", s.Agent, "reason", r.Reason)
		}
		if rule != nil {
			reason := rule.Reason
			if reason == "" {
				reason = "blocked by a permissions rule"
			}
			return deny("rules", reason, nil)
		}

		// 3. tier and destructive escalation
		why := ""
		if tier == tools.Restricted {
			why = "restricted tool"
		}
		if spec.Escalate != nil {
			if w := spec.Escalate(call.Args); w != "" {
				why = w
			}
		}
		// 3b. flow: what the session has read (the model obeys it). A call the
		// tier already holds names the untrusted sources too.
		flow := g.rules.Current().Flow(s.Team, s.TeamSource, FlowSettings{Mode: g.flow, PrivateContent: g.content})
		if flow.Mode == FlowAsk && s.Label.Untrusted() {
			outbound := spec.Outbound || (spec.OutboundWhen != nil && spec.OutboundWhen(s))
			if c, ok := carried(s.Label, outbound, call.Args); ok {
				// The page's instruction is carrying the data out: refused outright
				// unless the run may be sharing boilerplate (an import block), or
				// the policy asks.
				reason := "flow: this call carries private content the session read (" + c.Source + ", " + carriedForm(c) + "); " +
					untrustedRead + " (" + s.Label.UntrustedSources() + ")"
				if flow.PrivateContent == FlowContentRefuse && !c.Boilerplate {
					return deny("flow", reason, nil)
				}
				why = strings.TrimPrefix(why+"; "+reason, "; ")
			} else if r := g.flowReason(spec, tier, call.Args, s.Label, flow.Instructions); r != "" {
				why = strings.TrimPrefix(why+"; "+r, "; ")
			} else if why != "" {
				why += "; " + untrustedRead + ": " + s.Label.UntrustedSources()
			}
		}

		// 4. egress + DLP on outbound tools; DLP alone on a tool that reaches the
		// network in this session only (its destinations are the proxy's).
		scan := func() error {
			var serr error
			if findings, serr = g.dlp.ScanArgs(call.Args); serr != nil {
				_, err := deny("dlp", serr.Error(), egress.ErrDLPTooLarge)
				return err
			} else if len(findings) > 0 {
				ids := egress.RuleIDs(findings)
				if g.metrics != nil {
					for _, id := range ids {
						g.metrics.DLPHits.WithLabelValues(id).Inc()
					}
				}
				_, err := deny("dlp", "outgoing arguments carry a credential (gitleaks rule "+strings.Join(ids, ", ")+"); remove it", nil)
				return err
			}
			return nil
		}
		if spec.Outbound {
			var strs, paths, urls []string
			var args map[string]any
			_ = json.Unmarshal(call.Args, &args)
			collect("", args, &strs, &paths, &urls)
			for _, u := range urls {
				if spec.LoopbackInSandbox && inRunSandbox(u) {
					continue
				}
				if err := g.checkURL(u, s); err != nil {
					return deny("egress", egressReason(err), egress.ErrEgressDenied)
				}
			}
			if err := scan(); err != nil {
				return tools.Result{}, err
			}
		} else if spec.OutboundWhen != nil && spec.OutboundWhen(s) {
			if err := scan(); err != nil {
				return tools.Result{}, err
			}
		}

		// 5. approval, bound to the exact arguments: the hash of their canonical form
		if why != "" {
			hash, herr := egress.ArgsHash(call.Args)
			if herr != nil {
				return deny("approval", "the arguments cannot be bound to an approval: "+herr.Error(), nil)
			}
			view, masked := g.dlp.ApproverView(call.Args)
			appr, err := g.approvals.Ensure(ctx, s, call, tier.String(), why, masked, hash, view)
			if err != nil {
				return tools.Result{}, fmt.Errorf("approval: %w", err)
			}
			switch appr.Status {
			case store.ApprovalPending:
				pending = true
				return tools.Result{Pending: true, Content: "waiting for approval " + appr.ID}, nil
			case store.ApprovalApproved:
				if appr.ArgsHash != hash {
					return deny("approval", argsChangedReason(appr, hash), ErrArgsChanged)
				}
				row.ApprovedBy = appr.DecidedBy
			case store.ApprovalTimedOut:
				row.Decision = "timed_out"
				return deny("approval", "timed_out: no human decision within the approval window", nil)
			case store.ApprovalCancelled:
				return deny("approval", "cancelled: the "+appr.DecisionReason+" before a decision", nil)
			default:
				reason := appr.DecisionReason
				if reason == "" {
					reason = "no reason given"
				}
				return deny("approval", "denied by "+appr.DecidedBy+": "+reason, nil)
			}
		}

		// 6. execute. The egress client already scrubs what it returns; this also
		// covers a tool that reads a value some other way.
		res, err = next.Handle(ctx, call)
		res.Content = g.secrets.Scrub(res.Content)
		err = g.secrets.ScrubError(err)
		var d *tools.Denied
		if err != nil && errors.Is(err, egress.ErrEgressDenied) && !errors.As(err, &d) {
			// The egress client refused a redirect or a dialed address: a refusal of
			// the egress layer like one found before the call, not a tool error. The
			// tool ran, and the refused address is the remote's choice (Ran).
			_, err = deny("egress", egressReason(err), egress.ErrEgressDenied)
			err.(*tools.Denied).Ran = true
			return tools.Result{}, err
		}
		return res, err
	})
}

// carried asks the session's fingerprints whether an outbound call's arguments
// carry private content it read.
func carried(l *tools.Label, outbound bool, args json.RawMessage) (tools.Carried, bool) {
	if !outbound || l == nil || l.Content == nil || !l.Private() {
		return tools.Carried{}, false
	}
	return l.Content.Carried(string(args))
}

// carriedForm says how the content was sent, for the approver.
func carriedForm(c tools.Carried) string {
	form := "as sent"
	if c.Form != "" && c.Form != "plain" {
		form = c.Form
	}
	s := fmt.Sprintf("%s, %d characters", form, c.Chars)
	if c.Boilerplate {
		s += ", text the private reads repeat"
	}
	return s
}

// untrustedRead opens every reason the flow rules give: the approvals' expiry
// reads it too (an ask of the flow rules never falls back to the supervisor).
const untrustedRead = "the session read untrusted content"

// flowReason is why a call of a session that read untrusted content needs a human
// ("" when the flow rules let it run): an outbound call once the session also
// read private data (the lethal trifecta: it may carry the data out), a write
// where later runs will read it, and any other Elevated or Restricted call (a
// shell, a subagent) that the injected content may be steering.
func (g *Gate) flowReason(spec *tools.Spec, tier tools.Tier, args json.RawMessage, l *tools.Label, extraInstructions []string) string {
	from := untrustedRead + " (" + l.UntrustedSources() + ")"
	if p := spec.WrittenPath(args); p != "" && (isInstructionFile(p, g.instructions) || isInstructionFile(p, extraInstructions)) {
		return "flow: " + from + "; this writes " + p + ", which later runs read as instructions"
	}
	if spec.ChangesRemote != nil {
		if change := spec.ChangesRemote(args); change != "" {
			return "flow: " + from + "; this " + change + " changes state on a remote service"
		}
	}
	switch {
	case spec.Outbound && l.Private():
		return "flow: " + from + " and private data (" + l.PrivateSources() + "); this outbound call may carry the private data out"
	case spec.Persists:
		return "flow: " + from + "; this writes where later runs will read it"
	case tier >= tools.Elevated && !spec.Outbound:
		return "flow: " + from + "; it may be steering this " + tier.String() + " call"
	}
	return ""
}

func (g *Gate) checkURL(u string, s *tools.Session) error {
	if g.policy == nil {
		return egress.CheckURL(u, s.AllowedDomains)
	}
	return g.policy.CheckURLFor(u, s.AllowedDomains, s.EgressDenyPrivate)
}

// inRunSandbox tells a loopback http(s) URL without credentials: for a tool
// registered with tools.LoopbackInSandbox it is the run's own app, reached
// inside the run's sandbox, so the egress policy (built for destinations seen
// from the worker) does not judge it. The predicate is the tools' own.
func inRunSandbox(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.User != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	return tools.IsLoopbackHost(u.Hostname())
}

// egressReason is the refusal without the sentinel's text, which the layer names.
func egressReason(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, egress.ErrEgressDenied.Error()+": "); i >= 0 {
		return msg[:i] + msg[i+len(egress.ErrEgressDenied.Error())+2:]
	}
	return msg
}

func (g *Gate) redactJSON(args json.RawMessage, findings *[]egress.Finding) json.RawMessage {
	if *findings == nil {
		*findings = g.dlp.Scan(string(args))
	}
	red := g.secrets.Scrub(egress.Redact(string(args), *findings))
	if !json.Valid([]byte(red)) {
		b, _ := json.Marshal(map[string]string{"redacted": red})
		red = string(b)
	}
	// jsonb refuses the NUL escape; the row must land whatever the model sent.
	return json.RawMessage(strings.ReplaceAll(red, `\u0000`, `\ufffd`))
}

// fillAudit completes the attempt's row from its outcome, redacted.
func (g *Gate) fillAudit(row *store.AuditRow, call tools.Call, tier tools.Tier, res tools.Result, err error, findings []egress.Finding, start time.Time) {
	row.At = start
	row.DurationMS = time.Since(start).Milliseconds()
	outcome, _ := tools.Classify(err)
	if row.Decision == "" { // "timed_out" is a denial the approval layer names itself
		row.Decision = string(outcome)
	}
	if outcome == tools.OutcomeDenied {
		var d *tools.Denied
		errors.As(err, &d)
		row.DenyLayer, row.DenyReason = d.Layer, d.Reason
	} else {
		row.Allowed = true
		if err != nil {
			row.Error = err.Error()
		}
	}
	if tier == tools.Standard {
		// Redact before the cut, so a secret straddling it is still recognised; a
		// bounded window keeps a large write_file body cheap.
		row.Summary = pgText(truncateBytes(g.redactText(truncateBytes(string(call.Args), summaryScanBytes)), summaryBytes))
	} else {
		row.Args = g.redactJSON(call.Args, &findings)
		result := pgText(g.redactText(res.Content))
		row.Result = &result
		row.Summary = pgText(truncateBytes(string(row.Args), summaryBytes))
	}
	if row.Error != "" {
		row.Error = pgText(g.redactText(row.Error))
	}
	row.DenyReason = pgText(row.DenyReason)
}

func (g *Gate) redactText(s string) string {
	if s == "" {
		return s
	}
	return g.secrets.Scrub(egress.Redact(s, g.dlp.Scan(s)))
}

// truncateBytes cuts s to at most n bytes on a character boundary.
func truncateBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// pgText makes s storable in a PostgreSQL text column, which refuses invalid UTF-8
// and NUL (a tool's binary output must not make its audit row fail, and with it
// the rest of the batch).
func pgText(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

func lowered(list []string) []string {
	if list == nil {
		list = DefaultInstructionFiles
	}
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = strings.ToLower(strings.TrimPrefix(strings.TrimSpace(s), "/"))
	}
	return out
}

// isInstructionFile reports whether the workspace path p names an instruction
// file: its base name is one of the names, or one of its folders is one of the
// folders (the entries ending in /). The path is cleaned first, so ./, // and
// .. spell no way around it; case is folded.
func isInstructionFile(p string, entries []string) bool {
	clean := strings.ToLower(path.Clean("/" + strings.ReplaceAll(p, "\\", "/")))
	parts := strings.Split(strings.TrimPrefix(clean, "/"), "/")
	base := parts[len(parts)-1]
	for _, e := range entries {
		if dir, ok := strings.CutSuffix(e, "/"); ok {
			if strings.Contains(clean+"/", "/"+dir+"/") && clean != "/"+dir {
				return true
			}
			continue
		}
		if base == e {
			return true
		}
	}
	return false
}
