package wav

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRead(t *testing.T) {
	t.Parallel()
	good := Encode(24000, make([]int16, 12000))
	streaming := append([]byte(nil), good...)
	binary.LittleEndian.PutUint32(streaming[40:], 0xFFFFFFFF) // a pipe writer's unknown data size
	tests := []struct {
		name string
		in   []byte
		want time.Duration
		err  string
	}{
		{"half a second", good, 500 * time.Millisecond, ""},
		{"unknown data size", streaming, 500 * time.Millisecond, ""},
		{"empty", nil, 0, "not a WAV file"},
		{"mp3", []byte("ID3\x04\x00\x00\x00\x00\x00\x00"), 0, "not a WAV file"},
		{"no data", good[:36], 0, "no data chunk"},
		{"short fmt", good[:24], 0, "short fmt chunk"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			info, err := Read(tc.in)
			if tc.err != "" {
				require.ErrorIs(t, err, ErrNotWAV)
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, info.Duration)
			require.Equal(t, Info{SampleRate: 24000, Channels: 1, Bits: 16, Duration: tc.want}, info)
		})
	}
}

// FuzzRead: a WAV from a voice service or a workspace is outsider data; the
// reader never panics and never reports a negative length.
func FuzzRead(f *testing.F) {
	f.Add(Encode(8000, []int16{1, 2, 3}))
	f.Add([]byte("RIFF\x00\x00\x00\x00WAVEdata\x10\x00\x00\x00"))
	f.Add([]byte("RIFF\xff\xff\xff\xffWAVEfmt \x10\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		info, err := Read(b)
		if err == nil {
			require.GreaterOrEqual(t, info.Duration, time.Duration(0))
			require.Positive(t, info.SampleRate)
		}
	})
}
