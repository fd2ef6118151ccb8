package governor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/aetherium-engine/aetherium/llm"
)

// DefaultOutputEstimate is the output a request with MaxTokens 0 is assumed
// to produce, until Done corrects it.
const DefaultOutputEstimate = 1024

// Estimate is a call's token estimate before it is made: for each message
// (the system prompt is one) and each tool definition, ceil(bytes/4) of its
// JSON plus 1 (the brackets and commas around it), plus MaxTokens
// (DefaultOutputEstimate when 0). It is never below ceil(bytes/4) of the JSON
// of the messages and tools however a counter groups them (all at once, the
// system prompt apart, one by one). Four bytes a token over-estimates real
// tokenizers on English and code, the safe side; Done puts the real count in
// its place.
func Estimate(req llm.Request) int {
	n := 1 // the list's brackets
	for _, m := range req.Messages {
		n += jsonTokens(m)
	}
	for _, t := range req.Tools {
		n += jsonTokens(t)
	}
	if req.MaxTokens > 0 {
		n += req.MaxTokens
	} else {
		n += DefaultOutputEstimate
	}
	return max(n, 1)
}

// jsonTokens is ceil(bytes/4)+1 of v's JSON; when v does not marshal (bad
// raw JSON in tool arguments or a schema), twice its printed length counts.
func jsonTokens(v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		return (2*len(fmt.Sprint(v))+3)/4 + 1
	}
	return (len(b)+3)/4 + 1
}

// Middleware is Provider as a func, for a chain of provider middlewares.
func (g *Governor) Middleware() func(llm.Provider) llm.Provider { return g.Provider }

// Provider wraps next: each Complete is admitted first (key next.Name() and
// req.Model, Estimate tokens, req.Team and req.Principal for the shares), and
// returns at once a *llm.WaitError instead of waiting. After the call, Done
// corrects the tokens with the real usage and frees the concurrency slot; a
// failed call, or one without usage, keeps its estimate in the window (the
// provider may well have counted it).
// A provider's 429/503/529 comes back as a *llm.WaitError (Limit "HTTP 429",
// Cause the APIError); a 429 also blocks the whole fleet (Feedback). Every
// other error passes unchanged. Disabled, no admission is made, but the
// provider's "not now" answers still become WaitErrors.
//
// When Redis cannot be reached the call is let through (logged): the
// provider's own 429s still park the fleet's calls.
func (g *Governor) Provider(next llm.Provider) llm.Provider {
	return &governed{g: g, next: next}
}

type governed struct {
	g    *Governor
	next llm.Provider
}

func (p *governed) Name() string { return p.next.Name() }

func (p *governed) Complete(ctx context.Context, req llm.Request) (llm.Response, error) {
	g, name := p.g, p.next.Name()
	call := Call{Provider: name, Model: req.Model, Team: req.Team, Principal: req.Principal, Tokens: Estimate(req)}
	r, err := g.Admit(ctx, call)
	if err != nil {
		var w *llm.WaitError
		if errors.As(err, &w) || errors.Is(err, ErrNeverFits) || ctx.Err() != nil {
			return llm.Response{}, err
		}
		g.log.Warn("admission failed; letting the call through", "provider", name, "model", req.Model, "err", err)
		r = nil
	}
	resp, err := p.next.Complete(ctx, req)
	actual := 0
	if err == nil {
		actual = resp.Usage.Total()
	}
	if derr := g.Done(context.WithoutCancel(ctx), r, actual); derr != nil {
		g.log.Warn("releasing a reservation failed", "provider", name, "model", req.Model, "err", derr)
	}
	if err == nil {
		if lim := resp.Limits; lim != nil && (lim.RequestsRemaining == 0 || lim.TokensRemaining == 0) {
			if _, ferr := g.Feedback(context.WithoutCancel(ctx), name, req.Model, http.StatusOK, 0, lim); ferr != nil {
				g.log.Warn("feedback failed", "provider", name, "model", req.Model, "err", ferr)
			}
		}
		return resp, nil
	}
	var ae *llm.APIError
	if !errors.As(err, &ae) || !ae.RateLimited() {
		return resp, err
	}
	after := Penalty(ae.Status, ae.RetryAfter, ae.Limits)
	if ae.Status == http.StatusTooManyRequests {
		d, ferr := g.Feedback(context.WithoutCancel(ctx), name, req.Model, ae.Status, ae.RetryAfter, ae.Limits)
		if ferr != nil {
			g.log.Warn("feedback failed", "provider", name, "model", req.Model, "err", ferr)
		}
		after = max(after, d)
	} else if f := g.cfg.Load().Observer.OnFeedback; f != nil {
		f(name, req.Model, ae.Status, 0)
	}
	w := &llm.WaitError{After: after, Limit: "HTTP " + strconv.Itoa(ae.Status), Cause: err}
	if f := g.cfg.Load().Observer.OnWait; f != nil {
		f(w.Limit, w.After)
	}
	return llm.Response{}, w
}
