// Package workspace is the WorkspaceTools server class: file operations confined to
// the run's workspace directory.
package workspace

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/aetherium-engine/aetherium/tools"
)

// Config bounds file sizes.
type Config struct {
	// MaxFileBytes caps reads and writes. Default 1 MiB.
	MaxFileBytes int64
}

// ReadArgs are read_file's arguments.
type ReadArgs struct {
	Path string `json:"path" jsonschema:"description=File path relative to the workspace"`
}

// WriteArgs are write_file's arguments.
type WriteArgs struct {
	Path    string `json:"path" jsonschema:"description=File path relative to the workspace"`
	Content string `json:"content" jsonschema:"description=The whole new content of the file"`
}

// Register adds the workspace tools.
func Register(reg *tools.Registry, cfg Config) {
	if cfg.MaxFileBytes <= 0 {
		cfg.MaxFileBytes = 1 << 20
	}
	tools.Register(reg, "read_file", "Read and return a file's contents (path relative to the workspace).",
		func(ctx context.Context, a ReadArgs) (tools.Result, error) {
			p, err := resolve(ctx, a.Path)
			if err != nil {
				return tools.Result{}, err
			}
			fi, err := os.Stat(p)
			if err != nil {
				return tools.Result{}, fmt.Errorf("read_file %s: %w", a.Path, errors.Unwrap(err))
			}
			if !fi.Mode().IsRegular() {
				return tools.Result{}, fmt.Errorf("read_file %s: not a regular file", a.Path)
			}
			if fi.Size() > cfg.MaxFileBytes {
				return tools.Result{}, fmt.Errorf("read_file %s: %d bytes is over the %d byte limit", a.Path, fi.Size(), cfg.MaxFileBytes)
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return tools.Result{}, fmt.Errorf("read_file %s: %w", a.Path, err)
			}
			return tools.Result{Content: string(b)}, nil
		}, tools.Idempotent())
	tools.Register(reg, "write_file", "Create or overwrite a file in the workspace with the given content.",
		func(ctx context.Context, a WriteArgs) (tools.Result, error) {
			if int64(len(a.Content)) > cfg.MaxFileBytes {
				return tools.Result{}, fmt.Errorf("write_file %s: %d bytes is over the %d byte limit", a.Path, len(a.Content), cfg.MaxFileBytes)
			}
			p, err := resolve(ctx, a.Path)
			if err != nil {
				return tools.Result{}, err
			}
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return tools.Result{}, fmt.Errorf("write_file %s: %w", a.Path, err)
			}
			// Write-then-rename so a crash never leaves a half-written file behind.
			tmp := p + ".aetherium-tmp"
			if err := os.WriteFile(tmp, []byte(a.Content), 0o644); err != nil {
				return tools.Result{}, fmt.Errorf("write_file %s: %w", a.Path, err)
			}
			if err := os.Rename(tmp, p); err != nil {
				return tools.Result{}, fmt.Errorf("write_file %s: %w", a.Path, err)
			}
			return tools.Text("wrote %s (%d bytes)", a.Path, len(a.Content)), nil
		}, tools.Idempotent())
}

func resolve(ctx context.Context, rel string) (string, error) {
	s := tools.SessionFrom(ctx)
	if s == nil || s.Workspace == "" {
		return "", errors.New("no workspace for this session")
	}
	return Resolve(s.Workspace, rel)
}
