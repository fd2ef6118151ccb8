package governor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/llm/governor"
)

// fake is a third-party provider: it answers with what answer says, counting
// its calls.
type fake struct {
	name   string
	calls  atomic.Int64
	answer func(req llm.Request) (llm.Response, error)
}

func (f *fake) Name() string { return f.name }

func (f *fake) Complete(_ context.Context, req llm.Request) (llm.Response, error) {
	f.calls.Add(1)
	return f.answer(req)
}

func usage(in, out int) func(llm.Request) (llm.Response, error) {
	return func(llm.Request) (llm.Response, error) {
		return llm.Response{Message: llm.Message{Role: llm.RoleAssistant, Content: "ok"}, Usage: llm.Usage{InputTokens: in, OutputTokens: out}}, nil
	}
}

func fails(err error) func(llm.Request) (llm.Response, error) {
	return func(llm.Request) (llm.Response, error) { return llm.Response{}, err }
}

func request(model string, maxTokens int) llm.Request {
	return llm.Request{Model: model, MaxTokens: maxTokens, Team: "a", Principal: "alice", Messages: []llm.Message{
		{Role: llm.RoleSystem, Content: "You are terse."},
		{Role: llm.RoleUser, Content: "Say ok."},
	}}
}

func complete(t *testing.T, p llm.Provider, req llm.Request) error {
	t.Helper()
	_, err := p.Complete(context.Background(), req)
	return err
}

func waitErr(t *testing.T, err error, limit string) *llm.WaitError {
	t.Helper()
	var w *llm.WaitError
	require.ErrorAs(t, err, &w)
	require.Equal(t, limit, w.Limit)
	return w
}

func TestMiddlewareCorrectsTokensWithTheRealUsage(t *testing.T) {
	t.Parallel()
	setup(t, func(t *testing.T, e *env) {
		g := e.worker(t, governor.Config{Window: 2 * time.Second, Limits: []governor.Limit{{Provider: "p", Model: "m", TPM: 1000, Concurrency: 1}}})
		f := &fake{name: "p", answer: usage(30, 20)}
		p := g.Middleware()(f)
		require.Equal(t, "p", p.Name())
		for range 5 { // 5 × an estimate over 600 would not fit; 5 × 50 does
			require.NoError(t, complete(t, p, request("m", 600)))
		}
		tok, err := e.rdb.Get(context.Background(), e.key("p", "m:m:tok")).Int()
		require.NoError(t, err)
		require.Equal(t, 5*50, tok)
		n, err := e.rdb.ZCard(context.Background(), e.key("p", "m:m:conc")).Result()
		require.NoError(t, err)
		require.Zero(t, n, "every slot freed")
	})
}

func TestMiddlewareReturnsAWaitWithoutCallingTheProvider(t *testing.T) {
	t.Parallel()
	setup(t, func(t *testing.T, e *env) {
		g := e.worker(t, limits(governor.Limit{Provider: "p", RPM: 1, TPM: 5000}))
		f := &fake{name: "p", answer: usage(1, 1)}
		p := g.Provider(f)
		require.NoError(t, complete(t, p, request("m", 10)))
		w := waitErr(t, complete(t, p, request("m", 10)), "p/* rpm")
		require.Positive(t, w.After)
		require.Nil(t, w.Cause)

		err := complete(t, p, request("m", 6000))
		require.ErrorIs(t, err, governor.ErrNeverFits)
		require.EqualValues(t, 1, f.calls.Load())
	})
}

func TestMiddlewareParksOnA429AndBlocksTheFleet(t *testing.T) {
	t.Parallel()
	setup(t, func(t *testing.T, e *env) {
		cfg := limits(governor.Limit{Provider: "p", Concurrency: 1})
		w1, w2 := e.worker(t, cfg), e.worker(t, cfg)
		apiErr := &llm.APIError{Provider: "p", Status: 429, Message: "slow down", RetryAfter: 300 * time.Millisecond,
			Limits: &llm.RateLimits{RequestsLimit: 10, RequestsRemaining: 0, RequestsReset: 20 * time.Second, TokensLimit: -1, TokensRemaining: -1}}
		f := &fake{name: "p", answer: fails(apiErr)}
		err := complete(t, w1.Provider(f), request("m", 10))
		w := waitErr(t, err, "HTTP 429")
		require.Equal(t, 300*time.Millisecond, w.After, "Retry-After first")
		var ae *llm.APIError
		require.ErrorAs(t, err, &ae)
		require.Same(t, apiErr, ae)

		// The other worker's next call on the model waits, without asking.
		f2 := &fake{name: "p", answer: usage(1, 1)}
		w = waitErr(t, complete(t, w2.Provider(f2), request("m", 10)), "p/m blocked by the provider")
		require.LessOrEqual(t, w.After, 300*time.Millisecond)
		require.Zero(t, f2.calls.Load())
		// The slot of the failed call was freed: another model gets in.
		require.NoError(t, complete(t, w2.Provider(f2), request("other", 10)))

		// Without Retry-After, the exhausted limit's reset.
		apiErr2 := &llm.APIError{Provider: "p", Status: 429, Limits: &llm.RateLimits{RequestsRemaining: 5, TokensRemaining: 0, TokensReset: 700 * time.Millisecond}}
		w = waitErr(t, complete(t, w1.Provider(&fake{name: "p", answer: fails(apiErr2)}), request("n", 10)), "HTTP 429")
		require.Equal(t, 700*time.Millisecond, w.After)
		// Without either, the default.
		w = waitErr(t, complete(t, w1.Provider(&fake{name: "p", answer: fails(&llm.APIError{Status: 429})}), request("o", 10)), "HTTP 429")
		require.Equal(t, governor.DefaultPenalty, w.After)
	})
}

func TestMiddlewareParksOnAnOverloadWithoutBlockingOthers(t *testing.T) {
	t.Parallel()
	setup(t, func(t *testing.T, e *env) {
		w1, w2 := e.worker(t, governor.Config{}), e.worker(t, governor.Config{})
		for _, tt := range []struct {
			status int
			after  time.Duration
			want   time.Duration
		}{
			{llm.StatusOverloaded, 0, governor.DefaultPenalty},
			{503, 2 * time.Second, 2 * time.Second},
			{503, 48 * time.Hour, governor.MaxPenalty},
		} {
			apiErr := &llm.APIError{Provider: "p", Status: tt.status, RetryAfter: tt.after}
			err := complete(t, w1.Provider(&fake{name: "p", answer: fails(apiErr)}), request("m", 10))
			w := waitErr(t, err, fmt.Sprintf("HTTP %d", tt.status))
			require.Equal(t, tt.want, w.After)
			require.ErrorIs(t, err, llm.ErrRateLimited)
			require.NoError(t, complete(t, w2.Provider(&fake{name: "p", answer: usage(1, 1)}), request("m", 10)), "an overload blocks no one")
		}
	})
}

func TestMiddlewarePassesOtherErrorsUnchanged(t *testing.T) {
	t.Parallel()
	setup(t, func(t *testing.T, e *env) {
		g := e.worker(t, limits(governor.Limit{Provider: "p", Concurrency: 1}))
		bad := &llm.APIError{Provider: "p", Status: 400, Message: "bad request"}
		for _, cause := range []error{bad, llm.ErrMalformed, errors.New("boom"), context.DeadlineExceeded} {
			err := complete(t, g.Provider(&fake{name: "p", answer: fails(cause)}), request("m", 10))
			require.Equal(t, cause, err)
			require.NotErrorIs(t, err, llm.ErrRateLimited)
		}
		// Each failed call freed its slot (concurrency 1).
		require.NoError(t, complete(t, g.Provider(&fake{name: "p", answer: usage(1, 1)}), request("m", 10)))
	})
}

func TestMiddlewareLearnsFromASuccessWithNothingLeft(t *testing.T) {
	t.Parallel()
	setup(t, func(t *testing.T, e *env) {
		w1, w2 := e.worker(t, governor.Config{}), e.worker(t, governor.Config{})
		f := &fake{name: "p", answer: func(llm.Request) (llm.Response, error) {
			return llm.Response{Usage: llm.Usage{InputTokens: 1}, Limits: &llm.RateLimits{RequestsLimit: 10, RequestsRemaining: 0, RequestsReset: 400 * time.Millisecond, TokensLimit: -1, TokensRemaining: -1}}, nil
		}}
		require.NoError(t, complete(t, w1.Provider(f), request("m", 10)))
		w := waitErr(t, complete(t, w2.Provider(f), request("m", 10)), "p/m blocked by the provider")
		require.LessOrEqual(t, w.After, 400*time.Millisecond)
		require.EqualValues(t, 1, f.calls.Load())
	})
}

func TestMiddlewareDisabledStillParksButAdmitsEverything(t *testing.T) {
	t.Parallel()
	g, err := governor.New(nil, governor.Config{Limits: []governor.Limit{{Provider: "p", RPM: 1}}})
	require.NoError(t, err)
	ok := &fake{name: "p", answer: usage(1, 1)}
	for range 3 {
		require.NoError(t, complete(t, g.Provider(ok), request("m", 10)))
	}
	err = complete(t, g.Provider(&fake{name: "p", answer: fails(&llm.APIError{Status: 429, RetryAfter: time.Second})}), request("m", 10))
	require.Equal(t, time.Second, waitErr(t, err, "HTTP 429").After)
	boom := errors.New("boom")
	require.Equal(t, boom, complete(t, g.Provider(&fake{name: "p", answer: fails(boom)}), request("m", 10)))
}

// countingFake counts ceil(bytes/4) of JSON the ways a provider might: all
// messages and tools at once, the system prompt apart, or one by one.
func countingFake(req llm.Request, way int) int {
	ceil := func(v any) int {
		b, _ := json.Marshal(v)
		return (len(b) + 3) / 4
	}
	n := req.MaxTokens
	switch way {
	case 0:
		n += ceil(req.Messages)
		if len(req.Tools) > 0 {
			n += ceil(req.Tools)
		}
	case 1:
		var sys []string
		var rest []llm.Message
		for _, m := range req.Messages {
			if m.Role == llm.RoleSystem {
				sys = append(sys, m.Content)
			} else {
				rest = append(rest, m)
			}
		}
		if len(sys) > 0 {
			n += ceil(strings.Join(sys, "\n"))
		}
		if len(rest) > 0 {
			n += ceil(rest)
		}
		if len(req.Tools) > 0 {
			n += ceil(req.Tools)
		}
	case 2:
		for _, m := range req.Messages {
			n += ceil(m)
		}
		for _, t := range req.Tools {
			n += ceil(t)
		}
	}
	return n
}

func TestEstimateNeverUnderestimatesAByteCounter(t *testing.T) {
	t.Parallel()
	tool := llm.ToolDef{Name: "read_file", Description: "Read a file.", Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}}}`)}
	reqs := []llm.Request{
		{MaxTokens: 1},
		{MaxTokens: 7, Messages: []llm.Message{{Role: llm.RoleUser, Content: "a"}}},
		{MaxTokens: 100, Messages: []llm.Message{{Role: llm.RoleSystem, Content: "sys"}, {Role: llm.RoleUser, Content: "héllo \"quoted\" <b>&</b>"}}, Tools: []llm.ToolDef{tool, tool}},
		{MaxTokens: 5, Messages: []llm.Message{{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "1", Name: "read_file", Args: json.RawMessage(`{"path":"a.go"}`)}}}, {Role: llm.RoleTool, ToolCallID: "1", Content: strings.Repeat("x", 4093)}}},
	}
	for i := range 40 { // lengths around every multiple of 4
		reqs = append(reqs, llm.Request{MaxTokens: 3, Messages: []llm.Message{{Role: llm.RoleSystem, Content: strings.Repeat("s", i)}, {Role: llm.RoleUser, Content: strings.Repeat("u", 40-i)}}, Tools: []llm.ToolDef{tool}})
	}
	for i, req := range reqs {
		for way := range 3 {
			require.GreaterOrEqual(t, governor.Estimate(req), countingFake(req, way), "request %d, way %d", i, way)
		}
	}
	noMax := reqs[1]
	noMax.MaxTokens = 0
	require.Equal(t, governor.Estimate(reqs[1])-7+governor.DefaultOutputEstimate, governor.Estimate(noMax))
	require.Positive(t, governor.Estimate(llm.Request{Messages: []llm.Message{{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{Args: json.RawMessage("{bad")}}}}}))
}

func TestMiddlewareLetsCallsThroughWhenRedisIsDown(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	g, err := governor.New(rdb, governor.Config{Enabled: true, Limits: []governor.Limit{{Provider: "p", RPM: 1}}})
	require.NoError(t, err)
	f := &fake{name: "p", answer: usage(1, 1)}
	require.NoError(t, complete(t, g.Provider(f), request("m", 10)))
	require.NoError(t, complete(t, g.Provider(f), request("m", 10)))
	require.EqualValues(t, 2, f.calls.Load())
	_, err = g.Admit(context.Background(), governor.Call{Provider: "p", Tokens: 1})
	require.Error(t, err, "Admit itself reports the failure")
	require.NotErrorIs(t, err, llm.ErrRateLimited)
}

func TestMiddlewareKeepsAProviderWithBracesInOneSlot(t *testing.T) {
	t.Parallel()
	setup(t, func(t *testing.T, e *env) {
		g := e.worker(t, governor.Config{})
		f := &fake{name: "we}ird{", answer: fails(&llm.APIError{Status: 429, RetryAfter: time.Second})}
		waitErr(t, complete(t, g.Provider(f), request("m", 10)), "HTTP 429")
		waitErr(t, complete(t, g.Provider(f), request("m", 10)), "we}ird{/m blocked by the provider")
		require.EqualValues(t, 1, f.calls.Load())
	})
}
