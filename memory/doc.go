// Package memory is ADR 5's agent memory: what an agent remembers of earlier runs
// of its project, and how that reaches the model.
//
// Two tiers, with no vector index:
//   - working memory, a session's notes: the agent overwrites them with a
//     <notes>…</notes> section of an answer, the worker shows them at every turn
//     start and keeps them across compactions (sessions.notes; see
//     docs/long-sessions.md);
//   - long-term memory, in PostgreSQL's agent_memory table (store.AppendMemory and
//     friends), append-only per project, scoped project-shared or
//     agent-specific. The engine appends one entry when an agent session ends —
//     the task and the final answer, condensed deterministically (Condense: no
//     model call) — in the transaction of the session's final save.
//
// At turn start the orchestrator recalls entries ranked by
// relevance + w · 2^(−age/half_life) (Rank) within a token budget, and injects them
// as quoted data with their provenance (Format), never as instructions: memory
// came from earlier model output, so it is a lasting prompt-injection channel.
package memory
