package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aetherium-engine/aetherium/knowledge"
	"github.com/aetherium-engine/aetherium/mailbox"
	"github.com/aetherium-engine/aetherium/metrics"
	"github.com/aetherium-engine/aetherium/store"
)

// KnowledgeDeleter removes a knowledge source (knowledge.Postgres).
type KnowledgeDeleter interface {
	DeleteSource(ctx context.Context, src knowledge.Source) (int, error)
}

// Deps are the Sweeper's collaborators; optional ones left nil skip their class.
type Deps struct {
	Store *store.Store
	// Mailbox holds the dead letters (optional).
	Mailbox *mailbox.Mailbox
	// Knowledge removes a deleted project's knowledge (optional).
	Knowledge KnowledgeDeleter
	// Metrics counts what was deleted (optional).
	Metrics *metrics.Retention
	Log     *slog.Logger
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
}

// Sweeper deletes what outlived its retention. One Sweep is bounded
// (MaxBatches per class); several sweepers at once (replicas, a tick that
// overran) take disjoint batches (store's FOR UPDATE SKIP LOCKED), so each run
// is deleted, and exported, once.
type Sweeper struct {
	cfg Config
	d   Deps
}

// New returns a Sweeper; cfg is taken with its defaults filled in.
func New(cfg Config, d Deps) *Sweeper {
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	return &Sweeper{cfg: cfg.WithDefaults(), d: d}
}

// Config is the Sweeper's configuration, defaults filled in.
func (s *Sweeper) Config() Config { return s.cfg }

// Report is what one Sweep deleted, by class, and the longest time one of its
// delete transactions took (LongestBatch, exports included) and held the rows
// it deleted locked (LongestDelete).
type Report struct {
	Runs             int64         `json:"runs"`
	Exported         int64         `json:"exported"`
	Egress           int64         `json:"egress"`
	DeadLetters      int64         `json:"dead_letters"`
	ProjectKnowledge int64         `json:"project_knowledge"`
	Batches          int           `json:"batches"`
	LongestBatch     time.Duration `json:"longest_batch"`
	LongestDelete    time.Duration `json:"longest_delete"`
	// RunIDs are the runs this sweep deleted.
	RunIDs []string `json:"-"`
}

// Sweep runs every class once; a class's error does not stop the others.
func (s *Sweeper) Sweep(ctx context.Context) (Report, error) {
	var rep Report
	now := s.d.Now()
	errs := []error{
		s.runs(ctx, now, &rep),
		s.egress(ctx, now, &rep),
		s.deadLetters(ctx, now, &rep),
		s.projectKnowledge(ctx, now, &rep),
	}
	if rep.Runs+rep.Egress+rep.DeadLetters+rep.ProjectKnowledge > 0 {
		s.d.Log.Info("retention sweep", "runs", rep.Runs, "exported", rep.Exported, "egress", rep.Egress,
			"dead_letters", rep.DeadLetters, "project_knowledge", rep.ProjectKnowledge,
			"batches", rep.Batches, "longest_batch", rep.LongestBatch.String(), "longest_delete", rep.LongestDelete.String())
	}
	return rep, errors.Join(errs...)
}

func (s *Sweeper) batch(class string, b store.RetentionBatch, rep *Report) {
	rep.Batches++
	rep.LongestBatch = max(rep.LongestBatch, b.Held)
	rep.LongestDelete = max(rep.LongestDelete, b.Deleting)
	s.d.Metrics.BatchHeld(class, b.Deleting.Seconds())
	s.d.Metrics.Deletes(class, b.Rows)
}

func (s *Sweeper) runs(ctx context.Context, now time.Time, rep *Report) error {
	if s.cfg.Runs == 0 {
		return nil
	}
	var export store.RunExporter
	if dir := s.cfg.ExportDir; dir != "" {
		export = func(ctx context.Context, runID string, rows func(emit func(store.ArchiveRow) error) error) error {
			if _, err := WriteArchive(dir, runID, rows); err != nil {
				return err
			}
			rep.Exported++
			return nil
		}
	}
	cutoff := now.Add(-s.cfg.Runs)
	for range s.cfg.MaxBatches {
		exported := rep.Exported
		b, err := s.d.Store.DeleteRunsBatch(ctx, cutoff, s.cfg.BatchSize, export)
		if err != nil {
			// The batch rolled back: archives it wrote stay, and are written
			// again (atomically) when the runs are taken next time.
			rep.Exported = exported
			return fmt.Errorf("retention runs: %w", err)
		}
		s.batch("runs", b, rep)
		s.d.Metrics.Export(rep.Exported - exported)
		rep.Runs += b.Rows
		rep.RunIDs = append(rep.RunIDs, b.Runs...)
		if b.Rows < int64(s.cfg.BatchSize) || ctx.Err() != nil {
			return nil
		}
	}
	return nil
}

func (s *Sweeper) egress(ctx context.Context, now time.Time, rep *Report) error {
	if s.cfg.Egress == 0 {
		return nil
	}
	cutoff := now.Add(-s.cfg.Egress)
	for range s.cfg.MaxBatches {
		b, err := s.d.Store.DeleteOlderBatch(ctx, store.TableEgress, cutoff, s.cfg.BatchSize)
		if err != nil {
			return err
		}
		s.batch("egress", b, rep)
		rep.Egress += b.Rows
		if b.Rows < int64(s.cfg.BatchSize) || ctx.Err() != nil {
			return nil
		}
	}
	return nil
}

func (s *Sweeper) deadLetters(ctx context.Context, now time.Time, rep *Report) error {
	if s.cfg.DeadLetters == 0 || s.d.Mailbox == nil {
		return nil
	}
	n, err := s.d.Mailbox.TrimDead(ctx, now.Add(-s.cfg.DeadLetters))
	if err != nil {
		return fmt.Errorf("retention dead letters: %w", err)
	}
	rep.DeadLetters = n
	s.d.Metrics.Deletes("dead_letters", n)
	return nil
}

func (s *Sweeper) projectKnowledge(ctx context.Context, now time.Time, rep *Report) error {
	if s.cfg.DeletedProjectKnowledge == 0 || s.d.Knowledge == nil {
		return nil
	}
	ids, err := s.d.Store.OrphanProjectKnowledge(ctx, now.Add(-s.cfg.DeletedProjectKnowledge), s.cfg.BatchSize)
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range ids {
		n, err := s.d.Knowledge.DeleteSource(ctx, knowledge.Project(id))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		rep.ProjectKnowledge += int64(n)
		s.d.Metrics.Deletes("project_knowledge", int64(n))
	}
	if len(errs) > 0 {
		return fmt.Errorf("retention project knowledge: %w", errors.Join(errs...))
	}
	return nil
}
