// Package security is the permission gate every tool call passes, in this order:
//
//  1. capability — the tool must exist and be in the caller's catalog (the model is
//     never shown other tools; a hallucinated or withheld tool is refused here);
//  2. rules — config/permissions.yaml always_deny rules (hot-reloaded);
//  3. tier — Restricted tools, and run_shell commands matching a destructive pattern,
//     need a human approval;
//  4. egress + DLP — outbound tools may only reach the team's allowlisted domains (plus
//     loopback and private ranges; link-local and cloud metadata never), checked again
//     on the address actually dialed; their arguments must carry no credential;
//  5. approval — the call waits, durably, for a human decision (or times out);
//  6. execute, then audit — always, in a deferred path, exactly one row per attempt.
//
// The checks of layers 3 and 4 themselves (the shell parse, destinations, DLP,
// secrets) live a floor below, in package egress, which the tools use directly;
// this package is the gate that applies them, the rules, approvals and the audit.
package security
