package llm_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/llm"
)

// stub answers from a function and records the models it was asked for.
type stub struct {
	name   string
	answer func(req llm.Request) (llm.Response, error)
	asked  []string
}

func (s *stub) Name() string { return s.name }
func (s *stub) Complete(_ context.Context, req llm.Request) (llm.Response, error) {
	s.asked = append(s.asked, req.Model)
	return s.answer(req)
}

func failing(status int) func(llm.Request) (llm.Response, error) {
	return func(llm.Request) (llm.Response, error) {
		return llm.Response{}, &llm.APIError{Provider: "x", Status: status, Message: http.StatusText(status)}
	}
}

func answering(req llm.Request) (llm.Response, error) {
	return llm.Response{Message: llm.Message{Role: llm.RoleAssistant, Content: "hi from " + req.Model}}, nil
}

func TestChain(t *testing.T) {
	t.Parallel()
	parked := func(status int) func(llm.Request) (llm.Response, error) {
		return func(req llm.Request) (llm.Response, error) {
			_, err := failing(status)(req)
			return llm.Response{}, &llm.WaitError{After: 1, Limit: "HTTP", Cause: err}
		}
	}
	tests := []struct {
		name      string
		primary   func(llm.Request) (llm.Response, error)
		secondary func(llm.Request) (llm.Response, error)
		answered  string // the model that answered, "" for an error
		fallback  bool
		asked2    int
		status    int // the error's status
	}{
		{name: "the primary answers", primary: answering, secondary: answering, answered: "claude", asked2: 0},
		{name: "529 falls back", primary: failing(llm.StatusOverloaded), secondary: answering, answered: "gpt-4o", fallback: true, asked2: 1},
		{name: "a parked 529 falls back", primary: parked(llm.StatusOverloaded), secondary: answering, answered: "gpt-4o", fallback: true, asked2: 1},
		{name: "503 falls back", primary: failing(503), secondary: answering, answered: "gpt-4o", fallback: true, asked2: 1},
		{name: "500 falls back", primary: failing(500), secondary: answering, answered: "gpt-4o", fallback: true, asked2: 1},
		{name: "429 does not fall back", primary: parked(429), secondary: answering, asked2: 0, status: 429},
		{name: "400 does not fall back", primary: failing(400), secondary: answering, asked2: 0, status: 400},
		{name: "401 does not fall back", primary: failing(401), secondary: answering, asked2: 0, status: 401},
		{name: "all overloaded: the primary's error", primary: parked(llm.StatusOverloaded), secondary: failing(503), asked2: 1, status: llm.StatusOverloaded},
		{name: "a fallback's 400 is its own error", primary: failing(529), secondary: failing(400), asked2: 1, status: 400},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := &stub{name: "anthropic", answer: tc.primary}
			o := &stub{name: "openai", answer: tc.secondary}
			p := llm.Chain(llm.Link{Provider: a, Model: "claude"}, llm.Link{Provider: o, Model: "gpt-4o"})
			require.Equal(t, "anthropic", p.Name())
			resp, err := p.Complete(context.Background(), llm.Request{Model: "ignored"})
			require.Len(t, o.asked, tc.asked2)
			if tc.answered == "" {
				var api *llm.APIError
				require.ErrorAs(t, err, &api)
				require.Equal(t, tc.status, api.Status)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.answered, resp.Model)
			require.Equal(t, "hi from "+tc.answered, resp.Message.Content)
			require.Equal(t, tc.fallback, resp.Fallback)
			require.Equal(t, map[bool]string{false: "anthropic", true: "openai"}[tc.fallback], resp.Provider)
		})
	}

	t.Run("a cancelled call does not fall back", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		a := &stub{name: "a", answer: func(llm.Request) (llm.Response, error) { cancel(); return failing(503)(llm.Request{}) }}
		o := &stub{name: "o", answer: answering}
		_, err := llm.Chain(llm.Link{Provider: a}, llm.Link{Provider: o, Model: "m"}).Complete(ctx, llm.Request{})
		require.Error(t, err)
		require.Empty(t, o.asked)
	})

	t.Run("one link is the provider itself", func(t *testing.T) {
		t.Parallel()
		a := &stub{name: "a", answer: answering}
		require.Same(t, llm.Provider(a), llm.Chain(llm.Link{Provider: a}))
		_, err := llm.Chain(llm.Link{Provider: a}).Complete(context.Background(), llm.Request{Model: "kept"})
		require.NoError(t, err)
		require.Equal(t, []string{"kept"}, a.asked)
		require.False(t, errors.Is(err, llm.ErrRateLimited))
	})
}
