package ttssim

import (
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/media/wav"
)

func TestSpeech(t *testing.T) {
	t.Parallel()
	clip := base64.StdEncoding.EncodeToString(Tone("x", 0.5))
	tests := []struct {
		name, body string
		status     int
		secs       float64
		err        string
	}{
		{"preset", `{"input":"one two three","voice":"ryan","response_format":"wav"}`, 200, Lead + 3*SecondsPerWord, ""},
		{"default preset", `{"input":"one"}`, 200, Lead + SecondsPerWord, ""},
		{"design", `{"input":"a b","task_type":"VoiceDesign","instructions":"calm"}`, 200, Lead + 2*SecondsPerWord, ""},
		{"clone", `{"input":"a b c d","task_type":"Base","ref_audio":"data:audio/wav;base64,` + clip + `","ref_text":"x"}`, 200, Lead + 4*SecondsPerWord, ""},
		{"unknown preset", `{"input":"a","voice":"nobody"}`, 400, 0, `voice \"nobody\" is not supported`},
		{"design without a description", `{"input":"a","task_type":"VoiceDesign"}`, 400, 0, "needs instructions"},
		{"clone without audio", `{"input":"a","task_type":"Base","ref_audio":"https://x/y.wav"}`, 400, 0, "data:audio"},
		{"clone of a non-WAV", `{"input":"a","task_type":"Base","ref_audio":"data:audio/wav;base64,aGVsbG8="}`, 400, 0, "not a WAV file"},
		{"unknown task", `{"input":"a","task_type":"Sing"}`, 400, 0, "unknown task_type"},
		{"empty input", `{"input":"  "}`, 400, 0, "input must not be empty"},
		{"mp3 asked", `{"input":"a","response_format":"mp3"}`, 400, 0, "wav only"},
		{"unknown field", `{"input":"a","pitch":3}`, 400, 0, "unknown field"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := &Server{}
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodPost, "/v1/audio/speech", strings.NewReader(tc.body))
			req.Header.Set(TokenHeader, "42")
			s.Handler().ServeHTTP(rec, req)
			require.Equal(t, tc.status, rec.Code, rec.Body.String())
			reqs := s.Requests()
			require.Len(t, reqs, 1)
			require.Equal(t, "42", reqs[0].Token)
			if tc.err != "" {
				require.Contains(t, rec.Body.String(), tc.err)
				require.Contains(t, rec.Body.String(), `"error":{`)
				return
			}
			require.Equal(t, "audio/wav", rec.Header().Get("Content-Type"))
			info, err := wav.Read(rec.Body.Bytes())
			require.NoError(t, err)
			require.InDelta(t, tc.secs, info.Duration.Seconds(), 0.001)
			require.Equal(t, Rate, info.SampleRate)
		})
	}
}

func TestHealthAndVoices(t *testing.T) {
	t.Parallel()
	h := (&Server{}).Handler()
	for path, want := range map[string]string{"/health": "ok", "/v1/audio/voices": `{"voices":["vivian","ryan","serena","aiden"]}`, "/requests": "[]"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		require.Equal(t, 200, rec.Code)
		require.Equal(t, want, strings.TrimSpace(rec.Body.String()), path)
	}
}
