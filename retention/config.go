package retention

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/aetherium-engine/aetherium/internal/defaults"
)

// Defaults of Config. A retention of 0 keeps that class forever.
const (
	// DefaultRuns keeps terminal runs (and their events, sessions, messages,
	// delegations, approvals, model calls) for 90 days after they finished.
	DefaultRuns = 90 * 24 * time.Hour
	// DefaultEgress keeps the sandbox proxy's connection rows for 30 days.
	DefaultEgress = 30 * 24 * time.Hour
	// DefaultDeadLetters keeps the mailboxes' dead letters for 7 days.
	DefaultDeadLetters = 7 * 24 * time.Hour
	// DefaultDeletedProjectKnowledge is how long the knowledge of a deleted
	// project may linger before the sweep removes it (the project's delete
	// removes it at once; this is the safety net for a removal that failed).
	DefaultDeletedProjectKnowledge = 24 * time.Hour
	// DefaultBatchSize is how many rows (runs, for the runs class) one
	// transaction deletes.
	DefaultBatchSize = 500
	// MaxBatchSize bounds batch_size: a larger batch holds its locks longer.
	MaxBatchSize = 10000
	// DefaultMaxBatches bounds one sweep per class, so a backlog is worked off
	// over several ticks instead of one long task.
	DefaultMaxBatches = 20
)

// Config is the retention of each data class (the `retention` section of
// aetherium.yaml): how long rows are kept after they stop changing, and how the
// sweep deletes them. Durations of 0 keep the class forever. The audit table's
// retention is security.audit_retention.
type Config struct {
	// Runs deletes terminal runs (completed, failed, cancelled) that finished
	// longer ago than this, with every row of theirs except audit rows. A queued,
	// running or waiting run is never deleted, however old. Default DefaultRuns;
	// 0 keeps runs forever.
	Runs time.Duration `yaml:"runs"`
	// Egress deletes egress_connections rows older than this (a live run's too).
	// Default DefaultEgress; 0 keeps them.
	Egress time.Duration `yaml:"egress"`
	// DeadLetters deletes mailbox dead letters older than this (mailbox.dead_max_len
	// bounds their number whatever their age). Default DefaultDeadLetters; 0 keeps
	// them.
	DeadLetters time.Duration `yaml:"dead_letters"`
	// DeletedProjectKnowledge deletes the indexed knowledge of a project that no
	// longer exists once it was last written this long ago. Default
	// DefaultDeletedProjectKnowledge; 0 keeps it.
	DeletedProjectKnowledge time.Duration `yaml:"deleted_project_knowledge"`
	// BatchSize is how many rows one delete transaction takes, at most
	// MaxBatchSize. Runs: the most runs one transaction takes; their batches
	// adapt below it so each transaction lasts about BatchHoldTarget (25 ms).
	// Default DefaultBatchSize.
	BatchSize int `yaml:"batch_size"`
	// MaxBatches is how many batches one sweep deletes per class (runs: at most
	// batch_size × max_batches runs, in as many adaptive batches as it takes);
	// the rest waits for the next tick. Default DefaultMaxBatches.
	MaxBatches int `yaml:"max_batches"`
	// ExportDir, when set, is where each run is written before it is deleted:
	// export_dir/RUN_ID.jsonl.gz, gzip-compressed JSON Lines (the run, its
	// events, sessions with messages, delegations, approvals, audit rows, model
	// calls), which `aetherium runs import` writes back. A run whose archive
	// cannot be written is not deleted. Empty (the default): no export.
	ExportDir string `yaml:"export_dir"`
}

// Defaults is the retention of a deployment that sets nothing.
func Defaults() Config {
	return Config{
		Runs: DefaultRuns, Egress: DefaultEgress, DeadLetters: DefaultDeadLetters,
		DeletedProjectKnowledge: DefaultDeletedProjectKnowledge,
	}.WithDefaults()
}

// WithDefaults fills the zero fields whose zero means "unset" (the batch
// bounds); a zero retention means "keep forever" and stays.
func (c Config) WithDefaults() Config {
	c.BatchSize = defaults.Positive(c.BatchSize, DefaultBatchSize)
	c.MaxBatches = defaults.Positive(c.MaxBatches, DefaultMaxBatches)
	return c
}

// Validate reports every invalid field, naming its key.
func (c Config) Validate() error {
	var errs []error
	for _, d := range []struct {
		key string
		v   time.Duration
	}{{"runs", c.Runs}, {"egress", c.Egress}, {"dead_letters", c.DeadLetters}, {"deleted_project_knowledge", c.DeletedProjectKnowledge}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("retention.%s: must not be negative (0 keeps forever), got %s", d.key, d.v))
		}
	}
	if c.BatchSize < 0 || c.BatchSize > MaxBatchSize {
		errs = append(errs, fmt.Errorf("retention.batch_size: want 1 to %d, got %d", MaxBatchSize, c.BatchSize))
	}
	if c.MaxBatches < 0 {
		errs = append(errs, fmt.Errorf("retention.max_batches: must not be negative, got %d", c.MaxBatches))
	}
	if c.ExportDir != "" && filepath.Clean(c.ExportDir) == "/" {
		errs = append(errs, errors.New("retention.export_dir: not the filesystem root"))
	}
	return errors.Join(errs...)
}
