// Package lease shares GPU services between runs through leases kept in Redis.
//
// A service (comfyui, comfyui-qwen, comfyui-video, qwen-tts, …) has a capacity: how
// many runs may use it at once. A run (the holder) asks with Acquire; it is granted
// a slot or queued. A grant carries a fencing token and an expiry; the holder
// renews it (Renew, or Keep as a heartbeat) and releases it when the run ends
// (Release, ReleaseAll). A grant that is not renewed expires and the reaper (Reap,
// or any later operation on the service) reclaims it and hands the slot on. Every
// acquire, wait, renew, release, cancel and expiry is appended to the lease-events
// stream (Events, EventsKey) for operators.
//
// # How a worker uses it
//
// Nothing blocks a worker on another run: Acquire never waits. While the service
// is busy it returns a *WaitError (errors.Is ErrWaiting) with the queue position
// and keeps the holder queued; the caller re-enqueues its job (asynq ProcessIn)
// and calls Acquire again within Config.WaiterTTL to keep its place. When a slot
// frees up it is handed to the head of the queue immediately, so the next Acquire
// finds the grant. AcquireWait is the same with a short bounded poll.
//
// # Why it is safe
//
//   - Atomicity. Every state change is one Lua script, and Redis runs a script
//     with nothing interleaved. Expiry, hand-off and the change the caller asked for
//     happen in one step, so two processes can never both see a free slot and both
//     take it: capacity holds under any contention from any number of processes.
//   - One clock. Expiries are computed from Redis's TIME inside the scripts, never
//     from a worker's clock, so skewed worker clocks cannot make a grant look alive
//     or dead early.
//   - FIFO. A holder joins the queue once (an enqueue sequence number orders it);
//     slots are granted only to the head of the queue, in every script, so grant
//     order is queue order no matter which process performs the hand-off.
//   - Fencing. Every grant takes the next value of a per-service counter that is
//     only ever incremented, so tokens strictly increase in grant order. A holder
//     that paused (GC, network partition) past its expiry still has its old token;
//     its Renew fails with ErrLost, its Release is a no-op (a stale token never
//     frees a newer grant), and the fencing proxy in front of the service
//     (gpu/fenceproxy: Header, Validate; it rejects anything below the highest
//     token it admitted, or anything Validate calls dead) refuses its late
//     requests before the service sees them.
//   - Authorization. The token is public and predictable: it orders grants and
//     never authorizes on its own. Each grant also has a secret (SecretBytes
//     from crypto/rand), kept in the secrets hash for the holder's workers
//     (Acquire and Held return it; the first of them after a hand-off installs
//     it) and sent as SecretHeader. Validate, and so the proxy, admits a token
//     only with its grant's secret. No API response carries it (Grant.Secret
//     is never marshalled or printed; ServiceState does not read it).
//   - Idempotence. Acquire while holding returns the same grant; Release of what
//     is not held does nothing; so at-least-once job delivery cannot double-grant
//     or double-free.
//   - Liveness. A holder that stops renewing is reclaimed after its TTL (plus up to
//     one reaper period); a waiter that stops asking is dropped after WaiterTTL, so
//     neither can block the queue forever.
//
// # Keys and Redis Cluster
//
// The whole family shares one hash tag, the prefix in braces (Config.Prefix,
// default aeth:lease), so every key below is in one Cluster slot and every
// script's keys are too (no CROSSSLOT, whichever node owns the slot):
//
//	{<prefix>}:<service>:holders   ZSET   holder → expiry (ms, Redis clock)
//	{<prefix>}:<service>:grants    HASH   holder → token|acquired_ms|waited_ms
//	{<prefix>}:<service>:queue     ZSET   holder → enqueue sequence (FIFO)
//	{<prefix>}:<service>:waiters   ZSET   holder → waiter expiry
//	{<prefix>}:<service>:wsince    HASH   holder → enqueue time
//	{<prefix>}:<service>:fence     STRING last fencing token
//	{<prefix>}:<service>:seq       STRING last enqueue sequence
//	{<prefix>}:<service>:state     HASH   idle_since
//	{<prefix>}:<service>:stopping  STRING set while the container is stopped
//	{<prefix>}:<service>:secrets   HASH   holder → token|secret
//	{<prefix>}:events              STREAM lease events of every service
//	{<prefix>}:epoch               HASH   {epoch, replid}
//	{<prefix>}:layout              STRING the layout's version (Layout)
//
// Why one slot for all services rather than one per service: the family is
// small and cold (a handful of GPU services; a few script calls per GPU tool
// call plus one renewal per holder every TTL/3), far below what one master
// serves, so spreading it buys nothing. Keeping it together keeps what per-service
// tags would break: one events stream in one total order (Events, RecentEvents
// and their cursors), and one epoch check that lifts every service's counter in
// one script. The fencing epoch then follows exactly one history — that of the
// master owning the slot. In a cluster each master has its own replication id;
// the manager asks that master (ClusterClient.MasterForKey of the epoch key), so
// the failover of another master costs nothing and a failover of this one
// (its replica promoted with a new id, possibly missing the last writes) takes a
// new epoch just as with Sentinel. Nothing scans the keyspace: services are
// known from the configuration.
//
// Upgrading from the layout before the shared tag (<prefix>:{<service>}:…,
// <prefix>:events, <prefix>:epoch) starts from empty state: grants and queue
// places held at the switch are forgotten (holders see ErrLost on Renew and
// acquire again), old events are not migrated, and the first grant takes a new
// epoch (with an EpochSource, as every fleet has: PostgresEpoch), so tokens
// still sort after every token issued under the old keys. Old and new
// processes must not run side by side: each would grant from its own keys, so
// a service's capacity could be exceeded. Upgrade with every worker stopped (or
// no GPU lease held), not as a rolling restart.
//
// That was layout 1; the shared tag is layout 2 (Layout), which a worker
// records in {<prefix>}:layout at start (CheckLayout) and a worker of an older
// layout-aware build refuses to start on. So a rolling upgrade is safe between
// builds of one layout — every build since the shared tag (561c02b) — and a
// future change of layout is caught instead of silently splitting the
// family; that one upgrade stops the workers (docs/how-to/upgrade.md).
//
// Adding the secrets hash kept every other key: grants held at that upgrade
// stay, and the holder's next Acquire (or Held) installs a secret for them; an
// entry of an older token, or one a process without secrets left behind when
// it removed a grant, is replaced, or dropped by Reap. A rolling restart is
// safe for capacity, but a holder on a process without secrets sends no
// secret, and an upgraded fencing proxy refuses it: upgrade the proxy image
// with the workers (its container is replaced when its definition changes).
//
// # Limits
//
//   - Fencing across a Redis failover: epochs. The per-service counter lives in
//     Redis, and a failover to a replica that had not received the latest writes
//     (or a restart that lost data) can put it back. So a token is (epoch,
//     counter), packed as epoch<<EpochShift + counter so plain integer order is
//     the pair's order. Epochs come from an EpochSource that Redis cannot lose —
//     in a fleet the PostgreSQL sequence lease_fence_epoch (PostgresEpoch). The
//     Redis key {<prefix>}:epoch records the epoch together with the replication id
//     (INFO replication master_replid, read from the node that owns the lease
//     family's slot) of the dataset it was taken for. Before a
//     script that may grant runs, the manager compares the id it sees now with
//     the recorded one (at most every Options.EpochCheck); a promoted replica or
//     a wiped primary has a new id, so the manager takes a fresh epoch, installs
//     max(recorded, fresh) and lifts every service's counter to the new epoch's
//     floor in one script: every later token sorts after every token issued
//     before the failover, and the fencing proxy (gpu/fenceproxy), which
//     remembers the newest token it admitted, admits them in order. Bounds: fewer
//     than 2^32 grants per service and epoch, epochs up to MaxEpoch (the scripts
//     keep tokens as exact doubles). A restart that lost nothing may also change
//     the id; that only spends an epoch. Without an EpochSource tokens are the
//     bare counter (epoch 0) and a failover can reissue a token. Grants made
//     within EpochCheck after a failover, before a manager noticed it, carry the
//     old epoch and a gone-back counter: the proxy refuses them (it fails safe),
//     and their holders must release and acquire again. Grants made during the
//     lost window are lost too, and their holders discover it on the next Renew
//     (ErrLost).
//   - A lease bounds who should use the service, not who can: a holder that
//     ignores ErrLost and a service that ignores the token are not stopped. The
//     token only protects services that check it.
//   - Expiry is judged by Redis's clock, but a holder decides to stop by its own:
//     renew well inside the TTL (Keep uses TTL/3).
//   - A grant handed to the head of the queue starts its TTL at once; if that
//     holder vanished it occupies the slot until expiry. WaiterTTL much smaller than
//     TTL keeps such vanished waiters rare.
//   - All processes must agree on a service's capacity and TTL (they are passed to
//     the scripts by each caller; a process with a different config applies its own
//     values to the calls it makes).
package lease
