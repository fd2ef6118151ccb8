// Package egress is the floor every outbound check stands on: where a call may
// go and what it may carry, decided without the gate, the store or the queue.
//
//   - destinations: CheckURL and EgressPolicy (a team's allowlist, the fleet's own
//     endpoints, private ranges, link-local and metadata addresses never), Egress
//     (the HTTP client that checks again on the address actually dialed);
//   - DLP: gitleaks' rules and the fleet's (dlp_rules.toml) planned by keyword,
//     over the text, its decoded values and their reversed, spaced-out and decoded
//     forms (DLP.Scan, Redact, MaskSecrets), and the approval view a human decides
//     on (DLP.ApproverView);
//   - secrets: a team's secret sources (LoadSecrets), scrubbed from every result;
//   - normalization: NormalizeURL, NormalizePath, Canonicalize and ArgsHash (the
//     hash an approval binds);
//   - the shell parse lives in egress/shell (ShellCommands, Destructive); the
//     approval view shows a command line's simple commands through it.
//
// It imports no package of this module but egress/shell (internal/archtest says
// so): the tools
// (toolbox/research, toolbox/quality), the sandboxes' egress proxy, the store's
// egress rows and the permission gate (package security) all import it.
package egress
