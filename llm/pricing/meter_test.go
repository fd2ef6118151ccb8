package pricing_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/llm/pricing"
)

// fake answers every call with resp (or err), and remembers the request.
type fake struct {
	name string
	resp llm.Response
	err  error
	got  llm.Request
}

func (f *fake) Name() string { return f.name }

func (f *fake) Complete(_ context.Context, req llm.Request) (llm.Response, error) {
	f.got = req
	return f.resp, f.err
}

func TestMeter(t *testing.T) {
	t.Parallel()
	tb := parse(t, small)
	u := llm.Usage{InputTokens: 1000, CachedInputTokens: 400, OutputTokens: 100}
	want, ok := tb.Cost("openai", "gpt-4o", u)
	require.True(t, ok)
	for _, tc := range []struct {
		name     string
		next     fake
		model    string // the request's model
		table    func() *pricing.Table
		cost     llm.Money
		priced   bool
		wantsErr bool
	}{
		{name: "priced", next: fake{name: "openai", resp: llm.Response{Model: "gpt-4o", Provider: "openai", Usage: u}}, table: func() *pricing.Table { return tb }, cost: want, priced: true},
		{name: "alias the server answers with", next: fake{name: "openai", resp: llm.Response{Model: "gpt-4o-2024-08-06", Usage: u}}, table: func() *pricing.Table { return tb }, cost: want, priced: true},
		{name: "provider from Name when the answer has none", next: fake{name: "openai", resp: llm.Response{Model: "gpt-4o", Usage: u}}, table: func() *pricing.Table { return tb }, cost: want, priced: true},
		{name: "answer's provider wins over Name", next: fake{name: "chain", resp: llm.Response{Model: "gpt-4o", Provider: "openai", Usage: u}}, table: func() *pricing.Table { return tb }, cost: want, priced: true},
		{name: "request's model when the answer has none", model: "gpt-4o", next: fake{name: "openai", resp: llm.Response{Usage: u}}, table: func() *pricing.Table { return tb }, cost: want, priced: true},
		{name: "unpriced model", next: fake{name: "openai", resp: llm.Response{Model: "gpt-9", Usage: u}}, table: func() *pricing.Table { return tb }},
		{name: "no model at all", next: fake{name: "openai", resp: llm.Response{Usage: u}}, table: func() *pricing.Table { return tb }},
		{name: "a stale cost from an inner layer is overwritten", next: fake{name: "openai", resp: llm.Response{Model: "gpt-9", Usage: u, Cost: 42, Priced: true}}, table: func() *pricing.Table { return tb }},
		{name: "malformed usage", next: fake{name: "openai", resp: llm.Response{Model: "gpt-4o", Usage: llm.Usage{InputTokens: -1}}}, table: func() *pricing.Table { return tb }},
		{name: "nil table", next: fake{name: "openai", resp: llm.Response{Model: "gpt-4o", Usage: u}}, table: func() *pricing.Table { return nil }},
		{name: "nil table func", next: fake{name: "openai", resp: llm.Response{Model: "gpt-4o", Usage: u}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			next := tc.next
			p := pricing.Meter(tc.table)(&next)
			require.Equal(t, next.name, p.Name())
			req := llm.Request{Model: tc.model, Agent: "writer"}
			resp, err := p.Complete(context.Background(), req)
			require.NoError(t, err)
			require.Equal(t, req, next.got)
			require.Equal(t, tc.priced, resp.Priced)
			require.Equal(t, tc.cost, resp.Cost)
			// Nothing else of the answer changes.
			resp.Cost, resp.Priced = next.resp.Cost, next.resp.Priced
			require.Equal(t, next.resp, resp)
		})
	}
}

func TestMeterPassesErrorsThrough(t *testing.T) {
	t.Parallel()
	apiErr := &llm.APIError{Provider: "openai", Status: 500, Message: "boom"}
	partial := llm.Response{Model: "gpt-4o", Usage: llm.Usage{InputTokens: 10}}
	next := &fake{name: "openai", resp: partial, err: apiErr}
	p := pricing.Meter(func() *pricing.Table { return parse(t, small) })(next)
	resp, err := p.Complete(context.Background(), llm.Request{})
	require.Same(t, apiErr, err)
	var target *llm.APIError
	require.True(t, errors.As(err, &target))
	require.Equal(t, partial, resp)
	require.False(t, resp.Priced)
	require.Zero(t, resp.Cost)
}

// The table func is read at every call: swapping it reprices the next call.
func TestMeterHotSwap(t *testing.T) {
	t.Parallel()
	var cur atomic.Pointer[pricing.Table]
	cur.Store(parse(t, small))
	next := &fake{name: "openai", resp: llm.Response{Model: "gpt-4o", Usage: llm.Usage{InputTokens: 1}}}
	p := pricing.Meter(cur.Load)(next)
	resp, err := p.Complete(context.Background(), llm.Request{})
	require.NoError(t, err)
	require.Equal(t, llm.Money(2_500_000), resp.Cost)

	over := parse(t, "currency: USD\nas_of: 2026-12-01\nmodels:\n  - {provider: openai, model: gpt-4o, input: 2, output: 8}\n")
	cur.Store(over)
	resp, err = p.Complete(context.Background(), llm.Request{})
	require.NoError(t, err)
	require.Equal(t, llm.Money(2_000_000), resp.Cost)
}
