// Package governor keeps the whole fleet under a model provider's limits:
// requests per minute (RPM), tokens per minute (TPM) and calls in flight
// (concurrency), per credential (provider-wide) and per model, with optional
// shares for one team or one principal. The limits live in Redis, shared by
// every worker process.
//
// # Algorithm: an exact sliding-window log
//
// Each limit key keeps a sorted set of the calls it admitted, scored by their
// admission time in milliseconds; a member is "ticket:tokens", and a counter
// next to it holds the sum of their tokens. A call is admitted when, after the
// entries older than Window+Guard are trimmed, every matching key has fewer
// than RPM entries and room for the call's estimated tokens under TPM, and
// every concurrency set has fewer than Concurrency live slots. Admission is
// one Lua script (EVALSHA) per call, all or nothing: if any key would be
// exceeded nothing is recorded, and the script returns how long until the
// blocking key frees enough — for RPM when the entry that must leave reaches
// Window+Guard of age, for TPM when enough tokens have left the window, for
// concurrency the soonest slot expiry but at most ConcurrencyPoll (slots free
// on Done, which cannot be foreseen) — and which limit blocked
// ("openai/gpt-4o tpm", "openai/* team=alpha rpm"). When several keys block,
// the longest of their waits is returned: none is admitted before.
//
// A call whose own estimate is over a TPM limit can never be admitted: Admit
// returns an error wrapping ErrNeverFits rather than a wait.
//
// After the call, Done replaces the estimate by the real usage in every window
// (so a cheap call makes room at once) and frees the concurrency slot.
// Concurrency slots are members of a sorted set scored by their expiry
// (admission + ConcurrencyTTL), so a dead worker's slot frees itself.
//
// Guard is added to the window so a call admitted near the window's edge does
// not count inside the provider's own window because of network delay.
//
// # Keys
//
// Every key of one provider shares the hash tag {<KeyPrefix>gov:<provider>}
// (Redis-Cluster safe: the provider-wide and model keys a script touches are
// in one slot). Scope is "*" for the provider-wide line or "m:<model>", with
// "|t:<team>" or "|p:<principal>" for a share:
//
//	{P}:<scope>:log   sorted set "ticket:tokens" → admission ms
//	{P}:<scope>:tok   tokens of the log (the log is recounted when it blocks)
//	{P}:<scope>:conc  sorted set ticket → slot expiry ms
//	{P}:block:*       provider-wide "blocked until" ms (a 429 without a model)
//	{P}:block:m:<m>   model "blocked until" ms
//
// Every key has a PEXPIRE, so idle keys vanish.
//
// # Time
//
// The scripts read Redis TIME and nothing else: workers' clocks may disagree,
// the fleet still has one clock. The Go side computes no instants, only
// durations.
//
// # Feedback
//
// The governor's count is an estimate; the provider is the truth. A 429 (or a
// success whose rate-limit headers say remaining 0) sets a "blocked until" key
// for the model (or provider, when the call named none) that every worker's
// admission respects: Retry-After, else the reset of the exhausted limit,
// else DefaultPenalty; hints are clamped to MaxPenalty. A 503/529 (overload)
// parks the one call but blocks no one: it is the provider's state, not our
// credential's.
//
// # Snoozing
//
// The middleware never sleeps: Complete returns at once a *llm.WaitError
// (matched by errors.Is(err, llm.ErrRateLimited)) with After and Limit. The
// caller — the worker — snoozes the step's task until After and asks again;
// it fails the run (reason rate_limited) once the step has waited MaxWait in
// all. A retried call is a fresh admission: the first caller has no priority.
package governor
