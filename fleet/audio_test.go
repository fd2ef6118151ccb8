package fleet_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/fleet"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/internal/testdb"
	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/media"
	"github.com/aetherium-engine/aetherium/media/voice/ttssim"
	"github.com/aetherium-engine/aetherium/media/voice/ttssim/simimage"
	"github.com/aetherium-engine/aetherium/sandbox/sandboxtest"
	"github.com/aetherium-engine/aetherium/toolbox/audio"
)

// Voice-over through a running fleet (script model, real Docker, the media
// image, espeak-ng), two runs on one fleet:
//   - an inline node requiring script.md with at least 30 spoken words: a first
//     answer after a 5-word script is sent back with the count; the agent writes
//     the script in every speaker shape, renders it with tts_render, and the
//     second answer stands;
//   - the shipped voice-over template (its agents scripted): the writer's
//     two-voice script meets the template's 150 words, tts_render voices it, the
//     run completes and replays with no divergence and nothing executed.
func TestAudioRequiredOutputEndToEnd(t *testing.T) {
	t.Parallel()
	dockerOrFail(t)
	exec := sandboxtest.Media(t)
	cfg := fleettest.Config(t)
	cfg.Audio = audio.Config{Backend: audio.BackendEspeak}
	// The shipped template's episode: the HOST's 10 spoken words 15 times
	// (150, the template's minimum) and the GUEST's 3 (the stage direction is
	// not spoken).
	line := "HOST: The keeper counted every ship that passed the old rocks.\n"
	episode := strings.Repeat(line, 15) + "GUEST: (laughs) Every single one?\n"
	cfg.Templates = scriptedTemplates(t, "voice-over", map[string]any{
		"producer": []map[string]any{
			call("delegate", map[string]any{"agent": "writer", "task": "Write script.md and render it with tts_render"}),
			call("reply", map[string]any{"message": "audio/script.mp3, HOST and GUEST"}),
		},
		"writer": []map[string]any{
			call("write_file", map[string]any{"path": "script.md", "content": episode}),
			call("tts_render", map[string]any{"script": "script.md", "cast": map[string]any{
				"HOST": "design: a warm, calm radio host", "GUEST": "design: a curious, quick young voice"}}),
			{"say": "audio/script.mp3, HOST and GUEST"},
		},
	})
	f := fleettest.StartWith(t, cfg, fleettest.Options{Fleet: fleet.Options{Executor: exec}})

	// rendered is the answer of the run's writer's tts_render and the user
	// messages that sent its answers back.
	rendered := func(t *testing.T, id string) (audio.RenderAnswer, []string) {
		t.Helper()
		var raw []byte
		require.NoError(t, f.Store.Pool.QueryRow(t.Context(), `SELECT session_history(id) FROM sessions WHERE run_id = $1 AND agent = 'writer'`, id).Scan(&raw))
		var msgs []struct{ Role, Name, Content string }
		require.NoError(t, json.Unmarshal(raw, &msgs))
		var sentBack []string
		var ans audio.RenderAnswer
		for _, m := range msgs[2:] {
			if m.Role == "user" {
				sentBack = append(sentBack, m.Content)
			}
			if m.Role == "tool" && m.Name == "tts_render" {
				require.NoError(t, json.Unmarshal([]byte(m.Content), &ans), m.Content)
			}
		}
		return ans, sentBack
	}
	probe := func(t *testing.T, id, path string) media.Info {
		t.Helper()
		mp3, err := os.ReadFile(filepath.Join(f.Cfg.Workspaces, id, path))
		require.NoError(t, err)
		info, err := media.Probe(t.Context(), exec, "", filepath.Base(path), mp3)
		require.NoError(t, err)
		require.Equal(t, "mp3", info.Codec)
		return info
	}

	t.Run("an inline node's short script is sent back", func(t *testing.T) {
		t.Parallel()
		long := strings.Join([]string{
			"# Pilot", "", "[HOST]", "Welcome to the very first episode of our little show.",
			"PIXEL: Thank you, it is wonderful to finally be on the air.", "",
			"**Guest:** I brought a story about a robot and a lighthouse.",
			"**Host:**", "Then tell it, and take your time.", "(music)",
		}, "\n")
		voice := []map[string]any{
			call("write_file", map[string]any{"path": "script.md", "content": "HOST: Hello and welcome everyone.\n"}),
			{"say": "the script is written"},
			call("write_file", map[string]any{"path": "script.md", "content": long}),
			call("tts_render", map[string]any{"script": "script.md", "cast": map[string]any{"HOST": "design: a warm, calm female voice"}}),
			{"say": "script.md is written and audio/script.mp3 rendered"},
		}
		tm := team(voice, nil)
		tm["workers"] = []map[string]any{{
			"name": "writer", "prompt": "write and voice the script", "mcp_servers": []string{"workspace", "audio"},
			"required_output": map[string]any{"file": "script.md", "min_spoken_words": 30},
		}}
		id := f.SubmitTeam(tm, "make the pilot")
		run := f.WaitTerminal(id, 4*time.Minute)
		require.Equal(t, "completed", run.Status, run.Error)

		ans, sentBack := rendered(t, id)
		require.Len(t, sentBack, 1, "the short script was sent back once")
		require.Contains(t, sentBack[0], "script.md has 4 spoken words, and at least 30 are required")
		require.Equal(t, "audio/script.mp3", ans.Path)
		require.Equal(t, 38, ans.Words)
		require.Len(t, ans.Speakers, 3)
		require.Greater(t, probe(t, id, "audio/script.mp3").Duration.Seconds(), 38/3.5)
	})

	t.Run("the shipped voice-over template replays", func(t *testing.T) {
		t.Parallel()
		id := f.Submit("voice-over", "make the episode", map[string]any{"topic": "lighthouses"})
		run := f.WaitTerminal(id, 4*time.Minute)
		require.Equal(t, "completed", run.Status, run.Error)
		ans, sentBack := rendered(t, id)
		require.Empty(t, sentBack, "150 spoken words meet the template's required_output")
		require.Equal(t, 153, ans.Words)
		require.Len(t, ans.Speakers, 2)
		require.Greater(t, probe(t, id, "audio/script.mp3").Duration.Seconds(), 153/3.5)
		requireCleanReplay(t, f, id)
	})
}

// tts_render on the qwen-tts backend through the whole fleet: the team
// declares gpu_services: [qwen-tts], so the run's lease starts the TTS
// simulator's container (a locally built FROM-scratch image) through the lease
// controller before the writer's step, and every speech request the tool makes
// carries the run's fencing token.
func TestAudioQwenThroughTheFleet(t *testing.T) {
	t.Parallel()
	dc := dockerOrFail(t)
	tag, err := simimage.Image(t.Context(), dc)
	require.NoError(t, err)
	exec := sandboxtest.Media(t)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	suffix := hex.EncodeToString(b)
	port := freeTCPPort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	name := "aetherium-e2e-ttssim-" + suffix
	t.Cleanup(func() { _ = dc.ContainerRemove(context.Background(), name, container.RemoveOptions{Force: true}) })
	cfg := fleettest.Config(t)
	cfg.Streams.Leases = lease.Config{Prefix: "aeth:lease:" + suffix, Services: []lease.Service{{
		Name: audio.BackendQwen, Capacity: 1, TTL: 30 * time.Second, Image: tag, Container: name,
		Ports: []string{fmt.Sprintf("127.0.0.1:%d:%d", port, simimage.Port)}, HealthURL: base + "/health",
		StartTimeout: 30 * time.Second, IdleStop: time.Minute,
	}}}
	cfg.Audio = audio.Config{Backend: audio.BackendQwen, URL: base}
	f := fleettest.StartWith(t, cfg, fleettest.Options{Fleet: fleet.Options{Executor: exec}})

	writer := []map[string]any{
		call("write_file", map[string]any{"path": "ep.md", "content": "HOST: Hello there and welcome.\nGUEST: Thanks for having me on.\n"}),
		call("tts_render", map[string]any{"script": "ep.md"}),
		{"say": "rendered"},
	}
	tm := team(writer, map[string]any{"gpu_services": []string{audio.BackendQwen}})
	tm["workers"] = []map[string]any{{"name": "writer", "prompt": "voice it", "mcp_servers": []string{"workspace", "audio"}}}
	id := f.SubmitTeam(tm, "voice it")
	run := f.WaitTerminal(id, 3*time.Minute)
	require.Equal(t, "completed", run.Status, run.Error)

	mp3, err := os.ReadFile(filepath.Join(f.Cfg.Workspaces, id, "audio", "ep.mp3"))
	require.NoError(t, err)
	info, err := media.Probe(t.Context(), exec, "", "ep.mp3", mp3)
	require.NoError(t, err)
	// 2 lines: 0.2 s + 0.3 s a word (4 and 5 words) and one gap.
	require.InDelta(t, 2*0.2+9*0.3+audio.DefaultGap.Seconds(), info.Duration.Seconds(), 0.15)

	resp, err := http.Get(base + "/requests")
	require.NoError(t, err)
	defer resp.Body.Close()
	var reqs []ttssim.Request
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&reqs))
	require.Len(t, reqs, 2)
	for _, r := range reqs {
		require.Equal(t, "CustomVoice", r.TaskType)
		require.NotEmpty(t, r.Token, "the run's fencing token is on every request")
	}
	require.Equal(t, []string{"vivian", "ryan"}, []string{reqs[0].Voice, reqs[1].Voice})
}

// TestMain removes the TTS simulator's image once every test is done (it is
// built once per test binary, on first use), and stops the Redis Cluster the
// cluster demo runs on (testdb.Main).
func TestMain(m *testing.M) {
	code := testdb.Main(m)
	simimage.Cleanup()
	os.Exit(code)
}
