// Package voice is the voice service behind tts_render: a Backend speaks lines
// in voices and turns a written description into a reference clip. Two
// backends: Espeak (espeak-ng in the media image, for development and tests,
// with no GPU) and Qwen (Qwen3-TTS under vllm-omni, its OpenAI-compatible
// POST /v1/audio/speech, on the leased qwen-tts GPU service).
package voice

import (
	"context"

	"github.com/aetherium-engine/aetherium/media/wav"
)

// ReadWAV checks b is a PCM WAV and measures it (wav.Read).
func ReadWAV(b []byte) (wav.Info, error) { return wav.Read(b) }

// Voice is the voice a speaker is given by the cast.
type Voice struct {
	// Speaker is whom the voice speaks for; Index is the speaker's place in the
	// script (0 first), so backends that pick voices can give each its own.
	Speaker string
	Index   int
	// Clip is a reference clip (WAV, or another format its ClipPath names) to
	// speak like; ClipText is what is said in it, when known (a designed clip's
	// sample sentence, or the transcript beside a workspace clip).
	Clip     []byte
	ClipPath string
	ClipText string
	// Design is the written description the voice was designed from.
	Design string
	// Preset is a voice the backend names itself (Qwen3-TTS's "vivian",
	// espeak-ng's "en-us+f3").
	Preset string
}

// Utterance is one line to speak.
type Utterance struct {
	Voice Voice
	Text  string
}

// Spoken is one spoken line: a WAV clip and a human label of the voice used.
type Spoken struct {
	WAV   []byte
	Voice string
}

// Status is whether a backend can speak now.
type Status struct {
	Backend string `json:"backend"`
	Up      bool   `json:"up"`
	Detail  string `json:"detail,omitempty"`
	// Voices are the voices the backend offers by name (presets).
	Voices []string `json:"voices,omitempty"`
}

// Backend is a voice service.
type Backend interface {
	// Name is the backend's config name (espeak, qwen-tts).
	Name() string
	// Speak speaks every line, in order, calling progress after each finished
	// line when the backend can tell (it may report all at once).
	Speak(ctx context.Context, lines []Utterance, progress func(done int)) ([]Spoken, error)
	// Design turns a written voice description into a reference clip (WAV) of
	// sample spoken in that voice.
	Design(ctx context.Context, description, sample string) ([]byte, error)
	Status(ctx context.Context) (Status, error)
}
