package media

import (
	"encoding/base64"
	"testing"

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
