package media

import (
	"encoding/base64"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseOutput(t *testing.T) {
	t.Parallel()
	const n = "@@nonce"
	enc := base64.StdEncoding.EncodeToString
	tests := []struct {
		name  string
		out   string
		files map[string]string
		rc    int
		err   string
	}{
		{"files and log", n + " rc 0\n" + n + " log\n" + enc([]byte("fine")) + "\n" + n + " file a.wav\n" + enc([]byte("RIFF")) + "\n" + n + " end\n",
			map[string]string{"a.wav": "RIFF"}, 0, ""},
		{"a forged marker without the nonce is data", "@@other file x\n" + n + " rc 2\n" + n + " end\n", map[string]string{}, 2, ""},
		{"cut short", n + " rc 0\n" + n + " file a.wav\n" + enc([]byte("x")) + "\n", nil, 0, "ended early"},
		{"unpack failed", n + " rc 125\n", nil, 125, "could not be unpacked"},
		{"bad base64", n + " rc 0\n" + n + " file a\n!!!\n" + n + " end\n", nil, 0, "output a"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := Result{Files: map[string][]byte{}}
			err := parseOutput(tc.out, n, &res)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.rc, res.ExitCode)
			got := map[string]string{}
			for k, v := range res.Files {
				got[k] = string(v)
			}
			require.Equal(t, tc.files, got)
		})
	}
}

func TestMixRefusesBadArguments(t *testing.T) {
	t.Parallel()
	_, _, err := MixMP3(t.Context(), nil, nil, MixConfig{Bitrate: "128k"})
	require.ErrorContains(t, err, "nothing to mix")
	_, _, err = MixMP3(t.Context(), nil, [][]byte{{1}}, MixConfig{Bitrate: "128k; rm -rf /"})
	require.ErrorContains(t, err, "want e.g. 128k")
	_, err = Run(t.Context(), nil, Job{Script: "true"})
	require.ErrorIs(t, err, ErrNoRunner)
}

func TestParseVideoProbe(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		raw  string
		want VideoInfo
		err  string
	}{
		{"h264 mp4", `{"streams":[{"codec_type":"video","codec_name":"h264","width":832,"height":480,"avg_frame_rate":"16/1","nb_read_frames":"32"}],"format":{"format_name":"mov,mp4,m4a,3gp,3g2,mj2","duration":"2.000000"}}`,
			VideoInfo{Format: "mov,mp4,m4a,3gp,3g2,mj2", Codec: "h264", Width: 832, Height: 480, Frames: 32, FPS: 16, Duration: 2 * time.Second}, ""},
		{"ntsc rate", `{"streams":[{"codec_type":"video","codec_name":"h264","width":64,"height":64,"avg_frame_rate":"30000/1001","nb_read_frames":"3"}],"format":{"format_name":"mp4","duration":"0.1"}}`,
			VideoInfo{Format: "mp4", Codec: "h264", Width: 64, Height: 64, Frames: 3, FPS: 30000.0 / 1001, Duration: 100 * time.Millisecond}, ""},
		{"audio only", `{"streams":[],"format":{"format_name":"mp3","duration":"1.0"}}`, VideoInfo{}, "no decodable video"},
		{"no frames decoded", `{"streams":[{"codec_type":"video","codec_name":"h264","width":64,"height":64,"avg_frame_rate":"16/1","nb_read_frames":"0"}],"format":{"format_name":"mp4","duration":"1.0"}}`, VideoInfo{}, "0 frames"},
		{"no duration", `{"streams":[{"codec_type":"video","codec_name":"h264","width":64,"height":64,"nb_read_frames":"4"}],"format":{"format_name":"mp4"}}`, VideoInfo{}, "no duration"},
		{"not json", `nope`, VideoInfo{}, "ffprobe output"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseVideoProbe([]byte(tc.raw))
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}
