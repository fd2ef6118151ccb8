// Package device is the DeviceTools server class (server group device): the Steam
// Frame headset. frame_status is Standard; frame_install, frame_run and frame_grab
// are Restricted (the approval gate suspends them before they get here). The work
// is done by package device's driver; this layer decodes and bounds the agent's
// arguments and names the caller for the headset lock.
package device

import (
	"context"
	"errors"
	"fmt"
	"strings"

	hw "github.com/aetherium-engine/aetherium/device"
	"github.com/aetherium-engine/aetherium/tools"
)

// ErrNotConfigured is a device tool called in a build whose headset is not set up.
var ErrNotConfigured = errors.New("the Steam Frame headset is not configured on this fleet (devices.steam_frame)")

// StatusArgs are frame_status's arguments.
type StatusArgs struct {
	Package string `json:"package,omitempty" jsonschema:"description=Android package to report (e.g. com.example.game); default: the one last installed from this workspace"`
}

// InstallArgs are frame_install's arguments.
type InstallArgs struct {
	APK     string `json:"apk" jsonschema:"description=Path of the APK relative to the workspace (arm64-v8a or no native code; Android API 30; data inside the APK)"`
	Package string `json:"package,omitempty" jsonschema:"description=Expected package name; the call fails if the APK's manifest names another"`
}

// RunArgs are frame_run's arguments.
type RunArgs struct {
	Package                string  `json:"package,omitempty" jsonschema:"description=Android package to run; default: the one last installed from this workspace"`
	MaxSeconds             float64 `json:"max_seconds,omitempty" jsonschema:"minimum=1,description=Stop the app after this many seconds if the wearer has not exited (default and maximum from the fleet config)"`
	CaptureIntervalSeconds float64 `json:"capture_interval_seconds,omitempty" jsonschema:"minimum=1,maximum=60,description=Seconds between captures of the headset view (1-60; default from the fleet config)"`
}

// GrabArgs are frame_grab's arguments (none).
type GrabArgs struct{}

// Register adds the four device tools. d may be nil (a catalog-only registry, or a
// fleet without a headset): the tools then fail at call time with ErrNotConfigured.
func Register(reg *tools.Registry, d *hw.Driver) {
	tools.Register(reg, "frame_status",
		"Read the Steam Frame headset's state without changing anything: reachable and paired, Android container up, adb connected, the installed build (version name/code) and how many saves it has.",
		handler(d, "frame_status", func(ctx context.Context, c hw.Caller, ws string, a StatusArgs) (hw.Status, error) {
			return d.Status(ctx, c, ws, strings.TrimSpace(a.Package))
		}), tools.Returns[hw.Status](), tools.ReadOnly(), tools.Idempotent(), tools.InGroup("device"), tools.AlwaysHuman())

	tools.Register(reg, "frame_install",
		"Install an APK from the workspace on the Steam Frame headset (validated first: a zip with AndroidManifest.xml, arm64-v8a native code or none, size-limited). Starts the Android container and reconnects adb when needed, and restores the app's saves after a container restart. Needs human approval.",
		handler(d, "frame_install", func(ctx context.Context, c hw.Caller, ws string, a InstallArgs) (hw.InstallResult, error) {
			return d.Install(ctx, c, ws, a.APK, strings.TrimSpace(a.Package))
		}), tools.Returns[hw.InstallResult](), tools.InGroup("device"), tools.WithTier(tools.Restricted), tools.AlwaysHuman())

	tools.Register(reg, "frame_run",
		"Run the installed app with someone wearing the headset: capture the view every few seconds, wait until the wearer exits (or max_seconds), then bring back the log, the performance recording, the saves and a contact sheet under .frame/, with how the run ended (exited, crashed, timed_out) and the frame rate against the 72 fps bar. Needs human approval.",
		handler(d, "frame_run", func(ctx context.Context, c hw.Caller, ws string, a RunArgs) (hw.RunResult, error) {
			cfg := d.Config()
			maxDur, err := hw.BoundSeconds("max_seconds", a.MaxSeconds, cfg.DefaultRunDuration, hw.MinRunDuration, cfg.MaxRunDuration)
			if err != nil {
				return hw.RunResult{}, err
			}
			every, err := hw.BoundSeconds("capture_interval_seconds", a.CaptureIntervalSeconds, cfg.CaptureInterval, hw.MinCaptureEvery, hw.MaxCaptureEvery)
			if err != nil {
				return hw.RunResult{}, err
			}
			return d.Run(ctx, c, ws, hw.RunOptions{Package: strings.TrimSpace(a.Package), MaxDuration: maxDur, CaptureInterval: every})
		}), tools.Returns[hw.RunResult](), tools.InGroup("device"), tools.WithTier(tools.Restricted), tools.AlwaysHuman())

	tools.Register(reg, "frame_grab",
		"Save one picture of what the Steam Frame headset shows right now under .frame/grabs/. Needs human approval.",
		handler(d, "frame_grab", func(ctx context.Context, c hw.Caller, ws string, _ GrabArgs) (hw.GrabResult, error) {
			return d.Grab(ctx, c, ws)
		}), tools.Returns[hw.GrabResult](), tools.InGroup("device"), tools.WithTier(tools.Restricted), tools.AlwaysHuman())
}

// handler is the handler of a device tool: the caller named for the headset
// lock, then do, whose answer is the tool's result; errors name the tool.
func handler[A, R any](d *hw.Driver, tool string, do func(ctx context.Context, c hw.Caller, ws string, a A) (R, error)) func(context.Context, tools.Call, A) (tools.Result, error) {
	return func(ctx context.Context, call tools.Call, a A) (tools.Result, error) {
		c, ws, err := caller(call, d, tool)
		if err != nil {
			return tools.Result{}, err
		}
		res, err := do(ctx, c, ws, a)
		if err != nil {
			return tools.Result{}, fmt.Errorf("%s: %w", tool, err)
		}
		return tools.JSON(res)
	}
}

func caller(call tools.Call, d *hw.Driver, tool string) (hw.Caller, string, error) {
	if d == nil {
		return hw.Caller{}, "", fmt.Errorf("%s: %w", tool, ErrNotConfigured)
	}
	ws, err := call.Workspace()
	if err != nil {
		return hw.Caller{}, "", fmt.Errorf("%s: %w", tool, err)
	}
	return hw.Caller{RunID: call.Session.RunID, Agent: call.Session.Agent, Tool: tool}, ws, nil
}
