package voice_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/media"
	"github.com/aetherium-engine/aetherium/media/voice"
	"github.com/aetherium-engine/aetherium/media/voice/ttssim"
	"github.com/aetherium-engine/aetherium/media/voice/ttssim/simimage"
	"github.com/aetherium-engine/aetherium/sandbox/sandboxtest"
)

// conformance is what every backend must do: speak lines in distinct voices as
// real WAV whose length grows with the words, design a clip from a
// description, and say it is up.
func conformance(ctx context.Context, t *testing.T, b voice.Backend) {
	t.Helper()
	st, err := b.Status(ctx)
	require.NoError(t, err)
	require.True(t, st.Up, "status: %+v", st)

	clip, err := b.Design(ctx, "a calm, deep male voice", "Hello, this is my voice.")
	require.NoError(t, err)
	ci, err := voice.ReadWAV(clip)
	require.NoError(t, err)
	require.Greater(t, ci.Duration, 300*time.Millisecond)

	lines := []voice.Utterance{
		{Voice: voice.Voice{Speaker: "HOST", Index: 0, Clip: clip, ClipPath: "audio/voices/host.wav", ClipText: "Hello, this is my voice.", Design: "a calm, deep male voice"}, Text: "Welcome to the show."},
		{Voice: voice.Voice{Speaker: "PIXEL", Index: 1, Preset: presetFor(b)}, Text: "Thanks. It is a long line with many more words than the first one had in it."},
	}
	var progressed []int
	spoken, err := b.Speak(ctx, lines, func(n int) { progressed = append(progressed, n) })
	require.NoError(t, err)
	require.Len(t, spoken, 2)
	require.NotEmpty(t, progressed)
	require.Equal(t, 2, progressed[len(progressed)-1])
	var d [2]time.Duration
	for i, s := range spoken {
		info, err := voice.ReadWAV(s.WAV)
		require.NoError(t, err, "line %d", i)
		require.NotEmpty(t, s.Voice)
		d[i] = info.Duration
	}
	require.Greater(t, d[1], d[0], "17 words take longer than 4")
	require.NotEqual(t, spoken[0].Voice, spoken[1].Voice, "each speaker has its own voice")
}

func presetFor(b voice.Backend) string {
	if b.Name() == voice.EspeakName {
		return "en-gb+f3"
	}
	return "ryan"
}

func TestEspeakConformance(t *testing.T) {
	t.Parallel()
	d := sandboxtest.Media(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	conformance(ctx, t, &voice.Espeak{Runner: d, Project: sandboxtest.Project(), Timeout: 2 * time.Minute})
}

func TestEspeakMixDecodes(t *testing.T) {
	t.Parallel()
	d := sandboxtest.Media(t)
	ctx := context.Background()
	e := &voice.Espeak{Runner: d, Timeout: time.Minute}
	sp, err := e.Speak(ctx, []voice.Utterance{{Text: "one two three"}, {Voice: voice.Voice{Index: 1}, Text: "four five six seven"}}, nil)
	require.NoError(t, err)
	var sum time.Duration
	clips := [][]byte{}
	for _, s := range sp {
		i, err := voice.ReadWAV(s.WAV)
		require.NoError(t, err)
		sum += i.Duration
		clips = append(clips, s.WAV)
	}
	mp3, info, err := media.MixMP3(ctx, d, clips, media.MixConfig{Gap: 400 * time.Millisecond, Bitrate: "96k", Timeout: time.Minute})
	require.NoError(t, err)
	require.NotEmpty(t, mp3)
	require.Equal(t, "mp3", info.Codec)
	require.InDelta(t, (sum + 400*time.Millisecond).Seconds(), info.Duration.Seconds(), 0.15, "the lines plus one gap")
	// ffprobe of the MP3 on its own, as a reader would.
	again, err := media.Probe(ctx, d, "", "out.mp3", mp3)
	require.NoError(t, err)
	require.Equal(t, "mp3", again.Codec)
	require.Equal(t, 24000, again.SampleRate)
}

func TestMain(m *testing.M) {
	code := m.Run()
	simimage.Cleanup()
	os.Exit(code)
}

func TestQwenConformanceOnTheSimulator(t *testing.T) {
	t.Parallel()
	sim := simimage.Start(t, voice.QwenName)
	q := &voice.Qwen{URL: sim.URL, Service: voice.QwenName, Model: "Qwen/Qwen3-TTS-12Hz-1.7B-Base", Language: "English"}
	conformance(sim.Ctx, t, q)
}

func TestQwenOnTheSimulator(t *testing.T) {
	t.Parallel()
	sim := simimage.Start(t, voice.QwenName)
	ctx, g := sim.Ctx, sim.Grant
	st0, err := sim.GPU.Status(ctx, voice.QwenName)
	require.NoError(t, err)
	require.True(t, st0.Running, "started by the lease controller: %+v", st0)
	q := &voice.Qwen{URL: sim.URL, Service: voice.QwenName, Model: "Qwen/Qwen3-TTS-12Hz-1.7B-Base", Language: "English"}
	st, err := q.Status(ctx)
	require.NoError(t, err)
	require.True(t, st.Up)
	require.Equal(t, ttssim.Presets, st.Voices)

	clip, err := q.Design(ctx, "a bright young woman", "Hello there.")
	require.NoError(t, err)
	sp, err := q.Speak(ctx, []voice.Utterance{
		{Voice: voice.Voice{Speaker: "HOST", Clip: clip, ClipPath: "audio/voices/d.wav", ClipText: "Hello there.", Design: "a bright young woman"}, Text: "one two three four"},
		{Voice: voice.Voice{Speaker: "PIXEL", Preset: "ryan"}, Text: "five six"},
	}, nil)
	require.NoError(t, err)
	require.Len(t, sp, 2)
	i0, err := voice.ReadWAV(sp[0].WAV)
	require.NoError(t, err)
	require.InDelta(t, ttssim.Lead+4*ttssim.SecondsPerWord, i0.Duration.Seconds(), 0.01)

	reqs := sim.Requests(t)
	require.Len(t, reqs, 3)
	require.Equal(t, "VoiceDesign", reqs[0].TaskType)
	require.Equal(t, "a bright young woman", reqs[0].Instructions)
	require.Equal(t, "Base", reqs[1].TaskType)
	require.Equal(t, len(clip), reqs[1].RefAudio)
	require.Equal(t, "Hello there.", reqs[1].RefText)
	require.Equal(t, "CustomVoice", reqs[2].TaskType)
	require.Equal(t, "ryan", reqs[2].Voice)
	for _, r := range reqs {
		require.Equal(t, fmt.Sprint(g.Token), r.Token, "every request carries the run's fencing token")
	}

	// An unknown preset is the service's own clear error.
	_, err = q.Speak(ctx, []voice.Utterance{{Voice: voice.Voice{Speaker: "X", Preset: "nobody"}, Text: "hi"}}, nil)
	require.ErrorContains(t, err, `voice "nobody" is not supported`)
	require.True(t, strings.Contains(err.Error(), "line 1 (X)"))
}

func TestSimulatorTokenHeaderIsTheLeaseHeader(t *testing.T) {
	t.Parallel()
	require.Equal(t, lease.Header, ttssim.TokenHeader)
}
