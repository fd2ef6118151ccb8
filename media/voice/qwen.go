package voice

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/aetherium-engine/aetherium/lease"
)

// QwenName is the Qwen3-TTS backend's config name (and its lease service's
// default name).
const QwenName = "qwen-tts"

// Qwen speaks through Qwen3-TTS served by vllm-omni on its OpenAI-compatible
// POST /v1/audio/speech. The request shapes (an assumption to confirm against a
// real deployment, docs/reference/tools/audio.md):
//
//   - a preset voice: {model, input, voice, language, response_format: wav}
//     (task_type CustomVoice);
//   - a reference clip: {model, input, task_type: "Base", ref_audio: "data:audio/wav;base64,…",
//     ref_text, language, response_format: wav};
//   - voice design: {model, input: <sample>, task_type: "VoiceDesign",
//     instructions: <description>, language, response_format: wav}.
//
// Every request carries the run's fencing token (lease.Header) when the call's
// context holds a grant on Service.
type Qwen struct {
	// URL is the service's base URL (http://host:port, no /v1).
	URL string
	// Service is the lease service the requests are fenced by.
	Service  string
	Model    string
	Language string
	// HealthURL is the service's health check. Default URL + "/health".
	HealthURL string
	HTTP      *http.Client
	// MaxAudioBytes caps one answer. Default 64 MiB.
	MaxAudioBytes int64
}

// speechRequest is the body of POST /v1/audio/speech.
type speechRequest struct {
	Model          string `json:"model,omitempty"`
	Input          string `json:"input"`
	Voice          string `json:"voice,omitempty"`
	TaskType       string `json:"task_type,omitempty"`
	Language       string `json:"language,omitempty"`
	Instructions   string `json:"instructions,omitempty"`
	RefAudio       string `json:"ref_audio,omitempty"`
	RefText        string `json:"ref_text,omitempty"`
	ResponseFormat string `json:"response_format"`
}

// Name implements Backend.
func (q *Qwen) Name() string { return QwenName }

func (q *Qwen) client() *http.Client {
	if q.HTTP != nil {
		return q.HTTP
	}
	return &http.Client{Timeout: 2 * time.Minute}
}

// Speak implements Backend: one request per line, in order.
func (q *Qwen) Speak(ctx context.Context, lines []Utterance, progress func(int)) ([]Spoken, error) {
	out := make([]Spoken, 0, len(lines))
	for i, l := range lines {
		req := speechRequest{Model: q.Model, Input: l.Text, Language: q.Language, ResponseFormat: "wav"}
		label := ""
		switch v := l.Voice; {
		case len(v.Clip) > 0:
			req.TaskType, req.RefAudio, req.RefText = "Base", dataURL(v.ClipPath, v.Clip), v.ClipText
			label = "qwen3-tts clone of " + v.ClipPath
			if v.Design != "" {
				label = fmt.Sprintf("qwen3-tts designed voice %q (%s)", v.Design, v.ClipPath)
			}
		case v.Design != "":
			req.TaskType, req.Instructions = "VoiceDesign", v.Design
			label = fmt.Sprintf("qwen3-tts designed voice %q", v.Design)
		default:
			req.TaskType, req.Voice = "CustomVoice", v.Preset
			label = "qwen3-tts preset " + v.Preset
		}
		wav, err := q.speech(ctx, req)
		if err != nil {
			return nil, fmt.Errorf("qwen-tts line %d (%s): %w", i+1, l.Voice.Speaker, err)
		}
		out = append(out, Spoken{WAV: wav, Voice: label})
		if progress != nil {
			progress(i + 1)
		}
	}
	return out, nil
}

// Design implements Backend (task_type VoiceDesign).
func (q *Qwen) Design(ctx context.Context, description, sample string) ([]byte, error) {
	wav, err := q.speech(ctx, speechRequest{Model: q.Model, Input: sample, TaskType: "VoiceDesign", Instructions: description, Language: q.Language, ResponseFormat: "wav"})
	if err != nil {
		return nil, fmt.Errorf("qwen-tts voice design: %w", err)
	}
	return wav, nil
}

func (q *Qwen) speech(ctx context.Context, body speechRequest) ([]byte, error) {
	raw, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(q.URL, "/")+"/v1/audio/speech", bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "audio/wav")
	if g, ok := lease.GrantFrom(ctx, q.Service); ok {
		g.SetHeader(req.Header)
	}
	resp, err := q.client().Do(req)
	if err != nil {
		return nil, fmt.Errorf("POST /v1/audio/speech: %w", err)
	}
	defer resp.Body.Close()
	limit := q.MaxAudioBytes
	if limit <= 0 {
		limit = 64 << 20
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read the answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("POST /v1/audio/speech: %s: %s", resp.Status, apiError(b))
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("the answer is over %d bytes", limit)
	}
	if _, err := ReadWAV(b); err != nil {
		return nil, fmt.Errorf("the answer (%s) is %w", resp.Header.Get("Content-Type"), err)
	}
	return b, nil
}

// apiError is the message of an OpenAI-style error body, else its head.
func apiError(b []byte) string {
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
		Detail string `json:"detail"`
	}
	if json.Unmarshal(b, &e) == nil {
		if e.Error.Message != "" {
			return e.Error.Message
		}
		if e.Detail != "" {
			return e.Detail
		}
	}
	s := strings.TrimSpace(strings.ToValidUTF8(string(b), ""))
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

func dataURL(name string, clip []byte) string {
	mime := "audio/wav"
	switch strings.ToLower(path.Ext(name)) {
	case ".mp3":
		mime = "audio/mpeg"
	case ".flac":
		mime = "audio/flac"
	case ".ogg":
		mime = "audio/ogg"
	}
	return "data:" + mime + ";base64," + base64.StdEncoding.EncodeToString(clip)
}

// Status implements Backend: the health check, then the voice list
// (GET /v1/audio/voices; a server without it lists none).
func (q *Qwen) Status(ctx context.Context) (Status, error) {
	st := Status{Backend: QwenName}
	health := q.HealthURL
	if health == "" {
		health = strings.TrimRight(q.URL, "/") + "/health"
	}
	if err := q.get(ctx, health, nil); err != nil {
		st.Detail = "health check " + health + ": " + err.Error()
		return st, nil
	}
	st.Up, st.Detail = true, "healthy ("+health+")"
	var voices json.RawMessage
	if err := q.get(ctx, strings.TrimRight(q.URL, "/")+"/v1/audio/voices", &voices); err == nil {
		st.Voices = parseVoices(voices)
	}
	return st, nil
}

func (q *Qwen) get(ctx context.Context, url string, into *json.RawMessage) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if g, ok := lease.GrantFrom(ctx, q.Service); ok {
		g.SetHeader(req.Header)
	}
	resp, err := q.client().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s: %s", resp.Status, apiError(b))
	}
	if into != nil {
		*into = b
	}
	return nil
}

// parseVoices reads {"voices": ["a", …]} or {"voices": [{"name": "a"}, …]}
// (or the bare list).
func parseVoices(raw json.RawMessage) []string {
	var wrapped struct {
		Voices json.RawMessage `json:"voices"`
	}
	if json.Unmarshal(raw, &wrapped) == nil && len(wrapped.Voices) > 0 {
		raw = wrapped.Voices
	}
	var names []string
	if json.Unmarshal(raw, &names) == nil {
		return names
	}
	var objs []struct {
		Name string `json:"name"`
		ID   string `json:"id"`
	}
	if json.Unmarshal(raw, &objs) != nil {
		return nil
	}
	for _, o := range objs {
		names = append(names, cmp.Or(o.Name, o.ID))
	}
	return names
}
