package fleet

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/mcpserver"
)

// MCP builds the MCP server of the api role: the catalog of the configured
// profiles, calls queued for the workers (the api role runs no tool).
func (f *Fleet) MCP() (*mcpserver.Server, error) {
	if f.Registry == nil || f.Queue == nil {
		return nil, errors.New("mcp: this process was not opened for the api role (fleet.OpenAPI)")
	}
	return mcpserver.New(f.Cfg.MCPConfig(), mcpserver.Deps{Store: f.Store, Queue: f.Queue, Registry: f.Registry,
		Tokens: f.Cfg.API.Tokens, ApprovalWindow: f.Cfg.Security.ApprovalWindow, Hub: f.EventsHub(), Approvals: f.Approvals, Events: f.Events, Log: f.Log.With("component", "mcp")})
}

// RunMCP serves /mcp on api.mcp_addr until ctx ends; a no-op when it is off or
// no profile is configured. net/http, not Fiber: the adaptor would buffer the
// progress notifications of a call waiting for a human until it returned.
func (f *Fleet) RunMCP(ctx context.Context) error {
	cfg := f.Cfg.MCPConfig()
	if !cfg.Enabled() {
		return nil
	}
	if err := cfg.CheckAuth(f.Cfg.API.Config); err != nil {
		return err
	}
	srv, err := f.MCP()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("mcp (api.mcp_addr=%s): %w", cfg.Addr, err)
	}
	f.RegisterEndpoint(ctx, egress.EndpointMCP, ln.Addr().String())
	f.Log.Info("mcp listening", "addr", ln.Addr().String(), "profiles", len(cfg.Profiles))
	err = srv.Serve(ctx, ln, f.Cfg.Worker.ShutdownTimeout)
	f.Log.Info("mcp stopped")
	return err
}
