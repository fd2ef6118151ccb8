// Package evals measures a team with a suite of tasks (docs/evals.md): the
// suite file (strict YAML, every refusal naming its line), the assertions —
// on a run's trajectory read from its typed events (tools called or not, in
// order, gate outcomes, delegations), on its result (contains, regex, JSON
// Schema, a model judge's rubric) and on its cost, tokens and turns — and the
// reports: a table, a side-by-side comparison of two team versions, JUnit XML
// and JSON.
//
// It is pure: Run takes the function that runs one task (the CLI's submits
// it over the API and follows its events), so the judging is tested without
// a fleet. A task that cannot be judged (no run, a timeout, an event whose
// data is not its type's payload) is an error, never a pass; a judge without
// a configured model is skipped with the reason, never passed.
package evals
