package fleet

import (
	"context"
	"time"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/egressproxy"
	"github.com/aetherium-engine/aetherium/sandbox"
	"github.com/aetherium-engine/aetherium/security"
)

// openEgressProxy gives Docker sandboxes their only way out. Whatever fails here
// leaves sandbox egress off (network none), never open: the fleet still runs.
func (f *Fleet) openEgressProxy(ctx context.Context, cfg config.Config, opts Options) {
	d, ok := f.Executor.(*sandbox.Docker)
	if !ok {
		return
	}
	ecfg := cfg.Sandbox.EgressProxy.WithDefaults()
	if err := ecfg.Validate(); err != nil {
		f.Log.Error("sandbox egress off", "err", err)
		return
	}
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := ecfg.InstallFirewall(fctx); err != nil {
		f.Log.Error("sandbox egress off: the host firewall rules could not be installed", "err", err)
		return
	}
	dlp, err := security.NewDLP()
	if err != nil {
		f.Log.Error("sandbox egress off", "err", err)
		return
	}
	p, err := egressproxy.New(ecfg, egressproxy.Deps{DLP: dlp, Recorder: f.Store, Resolver: opts.EgressResolver, Log: f.Log})
	if err != nil {
		f.Log.Error("sandbox egress off", "err", err)
		return
	}
	d.SetEgress(p)
	f.EgressProxy = p
}

// closeEgressProxy stops the listeners; the firewall rules go only when no sandbox
// network is left on this host (another worker's may still need them).
func (f *Fleet) closeEgressProxy() {
	if f.EgressProxy == nil {
		return
	}
	_ = f.EgressProxy.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := f.EgressProxy.Config().RemoveFirewall(ctx); err != nil {
		f.Log.Warn("sandbox firewall rules left in place", "err", err)
	}
}
