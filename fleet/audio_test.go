package fleet_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/fleet"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/media"
	"github.com/aetherium-engine/aetherium/sandbox/sandboxtest"
	"github.com/aetherium-engine/aetherium/tools/audio"
)

// A voice-over node through a running fleet (script model, real Docker, the
// media image, espeak-ng): its node requires script.md with at least 30
// spoken words. A first answer after a 5-word script is sent back with the
// count; the agent writes the script in every speaker shape, renders it with
// tts_render, and the second answer stands.
func TestAudioRequiredOutputEndToEnd(t *testing.T) {
	t.Parallel()
	dockerOrFail(t)
	exec := sandboxtest.Media(t)
	cfg := fleettest.Config(t)
	cfg.Audio = audio.Config{Backend: audio.BackendEspeak}
	f := fleettest.StartWith(t, cfg, fleettest.Options{Fleet: fleet.Options{Executor: exec}})

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

	var raw []byte
	require.NoError(t, f.Store.Pool.QueryRow(t.Context(), `SELECT messages FROM sessions WHERE run_id = $1 AND agent = 'writer'`, id).Scan(&raw))
	var msgs []struct{ Role, Name, Content string }
	require.NoError(t, json.Unmarshal(raw, &msgs))
	var sentBack []string
	var rendered string
	for _, m := range msgs[2:] {
		if m.Role == "user" {
			sentBack = append(sentBack, m.Content)
		}
		if m.Role == "tool" && strings.Contains(m.Content, `"path":"audio/script.mp3"`) {
			rendered = m.Content
		}
	}
	require.Len(t, sentBack, 1, "the short script was sent back once")
	require.Contains(t, sentBack[0], "script.md has 4 spoken words, and at least 30 are required")
	require.NotEmpty(t, rendered, "tts_render's answer is in the session")
	var ans audio.RenderAnswer
	require.NoError(t, json.Unmarshal([]byte(rendered), &ans))
	require.Equal(t, 38, ans.Words)
	require.Len(t, ans.Speakers, 3)

	mp3, err := os.ReadFile(filepath.Join(f.Cfg.Workspaces, id, "audio", "script.mp3"))
	require.NoError(t, err)
	info, err := media.Probe(t.Context(), exec, "", "script.mp3", mp3)
	require.NoError(t, err)
	require.Equal(t, "mp3", info.Codec)
	require.Greater(t, info.Duration.Seconds(), 38/3.5)
}
