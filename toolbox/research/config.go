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
	DefaultMaxPDFBytes     = 50 << 20
	DefaultPDFTimeout      = 60 * time.Second
	DefaultPDFExtract      = 30 * time.Second
	DefaultPDFMemoryBytes  = 256 << 20
	DefaultPDFImage        = "aetherium-browser:latest"
	DefaultUserAgent       = "aetherium-research/1.0 (+https://github.com/aetherium-engine/aetherium)"
	DefaultCaptureImage    = "aetherium-browser:latest"
	DefaultCaptureTimeout  = 45 * time.Second
	DefaultCaptureMaxPages = 2
	DefaultCaptureIdle     = 5 * time.Minute
	DefaultCaptureMemory   = 1 << 30
	DefaultCaptureTmpfs    = 256 << 20
	DefaultCaptureHeight   = 12000
	MaxCaptureHeight       = 16384
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
	// UserAgent is sent by web_search, web_fetch and download_pdf. Default
	// DefaultUserAgent.
	UserAgent string `yaml:"user_agent"`

	// MaxPDFBytes caps what download_pdf downloads. Default DefaultMaxPDFBytes.
	MaxPDFBytes int64 `yaml:"max_pdf_bytes"`
	// PDFTimeout bounds download_pdf's download. Default DefaultPDFTimeout. The
	// egress client's own timeout (security.egress_timeout) bounds it too.
	PDFTimeout time.Duration `yaml:"pdf_timeout"`
	// PDFExtractTimeout bounds pdfinfo and pdftotext together, container start
	// included. Default DefaultPDFExtract.
	PDFExtractTimeout time.Duration `yaml:"pdf_extract_timeout"`
	// PDFMemoryBytes caps the extraction container's memory (the PDF's copy on its
	// tmpfs counts). Default DefaultPDFMemoryBytes.
	PDFMemoryBytes int64 `yaml:"pdf_memory_bytes"`
	// PDFImage is the image of the sandbox family that holds poppler. Default
	// DefaultPDFImage (sandbox/images/browser.packages, built by `make images`).
	PDFImage string `yaml:"pdf_image"`

	// CaptureImage is the image of the sandbox family that holds Chromium.
	// Default DefaultCaptureImage (sandbox/images/browser.packages).
	CaptureImage string `yaml:"capture_image"`
	// CaptureTimeout bounds one capture_reference call: the browser's start (when
	// the run has none yet), both page loads, the facts and the screenshots.
	// Default DefaultCaptureTimeout.
	CaptureTimeout time.Duration `yaml:"capture_timeout"`
	// CaptureMaxPages caps the pages open at once in a run's browser; further
	// calls wait (within their timeout). Default DefaultCaptureMaxPages.
	CaptureMaxPages int `yaml:"capture_max_pages"`
	// CaptureIdleTimeout closes a run's browser unused this long (the run's end
	// removes it anyway). Default DefaultCaptureIdle.
	CaptureIdleTimeout time.Duration `yaml:"capture_idle_timeout"`
	// CaptureMemoryBytes caps the browser container's memory (its /tmp tmpfs
	// counts). Default DefaultCaptureMemory.
	CaptureMemoryBytes int64 `yaml:"capture_memory_bytes"`
	// CaptureTmpfsBytes sizes the browser's /tmp (profile, cache, shared memory).
	// Default DefaultCaptureTmpfs.
	CaptureTmpfsBytes int64 `yaml:"capture_tmpfs_bytes"`
	// CaptureMaxHeight cuts a full-page screenshot this many CSS pixels down.
	// Default DefaultCaptureHeight, at most MaxCaptureHeight.
	CaptureMaxHeight int `yaml:"capture_max_height"`
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
	if c.MaxPDFBytes <= 0 {
		c.MaxPDFBytes = DefaultMaxPDFBytes
	}
	if c.PDFTimeout <= 0 {
		c.PDFTimeout = DefaultPDFTimeout
	}
	if c.PDFExtractTimeout <= 0 {
		c.PDFExtractTimeout = DefaultPDFExtract
	}
	if c.PDFMemoryBytes <= 0 {
		c.PDFMemoryBytes = DefaultPDFMemoryBytes
	}
	if c.PDFImage == "" {
		c.PDFImage = DefaultPDFImage
	}
	if c.CaptureImage == "" {
		c.CaptureImage = DefaultCaptureImage
	}
	if c.CaptureTimeout <= 0 {
		c.CaptureTimeout = DefaultCaptureTimeout
	}
	if c.CaptureMaxPages <= 0 {
		c.CaptureMaxPages = DefaultCaptureMaxPages
	}
	if c.CaptureIdleTimeout <= 0 {
		c.CaptureIdleTimeout = DefaultCaptureIdle
	}
	if c.CaptureMemoryBytes <= 0 {
		c.CaptureMemoryBytes = DefaultCaptureMemory
	}
	if c.CaptureTmpfsBytes <= 0 {
		c.CaptureTmpfsBytes = DefaultCaptureTmpfs
	}
	if c.CaptureMaxHeight <= 0 {
		c.CaptureMaxHeight = DefaultCaptureHeight
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
	if c.MaxFetchBytes < 0 || c.MaxBodyBytes < 0 || c.MaxPDFBytes < 0 || c.PDFMemoryBytes < 0 {
		errs = append(errs, errors.New("research: byte limits must not be negative"))
	}
	if d := c.WithDefaults(); c.MaxPDFBytes >= 0 && c.PDFMemoryBytes >= 0 && d.PDFMemoryBytes < d.MaxPDFBytes+32<<20 {
		errs = append(errs, fmt.Errorf("research.pdf_memory_bytes (%s) must exceed research.max_pdf_bytes (%s) by 32 MiB: the PDF's copy in the extraction container counts against it",
			sizeText(d.PDFMemoryBytes), sizeText(d.MaxPDFBytes)))
	}
	if c.CaptureMaxHeight > MaxCaptureHeight {
		errs = append(errs, fmt.Errorf("research.capture_max_height %d: at most %d (Chromium's own limit)", c.CaptureMaxHeight, MaxCaptureHeight))
	}
	if c.CaptureMaxPages < 0 || c.CaptureMemoryBytes < 0 || c.CaptureTmpfsBytes < 0 {
		errs = append(errs, errors.New("research: capture limits must not be negative"))
	}
	if d := c.WithDefaults(); c.CaptureMemoryBytes >= 0 && c.CaptureTmpfsBytes >= 0 && d.CaptureMemoryBytes < d.CaptureTmpfsBytes+256<<20 {
		errs = append(errs, fmt.Errorf("research.capture_memory_bytes (%s) must exceed research.capture_tmpfs_bytes (%s) by 256 MiB: the browser's /tmp counts against it",
			sizeText(d.CaptureMemoryBytes), sizeText(d.CaptureTmpfsBytes)))
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
