// Package ttssim is a Qwen3-TTS-under-vllm-omni simulator for tests: it speaks
// the wire format the qwen-tts backend uses (POST /v1/audio/speech with the
// CustomVoice, Base and VoiceDesign task types, GET /v1/audio/voices, GET
// /health) and answers with real WAV audio it generates — a tone whose pitch
// follows the voice and whose length follows the word count — and records
// every request it received, with its fencing token, at GET /requests. The
// real client code is what the tests exercise; cmd/ttssim serves it in a
// FROM-scratch image started as the qwen-tts GPU service.
package ttssim

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aetherium-engine/aetherium/media/wav"
)

// TokenHeader is the fencing token's header (lease.Header; a test keeps the
// two equal, so the static binary need not link the lease package).
const TokenHeader = "X-Aetherium-Lease-Token"

// DefaultPort is the port cmd/ttssim listens on (vllm-omni examples' 8091).
const DefaultPort = 8091

// Rate is the sample rate of the simulator's audio (Qwen3-TTS's).
const Rate = 24000

// Presets are the voices the simulator offers (CustomVoice).
var Presets = []string{"vivian", "ryan", "serena", "aiden"}

// SecondsPerWord and Lead shape the audio: Lead + words × SecondsPerWord.
const (
	SecondsPerWord = 0.3
	Lead           = 0.2
)

// Request is one recorded speech request.
type Request struct {
	TaskType     string `json:"task_type"`
	Voice        string `json:"voice,omitempty"`
	Instructions string `json:"instructions,omitempty"`
	Words        int    `json:"words"`
	RefAudio     int    `json:"ref_audio_bytes,omitempty"`
	RefText      string `json:"ref_text,omitempty"`
	// Token is the X-Aetherium-Lease-Token header ("" when absent).
	Token  string  `json:"token"`
	Status int     `json:"status"`
	Secs   float64 `json:"seconds,omitempty"`
}

// Server is the simulator.
type Server struct {
	mu   sync.Mutex
	reqs []Request
	// Latency delays every speech answer (a GPU's think time).
	Latency time.Duration
}

// Requests returns what the simulator has received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request{}, s.reqs...)
}

// Handler serves the simulator's routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /v1/audio/voices", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"voices": Presets})
	})
	mux.HandleFunc("GET /requests", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, s.Requests()) })
	mux.HandleFunc("POST /v1/audio/speech", s.speech)
	return mux
}

type speechBody struct {
	Model          string  `json:"model"`
	Input          string  `json:"input"`
	Voice          string  `json:"voice"`
	TaskType       string  `json:"task_type"`
	Language       string  `json:"language"`
	Instructions   string  `json:"instructions"`
	RefAudio       string  `json:"ref_audio"`
	RefText        string  `json:"ref_text"`
	ResponseFormat string  `json:"response_format"`
	Speed          float64 `json:"speed"`
}

func (s *Server) speech(w http.ResponseWriter, r *http.Request) {
	rec := Request{Token: r.Header.Get(TokenHeader)}
	fail := func(status int, format string, a ...any) {
		rec.Status = status
		s.record(rec)
		writeJSON(w, status, map[string]any{"error": map[string]any{"message": fmt.Sprintf(format, a...), "type": "BadRequestError", "code": status}})
	}
	var b speechBody
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		fail(http.StatusBadRequest, "invalid request body: %v", err)
		return
	}
	rec.TaskType, rec.Voice, rec.Instructions, rec.RefText = cmp.Or(b.TaskType, "CustomVoice"), b.Voice, b.Instructions, b.RefText
	rec.Words = len(strings.Fields(b.Input))
	if strings.TrimSpace(b.Input) == "" {
		fail(http.StatusBadRequest, "input must not be empty")
		return
	}
	if f := b.ResponseFormat; f != "" && f != "wav" {
		fail(http.StatusBadRequest, "the simulator answers response_format wav only, not %q", f)
		return
	}
	seed := b.Voice
	switch rec.TaskType {
	case "CustomVoice":
		v := cmp.Or(b.Voice, "vivian")
		if !slices.Contains(Presets, strings.ToLower(v)) {
			fail(http.StatusBadRequest, "voice %q is not supported; supported: %s", v, strings.Join(Presets, ", "))
			return
		}
		seed = v
	case "VoiceDesign":
		if strings.TrimSpace(b.Instructions) == "" {
			fail(http.StatusBadRequest, "task_type VoiceDesign needs instructions (the voice description)")
			return
		}
		seed = b.Instructions
	case "Base":
		mime, data, ok := strings.Cut(strings.TrimPrefix(b.RefAudio, "data:"), ";base64,")
		clip, err := base64.StdEncoding.DecodeString(data)
		if !ok || !strings.HasPrefix(b.RefAudio, "data:audio/") || err != nil || len(clip) == 0 {
			fail(http.StatusBadRequest, "task_type Base needs ref_audio as a data:audio/…;base64, URL")
			return
		}
		if mime == "audio/wav" {
			if _, err := wav.Read(clip); err != nil {
				fail(http.StatusBadRequest, "ref_audio: %v", err)
				return
			}
		}
		rec.RefAudio = len(clip)
		seed = data[:min(len(data), 4096)]
	default:
		fail(http.StatusBadRequest, "unknown task_type %q (CustomVoice, VoiceDesign, Base)", b.TaskType)
		return
	}
	if s.Latency > 0 {
		time.Sleep(s.Latency)
	}
	secs := Lead + SecondsPerWord*float64(rec.Words)
	rec.Status, rec.Secs = http.StatusOK, secs
	s.record(rec)
	w.Header().Set("Content-Type", "audio/wav")
	_, _ = w.Write(Tone(seed, secs))
}

func (s *Server) record(r Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs = append(s.reqs, r)
}

// Tone is secs of a sine tone at a pitch derived from seed (one voice, one
// pitch), with short fades so joined clips do not click.
func Tone(seed string, secs float64) []byte {
	h := fnv.New32a()
	_, _ = h.Write([]byte(seed))
	freq := 140 + float64(h.Sum32()%260)
	n := int(secs * Rate)
	samples := make([]int16, n)
	fade := Rate / 100
	for i := range samples {
		amp := 0.3
		if i < fade {
			amp *= float64(i) / float64(fade)
		} else if n-i < fade {
			amp *= float64(n-i) / float64(fade)
		}
		samples[i] = int16(amp * math.MaxInt16 * math.Sin(2*math.Pi*freq*float64(i)/Rate))
	}
	return wav.Encode(Rate, samples)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
