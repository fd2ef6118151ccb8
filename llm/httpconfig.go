package llm

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// HTTPConfig configures an adapter that calls a provider's HTTP API through
// the provider's SDK (llm/openai, llm/anthropic: each one's Config is an
// HTTPConfig, with its own defaults). Resolve checks it and applies them.
type HTTPConfig struct {
	// BaseURL is the API root the SDK appends its path to ("chat/completions"
	// for openai, e.g. "http://localhost:11434/v1" for Ollama; "v1/messages" for
	// anthropic). Default: the adapter's DefaultBaseURL.
	BaseURL string `yaml:"base_url"`
	// APIKey authenticates the calls. It may be empty for a server that needs
	// none (a local server, a gateway or proxy that authenticates on its own;
	// anthropic requires it for its DefaultBaseURL). The SDK never takes a key
	// from the environment (OPENAI_API_KEY, Anthropic's credential chain) in
	// its place: the Config is the only source of credentials, so a key cannot
	// leak to a server it was not meant for.
	APIKey string `yaml:"api_key"`
	// Model is the default model. Required unless every Request names one.
	Model string `yaml:"model"`
	// MaxRetries is how often a connection error, 408, 409, 429 or 5xx is retried
	// with the SDK's exponential backoff (which honours Retry-After). 0 means the
	// adapter's DefaultMaxRetries (3); a negative value disables retries.
	MaxRetries int `yaml:"max_retries"`
	// Timeout bounds each attempt, not the whole call (the context does that).
	// 0 means the adapter's DefaultTimeout (120s).
	Timeout time.Duration `yaml:"timeout"`
	// HTTPClient replaces the SDK's default client, e.g. for proxies or tests.
	HTTPClient *http.Client `yaml:"-"`
}

// HTTPDefaults are an adapter's values for what its HTTPConfig leaves zero.
type HTTPDefaults struct {
	BaseURL    string
	MaxRetries int
	Timeout    time.Duration
}

// Endpoint is an HTTPConfig checked, with its defaults applied: what the
// adapter hands its SDK.
type Endpoint struct {
	BaseURL string
	APIKey  string
	// Model is Config.Model trimmed, "" when the Config names none.
	Model string
	// Retries is how often a failed attempt is retried (0: never).
	Retries    int
	Timeout    time.Duration
	HTTPClient *http.Client
}

// Resolve checks c for provider (the prefix of its errors) and applies def:
// BaseURL must be an absolute http(s) URL and Timeout must not be negative.
func (c HTTPConfig) Resolve(provider string, def HTTPDefaults) (Endpoint, error) {
	baseURL := cmp.Or(strings.TrimSpace(c.BaseURL), def.BaseURL)
	u, err := url.Parse(baseURL)
	if err != nil {
		return Endpoint{}, fmt.Errorf("%s: invalid BaseURL %q: %w", provider, baseURL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return Endpoint{}, fmt.Errorf("%s: invalid BaseURL %q: want an absolute http(s) URL", provider, baseURL)
	}
	if c.Timeout < 0 {
		return Endpoint{}, fmt.Errorf("%s: negative Timeout %s", provider, c.Timeout)
	}
	retries := c.MaxRetries
	switch {
	case retries == 0:
		retries = def.MaxRetries
	case retries < 0:
		retries = 0
	}
	return Endpoint{BaseURL: baseURL, APIKey: c.APIKey, Model: strings.TrimSpace(c.Model), Retries: retries,
		Timeout: cmp.Or(c.Timeout, def.Timeout), HTTPClient: c.HTTPClient}, nil
}

// RequestModel is the model of a call: the Request's, else the Endpoint's; an
// error (prefixed with provider) when neither names one.
func RequestModel(provider string, req Request, fallback string) (string, error) {
	model := cmp.Or(strings.TrimSpace(req.Model), fallback)
	if model == "" {
		return "", errors.New(provider + ": no model: set Config.Model or Request.Model")
	}
	return model, nil
}
