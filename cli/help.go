package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// isHelp reports whether a word asks for help.
func isHelp(a string) bool {
	return a == "help" || a == "-h" || a == "-help" || a == "--help"
}

// helpRequest reports whether args ask for help on a command (cmd), or on one
// of its subcommands (sub): `CMD help [SUB]`, or -h/--help anywhere before a
// "--" (after it an argument is text, however it looks).
func helpRequest(args []string, cmds map[string]command) (cmd, sub string, ok bool) {
	cmd = args[0]
	c, known := cmds[cmd]
	if !known && !slices.Contains(serverRoles, cmd) {
		return "", "", false
	}
	rest := args[1:]
	if i := slices.Index(rest, "--"); i >= 0 {
		rest = rest[:i]
	}
	if len(rest) == 0 {
		return "", "", false
	}
	if len(rest) == 1 && rest[0] == "help" && len(c.subs) == 0 {
		return cmd, "", true
	}
	if rest[0] == "help" && len(c.subs) > 0 {
		if len(rest) > 1 && slices.Contains(c.subs, rest[1]) {
			sub = rest[1]
		}
		return cmd, sub, true
	}
	if !slices.ContainsFunc(rest, func(a string) bool { return a != "help" && isHelp(a) }) {
		return "", "", false
	}
	if len(c.subs) > 0 && slices.Contains(c.subs, rest[0]) {
		sub = rest[0]
	}
	return cmd, sub, true
}

// printHelp writes the help of cmd (its synopsis, which names its
// subcommands) or of one subcommand (its synopsis and flags) to w, and returns
// exit code 0. A subcommand's help is its own flag set's: the command runs
// with -h, which the flag package answers with the set's usage, written to w.
func printHelp(cmd, sub string, cmds map[string]command, w io.Writer) int {
	c, known := cmds[cmd]
	if !known { // a server role
		_ = serve(context.Background(), cmd, []string{"-h"}, w, nil)
		return 0
	}
	if len(c.subs) > 0 && sub == "" {
		fmt.Fprintln(w, c.synopsis)
		fmt.Fprintf(w, "\nsubcommands: %s\n", strings.Join(c.subs, ", "))
		fmt.Fprintf(w, "aetherium %s SUBCOMMAND --help prints a subcommand's flags.\n", cmd)
		return 0
	}
	args := []string{"-h"}
	if sub != "" {
		args = []string{sub, "-h"}
	}
	// No request leaves: -h stops every command at its flag parsing.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c.run(ctx, args, w, w)
	return 0
}

// setUsage makes fs's usage (what -h prints, and what a bad flag is answered
// with) the command's synopsis, then its flags.
func setUsage(fs *flag.FlagSet, synopsis string) {
	fs.Usage = func() { printUsage(fs.Output(), synopsis, fs, nil) }
}

// printUsage writes synopsis and the flags of fs (only those named in only,
// when not nil; --api always) to w.
func printUsage(w io.Writer, synopsis string, fs *flag.FlagSet, only []string) {
	fmt.Fprintln(w, synopsis)
	show := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
	fs.VisitAll(func(f *flag.Flag) {
		if only == nil || f.Name == "api" || slices.Contains(only, f.Name) {
			show.Var(f.Value, f.Name, f.Usage)
		}
	})
	n := 0
	show.VisitAll(func(*flag.Flag) { n++ })
	if n == 0 {
		return
	}
	fmt.Fprintln(w, "\nflags (before or after the arguments):")
	show.SetOutput(w)
	show.PrintDefaults()
}

// unknownSub is the answer to a subcommand cmd does not have: the valid ones.
func unknownSub(cmd, sub string) string {
	return fmt.Sprintf("unknown subcommand %q of %s (%s)", sub, cmd, strings.Join(commands()[cmd].subs, ", "))
}

// subcommand is the setup the commands with per-subcommand flags share (runs,
// hooks, schedules): the subcommand args name, the flags it takes beyond
// --api (flags[sub]), its flag set (its usage is the synopsis and those flags)
// with --api defined, and fail, which writes "aetherium CMD: …" and returns 1.
type subcommand struct {
	name    string
	rest    []string
	allowed []string
	fs      *flag.FlagSet
	base    *string
	fail    func(format string, a ...any) int
}

// newSubcommand reads args' subcommand of cmd; ok is false (and fail has
// answered, exit code 1) when args name none, or one not in flags.
func newSubcommand(cmd, usage string, flags map[string][]string, args []string, stderr io.Writer) (subcommand, bool) {
	s := subcommand{fail: func(format string, a ...any) int {
		fmt.Fprintf(stderr, "aetherium "+cmd+": "+format+"\n", a...)
		return 1
	}}
	if len(args) == 0 {
		s.fail("%s", usage)
		return s, false
	}
	s.name, s.rest = args[0], args[1:]
	allowed, known := flags[s.name]
	if !known {
		s.fail("%s\n%s", unknownSub(cmd, s.name), usage)
		return s, false
	}
	s.allowed = allowed
	s.fs = flag.NewFlagSet(cmd+" "+s.name, flag.ContinueOnError)
	s.fs.SetOutput(stderr)
	s.fs.Usage = func() { printUsage(stderr, usage, s.fs, allowed) }
	s.base = s.fs.String("api", apiURL(), "API base URL (AETHERIUM_API_URL)")
	return s, true
}
