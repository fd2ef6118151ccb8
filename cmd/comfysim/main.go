// Command comfysim serves the ComfyUI simulator (media/comfyui/comfysim) on
// COMFYSIM_LISTEN (default :8188), with COMFYSIM_STEP_DELAY and
// COMFYSIM_NODE_DELAY (durations or milliseconds) tuning its latencies and
// COMFYSIM_MAX_SIDE bounding latent sizes. A static
// binary for a FROM-scratch image (aetherium/comfysim), started as a GPU
// service like real ComfyUI; video workflows run ffmpeg from PATH, which the
// aetherium/comfysim-video image (the media image plus this binary) has.
package main

import (
	"cmp"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/aetherium-engine/aetherium/media/comfyui/comfysim"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	step, err1 := comfysim.ParseDuration(os.Getenv("COMFYSIM_STEP_DELAY"))
	node, err2 := comfysim.ParseDuration(os.Getenv("COMFYSIM_NODE_DELAY"))
	if err1 != nil || err2 != nil {
		log.Error("comfysim: bad delay", "step", err1, "node", err2)
		os.Exit(2)
	}
	maxSide, _ := strconv.Atoi(os.Getenv("COMFYSIM_MAX_SIDE"))
	addr := cmp.Or(os.Getenv("COMFYSIM_LISTEN"), ":8188")
	srv := &http.Server{Addr: addr, Handler: comfysim.New(comfysim.Config{StepDelay: step, NodeDelay: node, MaxSide: maxSide}, log), ReadHeaderTimeout: 10 * time.Second}
	log.Info("comfysim listening", "addr", addr)
	if err := srv.ListenAndServe(); err != nil {
		log.Error("comfysim", "err", err)
		os.Exit(1)
	}
}
