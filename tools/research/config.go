package research

import (
	"errors"
	"fmt"
	"net/url"
	"time"
)

// Defaults of Config.
const (
	DefaultMaxBodyBytes    = 64 << 10
	DefaultMaxTimeout      = 60 * time.Second
	DefaultDuckDuckGo      = "https://html.duckduckgo.com/html/"
	DefaultSearchTimeout   = 10 * time.Second
	DefaultMaxSearch       = 10
	MaxSearchResults       = 20
	DefaultFetchTimeout    = 30 * time.Second
	DefaultMaxFetchBytes   = 10 << 20
	DefaultMaxChars        = 20000
	MaxFetchChars          = 200000
	DefaultUserAgent       = "aetherium-research/1.0 (+https://github.com/aetherium-engine/aetherium)"
	duckDuckGoDisabledFlag = "off"
)

// Config configures the research tools (the `research` section of aetherium.yaml).
type Config struct {
	// MaxBodyBytes caps a response body http_request returns to the model.
	// Default DefaultMaxBodyBytes.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// MaxTimeout caps a caller-chosen timeout. Default DefaultMaxTimeout.
	MaxTimeout time.Duration `yaml:"max_timeout"`

	// SearXNGURLs are SearXNG instances (base URLs; /search is appended), tried in
	// order. Empty: web_search goes straight to DuckDuckGo. Their hosts must be in
	// the team's allowed_domains like any destination.
	SearXNGURLs []string `yaml:"searxng_urls"`
	// DuckDuckGo is the HTML endpoint of the fallback. Default DefaultDuckDuckGo;
	// "off" disables the fallback.
	DuckDuckGo string `yaml:"duckduckgo"`
	// FallbackOnEmpty asks DuckDuckGo when a healthy SearXNG answers no result.
	// Default false: an empty answer is a clean empty result.
	FallbackOnEmpty bool `yaml:"fallback_on_empty"`
	// SearchTimeout bounds each backend's answer. Default DefaultSearchTimeout.
	SearchTimeout time.Duration `yaml:"search_timeout"`

	// FetchTimeout bounds web_fetch's download. Default DefaultFetchTimeout.
	FetchTimeout time.Duration `yaml:"fetch_timeout"`
	// MaxFetchBytes caps what web_fetch downloads. Default DefaultMaxFetchBytes.
	MaxFetchBytes int64 `yaml:"max_fetch_bytes"`
	// UserAgent is sent by web_search and web_fetch. Default DefaultUserAgent.
	UserAgent string `yaml:"user_agent"`
}

// WithDefaults fills the zero fields.
func (c Config) WithDefaults() Config {
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.MaxTimeout <= 0 {
		c.MaxTimeout = DefaultMaxTimeout
	}
	if c.DuckDuckGo == "" {
		c.DuckDuckGo = DefaultDuckDuckGo
	}
	if c.SearchTimeout <= 0 {
		c.SearchTimeout = DefaultSearchTimeout
	}
	if c.FetchTimeout <= 0 {
		c.FetchTimeout = DefaultFetchTimeout
	}
	if c.MaxFetchBytes <= 0 {
		c.MaxFetchBytes = DefaultMaxFetchBytes
	}
	if c.UserAgent == "" {
		c.UserAgent = DefaultUserAgent
	}
	return c
}

// Validate reports every invalid field.
func (c Config) Validate() error {
	var errs []error
	for i, u := range c.SearXNGURLs {
		if err := httpURL(u); err != nil {
			errs = append(errs, fmt.Errorf("research.searxng_urls[%d]: %w", i, err))
		}
	}
	if c.DuckDuckGo != duckDuckGoDisabledFlag && c.DuckDuckGo != "" {
		if err := httpURL(c.DuckDuckGo); err != nil {
			errs = append(errs, fmt.Errorf("research.duckduckgo: %w (or \"off\")", err))
		}
	}
	if c.MaxFetchBytes < 0 || c.MaxBodyBytes < 0 {
		errs = append(errs, errors.New("research: byte limits must not be negative"))
	}
	return errors.Join(errs...)
}

func httpURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not an http(s) URL", raw)
	}
	return nil
}
