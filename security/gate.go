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
	"github.com/aetherium-engine/aetherium/tracing"
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

// Recorded returns a copy of the gate for replay (package replay): the same
// layers and settings, judging under rules (nil: the gate's own), that writes
// nothing. Its approvals read the decision a run recorded for the call and
// never request one (a call the rules hold now and nobody decided is answered
// Pending); it counts no metric. The audit row still rides back on the result
// for the caller to compare: replay writes none.
func (g *Gate) Recorded(rules *Rules) *Gate {
	c := *g
	if rules != nil {
		c.rules = rules
	}
	c.metrics = nil
	c.approvals = g.approvals.recorded()
	return &c
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
			Tool: call.Name, Tier: tier.String(), TraceID: tracing.TraceID(ctx),
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
		// edit is the approval whose edit this pass judges: an edited call goes
		// through the whole gate again with the approver's arguments.
		var edit *store.Approval
		deny := func(layer, reason string, sentinel error) (tools.Result, error) {
			if g.metrics != nil {
				g.metrics.GateDenials.WithLabelValues(layer).Inc()
			}
			if edit != nil {
				reason = "a human reviewer (" + edit.DecidedBy + ") edited this call, and the edited call was refused: " + reason
			}
			return tools.Result{}, &tools.Denied{Layer: layer, Reason: reason, Err: sentinel}
		}
		rev := g.rules.Current().Revision()

	judge:
		for {
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

			// 5. a human: the question of a tool that asks one, a grant, or an
			// approval bound to the exact arguments (the hash of their canonical form).
			if spec.AsksHuman != nil {
				ans, stop, res, err := g.question(ctx, s, call, spec, tier, rev, &row, &pending, deny)
				if stop {
					return res, err
				}
				call.Answer = ans
			} else if why != "" {
				hash, herr := egress.ArgsHash(call.Args)
				if herr != nil {
					return deny("approval", "the arguments cannot be bound to an approval: "+herr.Error(), nil)
				}
				row.ArgsHash, row.PolicyRevision = hash, rev
				if edit != nil {
					// The edited call, held again: it runs bound to the edit's hash.
					if edit.EditedArgsHash != hash {
						return deny("approval", argsChangedReason(store.Approval{ArgsHash: edit.EditedArgsHash}, hash), ErrArgsChanged)
					}
					row.ApprovalID, row.ApprovedBy = edit.ID, edit.DecidedBy
					break judge
				}
				granted, err := g.granted(ctx, s, call, why, hash, rev, &row)
				if err != nil {
					return tools.Result{}, err
				}
				if granted {
					break judge
				}
				view, masked := g.dlp.ApproverView(call.Args)
				appr, err := g.approvals.ensure(ctx, s, call, store.Approval{Kind: store.KindCall, Tier: tier.String(), Why: why,
					Args: masked, ArgsHash: hash, PolicyRevision: rev}, view)
				if err != nil {
					return tools.Result{}, fmt.Errorf("approval: %w", err)
				}
				switch appr.Status {
				case store.ApprovalPending:
					pending = true
					return tools.Result{Pending: true, Content: "waiting for approval " + appr.ID}, nil
				case store.ApprovalApproved, store.ApprovalEdited:
					if appr.ArgsHash != hash {
						return deny("approval", argsChangedReason(appr, hash), ErrArgsChanged)
					}
					if appr.PolicyRevision != "" && appr.PolicyRevision != rev {
						return deny("approval", fmt.Sprintf("the permissions changed since this call was held (revision %s, now %s): "+
							"the call did not run; call again to ask again", appr.PolicyRevision, rev), ErrPolicyChanged)
					}
					if appr.Status == store.ApprovalEdited {
						row.OriginalArgs = g.redactJSON(call.Args, &findings)
						row.EditedBy = appr.DecidedBy
						call.Args, findings, edit = appr.EditedArgs, nil, &appr
						continue judge
					}
					row.ApprovalID, row.ApprovedBy = appr.ID, appr.DecidedBy
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
					if g.metrics != nil {
						g.metrics.GateDenials.WithLabelValues("approval").Inc()
					}
					// The reviewer's words are addressed to the agent: marked as a
					// human's, and no failure of the agent's (tools.Denied.Human).
					return tools.Result{}, &tools.Denied{Layer: "approval", Human: true,
						Reason: "rejected by a human reviewer (" + appr.DecidedBy + "): " + reason}
				}
			}
			break judge
		}
		if edit != nil {
			// The edit needed no human any more (it asks for less): still the
			// approval's decision that let it run.
			// The first pass set the model's hash: the call runs with the edit's.
			row.ApprovalID, row.ApprovedBy = edit.ID, edit.DecidedBy
			row.ArgsHash, row.PolicyRevision = edit.EditedArgsHash, rev
		}

		// 6. execute. The egress client already scrubs what it returns; this also
		// covers a tool that reads a value some other way.
		res, err = next.Handle(ctx, call)
		res.Content = g.secrets.Scrub(res.Content)
		if edit != nil {
			// The model must know its call was not run as it asked.
			_, masked := g.dlp.ApproverView(call.Args)
			note := "[a human reviewer (" + edit.DecidedBy + ") edited this call before it ran; it ran with the arguments " + string(masked)
			if edit.DecisionReason != "" {
				note += "; the reviewer's note: " + edit.DecisionReason
			}
			res.Content = note + "]\n" + res.Content
		}
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
	// jsonb refuses the NUL escape and a lone surrogate's (\ud800); the row must
	// land whatever the model sent, and the rest of its batch with it.
	red = string(store.JSONBSafe([]byte(red)))
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
		row.Summary = pgText(truncateBytes(g.RedactText(truncateBytes(string(call.Args), summaryScanBytes)), summaryBytes))
	} else {
		row.Args = g.redactJSON(call.Args, &findings)
		result := pgText(g.RedactText(res.Content))
		row.Result = &result
		row.Summary = pgText(truncateBytes(string(row.Args), summaryBytes))
	}
	if row.Error != "" {
		row.Error = pgText(g.RedactText(row.Error))
	}
	row.DenyReason = pgText(row.DenyReason)
}

// RedactText masks what DLP finds in s and scrubs the team secrets: how audit
// rows keep text, and how opt-in trace content (tracing.capture_content) is masked.
func (g *Gate) RedactText(s string) string {
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

// ErrPolicyChanged denies an approved call whose approval was asked under another
// revision of the permissions file.
var ErrPolicyChanged = errors.New("permissions changed since approval")

// questionWhy is the why of every question: the approval list tells them apart
// by kind, and the question itself is in the view.
const questionWhy = "the agent asks a person"

// question holds a call of a tool that asks a person (tools.AsksHuman) as a
// question, and returns the answer once there is one. stop: the call ends here
// with res, err (waiting, a bad question, nobody answered).
func (g *Gate) question(ctx context.Context, s *tools.Session, call tools.Call, spec *tools.Spec, tier tools.Tier, rev string, row *store.AuditRow,
	pending *bool, deny func(layer, reason string, sentinel error) (tools.Result, error)) (ans *tools.HumanAnswer, stop bool, res tools.Result, err error) {
	q, err := spec.AsksHuman(call.Args)
	if err != nil {
		// The model's mistake: a tool error, and nobody is asked.
		return nil, true, tools.Result{}, err
	}
	hash, herr := egress.ArgsHash(call.Args)
	if herr != nil {
		res, err = deny("approval", "the question cannot be bound to an approval: "+herr.Error(), nil)
		return nil, true, res, err
	}
	_, masked := g.dlp.ApproverView(call.Args)
	q.Text = g.dlp.MaskSecrets(q.Text)
	for i, c := range q.Choices {
		q.Choices[i] = g.dlp.MaskSecrets(c)
	}
	appr, err := g.approvals.ensure(ctx, s, call, store.Approval{Kind: store.KindQuestion, Tier: tier.String(), Why: questionWhy,
		Args: masked, ArgsHash: hash, PolicyRevision: rev}, q)
	if err != nil {
		return nil, true, tools.Result{}, fmt.Errorf("question: %w", err)
	}
	row.ArgsHash, row.PolicyRevision, row.ApprovalID = hash, rev, appr.ID
	switch appr.Status {
	case store.ApprovalPending:
		*pending = true
		return nil, true, tools.Result{Pending: true, Content: "waiting for an answer to " + appr.ID}, nil
	case store.ApprovalAnswered:
		row.ApprovedBy = appr.DecidedBy
		return &tools.HumanAnswer{By: appr.DecidedBy, Text: appr.Answer}, false, tools.Result{}, nil
	case store.ApprovalTimedOut:
		return nil, true, tools.Result{}, fmt.Errorf("%s: nobody answered within the approval window; go on with your best judgment, or stop and say what you need", call.Name)
	case store.ApprovalCancelled:
		res, err = deny("approval", "cancelled: the "+appr.DecisionReason+" before an answer", nil)
		return nil, true, res, err
	}
	return nil, true, tools.Result{}, fmt.Errorf("%s: question %s is %s", call.Name, appr.ID, appr.Status)
}

// granted looks for a grant that lets a held call run without asking: only for
// a call with no approval of its own yet (a decision on it wins, whatever grants
// came since), only for the asks of the tier and escalation (never for the flow
// rules': the untrusted content would be spending the grant), and only a grant
// made under the permissions in force.
func (g *Gate) granted(ctx context.Context, s *tools.Session, call tools.Call, why, hash, rev string, row *store.AuditRow) (bool, error) {
	if strings.Contains(why, untrustedRead) || s.Owner == "" {
		return false, nil
	}
	if _, err := g.approvals.store.ApprovalForCall(ctx, s.SessionID, call.ID); err == nil {
		return false, nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return false, fmt.Errorf("approval of %s: %w: %w", call.ID, tools.ErrInfrastructure, err)
	}
	grants, err := g.approvals.store.LiveGrants(ctx, call.Name, store.GrantScope{Owner: s.Owner, RunID: s.RunID, ProjectID: s.Project, Team: s.Team})
	if err != nil {
		return false, fmt.Errorf("grants: %w: %w", tools.ErrInfrastructure, err)
	}
	for _, gr := range grants {
		if gr.PolicyRevision != rev || !grantCovers(gr, call.Args, hash) {
			continue
		}
		row.GrantID, row.ApprovedBy = gr.ID, "grant "+gr.ID+" ("+gr.CreatedBy+")"
		g.log.Info("call runs under a grant", "grant_id", gr.ID, "run_id", s.RunID, "tool", call.Name)
		return true, nil
	}
	return false, nil
}
