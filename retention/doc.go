// Package retention deletes what outlived its retention, class by class (issue
// 46, docs/retention.md): terminal runs with their events, sessions, messages,
// delegations, approvals and model calls; the sandbox proxy's egress rows; the
// mailboxes' dead letters; the knowledge of deleted projects. The audit table
// keeps its own retention (security.audit_retention, store.PurgeAudit).
//
// It is not a scheduler of its own: the scheduler role enqueues its tick like
// every maintenance task (one per period however many schedulers run, by task
// id), and a worker runs Sweeper.Sweep. Each delete is a bounded batch in a short
// transaction whose rows are taken FOR UPDATE SKIP LOCKED (store/retention.go), so
// the hot tables are never locked for long and overlapping sweeps split the work.
//
// With export_dir set, every run is first written to an archive (archive.go:
// gzip-compressed JSON Lines, atomically) inside the transaction that deletes it,
// so a run is deleted only once its archive is on disk; Import writes an archive
// back (`aetherium runs import`), in one transaction, idempotently.
package retention
