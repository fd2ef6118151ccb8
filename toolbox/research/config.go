package research

import (
	"cmp"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/aetherium-engine/aetherium/internal/defaults"
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
	c.MaxBodyBytes = defaults.Positive(c.MaxBodyBytes, DefaultMaxBodyBytes)
	c.MaxTimeout = defaults.Positive(c.MaxTimeout, DefaultMaxTimeout)
	c.DuckDuckGo = cmp.Or(c.DuckDuckGo, DefaultDuckDuckGo)
	c.SearchTimeout = defaults.Positive(c.SearchTimeout, DefaultSearchTimeout)
	c.FetchTimeout = defaults.Positive(c.FetchTimeout, DefaultFetchTimeout)
	c.MaxFetchBytes = defaults.Positive(c.MaxFetchBytes, DefaultMaxFetchBytes)
	c.UserAgent = cmp.Or(c.UserAgent, DefaultUserAgent)
	c.MaxPDFBytes = defaults.Positive(c.MaxPDFBytes, DefaultMaxPDFBytes)
	c.PDFTimeout = defaults.Positive(c.PDFTimeout, DefaultPDFTimeout)
	c.PDFExtractTimeout = defaults.Positive(c.PDFExtractTimeout, DefaultPDFExtract)
	c.PDFMemoryBytes = defaults.Positive(c.PDFMemoryBytes, DefaultPDFMemoryBytes)
	c.PDFImage = cmp.Or(c.PDFImage, DefaultPDFImage)
	c.CaptureImage = cmp.Or(c.CaptureImage, DefaultCaptureImage)
	c.CaptureTimeout = defaults.Positive(c.CaptureTimeout, DefaultCaptureTimeout)
	c.CaptureMaxPages = defaults.Positive(c.CaptureMaxPages, DefaultCaptureMaxPages)
	c.CaptureIdleTimeout = defaults.Positive(c.CaptureIdleTimeout, DefaultCaptureIdle)
	c.CaptureMemoryBytes = defaults.Positive(c.CaptureMemoryBytes, DefaultCaptureMemory)
	c.CaptureTmpfsBytes = defaults.Positive(c.CaptureTmpfsBytes, DefaultCaptureTmpfs)
	c.CaptureMaxHeight = defaults.Positive(c.CaptureMaxHeight, DefaultCaptureHeight)
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
