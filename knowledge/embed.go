package knowledge

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"net/http"
	"strings"
)

// Embedder turns texts into vectors. Implementations return one vector per input,
// in input order, all of one dimension.
type Embedder interface {
	Embed(ctx context.Context, texts []string) ([][]float32, error)
	// Model names the vectors' model: chunks embedded by another model are not
	// compared with a query embedded by this one.
	Model() string
}

// NewEmbedder builds the embedder of cfg: nil (no re-ranking) without an
// endpoint.
func NewEmbedder(cfg EmbeddingsConfig) Embedder {
	if cfg.Endpoint == "" {
		return nil
	}
	return NewOpenAIEmbedder(cfg)
}

// OpenAIEmbedder calls an OpenAI-compatible POST {endpoint}/embeddings.
type OpenAIEmbedder struct {
	endpoint, model, key string
	batch                int
	client               *http.Client
}

// NewOpenAIEmbedder returns the client of cfg (defaults applied).
func NewOpenAIEmbedder(cfg EmbeddingsConfig) *OpenAIEmbedder {
	d := Config{Embeddings: cfg}.WithDefaults().Embeddings
	return &OpenAIEmbedder{
		endpoint: strings.TrimRight(d.Endpoint, "/") + "/embeddings",
		model:    d.Model, key: d.APIKey, batch: d.BatchSize,
		client: &http.Client{Timeout: d.Timeout},
	}
}

// Model implements Embedder.
func (e *OpenAIEmbedder) Model() string { return e.model }

type embedRequest struct {
	Model          string   `json:"model"`
	Input          []string `json:"input"`
	EncodingFormat string   `json:"encoding_format"`
}

type embedResponse struct {
	Data []struct {
		Index     int       `json:"index"`
		Embedding []float32 `json:"embedding"`
	} `json:"data"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// Embed implements Embedder, batch by batch.
func (e *OpenAIEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, 0, len(texts))
	for start := 0; start < len(texts); start += e.batch {
		vs, err := e.embedBatch(ctx, texts[start:min(start+e.batch, len(texts))])
		if err != nil {
			return nil, err
		}
		out = append(out, vs...)
	}
	return out, checkDims(out)
}

func (e *OpenAIEmbedder) embedBatch(ctx context.Context, texts []string) ([][]float32, error) {
	// Some servers refuse empty strings: an empty chunk is embedded as one space.
	in := make([]string, len(texts))
	for i, t := range texts {
		if strings.TrimSpace(t) == "" {
			t = " "
		}
		in[i] = t
	}
	body, err := json.Marshal(embedRequest{Model: e.model, Input: in, EncodingFormat: "float"})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.endpoint, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrEmbeddings, err)
	}
	req.Header.Set("Content-Type", "application/json")
	if e.key != "" {
		req.Header.Set("Authorization", "Bearer "+e.key)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrEmbeddings, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, fmt.Errorf("%w: reading answer: %v", ErrEmbeddings, err)
	}
	var r embedResponse
	jerr := json.Unmarshal(raw, &r)
	if resp.StatusCode != http.StatusOK {
		msg := strings.TrimSpace(clip(string(raw), 300))
		if jerr == nil && r.Error != nil {
			msg = r.Error.Message
		}
		return nil, fmt.Errorf("%w: %s answered %d: %s", ErrEmbeddings, e.endpoint, resp.StatusCode, msg)
	}
	if jerr != nil {
		return nil, fmt.Errorf("%w: unreadable answer: %v", ErrEmbeddings, jerr)
	}
	if len(r.Data) != len(texts) {
		return nil, fmt.Errorf("%w: %d vectors for %d inputs", ErrEmbeddings, len(r.Data), len(texts))
	}
	// The wire format numbers the vectors; servers need not answer in order.
	out := make([][]float32, len(texts))
	for _, d := range r.Data {
		if d.Index < 0 || d.Index >= len(texts) || out[d.Index] != nil || len(d.Embedding) == 0 {
			return nil, fmt.Errorf("%w: bad or repeated vector index %d", ErrEmbeddings, d.Index)
		}
		out[d.Index] = d.Embedding
	}
	return out, nil
}

func checkDims(vs [][]float32) error {
	for _, v := range vs {
		if len(v) != len(vs[0]) {
			return fmt.Errorf("%w: vectors of %d and %d dimensions", ErrEmbeddings, len(vs[0]), len(v))
		}
	}
	return nil
}

// HashEmbedder is a local, deterministic embedder: character trigrams of every
// word hashed into Dims buckets, L2-normalized. It knows no synonyms, but it is
// tolerant of typos and inflections, costs no network and is the reference the
// conformance tests and the fake embeddings server use.
type HashEmbedder struct {
	Dims int
}

// Model implements Embedder.
func (h HashEmbedder) Model() string { return fmt.Sprintf("hash-trigram-%d", h.dims()) }

func (h HashEmbedder) dims() int {
	if h.Dims <= 0 {
		return 256
	}
	return h.Dims
}

// Embed implements Embedder.
func (h HashEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make([][]float32, len(texts))
	for i, t := range texts {
		v := make([]float32, h.dims())
		for _, w := range Terms(t) {
			g := []rune(" " + w + " ")
			for j := 0; j+3 <= len(g); j++ {
				f := fnv.New32a()
				_, _ = f.Write([]byte(string(g[j : j+3])))
				v[int(f.Sum32()%uint32(len(v)))]++
			}
		}
		normalize(v)
		out[i] = v
	}
	return out, nil
}

func normalize(v []float32) {
	var s float64
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	if s == 0 {
		return
	}
	n := float32(1 / math.Sqrt(s))
	for i := range v {
		v[i] *= n
	}
}

// Cosine is the cosine similarity of a and b (0 when either is empty or their
// dimensions differ).
func Cosine(a, b []float32) float64 {
	if len(a) == 0 || len(a) != len(b) {
		return 0
	}
	var dot, na, nb float64
	for i := range a {
		dot += float64(a[i]) * float64(b[i])
		na += float64(a[i]) * float64(a[i])
		nb += float64(b[i]) * float64(b[i])
	}
	if na == 0 || nb == 0 {
		return 0
	}
	return dot / math.Sqrt(na*nb)
}
