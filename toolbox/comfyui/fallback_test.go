package comfyui_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/media/comfyui/comfysim"
	comfyuitools "github.com/aetherium-engine/aetherium/toolbox/comfyui"
	"github.com/aetherium-engine/aetherium/tools"
)

// A WebSocket that breaks mid-wait (a proxy restart, a network hiccup) does not
// fail the generation: the tool follows the prompt through /history.
func TestGenerateSurvivesLostEventStream(t *testing.T) {
	t.Parallel()
	sim := comfysim.New(comfysim.Config{StepDelay: 5 * time.Millisecond, NodeDelay: time.Millisecond}, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ws" {
			c, err := websocket.Accept(w, r, nil)
			if err == nil {
				time.Sleep(20 * time.Millisecond)
				_ = c.Close(websocket.StatusGoingAway, "restarting")
			}
			return
		}
		sim.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	m := leases(t, lease.Service{Name: "comfyui", URL: srv.URL})
	g, err := m.Acquire(context.Background(), "comfyui", "run-f")
	require.NoError(t, err)
	reg := tools.NewRegistry()
	comfyuitools.Register(reg, comfyuitools.Deps{Service: m.Service}, comfyuitools.Config{})
	r := &rig{t: t, router: tools.NewRouter(reg)}
	ws := t.TempDir()
	res, err := r.call(session("run-f", ws, &coord{}, g), "comfyui_generate", map[string]any{"prompt": "steady", "width": 128, "height": 64})
	require.NoError(t, err)
	require.Equal(t, "done", res.Status)
	w, h := decodePNG(t, filepath.Join(ws, res.Paths[0]))
	require.Equal(t, [2]int{128, 64}, [2]int{w, h})
}
