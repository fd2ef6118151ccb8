package fleet_test

import (
	"context"
	"encoding/json"
	"image/png"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/device"
	"github.com/aetherium-engine/aetherium/device/apk/apktest"
	"github.com/aetherium-engine/aetherium/device/devicetest"
	"github.com/aetherium-engine/aetherium/device/steam-frame/sim"
	"github.com/aetherium-engine/aetherium/fleet"
	"github.com/aetherium-engine/aetherium/fleettest"
)

// The steam-frame-vr template on the simulated headset, through the whole fleet:
// status → install (approved over the API) → run (approved) → status; while the
// run holds the headset a second device call is refused; the container that was
// down is started; the contact sheet decodes; the metrics carry the fps check.
func TestSteamFrameTemplateOnSimulator(t *testing.T) {
	t.Parallel()
	h := devicetest.Sim(t, sim.Scenario{
		ContainerStopped: true,
		App:              sim.App{ExitAfter: 3 * time.Second, Frames: sim.Profile{FPS: 72}},
	})
	f := fleettest.Start(t, fleettest.Options{Fleet: fleet.Options{Device: &h.Config}})
	id := f.Submit("steam-frame-vr", "playtest the build", nil)
	// Open the workspace before putting the build in: with a quota it is a
	// filesystem of its own (Open is idempotent, whoever comes first makes it).
	ws, err := f.Workspaces.Open(context.Background(), id)
	require.NoError(t, err)
	apkPath := filepath.Join(ws, "build", "game.apk")
	require.NoError(t, os.MkdirAll(filepath.Dir(apkPath), 0o755))
	require.NoError(t, os.WriteFile(apkPath, apktest.APK(apktest.GameAPK()), 0o644))

	install := pendingApproval(t, f, id)
	require.Equal(t, "frame_install", install.Tool)
	code, raw := f.Do("POST", "/api/approvals/"+install.ID+"/approve", map[string]string{"reason": "wearing it"}, nil)
	require.Equal(t, http.StatusOK, code, string(raw))

	run := pendingApproval(t, f, id)
	require.Equal(t, "frame_run", run.Tool)
	code, raw = f.Do("POST", "/api/approvals/"+run.ID+"/approve", nil, nil)
	require.Equal(t, http.StatusOK, code, string(raw))

	// While frame_run holds the headset (its app is running), any other device call
	// is refused at once, naming the holder. Probing only then keeps the probe from
	// taking the headset before frame_run does.
	ctx := context.Background()
	require.Eventually(t, func() bool {
		st := h.State(t)
		return st.App != nil && st.App.Ended.IsZero()
	}, 60*time.Second, 20*time.Millisecond, "the app never launched")
	_, err = f.Device.Status(ctx, device.Caller{RunID: "other", Agent: "intruder", Tool: "frame_status"}, t.TempDir(), "")
	var busy *device.BusyError
	require.ErrorAs(t, err, &busy)
	require.Contains(t, err.Error(), "vr-tester")

	evs := f.Follow(id, 0, 90*time.Second)
	require.Equal(t, "run.completed", evs[len(evs)-1].Type)

	var result struct {
		Outcome      string `json:"outcome"`
		ContactSheet string `json:"contact_sheet"`
		FPS          *struct {
			Result    string  `json:"result"`
			SteadyFPS float64 `json:"steady_fps"`
		} `json:"fps"`
	}
	var tools []string
	for _, e := range evs {
		if e.Type != "tool.call" || e.Agent != "vr-tester" {
			continue
		}
		var d struct{ Tool, Decision, Result string }
		require.NoError(t, json.Unmarshal(e.Data, &d))
		tools = append(tools, d.Tool+":"+d.Decision)
	}
	require.Equal(t, []string{"frame_status:allowed", "frame_install:allowed", "frame_run:allowed", "frame_status:allowed"}, tools)
	var msgs []struct {
		Role, Name, Content string
	}
	var raws string
	require.NoError(t, f.Store.Pool.QueryRow(ctx, `SELECT session_history(id)::text FROM sessions WHERE run_id = $1 AND agent = 'vr-tester'`, id).Scan(&raws))
	require.NoError(t, json.Unmarshal([]byte(raws), &msgs))
	for _, m := range msgs {
		if m.Role == "tool" && m.Name == "frame_run" {
			require.NoError(t, json.Unmarshal([]byte(m.Content), &result), m.Content)
		}
	}
	require.Equal(t, "exited", result.Outcome)
	require.NotNil(t, result.FPS)
	require.Equal(t, "pass", result.FPS.Result)
	require.InDelta(t, 72, result.FPS.SteadyFPS, 1)
	require.True(t, strings.HasPrefix(result.ContactSheet, ".frame/"), result.ContactSheet)
	var sheet *os.File
	sheet, err = os.Open(filepath.Join(f.Cfg.Workspaces, id, result.ContactSheet))
	require.NoError(t, err)
	defer sheet.Close()
	_, err = png.Decode(sheet)
	require.NoError(t, err)

	st := h.State(t)
	require.Equal(t, 1, st.Starts, "the stopped Android container was started once")

	f.Audit.Flush()
	rows, err := f.Store.RunAudit(ctx, id, 100)
	require.NoError(t, err)
	approved := map[string]string{}
	for _, r := range rows {
		if r.Agent == "vr-tester" {
			approved[r.Tool] = r.ApprovedBy + "/" + r.Tier
		}
	}
	require.Equal(t, "local/restricted", approved["frame_install"])
	require.Equal(t, "local/restricted", approved["frame_run"])
	require.Equal(t, "/standard", approved["frame_status"])

	// Replayed from its record, the run reaches the headset no more.
	before := h.State(t)
	requireCleanReplay(t, f, id)
	after := h.State(t)
	require.Len(t, after.Log, len(before.Log), "the replay ran a command on the headset")
	require.Equal(t, before.Starts, after.Starts)
	require.Equal(t, before.Captures, after.Captures)

	code, raw = f.Do("GET", "/metrics", nil, nil)
	require.Equal(t, 200, code)
	require.Contains(t, string(raw), `aetherium_headset_fps_checks_total{result="pass"} 1`)
	require.Contains(t, string(raw), "aetherium_headset_fps ")
}
