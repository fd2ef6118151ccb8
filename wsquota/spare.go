package wsquota

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// SparesDir is where the ready images wait, under ImagesDir.
const SparesDir = "spare"

// staleSpareTmp is how old a half-made spare (a crash mid-mkfs) may be before a
// refill removes it: older than any mkfs takes.
const staleSpareTmp = time.Minute

func (m *Manager) spareDir() string { return filepath.Join(m.root, ImagesDir, m.spares) }

// takeSpare moves a ready image of the quota's size to image. Several processes
// may share the root: whoever renames a spare first has it, the others try the
// next one. A spare of another size (the quota changed) is removed.
func (m *Manager) takeSpare(image string) bool {
	if m.cfg.Spares <= 0 {
		return false
	}
	entries, err := os.ReadDir(m.spareDir())
	if err != nil {
		return false
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".ext4") {
			continue // a spare still being made (.ext4.tmp)
		}
		p := filepath.Join(m.spareDir(), e.Name())
		info, err := os.Stat(p)
		if err != nil {
			continue
		}
		if info.Size() != int64(m.cfg.Quota) {
			_ = os.Remove(p)
			continue
		}
		if os.Rename(p, image) == nil {
			return true
		}
	}
	return false
}

// refill makes spares in the background until Spares are ready (one goroutine
// per Manager; Close stops and waits for it). The free-disk guard applies: no
// spare is made while the disk is below MinFree.
func (m *Manager) refill() {
	if m.cfg.Spares <= 0 || m.cfg.Quota == 0 {
		return
	}
	m.spareMu.Lock()
	if m.refilling || m.closed {
		m.spareMu.Unlock()
		return
	}
	m.refilling = true
	m.refills.Add(1)
	m.spareMu.Unlock()
	go func() {
		defer m.refills.Done()
		defer func() {
			m.spareMu.Lock()
			m.refilling = false
			m.spareMu.Unlock()
		}()
		if err := m.fillSpares(m.stopCtx); err != nil && m.stopCtx.Err() == nil {
			// Not fatal: the next new workspace makes its own image.
			slog.Warn("workspace spares", "root", m.root, "err", err)
		}
	}()
}

func (m *Manager) fillSpares(ctx context.Context) error {
	dir := m.spareDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for ctx.Err() == nil {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		ready := 0
		for _, e := range entries {
			switch {
			case strings.HasSuffix(e.Name(), ".ext4"):
				ready++
			case strings.HasSuffix(e.Name(), ".tmp"):
				if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > staleSpareTmp {
					_ = os.Remove(filepath.Join(dir, e.Name()))
				}
			}
		}
		if ready >= m.cfg.Spares {
			return nil
		}
		if err := m.CheckFree(); err != nil {
			return nil // the guard refuses new workspaces too; nothing to make ready
		}
		var id [8]byte
		_, _ = rand.Read(id[:])
		if err := m.makeImage(ctx, filepath.Join(dir, hex.EncodeToString(id[:])+".ext4")); err != nil {
			return err
		}
	}
	return nil
}

// Close stops making spares and waits for the refill under way (the spares made
// stay for the next Manager on this root). Safe to call more than once.
func (m *Manager) Close() {
	for _, c := range m.children {
		c.Close()
	}
	m.spareMu.Lock()
	m.closed = true
	m.spareMu.Unlock()
	m.stop()
	m.refills.Wait()
}
