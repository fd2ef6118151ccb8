// Package shell reads a shell command line the way bash would, without running
// it: ShellCommands splits it into the simple commands it would run (what an
// approver is shown), Destructive decides whether it needs a human (run_shell's
// escalation, tools.Escalates). Everything it cannot read statically — eval,
// code in variables, a shell reading stdin, input past its limits — escalates.
// docs/shellparse.md explains the rules and their limits.
//
// It imports no package of this module (internal/archtest says so): egress's
// approval view, toolbox/shell and the gate's tests import it.
package shell
