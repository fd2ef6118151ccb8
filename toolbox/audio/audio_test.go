package audio_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/media"
	"github.com/aetherium-engine/aetherium/media/script"
	"github.com/aetherium-engine/aetherium/media/voice"
	"github.com/aetherium-engine/aetherium/media/voice/ttssim"
	"github.com/aetherium-engine/aetherium/media/voice/ttssim/simimage"
	"github.com/aetherium-engine/aetherium/sandbox"
	"github.com/aetherium-engine/aetherium/sandbox/sandboxtest"
	"github.com/aetherium-engine/aetherium/toolbox/audio"
	"github.com/aetherium-engine/aetherium/tools"
)

type coordinator struct {
	mu     sync.Mutex
	events []events.ProgressData
}

func (c *coordinator) Delegate(context.Context, string, []tools.DelegateRequest) error {
	return errors.New("no")
}
func (c *coordinator) Reply(context.Context, string) error { return errors.New("no") }
func (c *coordinator) Emit(_ context.Context, _, typ string, data any) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := data.(events.ProgressData); ok && typ == events.Progress {
		c.events = append(c.events, p)
	}
	return nil
}

type env struct {
	router *tools.Router
	runner *sandbox.Docker
	ws     string
	co     *coordinator
}

func newEnv(t *testing.T) *env {
	t.Helper()
	d := sandboxtest.Media(t)
	reg := tools.NewRegistry()
	audio.Register(reg, audio.Deps{Runner: d}, audio.Config{Backend: audio.BackendEspeak})
	ws := sandboxtest.Workspace(t)
	fixture, err := os.ReadFile(filepath.Join("testdata", "episode.md"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(ws, "episode.md"), fixture, 0o644))
	return &env{router: tools.NewRouter(reg), runner: d, ws: ws, co: &coordinator{}}
}

func (e *env) call(t *testing.T, tool string, args any) (string, error) {
	t.Helper()
	raw, err := json.Marshal(args)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	caller := &tools.Session{RunID: "run-audio-test", SessionID: "s", Agent: "voice", Workspace: e.ws,
		Coordinator: e.co, Access: tools.Access{Tools: []string{"tts_render", "tts_status"}}}
	res, err := e.router.Dispatch(ctx, tools.Call{Session: caller, ID: "c1", Name: tool, Args: raw})
	return res.Content, err
}

func TestRenderEspeakEveryShape(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// A reference clip in the workspace (espeak-ng cannot clone it, and says so).
	clip, err := (&voice.Espeak{Runner: e.runner, Timeout: time.Minute}).Design(context.Background(), "a woman", "Reference.")
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(e.ws, "voices"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(e.ws, "voices", "guest.wav"), clip, 0o644))

	start := time.Now()
	out, err := e.call(t, "tts_render", map[string]any{"script": "episode.md", "cast": map[string]string{
		"host":   "design: a deep, calm male voice",
		"Guest":  "voices/guest.wav",
		"Pixel":  "voice: en-gb+f4",
		"Nobody": "design: unused",
	}})
	require.NoError(t, err)
	t.Logf("tts_render (espeak-ng, 6 lines) took %s", time.Since(start))
	var ans audio.RenderAnswer
	require.NoError(t, json.Unmarshal([]byte(out), &ans))
	require.Equal(t, "audio/episode.mp3", ans.Path)
	require.Equal(t, 6, ans.Lines)
	require.Equal(t, 41, ans.Words)

	fixture, _ := os.ReadFile(filepath.Join("testdata", "episode.md"))
	require.Equal(t, script.SpokenWords(string(fixture)), ans.Words, "the tool counts with the parser")
	// Each speaker got its voice.
	by := map[string]audio.SpeakerAnswer{}
	for _, s := range ans.Speakers {
		by[s.Speaker] = s
	}
	require.Len(t, by, 4)
	require.Equal(t, 10, by["HOST"].Words)
	require.Contains(t, by["HOST"].Voice, "pitch 25 speed 140", "deep and calm")
	require.Equal(t, "audio/voices/"+filepath.Base(by["HOST"].Clip), by["HOST"].Clip)
	require.Contains(t, by["PIXEL"].Voice, "en-gb+f4")
	require.Equal(t, "voices/guest.wav", by["Guest"].Clip)
	require.NotEmpty(t, by["NARRATOR"].Voice)
	voices := map[string]bool{}
	for _, s := range ans.Speakers {
		voices[s.Voice] = true
	}
	require.Len(t, voices, 4, "four speakers, four voices")
	require.Contains(t, ans.Notes, `cast entry "Nobody" speaks no line of the script`)

	// The MP3 decodes (ffprobe in the media image) and its length is plausible
	// for 41 words at espeak-ng's 140-165 wpm plus 5 gaps.
	mp3, err := os.ReadFile(filepath.Join(e.ws, "audio", "episode.mp3"))
	require.NoError(t, err)
	info, err := media.Probe(context.Background(), e.runner, "", "episode.mp3", mp3)
	require.NoError(t, err)
	require.Equal(t, "mp3", info.Codec)
	require.InDelta(t, ans.DurationSeconds, info.Duration.Seconds(), 0.1)
	require.Greater(t, info.Duration.Seconds(), 41.0/3.5, "at most 3.5 words a second")
	require.Less(t, info.Duration.Seconds(), 41.0/1.5+3, "at least 1.5 words a second")

	// Progress reached the run's events, ending at 100.
	require.NotEmpty(t, e.co.events)
	require.Equal(t, 100, e.co.events[len(e.co.events)-1].Percent)

	// The designed voice was cached: a second render reuses it.
	out, err = e.call(t, "tts_render", map[string]any{"script": "episode.md", "out": "final/take2.mp3", "cast": map[string]string{"HOST": "design: a deep, calm male voice"}})
	require.NoError(t, err)
	require.NotContains(t, out, "designed a voice")
	require.FileExists(t, filepath.Join(e.ws, "final", "take2.mp3"))

	st, err := e.call(t, "tts_status", map[string]any{})
	require.NoError(t, err)
	var sa audio.StatusAnswer
	require.NoError(t, json.Unmarshal([]byte(st), &sa))
	require.True(t, sa.Up)
	require.Equal(t, "espeak", sa.Backend)
	require.Len(t, sa.Designed, 1)
	require.NotEmpty(t, sa.Voices)
}

func TestRenderRefusesHostilePaths(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	outside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "secret.md"), []byte("HOST: secret words"), 0o644))
	require.NoError(t, os.Symlink(filepath.Join(outside, "secret.md"), filepath.Join(e.ws, "link.md")))
	require.NoError(t, os.Symlink(outside, filepath.Join(e.ws, "outdir")))
	require.NoError(t, os.MkdirAll(filepath.Join(e.ws, ".hidden"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(e.ws, ".hidden", "s.md"), []byte("HOST: hi"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(e.ws, "prose.md"), []byte("Just some prose, no speakers."), 0o644))
	tests := []struct {
		name string
		args map[string]any
		want string
	}{
		{"traversal", map[string]any{"script": "../secret.md"}, "climbs out of the workspace"},
		{"absolute", map[string]any{"script": "/etc/passwd"}, "is absolute"},
		{"dot dir", map[string]any{"script": ".hidden/s.md"}, "hidden name"},
		{"engine dir", map[string]any{"script": ".aetherium/x.md"}, "reserved"},
		{"symlink out", map[string]any{"script": "link.md"}, "link.md"},
		{"missing", map[string]any{"script": "nope.md"}, "no such file"},
		{"no speakers", map[string]any{"script": "prose.md"}, "has no speaker lines"},
		{"out traversal", map[string]any{"script": "episode.md", "out": "../x.mp3"}, "climbs out"},
		{"out through a symlinked dir", map[string]any{"script": "episode.md", "out": "outdir/x.mp3"}, "outdir"},
		{"out not mp3", map[string]any{"script": "episode.md", "out": "a.wav"}, "must end in .mp3"},
		{"out is the script", map[string]any{"script": "episode.md", "out": "episode.md"}, "must end in .mp3"},
		{"clip traversal", map[string]any{"script": "episode.md", "cast": map[string]string{"HOST": "../../etc/x.wav"}}, "climbs out"},
		{"clip not audio", map[string]any{"script": "episode.md", "cast": map[string]string{"HOST": "episode.md"}}, "neither a reference clip"},
		{"empty design", map[string]any{"script": "episode.md", "cast": map[string]string{"HOST": "design:  "}}, "needs a description"},
		{"bad preset", map[string]any{"script": "episode.md", "cast": map[string]string{"HOST": "voice: a b"}}, "not a voice name"},
		{"missing script arg", map[string]any{}, "missing required field"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.call(t, "tts_render", tc.args)
			require.ErrorContains(t, err, tc.want)
		})
	}
	_, err := os.Stat(filepath.Join(outside, "x.mp3"))
	require.ErrorIs(t, err, os.ErrNotExist, "nothing was written outside the workspace")
}

func TestRenderQwenNeedsTheLease(t *testing.T) {
	t.Parallel()
	reg := tools.NewRegistry()
	audio.Register(reg, audio.Deps{Runner: fakeRunner{}}, audio.Config{Backend: audio.BackendQwen})
	ctx, caller := context.Background(), &tools.Session{RunID: "r", Workspace: t.TempDir(), Access: tools.Access{Tools: []string{"tts_render"}}}
	_, err := tools.NewRouter(reg).Dispatch(ctx, tools.Call{Session: caller, ID: "c", Name: "tts_render", Args: json.RawMessage(`{"script":"s.md"}`)})
	require.ErrorContains(t, err, "gpu_services: [qwen-tts]")
}

func TestRenderWithoutSandboxRefuses(t *testing.T) {
	t.Parallel()
	reg := tools.NewRegistry()
	audio.Register(reg, audio.Deps{}, audio.Config{})
	ctx, caller := context.Background(), &tools.Session{RunID: "r", Workspace: t.TempDir(), Access: tools.Access{Tools: []string{"tts_render"}}}
	_, err := tools.NewRouter(reg).Dispatch(ctx, tools.Call{Session: caller, ID: "c", Name: "tts_render", Args: json.RawMessage(`{"script":"s.md"}`)})
	require.ErrorIs(t, err, media.ErrNoRunner)
}

func TestConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  audio.Config
		want string
	}{
		{"defaults", audio.Config{}, ""},
		{"qwen", audio.Config{Backend: "qwen-tts", URL: "http://gpu:8091"}, ""},
		{"unknown backend", audio.Config{Backend: "piper"}, `audio.backend: "piper"`},
		{"bad url", audio.Config{URL: "gpu:8091"}, "audio.url"},
		{"gap", audio.Config{Gap: time.Minute}, "audio.gap"},
		{"bitrate", audio.Config{Bitrate: "loud"}, "audio.bitrate"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.cfg.WithDefaults().Validate()
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
	c := audio.Config{}.WithDefaults()
	require.Equal(t, audio.DefaultBackend, c.Backend)
	require.Equal(t, audio.DefaultGap, c.Gap)
	require.Equal(t, audio.DefaultVoices, c.Voices)
}

type fakeRunner struct{}

func (fakeRunner) RunOnce(context.Context, sandbox.OneShot) (sandbox.OneShotResult, error) {
	return sandbox.OneShotResult{}, errors.New("fake runner never runs")
}
func (fakeRunner) ImageFor(string) string { return "" }

func TestMain(m *testing.M) {
	code := m.Run()
	simimage.Cleanup()
	os.Exit(code)
}

// tts_render and tts_status with the qwen-tts backend against the simulator,
// started as the qwen-tts GPU service by the lease controller: a designed voice
// is made once and cached, lines go as Base (with the clip) or CustomVoice
// (the default presets), every request carries the run's fencing token, and
// the MP3 is mixed in the media image.
func TestRenderQwenOnTheSimulator(t *testing.T) {
	t.Parallel()
	sim := simimage.Start(t, audio.BackendQwen)
	d := sandboxtest.Media(t)
	reg := tools.NewRegistry()
	audio.Register(reg, audio.Deps{Runner: d, GPU: sim.GPU, Services: sim.Leases}, audio.Config{Backend: audio.BackendQwen, URL: sim.URL, Gap: 250 * time.Millisecond})
	ws := sandboxtest.Workspace(t)
	fixture, err := os.ReadFile(filepath.Join("testdata", "episode.md"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(ws, "episode.md"), fixture, 0o644))
	dispatch := func(tool string, args any) (string, error) {
		raw, _ := json.Marshal(args)
		ctx, caller := sim.Ctx, &tools.Session{RunID: "run-qwen", SessionID: "s", Workspace: ws,
			Access: tools.Access{Tools: []string{"tts_render", "tts_status"}}}
		res, err := tools.NewRouter(reg).Dispatch(ctx, tools.Call{Session: caller, ID: "c", Name: tool, Args: raw})
		return res.Content, err
	}
	start := time.Now()
	out, err := dispatch("tts_render", map[string]any{"script": "episode.md", "cast": map[string]string{"HOST": "design: a warm radio host"}})
	require.NoError(t, err)
	t.Logf("tts_render (qwen-tts on the simulator, 1 design + 6 lines, mix) took %s", time.Since(start))
	var ans audio.RenderAnswer
	require.NoError(t, json.Unmarshal([]byte(out), &ans))
	require.Equal(t, "qwen-tts", ans.Backend)
	by := map[string]audio.SpeakerAnswer{}
	for _, s := range ans.Speakers {
		by[s.Speaker] = s
	}
	require.Contains(t, by["HOST"].Voice, `designed voice "a warm radio host"`)
	require.Equal(t, "qwen3-tts preset ryan", by["PIXEL"].Voice, "uncast speakers get the presets in order (PIXEL is second)")

	// The simulator's audio is 0.2 s + 0.3 s a word per line: 6 lines, 41
	// words, 5 gaps of 0.25 s.
	want := 6*0.2 + 41*0.3 + 5*0.25
	require.InDelta(t, want, ans.DurationSeconds, 0.15)

	reqs := sim.Requests(t)
	require.Len(t, reqs, 7, "one design, six lines")
	require.Equal(t, "VoiceDesign", reqs[0].TaskType)
	require.Equal(t, "a warm radio host", reqs[0].Instructions)
	tasks := map[string]int{}
	for _, r := range reqs {
		require.Equal(t, fmt.Sprint(sim.Grant.Token), r.Token)
		require.Equal(t, 200, r.Status)
		tasks[r.TaskType]++
	}
	require.Equal(t, map[string]int{"VoiceDesign": 1, "Base": 2, "CustomVoice": 4}, tasks)

	// A second render reuses the cached design: no VoiceDesign request.
	_, err = dispatch("tts_render", map[string]any{"script": "episode.md", "out": "take2.mp3", "cast": map[string]string{"HOST": "design: a warm radio host"}})
	require.NoError(t, err)
	for _, r := range sim.Requests(t)[7:] {
		require.NotEqual(t, "VoiceDesign", r.TaskType)
	}

	st, err := dispatch("tts_status", map[string]any{})
	require.NoError(t, err)
	var sa audio.StatusAnswer
	require.NoError(t, json.Unmarshal([]byte(st), &sa))
	require.True(t, sa.Up, sa.Detail)
	require.True(t, sa.Held)
	require.NotNil(t, sa.Container)
	require.True(t, sa.Container.Running)
	require.Equal(t, ttssim.Presets, sa.Voices)
	require.Len(t, sa.Designed, 1)
}

// tts_status on qwen-tts reports a service that fails its health check as down,
// with the reason, rather than failing the call.
func TestStatusQwenDown(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, `{"detail":"model still loading"}`, http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	reg := tools.NewRegistry()
	audio.Register(reg, audio.Deps{}, audio.Config{Backend: audio.BackendQwen, URL: srv.URL})
	ctx, caller := context.Background(), &tools.Session{RunID: "r", Workspace: t.TempDir(), Access: tools.Access{Tools: []string{"tts_status"}}}
	res, err := tools.NewRouter(reg).Dispatch(ctx, tools.Call{Session: caller, ID: "c", Name: "tts_status", Args: json.RawMessage(`{}`)})
	require.NoError(t, err)
	var sa audio.StatusAnswer
	require.NoError(t, json.Unmarshal([]byte(res.Content), &sa))
	require.False(t, sa.Up)
	require.False(t, sa.Held)
	require.Contains(t, sa.Detail, "503 Service Unavailable: model still loading")
}
