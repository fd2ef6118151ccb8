package llm

import (
	"cmp"
	"context"
	"errors"
	"fmt"
)

// Link is one model of a fallback chain: the provider and the model to ask
// it ("" for the provider's default), with its own answer cap (0: the
// request's).
type Link struct {
	Provider  Provider
	Model     string
	MaxTokens int
}

// Chain is a provider that asks links[0] and, when it is overloaded (a 5xx,
// 503 or 529 — Overloaded, also under a WaitError), the next link, and so on.
// A 4xx, a rate limit (429) or any other error ends the chain at once: the
// request or the credential is at fault, which another model would not fix,
// and a 429 is waited out rather than spread. When every link is overloaded,
// the first link's error is returned (a WaitError parks the step, which
// starts again from the first link). The answer names the link that gave it
// (Provider, Model, Fallback).
func Chain(links ...Link) Provider {
	if len(links) == 1 && links[0].Model == "" && links[0].MaxTokens == 0 {
		return links[0].Provider
	}
	return chain(links)
}

type chain []Link

// Name is the first link's: metrics and logs name the team's provider.
func (c chain) Name() string { return c[0].Provider.Name() }

func (c chain) Complete(ctx context.Context, req Request) (Response, error) {
	var first error
	for i, l := range c {
		r := req
		r.Model = cmp.Or(l.Model, req.Model)
		r.MaxTokens = cmp.Or(l.MaxTokens, req.MaxTokens)
		resp, err := l.Provider.Complete(ctx, r)
		if err == nil {
			resp.Provider = cmp.Or(resp.Provider, l.Provider.Name())
			resp.Model = cmp.Or(resp.Model, r.Model)
			resp.Fallback = i > 0
			return resp, nil
		}
		if i == 0 {
			first = err
		}
		if !overloaded(err) || ctx.Err() != nil {
			if i == 0 {
				return resp, err
			}
			return resp, fmt.Errorf("fallback %s/%s (after %v): %w", l.Provider.Name(), r.Model, first, err)
		}
	}
	return Response{}, first
}

// overloaded: the provider failed, not the request: a 5xx (503 and 529 among
// them) seen directly or as the cause of a WaitError.
func overloaded(err error) bool {
	var api *APIError
	return errors.As(err, &api) && api.Overloaded()
}
