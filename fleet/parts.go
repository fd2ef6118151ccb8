package fleet

import (
	"context"
	"fmt"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/device"
	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/gpu"
	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/sandbox"
)

// openParts builds the worker role's machinery: the GPU controller, the device
// driver, the sandbox and its egress proxy.
func (f *Fleet) openParts(ctx context.Context, cfg config.Config, opts Options) error {
	reg := f.Metrics.Registry
	gm, err := gpu.NewMetrics(reg)
	if err != nil {
		return fmt.Errorf("gpu metrics: %w", err)
	}
	needsDocker := false
	for _, s := range cfg.Streams.Leases.Services {
		needsDocker = needsDocker || s.Image != ""
	}
	if needsDocker {
		dc, err := gpu.NewDockerClient()
		if err != nil {
			return fmt.Errorf("streams.leases: services with an image need a Docker engine: %w", err)
		}
		if f.GPU, err = gpu.New(gpu.Config{}, gpu.Deps{Leases: f.Leases, Docker: dc, Metrics: gm, Log: f.Log}); err != nil {
			return fmt.Errorf("gpu controller: %w", err)
		}
		// The GPU services' network is refused to agents whole, here and (through
		// the registry) in every process: its containers answer on addresses no
		// configured endpoint names.
		nets, err := f.GPU.Networks(ctx)
		if err != nil {
			return fmt.Errorf("gpu controller: %w", err)
		}
		for _, n := range nets {
			f.RegisterEndpoint(ctx, egress.EndpointGPU+" network ("+lease.DefaultNetwork+")", n.String())
		}
	}

	dm := device.NewMetrics(reg)
	if opts.Device != nil {
		if f.Device, err = device.New(*opts.Device, device.Deps{Redis: f.Redis, Metrics: dm, Log: f.Log}); err != nil {
			return fmt.Errorf("device: %w", err)
		}
	} else if sf := cfg.Devices.SteamFrame; sf.Enabled {
		f.Device, err = device.New(sf.Config, device.Deps{Redis: f.Redis, Metrics: dm, Log: f.Log})
		if err != nil {
			return fmt.Errorf("devices.steam_frame: %w", err)
		}
	}

	f.Executor = opts.Executor
	if f.Executor == nil && !opts.NoSandbox {
		// A sandbox that cannot start leaves run_shell failing with a clear error at
		// call time; the rest of the fleet still runs. Never a silent host fallback.
		scfg := cfg.Sandbox
		if scfg.Docker.Scope == "" {
			// The default scope is this fleet's id, not a constant: two fleets on one
			// Docker engine must never sweep each other's containers.
			id, err := f.Store.FleetID(ctx)
			if err != nil {
				return err
			}
			scfg.Docker.Scope = id
		}
		ex, err := sandbox.New(ctx, scfg, f.Log)
		if err != nil {
			f.Log.Error("sandbox unavailable: run_shell and read_logs will fail", "err", err)
		} else {
			f.Executor = ex
			f.ownExecutor = true
			if d, ok := ex.(*sandbox.Docker); ok {
				// One-shot containers are capped per run and per principal across
				// every worker process (Redis slots).
				d.SetSlots(sandbox.NewSlots(f.Redis, cfg.Sandbox.OneShot))
			}
		}
	}
	f.openEgressProxy(ctx, cfg, opts)
	return nil
}
