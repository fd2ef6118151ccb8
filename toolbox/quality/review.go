package quality

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/aetherium-engine/aetherium/confine"
	"github.com/aetherium-engine/aetherium/internal/defaults"
	"github.com/aetherium-engine/aetherium/review"
	"github.com/aetherium-engine/aetherium/toolbox/workspace"
	"github.com/aetherium-engine/aetherium/tools"
)

// Bounds of what code_review hands its reviewer: the model's context is finite
// and every byte counts against the run's token budget.
const (
	DefaultReviewMaxBytes = 96 << 10
	DefaultReviewMaxFiles = 40
)

// ReviewArgs are code_review's arguments.
type ReviewArgs struct {
	Path  string `json:"path" jsonschema:"description=A file or directory of the workspace"`
	Focus string `json:"focus,omitempty" jsonschema:"description=What to look at above all (security, error handling, …)"`
}

// ReviewConfig bounds code_review.
type ReviewConfig struct {
	// Model is the model the reviewer asks, on the provider of the calling
	// agent's model (the worker applies it: worker.Config.ReviewModel). Empty:
	// the calling agent's own model.
	Model string `yaml:"review_model"`
	// MaxBytes bounds the source handed to the reviewer. Default DefaultReviewMaxBytes.
	MaxBytes int `yaml:"review_max_bytes"`
	// MaxFiles bounds the files of a directory. Default DefaultReviewMaxFiles.
	MaxFiles int `yaml:"review_max_files"`
}

// WithDefaults fills the zero fields.
func (c ReviewConfig) WithDefaults() ReviewConfig {
	c.MaxBytes = defaults.Positive(c.MaxBytes, DefaultReviewMaxBytes)
	c.MaxFiles = defaults.Positive(c.MaxFiles, DefaultReviewMaxFiles)
	return c
}

// skipDirs are never reviewed: dependencies and build output, not the project's code.
var skipDirs = []string{"node_modules", "vendor", "dist", "build", "target", "__pycache__", "venv"}

// RegisterReview adds code_review: it reads the file (or the files under a
// directory, bounded) and hands them to a reviewer — a durable delegation to
// the calling agent's model with the review prompt — and the call waits,
// persisted, like delegate. The worker validates the reviewer's JSON against
// package review's schema (one retry with the error) before this call's
// result is the review.
func RegisterReview(reg *tools.Registry, cfg ReviewConfig) {
	cfg = cfg.WithDefaults()
	tools.Register(reg, tools.CodeReview, "A structured, severity-tagged review of a file or directory by a model (critical, major, minor, nit; file, line, title, detail, suggestion). Reads the files itself.",
		func(ctx context.Context, call tools.Call, a ReviewArgs) (tools.Result, error) {
			s := call.Session
			if s.Coordinator == nil {
				return tools.Result{}, errors.New("code_review: no coordinator in this session")
			}
			if len(a.Focus) > 500 {
				return tools.Result{}, fmt.Errorf("code_review: focus is %d bytes, at most 500", len(a.Focus))
			}
			files, err := reviewFiles(s.Workspace, a.Path, cfg)
			if err != nil {
				return tools.Result{}, fmt.Errorf("code_review: %w", err)
			}
			task := reviewTask(files, strings.TrimSpace(a.Focus))
			if err := s.Coordinator.Delegate(ctx, call.ID, []tools.DelegateRequest{{Agent: review.Agent(s.Agent), Task: task, Review: true}}); err != nil {
				return tools.Result{}, err
			}
			return tools.Result{Pending: true}, nil
		}, tools.ReadOnly(), tools.Idempotent(), tools.Reads(tools.Private), tools.InGroup("quality"))
}

type sourceFile struct {
	path string
	text string
}

// reviewFiles reads rel (a file, or the text files under a directory, sorted,
// skipping dot and dependency directories) through a confine.Root: no symlink
// leads out of the workspace, a FIFO or socket is refused instead of blocking, a
// file over the review budget is never read whole.
func reviewFiles(ws, rel string, cfg ReviewConfig) ([]sourceFile, error) {
	clean, err := workspace.Clean(rel)
	if err != nil {
		return nil, err
	}
	root, err := confine.OpenRoot(ws, confine.Config{MaxBytes: int64(cfg.MaxBytes)})
	if err != nil {
		return nil, fmt.Errorf("open the workspace: %w", err)
	}
	defer root.Close()
	fsys := root.FS()
	info, err := fs.Stat(fsys, clean)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", rel, err)
	}
	var paths []string
	if !info.IsDir() {
		paths = []string{clean}
	} else {
		err = fs.WalkDir(fsys, clean, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			name := d.Name()
			if d.IsDir() {
				if p != clean && (strings.HasPrefix(name, ".") || slices.Contains(skipDirs, name)) {
					return fs.SkipDir
				}
				return nil
			}
			if d.Type().IsRegular() && !strings.HasPrefix(name, ".") {
				paths = append(paths, p)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("walk %s: %w", rel, err)
		}
	}
	var out []sourceFile
	total := 0
	for _, p := range paths {
		if len(out) == cfg.MaxFiles {
			break
		}
		raw, err := fs.ReadFile(fsys, p)
		if errors.Is(err, confine.ErrTooLarge) && info.IsDir() {
			continue // one file over the whole budget: the others may fit
		}
		if errors.Is(err, confine.ErrTooLarge) {
			return nil, fmt.Errorf("%s is over the %d bytes a review takes; review a smaller file or part of the directory", p, cfg.MaxBytes)
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", p, err)
		}
		if !utf8.Valid(raw) || slices.Contains(raw, 0) {
			if info.IsDir() {
				continue // a binary among the sources
			}
			return nil, fmt.Errorf("%s is not a text file", p)
		}
		if total+len(raw) > cfg.MaxBytes {
			if len(out) == 0 {
				return nil, fmt.Errorf("%s is %d bytes, over the %d bytes a review takes; review a smaller file or part of the directory", p, len(raw), cfg.MaxBytes)
			}
			break
		}
		total += len(raw)
		out = append(out, sourceFile{path: p, text: string(raw)})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no text files to review", rel)
	}
	return out, nil
}

// reviewTask is the reviewer's task: the files, each line numbered so the
// reviewer's line numbers are the file's, between markers that name the file.
func reviewTask(files []sourceFile, focus string) string {
	var b strings.Builder
	b.WriteString("Review these files")
	if focus != "" {
		fmt.Fprintf(&b, " with this focus: %s", focus)
	}
	fmt.Fprintf(&b, ". %d file(s); each line is prefixed with its number and a bar, which are not part of the code.\n", len(files))
	for _, f := range files {
		lines := strings.Split(strings.TrimSuffix(f.text, "\n"), "\n")
		fmt.Fprintf(&b, "\n===== file %s (%d lines) =====\n", path.Clean(f.path), len(lines))
		for i, l := range lines {
			fmt.Fprintf(&b, "%5d| %s\n", i+1, l)
		}
		fmt.Fprintf(&b, "===== end of %s =====\n", path.Clean(f.path))
	}
	return b.String()
}
