package worker

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/aetherium-engine/aetherium/confine"
	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/tools"
)

// File labels (issue 49): a workspace file written by a session that had read
// untrusted content carries that content's label, so a later session that reads
// the file (this run's or a later run's in a persistent project workspace)
// inherits it instead of taking a page's instruction for the owner's data.
// One record per labelled file under the workspace's engine state
// (.aetherium/labels/<hash of the path>.json): no write races between sessions
// labelling different files, and the workspace tools refuse the folder.

// labelsDir is where the records live, relative to the workspace.
const labelsDir = confine.InternalDir + "/labels"

// maxLabelledFiles bounds the records a read consults, so a workspace with very
// many labelled files costs a bounded directory read per private call.
const maxLabelledFiles = 4096

// fileLabel is a labelled file's record.
type fileLabel struct {
	Path string `json:"path"`
	// Untrusted are the sources the writing sessions had read, the first
	// tools.MaxLabelSources kept.
	Untrusted []string `json:"untrusted"`
}

// workspaceRel is the workspace-relative form of a path argument as the
// permission rules read it (egress.NormalizePath: cleaned, the sandbox's
// /workspace/… and the host's view both relative), with symlinks inside the
// workspace resolved; "" for a path outside it.
func workspaceRel(ws, p string) string {
	rel := egress.NormalizePath(strings.ReplaceAll(p, "\\", "/"), ws)
	if rel == "" || rel == "." || path.IsAbs(rel) {
		return ""
	}
	if root, err := confine.OpenRoot(ws, confine.Config{}); err == nil {
		defer root.Close()
		if r, err := root.Resolve(rel); err == nil {
			rel = r
		}
	}
	return rel
}

// labelFile joins sources into the record of the workspace file rel.
func labelFile(ws, rel string, sources []string) error {
	root, err := os.OpenRoot(ws)
	if err != nil {
		return fmt.Errorf("label %s: %w", rel, err)
	}
	defer root.Close()
	if err := root.MkdirAll(labelsDir, 0o755); err != nil {
		return fmt.Errorf("label %s: %w", rel, err)
	}
	sum := sha256.Sum256([]byte(rel))
	name := path.Join(labelsDir, hex.EncodeToString(sum[:16])+".json")
	rec := fileLabel{Path: rel}
	if raw, err := root.ReadFile(name); err == nil {
		_ = json.Unmarshal(raw, &rec) // a damaged record is rewritten whole
		rec.Path = rel
	}
	for _, s := range sources {
		if !slices.Contains(rec.Untrusted, s) && len(rec.Untrusted) < tools.MaxLabelSources {
			rec.Untrusted = append(rec.Untrusted, s)
		}
	}
	raw, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	// Written aside and renamed: a reader never sees half a record.
	tmp := name + ".tmp"
	if err := root.WriteFile(tmp, raw, 0o644); err != nil {
		return fmt.Errorf("label %s: %w", rel, err)
	}
	if err := root.Rename(tmp, name); err != nil {
		return fmt.Errorf("label %s: %w", rel, err)
	}
	return nil
}

// labelledFiles reads the workspace's records (none when it has none).
func labelledFiles(ws string) ([]fileLabel, error) {
	root, err := os.OpenRoot(ws)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil // no workspace yet: nothing in it is labelled
	}
	if err != nil {
		return nil, fmt.Errorf("file labels: %w", err)
	}
	defer root.Close()
	dir, err := root.Open(labelsDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("file labels: %w", err)
	}
	defer dir.Close()
	names, err := dir.Readdirnames(maxLabelledFiles)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("file labels: %w", err)
	}
	slices.Sort(names)
	var out []fileLabel
	for _, n := range names {
		if !strings.HasSuffix(n, ".json") {
			continue
		}
		raw, err := root.ReadFile(path.Join(labelsDir, n))
		if err != nil {
			continue // renamed over or removed meanwhile
		}
		var rec fileLabel
		if json.Unmarshal(raw, &rec) != nil || rec.Path == "" {
			// A record that does not parse still says a file was labelled;
			// without its path it cannot be matched, so it is skipped.
			continue
		}
		out = append(out, rec)
	}
	return out, nil
}

// fileProvenance is what a private read of the workspace inherits from labelled
// files: read_file's own path (resolved as the tool resolves it), and for the
// other private reads (search_files, run_shell, …) every labelled file whose
// path or base name the call's arguments or answer mention. Nil when nothing
// labelled was read.
func fileProvenance(ws string, spec *tools.Spec, call llm.ToolCall, content string) (*llm.Provenance, error) {
	if ws == "" || spec.Reads != tools.Private {
		return nil, nil
	}
	recs, err := labelledFiles(ws)
	if err != nil || len(recs) == 0 {
		return nil, err
	}
	var exact string
	if call.Name == "read_file" {
		var a struct {
			Path string `json:"path"`
		}
		if json.Unmarshal(call.Args, &a) == nil {
			exact = workspaceRel(ws, a.Path)
		}
	}
	args := string(call.Args)
	var p llm.Provenance
	for _, r := range recs {
		hit := r.Path == exact
		if !hit && call.Name != "read_file" {
			base := path.Base(r.Path)
			hit = strings.Contains(args, r.Path) || strings.Contains(content, r.Path) ||
				strings.Contains(args, base) || strings.Contains(content, base)
		}
		if !hit {
			continue
		}
		// The record is a file in the workspace a sandbox shell can write: what
		// it says reaches an approval card only as printable text.
		for _, s := range r.Untrusted {
			p.Untrusted = append(p.Untrusted, printable(r.Path)+", written by a session that read "+printable(s))
		}
	}
	if len(p.Untrusted) == 0 {
		return nil, nil
	}
	return &p, nil
}
