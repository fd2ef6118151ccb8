// Package voice is the voice service behind tts_render: a Backend speaks lines
// in voices and turns a written description into a reference clip. Two
// backends: Espeak (espeak-ng in the media image, for development and tests,
// with no GPU) and Qwen (Qwen3-TTS under vllm-omni, its OpenAI-compatible
// POST /v1/audio/speech, on the leased qwen-tts GPU service).
package voice

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

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

// ErrNotWAV is an answer that is not a RIFF/WAVE file.
var ErrNotWAV = errors.New("not a WAV file")

// WAVInfo is a PCM WAV's format and length.
type WAVInfo struct {
	SampleRate, Channels, Bits int
	Duration                   time.Duration
}

// ReadWAV checks b is a PCM WAV and measures it. It tolerates the unknown
// sizes (0 or 0xFFFFFFFF) streaming writers put in the headers, as espeak-ng's
// and ffmpeg's do when writing to a pipe.
func ReadWAV(b []byte) (WAVInfo, error) {
	if len(b) < 12 || !bytes.Equal(b[:4], []byte("RIFF")) || !bytes.Equal(b[8:12], []byte("WAVE")) {
		return WAVInfo{}, ErrNotWAV
	}
	var info WAVInfo
	for off := 12; off+8 <= len(b); {
		id, size := string(b[off:off+4]), int(binary.LittleEndian.Uint32(b[off+4:off+8]))
		body := off + 8
		switch id {
		case "fmt ":
			if body+16 > len(b) {
				return WAVInfo{}, fmt.Errorf("%w: short fmt chunk", ErrNotWAV)
			}
			info.Channels = int(binary.LittleEndian.Uint16(b[body+2:]))
			info.SampleRate = int(binary.LittleEndian.Uint32(b[body+4:]))
			info.Bits = int(binary.LittleEndian.Uint16(b[body+14:]))
		case "data":
			if size <= 0 || body+size > len(b) {
				size = len(b) - body
			}
			if info.SampleRate <= 0 || info.Channels <= 0 || info.Bits <= 0 {
				return WAVInfo{}, fmt.Errorf("%w: data before a valid fmt chunk", ErrNotWAV)
			}
			frames := size / (info.Channels * info.Bits / 8)
			info.Duration = time.Duration(frames) * time.Second / time.Duration(info.SampleRate)
			return info, nil
		}
		if size < 0 || body+size > len(b) {
			break
		}
		off = body + size + size%2
	}
	return WAVInfo{}, fmt.Errorf("%w: no data chunk", ErrNotWAV)
}

// WAV encodes 16-bit mono PCM samples (the simulator's and the tests').
func WAV(rate int, samples []int16) []byte {
	var b bytes.Buffer
	data := len(samples) * 2
	b.WriteString("RIFF")
	_ = binary.Write(&b, binary.LittleEndian, uint32(36+data))
	b.WriteString("WAVEfmt ")
	for _, v := range []any{uint32(16), uint16(1), uint16(1), uint32(rate), uint32(rate * 2), uint16(2), uint16(16)} {
		_ = binary.Write(&b, binary.LittleEndian, v)
	}
	b.WriteString("data")
	_ = binary.Write(&b, binary.LittleEndian, uint32(data))
	_ = binary.Write(&b, binary.LittleEndian, samples)
	return b.Bytes()
}
