package knowledge_test

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/knowledge"
)

// fakeEmbeddings is an OpenAI-compatible POST /v1/embeddings on loopback,
// speaking the real wire format: {model, input, encoding_format} in, {object:
// "list", data: [{object: "embedding", index, embedding}], model, usage} out. It
// answers in reverse order (the index field is what counts) and embeds with vec.
type fakeEmbeddings struct {
	srv      *httptest.Server
	requests atomic.Int64
	status   atomic.Int64 // non-zero: answer with this status
}

func newFakeEmbeddings(t *testing.T, key string, vec func(string) []float32) *fakeEmbeddings {
	t.Helper()
	f := &fakeEmbeddings{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.requests.Add(1)
		if r.Method != http.MethodPost || r.URL.Path != "/v1/embeddings" || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, `{"error":{"message":"not found"}}`, http.StatusNotFound)
			return
		}
		if key != "" && r.Header.Get("Authorization") != "Bearer "+key {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":{"message":"Incorrect API key provided","type":"invalid_request_error"}}`))
			return
		}
		if s := f.status.Load(); s != 0 {
			w.WriteHeader(int(s))
			_, _ = w.Write([]byte(`{"error":{"message":"Rate limit reached","type":"requests"}}`))
			return
		}
		var req struct {
			Model          string          `json:"model"`
			Input          json.RawMessage `json:"input"`
			EncodingFormat string          `json:"encoding_format"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Model == "" {
			http.Error(w, `{"error":{"message":"bad request"}}`, http.StatusBadRequest)
			return
		}
		var inputs []string
		if json.Unmarshal(req.Input, &inputs) != nil {
			var one string
			if json.Unmarshal(req.Input, &one) != nil {
				http.Error(w, `{"error":{"message":"input must be a string or an array of strings"}}`, http.StatusBadRequest)
				return
			}
			inputs = []string{one}
		}
		if req.EncodingFormat != "" && req.EncodingFormat != "float" {
			http.Error(w, `{"error":{"message":"this fake speaks float only"}}`, http.StatusBadRequest)
			return
		}
		type item struct {
			Object    string    `json:"object"`
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		}
		data := make([]item, 0, len(inputs))
		tokens := 0
		for i := len(inputs) - 1; i >= 0; i-- {
			if inputs[i] == "" {
				http.Error(w, `{"error":{"message":"input cannot be an empty string"}}`, http.StatusBadRequest)
				return
			}
			data = append(data, item{"embedding", i, vec(inputs[i])})
			tokens += len(strings.Fields(inputs[i]))
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data, "model": req.Model,
			"usage": map[string]int{"prompt_tokens": tokens, "total_tokens": tokens}})
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func hashVec(s string) []float32 {
	v, _ := knowledge.HashEmbedder{Dims: 64}.Embed(context.Background(), []string{s})
	return v[0]
}

// The conformance every Embedder meets: one vector per input, in order, one
// dimension, deterministic, similar texts closer than unrelated ones.
func TestEmbedderConformance(t *testing.T) {
	t.Parallel()
	fake := newFakeEmbeddings(t, "sk-test", hashVec)
	for name, e := range map[string]knowledge.Embedder{
		"hash":   knowledge.HashEmbedder{Dims: 64},
		"openai": knowledge.NewOpenAIEmbedder(knowledge.EmbeddingsConfig{Endpoint: fake.srv.URL + "/v1", Model: "text-embedding-3-small", APIKey: "sk-test", BatchSize: 3}),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			require.NotEmpty(t, e.Model())
			texts := []string{"rotate the signing keys", "rotating signing key", "a recipe for bread", "", "x", "keys", "bread"}
			vs, err := e.Embed(ctx, texts)
			require.NoError(t, err)
			require.Len(t, vs, len(texts))
			for _, v := range vs {
				require.Len(t, v, len(vs[0]))
			}
			again, err := e.Embed(ctx, texts[2:3])
			require.NoError(t, err)
			require.Equal(t, vs[2], again[0], "deterministic and in input order")
			require.Greater(t, knowledge.Cosine(vs[0], vs[1]), knowledge.Cosine(vs[0], vs[2]))
			none, err := e.Embed(ctx, nil)
			require.NoError(t, err)
			require.Empty(t, none)
			cancelled, cancel := context.WithCancel(ctx)
			cancel()
			_, err = e.Embed(cancelled, []string{"a"})
			require.Error(t, err)
		})
	}
}

func TestOpenAIEmbedderErrors(t *testing.T) {
	t.Parallel()
	fake := newFakeEmbeddings(t, "sk-right", hashVec)
	ctx := context.Background()
	wrong := knowledge.NewOpenAIEmbedder(knowledge.EmbeddingsConfig{Endpoint: fake.srv.URL + "/v1", Model: "m", APIKey: "sk-wrong"})
	_, err := wrong.Embed(ctx, []string{"a"})
	require.ErrorIs(t, err, knowledge.ErrEmbeddings)
	require.ErrorContains(t, err, "401")
	require.ErrorContains(t, err, "Incorrect API key")

	limited := newFakeEmbeddings(t, "", hashVec)
	limited.status.Store(http.StatusTooManyRequests)
	_, err = knowledge.NewOpenAIEmbedder(knowledge.EmbeddingsConfig{Endpoint: limited.srv.URL + "/v1/", Model: "m"}).Embed(ctx, []string{"a"})
	require.ErrorContains(t, err, "429")

	_, err = knowledge.NewOpenAIEmbedder(knowledge.EmbeddingsConfig{Endpoint: "http://127.0.0.1:1/v1", Model: "m"}).Embed(ctx, []string{"a"})
	require.ErrorIs(t, err, knowledge.ErrEmbeddings)
}

// With an embedder, the lexical candidates are re-ranked by cosine similarity;
// without one, or when the endpoint fails, the lexical order stands.
func TestSemanticReRanking(t *testing.T) {
	t.Parallel()
	// The fake maps texts holding "zz" (the query's marker, the near document's
	// body) to one direction and everything else to another.
	vec := func(s string) []float32 {
		if strings.Contains(s, "zz") {
			return []float32{1, 0}
		}
		return []float32{0, 1}
	}
	fake := newFakeEmbeddings(t, "", vec)
	cfg := knowledge.Config{Embeddings: knowledge.EmbeddingsConfig{Endpoint: fake.srv.URL + "/v1", Model: "fake-2d"}}
	e := setup(t, cfg)
	plain := knowledge.NewPostgres(e.pool, knowledge.Config{})
	ctx := context.Background()
	res := e.index(t, packOps, "far.md", "Cache policy", "The cache policy evicts the least recently used cache entries.")
	require.True(t, res.Embedded)
	e.index(t, packOps, "near.md", "Storage notes", "Old entries leave the cache eventually. zzmarker")
	scope := knowledge.Scope{Packs: []string{"ops"}}
	q := knowledge.Query{Text: "cache policy entries qqzz", K: 2, Scope: scope}

	lexical, err := plain.Search(ctx, q)
	require.NoError(t, err)
	require.Equal(t, []string{"far.md", "near.md"}, paths(lexical))
	reranked, err := e.kb.Search(ctx, q)
	require.NoError(t, err)
	require.Equal(t, []string{"near.md", "far.md"}, paths(reranked))
	for _, r := range reranked {
		require.True(t, r.Score >= 0 && r.Score <= 1, r.Score)
	}

	fake.status.Store(http.StatusServiceUnavailable)
	degraded, err := e.kb.Search(ctx, q)
	require.NoError(t, err, "a failing endpoint degrades to lexical ranking")
	require.Equal(t, paths(lexical), paths(degraded))
	// A document indexed while the endpoint fails is indexed without embeddings,
	// and embedded when indexed again after it recovers.
	res = e.index(t, packOps, "later.md", "Later", "cache notes")
	require.True(t, res.Changed)
	require.False(t, res.Embedded)
	fake.status.Store(0)
	res = e.index(t, packOps, "later.md", "Later", "cache notes")
	require.True(t, res.Changed && res.Embedded)
	require.False(t, e.index(t, packOps, "later.md", "Later", "cache notes").Changed)
	require.False(t, math.IsNaN(knowledge.Cosine(nil, []float32{1})))
}
