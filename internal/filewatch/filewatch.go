// Package filewatch calls a function when files change: the hot reload of the
// permissions file and of the llm section (limits, prices). It watches each
// file's directory, so editors that replace a file (rename over it) and files
// created later are seen too, and debounces bursts of writes into one call.
package filewatch

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// DefaultDebounce is how long a burst of changes is waited out.
const DefaultDebounce = 200 * time.Millisecond

// Watch calls changed (from one goroutine, never twice at once) after any of
// paths changed, debounced, until ctx ends. Empty paths are skipped; none left
// is no watch at all. The watcher's own errors are logged.
func Watch(ctx context.Context, log *slog.Logger, debounce time.Duration, changed func(), paths ...string) error {
	if debounce <= 0 {
		debounce = DefaultDebounce
	}
	names := map[string]bool{}
	dirs := map[string]bool{}
	for _, p := range paths {
		if p == "" {
			continue
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			return fmt.Errorf("watch %s: %w", p, err)
		}
		names[abs] = true
		dirs[filepath.Dir(abs)] = true
	}
	if len(names) == 0 {
		return nil
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %v: %w", paths, err)
	}
	for dir := range dirs {
		if err := w.Add(dir); err != nil {
			w.Close()
			return fmt.Errorf("watch directory %s: %w", dir, err)
		}
	}
	go func() {
		defer w.Close()
		var timer *time.Timer
		fire := make(chan struct{}, 1)
		for {
			select {
			case <-ctx.Done():
				if timer != nil {
					timer.Stop()
				}
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if abs, err := filepath.Abs(ev.Name); err != nil || !names[abs] {
					continue
				}
				if timer != nil {
					timer.Stop()
				}
				timer = time.AfterFunc(debounce, func() {
					select {
					case fire <- struct{}{}:
					default:
					}
				})
			case <-fire:
				changed()
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				log.Warn("file watcher", "paths", paths, "err", err)
			}
		}
	}()
	return nil
}
