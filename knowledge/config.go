package knowledge

import (
	"cmp"
	"errors"
	"fmt"
	"net/url"
	"time"
)

// Defaults of Config.
const (
	// DefaultScoreFloor was set from the retrieval evaluation (README, Knowledge):
	// its lowest-scoring expected hit scores 0.47, while a chunk that holds only a
	// low-IDF word of a longer query scores under 0.12.
	DefaultScoreFloor   = 0.12
	DefaultPacksDir     = "knowledge/packs"
	DefaultLanguage     = "english"
	DefaultChunkSize    = 1200
	MinChunkSize        = 200
	MaxChunkSize        = 8000
	DefaultCandidates   = 40
	DefaultIndexTimeout = 15 * time.Second
	DefaultEmbedTimeout = 30 * time.Second
	DefaultEmbedBatch   = 64
	DefaultSemantic     = 0.5
	// MaxDocumentBytes caps one document (write_knowledge's content, a pack file).
	MaxDocumentBytes = 512 << 10
	// DefaultK and MaxK bound how many hits a search returns.
	DefaultK = 5
	MaxK     = 20
)

// Config configures the knowledge base (the `knowledge` section of aetherium.yaml).
type Config struct {
	// ScoreFloor drops hits scoring under it (scores are 0..1). Default
	// DefaultScoreFloor; 0 takes the default (set 0.0001 to keep nearly all).
	ScoreFloor float64 `yaml:"score_floor"`
	// PacksDir holds the packs, one directory of Markdown each (a pack.yaml in it
	// may set `language`). Default DefaultPacksDir.
	PacksDir string `yaml:"packs_dir"`
	// Language is the text-search configuration of project documents and of packs
	// that name none. Default DefaultLanguage.
	Language string `yaml:"language"`
	// ChunkSize bounds a chunk in characters (MinChunkSize..MaxChunkSize). Default
	// DefaultChunkSize.
	ChunkSize int `yaml:"chunk_size"`
	// Candidates is how many hits are re-ranked by embeddings. Default
	// DefaultCandidates.
	Candidates int `yaml:"candidates"`
	// IndexTimeout bounds indexing one document (write_knowledge reports
	// indexed: false past it, the file stays saved). Default DefaultIndexTimeout.
	IndexTimeout time.Duration `yaml:"index_timeout"`
	// Embeddings, when Endpoint is set, re-ranks by cosine similarity.
	Embeddings EmbeddingsConfig `yaml:"embeddings"`
}

// EmbeddingsConfig locates an OpenAI-compatible embeddings endpoint (OpenAI, vLLM,
// Ollama, llama.cpp server, text-embeddings-inference).
type EmbeddingsConfig struct {
	// Endpoint is the API root (…/v1); /embeddings is appended. Empty: no
	// embeddings, lexical ranking only.
	Endpoint string `yaml:"endpoint"`
	// Model names the embedding model. Required with Endpoint.
	Model string `yaml:"model"`
	// APIKey is sent as a bearer token when set. Env AETHERIUM_EMBEDDINGS_API_KEY.
	APIKey string `yaml:"api_key"`
	// Timeout bounds one request. Default DefaultEmbedTimeout.
	Timeout time.Duration `yaml:"timeout"`
	// BatchSize caps the inputs of one request. Default DefaultEmbedBatch.
	BatchSize int `yaml:"batch_size"`
	// Weight is the share of the cosine similarity in the re-ranked score (0..1).
	// Default DefaultSemantic.
	Weight float64 `yaml:"weight"`
}

// WithDefaults fills the zero fields.
func (c Config) WithDefaults() Config {
	c.ScoreFloor = cmp.Or(c.ScoreFloor, DefaultScoreFloor)
	c.PacksDir = cmp.Or(c.PacksDir, DefaultPacksDir)
	c.Language = cmp.Or(c.Language, DefaultLanguage)
	c.ChunkSize = cmp.Or(c.ChunkSize, DefaultChunkSize)
	c.Candidates = cmp.Or(c.Candidates, DefaultCandidates)
	c.IndexTimeout = cmp.Or(c.IndexTimeout, DefaultIndexTimeout)
	c.Embeddings.Timeout = cmp.Or(c.Embeddings.Timeout, DefaultEmbedTimeout)
	c.Embeddings.BatchSize = cmp.Or(c.Embeddings.BatchSize, DefaultEmbedBatch)
	c.Embeddings.Weight = cmp.Or(c.Embeddings.Weight, DefaultSemantic)
	return c
}

// Validate reports every invalid field, named by its key.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, format string, a ...any) {
		errs = append(errs, fmt.Errorf("knowledge.%s: %s", key, fmt.Sprintf(format, a...)))
	}
	if c.ScoreFloor < 0 || c.ScoreFloor >= 1 {
		bad("score_floor", "must be in [0, 1), got %v", c.ScoreFloor)
	}
	if c.ChunkSize != 0 && (c.ChunkSize < MinChunkSize || c.ChunkSize > MaxChunkSize) {
		bad("chunk_size", "must be %d-%d characters, got %d", MinChunkSize, MaxChunkSize, c.ChunkSize)
	}
	if c.Candidates < 0 || c.Candidates > 500 {
		bad("candidates", "must be 1-500, got %d", c.Candidates)
	}
	if c.IndexTimeout < 0 {
		bad("index_timeout", "must not be negative")
	}
	if !validLanguage(c.Language) {
		bad("language", "%q is not a text-search configuration name", c.Language)
	}
	e := c.Embeddings
	if e.Endpoint != "" {
		if u, err := url.Parse(e.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("embeddings.endpoint", "want an http(s) URL, got %q", e.Endpoint)
		}
		if e.Model == "" {
			bad("embeddings.model", "is required with embeddings.endpoint")
		}
	}
	if e.Timeout < 0 || e.BatchSize < 0 || e.BatchSize > 2048 {
		bad("embeddings", "timeout must not be negative and batch_size must be 1-2048")
	}
	if e.Weight < 0 || e.Weight > 1 {
		bad("embeddings.weight", "must be in [0, 1], got %v", e.Weight)
	}
	return errors.Join(errs...)
}

// validLanguage accepts what can name a text-search configuration ("" = default);
// whether it exists is PostgreSQL's to say at index time.
func validLanguage(s string) bool {
	if len(s) > 63 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return true
}
