// Command ttssim serves the Qwen3-TTS simulator (media/voice/ttssim) for tests:
// a static binary in a FROM-scratch image, started as the qwen-tts GPU service
// through the lease controller exactly as a real vllm-omni container would be.
package main

import (
	"flag"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/aetherium-engine/aetherium/media/voice/ttssim"
)

func main() {
	addr := flag.String("addr", ":8091", "listen address")
	latency := flag.Duration("latency", 0, "delay of every speech answer")
	flag.Parse()
	s := &ttssim.Server{Latency: *latency}
	srv := &http.Server{Addr: *addr, Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	slog.Info("ttssim listening", "addr", *addr)
	if err := srv.ListenAndServe(); err != nil {
		slog.Error("ttssim", "err", err)
		os.Exit(1)
	}
}
