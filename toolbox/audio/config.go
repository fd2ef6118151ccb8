package audio

import (
	"cmp"
	"fmt"
	"net/url"
	"regexp"
	"time"

	"github.com/aetherium-engine/aetherium/internal/defaults"
	"github.com/aetherium-engine/aetherium/media/voice"
)

// Backends a Config may name.
const (
	BackendEspeak = voice.EspeakName
	BackendQwen   = voice.QwenName
)

// Defaults of Config.
const (
	DefaultBackend        = BackendEspeak
	DefaultService        = voice.QwenName
	DefaultURL            = "http://127.0.0.1:8091"
	DefaultModel          = "Qwen/Qwen3-TTS-12Hz-1.7B-Base"
	DefaultLanguage       = "Auto"
	DefaultGap            = 350 * time.Millisecond
	DefaultBitrate        = "128k"
	DefaultRequestTimeout = 2 * time.Minute
	DefaultRenderTimeout  = 8 * time.Minute
	DefaultMaxScriptBytes = 256 << 10
	DefaultMaxLines       = 500
	DefaultMaxClipBytes   = 16 << 20
	// DefaultDesignSample is what a designed voice's reference clip says.
	DefaultDesignSample = "Hello, and welcome. This is how I sound when I read a script aloud."
)

// DefaultVoices are the Qwen3-TTS presets handed to speakers the cast leaves
// out, in script order.
var DefaultVoices = []string{"vivian", "ryan"}

// Config is the `audio` section: which voice backend tts_render speaks with and
// its bounds.
type Config struct {
	// Backend is espeak (espeak-ng in the media image: development, tests, no
	// GPU) or qwen-tts (Qwen3-TTS under vllm-omni on the leased GPU service).
	// Default DefaultBackend.
	Backend string `yaml:"backend"`
	// Service is the lease service of the qwen-tts backend: a run must hold it
	// (its template's gpu_services). Default DefaultService.
	Service string `yaml:"service"`
	// URL is the voice service's base URL (no /v1). Default DefaultURL.
	URL string `yaml:"url"`
	// Model and Language go into every speech request. Defaults DefaultModel,
	// DefaultLanguage.
	Model    string `yaml:"model"`
	Language string `yaml:"language"`
	// Voices are the presets for speakers the cast leaves out. Default
	// DefaultVoices.
	Voices []string `yaml:"voices"`
	// Gap is the silence between two lines. Default DefaultGap.
	Gap time.Duration `yaml:"gap"`
	// Bitrate is the MP3's. Default DefaultBitrate.
	Bitrate string `yaml:"bitrate"`
	// RequestTimeout bounds one speech request; RenderTimeout one media
	// container (espeak-ng's batch, the mix).
	RequestTimeout time.Duration `yaml:"request_timeout"`
	RenderTimeout  time.Duration `yaml:"render_timeout"`
	// MaxScriptBytes, MaxLines and MaxClipBytes bound a script, its spoken
	// lines and a reference clip.
	MaxScriptBytes int64 `yaml:"max_script_bytes"`
	MaxLines       int   `yaml:"max_lines"`
	MaxClipBytes   int64 `yaml:"max_clip_bytes"`
	// DesignSample is what a designed voice's clip says. Default
	// DefaultDesignSample.
	DesignSample string `yaml:"design_sample"`
}

// WithDefaults fills the zero fields.
func (c Config) WithDefaults() Config {
	c.Backend = cmp.Or(c.Backend, DefaultBackend)
	c.Service = cmp.Or(c.Service, DefaultService)
	c.URL = cmp.Or(c.URL, DefaultURL)
	c.Model = cmp.Or(c.Model, DefaultModel)
	c.Language = cmp.Or(c.Language, DefaultLanguage)
	c.Bitrate = cmp.Or(c.Bitrate, DefaultBitrate)
	c.DesignSample = cmp.Or(c.DesignSample, DefaultDesignSample)
	if len(c.Voices) == 0 {
		c.Voices = append([]string(nil), DefaultVoices...)
	}
	c.Gap = cmp.Or(c.Gap, DefaultGap)
	c.RequestTimeout = defaults.Positive(c.RequestTimeout, DefaultRequestTimeout)
	c.RenderTimeout = defaults.Positive(c.RenderTimeout, DefaultRenderTimeout)
	c.MaxScriptBytes = defaults.Positive(c.MaxScriptBytes, DefaultMaxScriptBytes)
	c.MaxLines = defaults.Positive(c.MaxLines, DefaultMaxLines)
	c.MaxClipBytes = defaults.Positive(c.MaxClipBytes, DefaultMaxClipBytes)
	return c
}

var bitrateRE = regexp.MustCompile(`^[1-9][0-9]{1,2}k$`)

// Validate checks a config after WithDefaults.
func (c Config) Validate() error {
	switch c.Backend {
	case BackendEspeak, BackendQwen:
	default:
		return fmt.Errorf("audio.backend: %q is not %s or %s", c.Backend, BackendEspeak, BackendQwen)
	}
	if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("audio.url: %q is not an http(s) base URL", c.URL)
	}
	if c.Gap < 0 || c.Gap > 5*time.Second {
		return fmt.Errorf("audio.gap: %s is outside 0-5s", c.Gap)
	}
	if !bitrateRE.MatchString(c.Bitrate) {
		return fmt.Errorf("audio.bitrate: %q: want e.g. 128k", c.Bitrate)
	}
	return nil
}
