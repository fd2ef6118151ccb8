// Package wav reads and writes the PCM WAV files voices speak in (a leaf
// package: the TTS simulator's static binary links nothing else of the module).
package wav

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// ErrNotWAV is an answer that is not a RIFF/WAVE file.
var ErrNotWAV = errors.New("not a WAV file")

// Info is a PCM WAV's format and length.
type Info struct {
	SampleRate, Channels, Bits int
	Duration                   time.Duration
}

// Read checks b is a PCM WAV and measures it. It tolerates the unknown
// sizes (0 or 0xFFFFFFFF) streaming writers put in the headers, as espeak-ng's
// and ffmpeg's do when writing to a pipe.
func Read(b []byte) (Info, error) {
	if len(b) < 12 || !bytes.Equal(b[:4], []byte("RIFF")) || !bytes.Equal(b[8:12], []byte("WAVE")) {
		return Info{}, ErrNotWAV
	}
	var info Info
	for off := 12; off+8 <= len(b); {
		id, size := string(b[off:off+4]), int(binary.LittleEndian.Uint32(b[off+4:off+8]))
		body := off + 8
		switch id {
		case "fmt ":
			if body+16 > len(b) {
				return Info{}, fmt.Errorf("%w: short fmt chunk", ErrNotWAV)
			}
			info.Channels = int(binary.LittleEndian.Uint16(b[body+2:]))
			info.SampleRate = int(binary.LittleEndian.Uint32(b[body+4:]))
			info.Bits = int(binary.LittleEndian.Uint16(b[body+14:]))
		case "data":
			if size <= 0 || body+size > len(b) {
				size = len(b) - body
			}
			if info.SampleRate <= 0 || info.Channels <= 0 || info.Bits <= 0 || info.Bits%8 != 0 {
				return Info{}, fmt.Errorf("%w: data before a valid fmt chunk (%d Hz, %d channels, %d bits)", ErrNotWAV, info.SampleRate, info.Channels, info.Bits)
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
	return Info{}, fmt.Errorf("%w: no data chunk", ErrNotWAV)
}

// Encode encodes 16-bit mono PCM samples (the simulator's and the tests').
func Encode(rate int, samples []int16) []byte {
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
