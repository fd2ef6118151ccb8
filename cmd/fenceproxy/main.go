// Command fenceproxy is the fencing proxy the GPU controller runs beside a leased
// service (package gpu/fenceproxy): it refuses requests whose lease token is
// missing, stale or not live, and forwards the rest. Configured by FENCE_*
// environment variables; a static binary for a FROM-scratch image.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/aetherium-engine/aetherium/gpu/fenceproxy"
	"github.com/aetherium-engine/aetherium/internal/redisconn"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if err := run(log); err != nil {
		log.Error("fenceproxy", "err", err)
		os.Exit(1)
	}
}

func run(log *slog.Logger) error {
	cfg, err := fenceproxy.FromEnv(os.Getenv)
	if err != nil {
		return err
	}
	rc, err := redisconn.Parse(cfg.Redis)
	if err != nil {
		return fmt.Errorf("%s: %w", fenceproxy.EnvRedis, err)
	}
	rdb := rc.Client()
	defer rdb.Close()
	m, err := fenceproxy.NewManager(cfg, rdb)
	if err != nil {
		return err
	}
	p, err := fenceproxy.New(cfg, m, log)
	if err != nil {
		return err
	}
	srv := &http.Server{Addr: cfg.Listen, Handler: p, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Info("fencing proxy listening", "listen", cfg.Listen, "service", cfg.Service, "upstream", cfg.Upstream, "capacity", cfg.Capacity)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
