// Package queue is the fleet's queue contract: every asynq task type and its
// payload, the queue names and their weights, the deterministic task ids, the
// routing of an agent session to the task that steps it (SessionID, Resume), and
// the one Enqueuer everything enqueues through. The api, the scheduler, the
// approval flow, the webhook deliverer and the worker import this package; none of
// them imports another to enqueue.
//
// # Idempotency
//
// asynq delivers at least once, so every task carries a deterministic TaskID (see
// the *TaskID functions) and is kept for a retention window after it finishes:
// while the task or its record exists, asynq refuses a second enqueue of the same
// id. The Enqueuer treats that refusal as success, so enqueueing twice is harmless
// and callers never branch on it.
//
// # Compatibility
//
// Task type names, payload field names, task id formats and SessionID.String are
// stored outside this process (tasks waiting in a deployed Redis, session ids in
// PostgreSQL). They do not change, but for a task id whose old form can at worst
// run a task once more at the upgrade (WebhookTaskID gained its hook's digest);
// tests pin them byte for byte.
//
// Payloads carry a contract version (field "v", none = 1): a worker reads
// MinContractVersion through ContractVersion and refuses a newer one without
// losing the task (CheckContract); the Enqueuer writes the version the whole
// fleet reads (Config.Contract). See contract.go and docs/how-to/upgrade.md.
//
// # Adding a task type
//
// Add a Type constant, a payload struct, a task constructor and a TaskID function
// here, and an Enqueuer method that calls enqueue with the task's options (queue,
// retries, retention, timeout, process-at) spelled out. The role that handles the
// task registers a handler for the type on its asynq.ServeMux and decodes the
// payload with Decode (see the package example).
package queue
