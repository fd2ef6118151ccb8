// Package fair is the fleet-wide fair dispatcher in front of asynq.
//
// asynq queues are FIFO and know nothing of tenants: one tenant that submits a
// thousand runs fills every worker slot and another tenant's ten runs wait
// behind the backlog. So agent tasks are not enqueued into asynq directly:
// they are submitted here (Submit). The dispatcher keeps each fairness key's
// pending work in Redis and releases tasks into asynq only as worker slots
// free up, choosing which key goes next. Every operation is one Lua script,
// and Redis's TIME is the only clock, as in package lease.
//
// # How a worker uses it
//
// Whoever submits enqueues what Submit returns (a deterministic asynq TaskID
// makes that idempotent). A worker process calls Heartbeat every few seconds
// with its asynq concurrency and the ids it runs; its handler calls Started
// when a task begins and Done when it ends (success, final failure or
// cancellation), and enqueues what Done and Heartbeat return. Leave at a
// clean shutdown; Pump from any periodic tick. Cancel drops a pending task.
//
// # Semantics
//
//   - Window. Tasks in flight (dispatched or running) never exceed the sum of
//     the capacities of live workers (a Heartbeat within WorkerTTL). With no
//     live worker nothing is dispatched; the first Heartbeat dispatches.
//   - Per-key limit. A key with Limit > 0 never has more than Limit tasks in
//     flight through the dispatcher, exactly, under any concurrency: the check
//     and the dispatch are one script. A key at its limit is parked out of the
//     ready sets and rejoins when one of its tasks is Done or expires. The one
//     exception: Started of an id the dispatcher does not know (or of one whose
//     dispatch lease had expired and put it back in line) registers it running
//     even over the limit — it is a retry already running, and refusing it
//     would only hide it from the count.
//   - Fairness: start-time fair queuing (SFQ), a weighted fair queuing with
//     virtual time. Each key has a finish tag F, the family a virtual time V.
//     The next finish tag of a key is F + SCALE/weight (SCALE = 1e6, integer
//     arithmetic in exact Lua doubles). A pick takes the key with the smallest
//     next tag; with S = F it sets F = S + SCALE/weight and V = max(V, S). A key
//     that joins the ready sets (it had no pending work, or was parked at its
//     limit) takes F = max(F, V): idle time banks no credit, so a late key
//     gets its share at once but no burst paid by the others. Two always
//     backlogged keys of weights 3 and 1 get picks 3:1.
//   - Priorities 1..5 with aging. Each key has one FIFO line per priority.
//     Level choice: for each non-empty level p, eff = p + floor(wait/Aging),
//     where wait is how long the oldest head of a line at that level has
//     waited; the highest eff wins (ties: the higher p). Within the level the
//     key with the smallest next finish tag goes, and its line's head is
//     dispatched. So priority 5 goes before a backlog of priority 3, and
//     priority 1 cannot starve: it gains a level per Aging waited.
//   - Leases. A dispatched task must be Started within DispatchLease, else it
//     goes back to the head of its line (Spec kept) and counts out of the
//     window and its key's limit meanwhile. A Started task has RunLease,
//     extended by its worker's Heartbeat; when it expires the entry is dropped
//     (asynq redelivers the task itself, and Started registers it again).
//     Started (or a Heartbeat naming it) of a task whose dispatch lease had
//     expired takes it out of its line again, so it is not dispatched twice.
//     Every script that dispatches first reclaims what expired (at most Scan
//     leases and Scan workers per call), by Redis's clock.
//   - Batches. One call dispatches at most Scan tasks; the rest go on the next
//     call (Done, Heartbeat, Pump, Submit).
//   - Idempotence. Submit of a known id (pending, dispatched or running) is a
//     no-op, Done of an unknown id too, and Started twice is fine.
//   - Waited. A dispatched task carries the time since its Submit (Redis's
//     clock), for the caller's queue-wait metric.
//   - Memory. Everything about a key (finish tag, weight, limit, in-flight
//     count, lines) is deleted once it has nothing pending and nothing in
//     flight, and Done deletes the task's record. So the family's size follows
//     the live work, not the number of keys ever seen; nothing per key is kept
//     outside Redis.
//   - Hostile input. A key is kept as it is up to MaxKey bytes, else (or when it
//     starts with "h:") as "h:"+hex(sha256): bounded, and with no way to take a
//     hashed key's name. Keys and ids only ever follow the family's hash tag
//     and a fixed kind prefix in a key name, so no byte of them can reach
//     another key. Bad arguments are errors wrapping ErrInvalid that name the
//     field.
//
// # Keys and Redis Cluster
//
// Every key is "{<prefix>}:…" (Config.Prefix, default aeth:fair): one hash tag,
// one Cluster slot. The scripts declare the family's fixed keys (so a Cluster
// client routes them to the slot's master) and build the per-key and per-task
// keys themselves from the same tag — legal because they are in the declared
// keys' slot:
//
//	{<prefix>}:V                STRING virtual time
//	{<prefix>}:dl               ZSET   id → lease deadline of every task in flight
//	{<prefix>}:workers          ZSET   worker → registration expiry
//	{<prefix>}:cap              HASH   worker → capacity
//	{<prefix>}:parked           SET    keys at their limit
//	{<prefix>}:keys             SET    keys with pending work
//	{<prefix>}:pending          STRING pending tasks
//	{<prefix>}:ready:<p>        ZSET   key → next finish tag, keys with a line at p
//	{<prefix>}:oldest:<p>       ZSET   key → submit time of its line's head at p
//	{<prefix>}:k:<key>          HASH   finish tag, weight, limit, in flight
//	{<prefix>}:l:<p>:<key>      LIST   the key's pending ids at priority p
//	{<prefix>}:t:<id>           HASH   key, priority, spec, submit time, state
//
// One slot for the family is enough: a few script calls per task, far below
// what one master serves; and fairness needs one order over all keys.
//
// # Limits
//
//   - A key's weight and limit are the latest Submit's: all producers of a key
//     should agree on them.
//   - Lowering a limit does not recall tasks already in flight.
//   - All processes must share one Config (the scripts get it from the caller).
//   - Dispatched.Key is the key as kept (NormalizeKey), not the raw key.
//   - Started neither reclaims nor dispatches (it frees no slot). Stats reads
//     without reclaiming: InFlight includes leases expired
//     but not reclaimed yet (Window leaves out expired workers).
//   - A pick is O(log keys) (sorted sets), so there is nothing to scan per pick;
//     Scan bounds the batch and the reclaim per call instead.
package fair
