package retention

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sys/unix"

	"github.com/aetherium-engine/aetherium/store"
)

// The archive of one run: gzip-compressed JSON Lines. The first line is the
// header, then one line per row (store.ArchiveRow: table and row, in
// store.ArchiveTables order), then the end line with the row count: an archive
// cut short at a line boundary lacks it, one cut inside the gzip stream fails its
// checksum.
const (
	// ArchiveFormat names the format in the header.
	ArchiveFormat = "aetherium.run-archive"
	// ArchiveVersion is the version this build writes and reads.
	ArchiveVersion = 1
	// ArchiveExt ends every archive's file name.
	ArchiveExt = ".jsonl.gz"
	// MaxArchiveLine bounds one line of an archive on import (a session message
	// with a large tool result is the longest row).
	MaxArchiveLine = 32 << 20
)

// Header is an archive's first line.
type Header struct {
	Format     string    `json:"format"`
	Version    int       `json:"version"`
	RunID      string    `json:"run_id"`
	Owner      string    `json:"owner"`
	ExportedAt time.Time `json:"exported_at"`
}

// line is every line after the header: a row, or the end.
type line struct {
	Table string          `json:"table,omitempty"`
	Row   json.RawMessage `json:"row,omitempty"`
	End   bool            `json:"end,omitempty"`
	Rows  int             `json:"rows,omitempty"`
}

// ArchivePath is run id's archive under dir. The id must be a UUID: it is
// parsed, and its canonical form names the file, so no id reaches the path as
// given.
func ArchivePath(dir, runID string) (string, error) {
	u, err := uuid.Parse(runID)
	if err != nil {
		return "", fmt.Errorf("archive of run %q: not a run id", runID)
	}
	return filepath.Join(dir, u.String()+ArchiveExt), nil
}

// WriteArchive writes run runID's rows to its archive under dir atomically: a
// temporary file in dir, flushed and fsynced, renamed over the final name, and
// the directory fsynced. A failure leaves no archive (an earlier one of the run
// stays as it was).
func WriteArchive(dir, runID string, rows func(emit func(store.ArchiveRow) error) error) (path string, err error) {
	var b archiveBatch
	if err := b.add(dir, runID, rows, true); err != nil {
		return "", err
	}
	if err := b.commit(false); err != nil {
		return "", err
	}
	return b.paths[0], nil
}

// archiveBatch writes a batch's archives: each to a temporary file in its
// directory (add), then all made durable and renamed over their final names at
// once (commit: one syncfs, the renames, one fsync of the directory) instead
// of two fsyncs an archive. Until commit, no final name changed; abort removes
// the temporary files.
type archiveBatch struct {
	dir         string
	tmps, paths []string
}

// add writes run runID's archive to a temporary file; with sync, the file is
// fsynced itself (a batch of one).
func (b *archiveBatch) add(dir, runID string, rows func(emit func(store.ArchiveRow) error) error, sync bool) (err error) {
	path, err := ArchivePath(dir, runID)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("archive dir: %w", err)
	}
	b.dir = dir
	tmp, err := os.CreateTemp(dir, ".run-*.tmp")
	if err != nil {
		return fmt.Errorf("archive of run %s: %w", runID, err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	buf := bufio.NewWriterSize(tmp, 256<<10)
	zw := gzip.NewWriter(buf)
	enc := json.NewEncoder(zw)
	n := 0
	err = rows(func(r store.ArchiveRow) error {
		if n == 0 {
			// The header needs the owner, from the first row (the run's).
			var run struct {
				ID    string `json:"id"`
				Owner string `json:"owner"`
			}
			if r.Table != "runs" || json.Unmarshal(r.Row, &run) != nil || run.ID != runID {
				return fmt.Errorf("the first row is not run %s", runID)
			}
			if err := enc.Encode(Header{Format: ArchiveFormat, Version: ArchiveVersion, RunID: runID, Owner: run.Owner, ExportedAt: time.Now().UTC()}); err != nil {
				return err
			}
		}
		n++
		return enc.Encode(line{Table: r.Table, Row: r.Row})
	})
	if err == nil && n == 0 {
		err = fmt.Errorf("run %s has no rows", runID)
	}
	if err == nil {
		err = enc.Encode(line{End: true, Rows: n})
	}
	if err == nil {
		err = zw.Close()
	}
	if err == nil {
		err = buf.Flush()
	}
	if err == nil && sync {
		err = tmp.Sync()
	}
	if err == nil {
		err = tmp.Close()
	}
	if err != nil {
		return fmt.Errorf("archive of run %s: %w", runID, err)
	}
	b.tmps = append(b.tmps, tmp.Name())
	b.paths = append(b.paths, path)
	return nil
}

// commit makes the batch's archives durable under their final names: with
// syncfs, the file system their directory is on synced once (their data on
// disk before any rename), then each renamed, then the directory fsynced. A
// crash leaves each archive old or new, never half of one (at worst a
// temporary file behind). On error the temporary files left are removed.
func (b *archiveBatch) commit(syncfs bool) (err error) {
	defer func() {
		if err != nil {
			b.abort()
		}
	}()
	if len(b.tmps) == 0 {
		return nil
	}
	if syncfs {
		if err := syncFS(b.dir); err != nil {
			return fmt.Errorf("archives: sync: %w", err)
		}
	}
	for len(b.tmps) > 0 {
		if err := os.Rename(b.tmps[0], b.paths[len(b.paths)-len(b.tmps)]); err != nil {
			return fmt.Errorf("archives: %w", err)
		}
		b.tmps = b.tmps[1:]
	}
	if err := syncDir(b.dir); err != nil {
		return fmt.Errorf("archives: %w", err)
	}
	return nil
}

// abort removes the batch's temporary files not yet renamed.
func (b *archiveBatch) abort() {
	for _, t := range b.tmps {
		_ = os.Remove(t)
	}
	b.tmps = nil
}

// syncFS flushes the file system dir is on (syncfs(2)): one call for every
// archive of a batch.
func syncFS(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return unix.Syncfs(int(d.Fd()))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// ErrArchive marks an archive this build cannot read: not gzip, cut short, a
// wrong format or version, a line over MaxArchiveLine, a malformed line.
var ErrArchive = errors.New("unreadable archive")

// ImportResult is what importing one archive did.
type ImportResult struct {
	RunID string `json:"run_id"`
	// Rows is how many rows were written; 0 with AlreadyPresent.
	Rows int `json:"rows"`
	// AlreadyPresent: the run was in the database already, as archived; nothing
	// was written.
	AlreadyPresent bool `json:"already_present"`
}

// Import writes the run in the archive r back into st, in one transaction:
// every row or none. With owner set, the archived run must be owned by it. A run
// already present as archived is a no-op (AlreadyPresent); errors wrap
// ErrArchive (unreadable), store.ErrBadArchive (rows that do not make the run)
// or store.ErrImportConflict (ids held by other rows).
func Import(ctx context.Context, st *store.Store, r io.Reader, owner string) (ImportResult, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return ImportResult{}, fmt.Errorf("%w: not gzip: %v", ErrArchive, err)
	}
	defer zr.Close()
	sc := bufio.NewScanner(zr)
	sc.Buffer(make([]byte, 0, 64<<10), MaxArchiveLine)
	lineNo := 0
	scan := func() ([]byte, error) {
		lineNo++
		if sc.Scan() {
			return sc.Bytes(), nil
		}
		switch err := sc.Err(); {
		case errors.Is(err, bufio.ErrTooLong):
			return nil, fmt.Errorf("%w: line %d is longer than %d bytes", ErrArchive, lineNo, MaxArchiveLine)
		case err != nil:
			return nil, fmt.Errorf("%w: line %d: %v (truncated or corrupt gzip?)", ErrArchive, lineNo, err)
		}
		return nil, io.EOF
	}
	first, err := scan()
	if errors.Is(err, io.EOF) {
		return ImportResult{}, fmt.Errorf("%w: empty", ErrArchive)
	}
	if err != nil {
		return ImportResult{}, err
	}
	var h Header
	if err := json.Unmarshal(first, &h); err != nil || h.Format != ArchiveFormat {
		return ImportResult{}, fmt.Errorf("%w: no %s header", ErrArchive, ArchiveFormat)
	}
	if h.Version != ArchiveVersion {
		return ImportResult{}, fmt.Errorf("%w: version %d, this build reads version %d", ErrArchive, h.Version, ArchiveVersion)
	}
	if _, err := uuid.Parse(h.RunID); err != nil {
		return ImportResult{}, fmt.Errorf("%w: run id %q is not a UUID", ErrArchive, h.RunID)
	}
	res := ImportResult{RunID: h.RunID}
	rows := 0
	next := func() (store.ArchiveRow, bool, error) {
		b, err := scan()
		if errors.Is(err, io.EOF) {
			return store.ArchiveRow{}, false, fmt.Errorf("%w: truncated: no end line after %d rows", ErrArchive, rows)
		}
		if err != nil {
			return store.ArchiveRow{}, false, err
		}
		var l line
		if err := json.Unmarshal(b, &l); err != nil {
			return store.ArchiveRow{}, false, fmt.Errorf("%w: line %d: %v", ErrArchive, lineNo, err)
		}
		if l.End {
			if l.Rows != rows {
				return store.ArchiveRow{}, false, fmt.Errorf("%w: the end line counts %d rows, the archive holds %d", ErrArchive, l.Rows, rows)
			}
			// Read to the end before the commit: the gzip checksum is checked
			// there, and nothing may follow the end line.
			if _, err := scan(); !errors.Is(err, io.EOF) {
				if err == nil {
					err = fmt.Errorf("%w: line %d follows the end line", ErrArchive, lineNo)
				}
				return store.ArchiveRow{}, false, err
			}
			return store.ArchiveRow{}, true, nil
		}
		if l.Table == "" || len(l.Row) == 0 {
			return store.ArchiveRow{}, false, fmt.Errorf("%w: line %d: neither a row nor the end", ErrArchive, lineNo)
		}
		rows++
		return store.ArchiveRow{Table: l.Table, Row: l.Row}, false, nil
	}
	n, err := st.ImportRun(ctx, h.RunID, owner, next)
	switch {
	case errors.Is(err, store.ErrAlreadyImported):
		res.AlreadyPresent = true
		return res, nil
	case err != nil:
		return res, fmt.Errorf("import run %s: %w", h.RunID, err)
	}
	res.Rows = n
	return res, nil
}

// ImportFile imports the archive at path (Import).
func ImportFile(ctx context.Context, st *store.Store, path, owner string) (ImportResult, error) {
	f, err := os.Open(path)
	if err != nil {
		return ImportResult{}, fmt.Errorf("archive: %w", err)
	}
	defer f.Close()
	res, err := Import(ctx, st, f, owner)
	if err != nil {
		return res, fmt.Errorf("%s: %w", path, err)
	}
	return res, nil
}
