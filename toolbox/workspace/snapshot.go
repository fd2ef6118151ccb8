package workspace

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"time"
)

// Snapshots: before a session first changes a file, the file's state (content and
// mode, or "did not exist") is written to
// .aetherium/snapshots/<session>/<path>.json in the workspace. Later changes in the
// same session keep that first snapshot, so revert_file restores the file as it was
// before the session touched it. They live on disk, not in memory, because a
// session's turns may run on different worker processes.

// ErrNoSnapshot is a revert_file with nothing to restore.
var ErrNoSnapshot = errors.New("nothing to revert")

type snapshot struct {
	Path    string      `json:"path"`
	Existed bool        `json:"existed"`
	Mode    fs.FileMode `json:"mode,omitempty"`
	Content []byte      `json:"content,omitempty"`
	TakenAt time.Time   `json:"taken_at"`
}

func hashName(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:16])
}

func snapshotDir(sessionID string) string {
	return path.Join(InternalDir, "snapshots", hashName(sessionID))
}

func snapshotPath(sessionID, rel string) string {
	return path.Join(snapshotDir(sessionID), hashName(rel)+".json")
}

// snapshot records rel's pre-edit state for the session, once.
func (d *dir) snapshot(sessionID, rel string) error {
	if sessionID == "" {
		return nil
	}
	p := snapshotPath(sessionID, rel)
	if _, err := d.root.Lstat(p); err == nil {
		return nil
	}
	snap := snapshot{Path: rel, TakenAt: time.Now().UTC()}
	exists, err := d.exists(rel)
	if err != nil {
		return err
	}
	if exists {
		b, mode, err := d.readRegular(rel)
		if err != nil {
			return err
		}
		snap.Existed, snap.Content, snap.Mode = true, b, mode
	}
	raw, err := json.Marshal(snap)
	if err != nil {
		return err
	}
	// The internal directory stays root's: the sandbox never sees it anyway.
	if err := d.mkdirAll(path.Dir(p), false); err != nil {
		return fmt.Errorf("snapshot %s: %w", rel, err)
	}
	big := d.cfg
	big.MaxFileBytes = int64(len(raw)) + 1
	if err := (&dir{root: d.root, cfg: big, engine: true}).writeFile(p, raw, 0o600, false); err != nil {
		return fmt.Errorf("snapshot %s: %w", rel, err)
	}
	return nil
}

// revert restores rel to its snapshot and drops the snapshot.
func (d *dir) revert(sessionID, rel string) (snapshot, error) {
	var snap snapshot
	if sessionID == "" {
		return snap, fmt.Errorf("%w: no session", ErrNoSnapshot)
	}
	p := snapshotPath(sessionID, rel)
	// The engine's own file, but read like an agent's (O_NONBLOCK, fstat,
	// bounded): a snapshot is the content (base64 in JSON) plus its metadata.
	engine := d.cfg
	engine.MaxFileBytes = d.cfg.MaxFileBytes/3*4 + 64<<10
	raw, _, err := (&dir{root: d.root, cfg: engine, engine: true}).readRegular(p)
	if errors.Is(err, fs.ErrNotExist) {
		return snap, fmt.Errorf("%w: this session has not changed %s", ErrNoSnapshot, rel)
	}
	if err != nil {
		return snap, fmt.Errorf("read snapshot of %s: %w", rel, err)
	}
	if err := json.Unmarshal(raw, &snap); err != nil || snap.Path != rel {
		return snap, fmt.Errorf("snapshot of %s is damaged", rel)
	}
	if snap.Existed {
		if err := d.writeFile(rel, snap.Content, snap.Mode, true); err != nil {
			return snap, err
		}
		// writeFile keeps the current file's mode when one exists: restore the
		// snapshot's.
		if err := d.root.Chmod(rel, snap.Mode); err != nil {
			return snap, fmt.Errorf("revert %s: %w", rel, err)
		}
	} else if err := d.remove(rel); err != nil {
		return snap, err
	}
	if err := d.root.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return snap, fmt.Errorf("drop snapshot of %s: %w", rel, err)
	}
	return snap, nil
}

// ForgetSession drops a finished session's snapshots (its edits can no longer be
// reverted). Call it when a session ends; a workspace removed with its run takes
// them along anyway.
func ForgetSession(workspace, sessionID string) error {
	r, err := os.OpenRoot(workspace)
	if err != nil {
		return fmt.Errorf("open workspace: %w", err)
	}
	defer r.Close()
	if err := r.RemoveAll(snapshotDir(sessionID)); err != nil {
		return fmt.Errorf("forget snapshots: %w", err)
	}
	return nil
}
