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
	"github.com/aetherium-engine/aetherium/wsquota"
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
	// Workspaces holds the runs' and projects' workspaces: each storage tier's
	// retention (wsquota.TierConfig.Retention) deletes its finished ones with
	// their images (optional).
	Workspaces *wsquota.Manager
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
	// RunBatchHolds are the runs batches' transaction times (Held), in order.
	RunBatchHolds []time.Duration `json:"-"`
	// Workspaces is how many workspaces (and their images) were deleted.
	Workspaces int64 `json:"workspaces"`
	// WorkspaceIDs are the workspaces this sweep deleted.
	WorkspaceIDs []string `json:"-"`
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
		s.workspaces(ctx, now, &rep),
	}
	if rep.Runs+rep.Egress+rep.DeadLetters+rep.ProjectKnowledge+rep.Workspaces > 0 {
		s.d.Log.Info("retention sweep", "runs", rep.Runs, "exported", rep.Exported, "egress", rep.Egress,
			"dead_letters", rep.DeadLetters, "project_knowledge", rep.ProjectKnowledge, "workspaces", rep.Workspaces,
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
	var export *store.RunExport
	var pending archiveBatch
	if dir := s.cfg.ExportDir; dir != "" {
		// Each batch's archives are written to temporary files, then made
		// durable and named at once before the batch's deletes (Flush): one
		// sync a batch, not two fsyncs a run.
		export = &store.RunExport{
			Run: func(ctx context.Context, runID string, rows func(emit func(store.ArchiveRow) error) error) error {
				if err := pending.add(dir, runID, rows, false); err != nil {
					return err
				}
				rep.Exported++
				return nil
			},
			Flush: func(context.Context) error { return pending.commit(true) },
		}
	}
	cutoff := now.Add(-s.cfg.Runs)
	// The budget is BatchSize × MaxBatches runs a sweep; how many a batch
	// takes adapts so each transaction stays near BatchHoldTarget (below).
	budget := s.cfg.BatchSize * s.cfg.MaxBatches
	size := min(s.cfg.BatchSize, firstRunBatch)
	for budget > 0 {
		n := min(size, budget)
		exported := rep.Exported
		b, err := s.d.Store.DeleteRunsBatch(ctx, cutoff, n, export)
		pending.abort() // a batch that failed before its Flush leaves temporary files
		pending = archiveBatch{}
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
		rep.RunBatchHolds = append(rep.RunBatchHolds, b.Held)
		budget -= int(b.Rows)
		if b.Rows < int64(n) || ctx.Err() != nil {
			return nil
		}
		size = NextRunBatch(size, b.Held, s.cfg.BatchSize)
		// Rest as long as the batch took: the sweep takes at most half of
		// what it shares with the live fleet (a core, the disk, the WAL), so
		// live steps keep their latency while a backlog is worked off.
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(b.Held):
		}
	}
	return nil
}

// BatchHoldTarget is how long one runs batch's transaction aims to take. Its
// rows stay locked from its SELECT … FOR UPDATE to its commit: the runs rows,
// and, once it deletes, every child row (events, sessions, messages, …) and
// their index entries. No live step touches a terminal run's rows, but a
// statement that does (a fork's foreign-key check of its source run, an
// import, an operator's delete) waits at most this long, and a shorter
// transaction writes a shorter WAL burst. Issue 46's bar is a p99 lock wait of
// 50 ms; a fixed batch of 500 runs held 450–600 ms (docs/retention.md).
const BatchHoldTarget = 25 * time.Millisecond

// firstRunBatch is a sweep's first runs batch, before one has been timed.
const firstRunBatch = 16

// NextRunBatch is the size of the runs batch after one of size that held its
// locks for held: scaled toward BatchHoldTarget, at most doubled or halved at
// once (one slow batch, a checkpoint or a busy disk, does not collapse it),
// within [1, limit].
func NextRunBatch(size int, held time.Duration, limit int) int {
	next := size * 2
	if held > 0 {
		next = int(float64(size) * 0.8 * float64(BatchHoldTarget) / float64(held))
	}
	next = max(next, size/2, 1)
	return min(next, size*2, limit)
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

// workspaces deletes, tier by tier, the workspaces nothing has used for the
// tier's retention (0 keeps the tier's): a run's own (Temp, Staging) once its
// run ended that long ago, a project's (Production) once its project is gone
// and its last run ended that long ago, and one that no run or project names
// (its run deleted by the runs' retention) once its files are that old. A
// workspace whose files changed since the cutoff is not even looked up (a
// workspace changes only while it is used), which bounds the lookups per
// sweep to the workspaces that are due; at most BatchSize × MaxBatches are
// deleted per sweep. Each decision is asked again under the workspace's lock.
func (s *Sweeper) workspaces(ctx context.Context, now time.Time, rep *Report) error {
	if s.d.Workspaces == nil {
		return nil
	}
	tiers := s.d.Workspaces.Config().Tiers
	budget := s.cfg.BatchSize * s.cfg.MaxBatches
	var errs []error
	for _, t := range wsquota.Tiers {
		ret := tiers.Of(t).Retention
		if ret == 0 {
			continue
		}
		cutoff := now.Add(-ret)
		entries, err := s.d.Workspaces.List(t)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, e := range entries {
			if ctx.Err() != nil || budget <= 0 {
				break
			}
			if !e.Modified.Before(cutoff) {
				continue
			}
			removed, err := s.d.Workspaces.Remove(ctx, e.ID, func(ctx context.Context, id string) bool {
				return !s.workspaceDue(ctx, id, cutoff)
			})
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if removed {
				budget--
				rep.Workspaces++
				rep.WorkspaceIDs = append(rep.WorkspaceIDs, e.ID)
				s.d.Metrics.Deletes("workspaces", 1)
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("retention workspaces: %w", errors.Join(errs...))
	}
	return nil
}

// workspaceDue reports whether workspace id (whose files are older than
// cutoff) is past its tier's retention; a lookup error keeps it.
func (s *Sweeper) workspaceDue(ctx context.Context, id string, cutoff time.Time) bool {
	u, err := s.d.Store.WorkspaceUse(ctx, id)
	if err != nil {
		s.d.Log.Warn("retention: keeping a workspace whose runs cannot be read", "workspace", id, "err", err)
		return false
	}
	if u.Live || u.Project {
		return false
	}
	if u.Known {
		return u.LastEnded != nil && u.LastEnded.Before(cutoff)
	}
	return true
}
