package shell

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// Limits that keep the check cheap on hostile input. Every limit that trips
// escalates (Destructive) or errors (ShellCommands): a command we could not
// read completely is never waved through.
const (
	// MaxCommandBytes bounds the command text that is parsed at all. The parser
	// is linear, so this bounds its time; 64 KiB is far above any real command.
	MaxCommandBytes = 64 << 10
	// MaxNestingDepth bounds how often code inside a string (sh -c '…', trap,
	// alias) is re-parsed. Each level is a substring of the one above, so the
	// total parsing work is at most MaxNestingDepth × MaxCommandBytes.
	MaxNestingDepth = 8
	// MaxSimpleCommands bounds how many simple commands one call may contain.
	MaxSimpleCommands = 4096
	// MaxFunctions bounds function definitions: each one's body is walked
	// again for the fork-bomb check, so nested definitions cost depth × size.
	MaxFunctions = 64
	// MaxListedBytes bounds the printed approver view (ShellCommands): nested
	// command substitutions are printed once per level, so the view of a
	// hostile command could otherwise grow quadratically.
	MaxListedBytes = 1 << 20
)

// Sentinel errors of ShellCommands; Destructive turns each into an escalation.
var (
	ErrCommandTooLong    = errors.New("command longer than the check reads")
	ErrCommandTooComplex = errors.New("command too complex to check")
)

// Reasons Destructive reports that are not tied to one command's rule.
const (
	reasonUnparseable = "unparseable command"
	reasonTooLong     = "command too long to check"
	reasonTooComplex  = "command too complex to check"
	reasonNameNotLit  = "command name is not a literal"
	reasonEval        = "eval/source runs code the check cannot see"
	reasonShellStdin  = "shell reads code from stdin, a pipe or a here-document"
	reasonShellCode   = "shell code is not a literal"
	reasonForkBomb    = "fork bomb"
)

// Destructive reports whether a run_shell command needs a human, and why. It
// parses the command as bash and judges every simple command it would run,
// including those inside sh -c strings, find -exec, xargs and wrappers (env,
// nice, timeout, …). Anything it cannot read statically escalates.
func Destructive(command string) (bool, string) {
	c := &checker{}
	c.run(command)
	if c.reason != "" {
		return true, c.reason
	}
	return false, ""
}

// ShellCommands returns the simple commands Destructive judged, in source
// order, each printed as shell text — the approver's view of what would run.
// Commands inside sh -c strings are listed after the sh -c command itself.
func ShellCommands(command string) ([]string, error) {
	c := &checker{list: true}
	c.run(command)
	if c.err != nil {
		return nil, c.err
	}
	return c.cmds, nil
}

// checker walks one command. It keeps walking after the first escalation so
// that the approver view is complete; only the first reason is reported.
type checker struct {
	list   bool // print commands for ShellCommands
	cmds   []string
	listed int
	count  int
	funcs  int
	reason string
	err    error // fatal for ShellCommands: the walk was incomplete
	// cwdOutside: a cd left the workspace (or went somewhere unreadable),
	// so relative paths after it are not workspace paths.
	cwdOutside bool
	// redirs are the redirections of the statement being judged and pipeIn
	// the statements that read a pipe: a database client's SQL may come
	// from its stdin.
	redirs []*syntax.Redirect
	pipeIn map[*syntax.Stmt]bool
	piped  bool
	// Effects that escalate only together, judged when the walk ends:
	// download-then-run (download names files, run finds one of them) and
	// secrets-into-a-served-file (a secret source and a served write).
	downloaded   map[string]bool // base names of downloaded files
	downloadAny  bool            // a download whose file names are unknown
	sawDownload  bool            // any download, also to stdout
	ranDownload  string          // what ran a downloaded file
	secretSource string
	servedWrite  string
}

func (c *checker) escalate(reason string) {
	if c.reason == "" {
		c.reason = reason
	}
}

func (c *checker) fail(reason string, err error) {
	c.escalate(reason)
	if c.err == nil {
		c.err = err
	}
}

func (c *checker) run(command string) {
	if len(command) > MaxCommandBytes {
		c.fail(reasonTooLong, fmt.Errorf("%w: %d bytes, limit %d", ErrCommandTooLong, len(command), MaxCommandBytes))
		return
	}
	c.parse(command, 0)
	c.effects()
}

// parse reads code at a nesting depth (0 = the run_shell command itself).
func (c *checker) parse(code string, depth int) {
	if depth > MaxNestingDepth {
		c.fail(reasonTooComplex, fmt.Errorf("%w: code nested more than %d levels deep", ErrCommandTooComplex, MaxNestingDepth))
		return
	}
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(code), "")
	if err != nil {
		c.fail(reasonUnparseable, fmt.Errorf("parse shell command: %w", err))
		return
	}
	syntax.Walk(f, func(n syntax.Node) bool { return c.visit(n, depth) })
}

func (c *checker) visit(n syntax.Node, depth int) bool {
	if c.err != nil {
		return false
	}
	switch x := n.(type) {
	case *syntax.Stmt:
		switch x.Cmd.(type) {
		case *syntax.CallExpr, *syntax.DeclClause, *syntax.LetClause:
			c.record(x)
		}
		// Pre-order: the statement's own command is visited next.
		c.redirs, c.piped = x.Redirs, c.pipeIn[x]
	case *syntax.BinaryCmd:
		if x.Op == syntax.Pipe || x.Op == syntax.PipeAll {
			if c.pipeIn == nil {
				c.pipeIn = map[*syntax.Stmt]bool{}
			}
			c.pipeIn[x.Y] = true
		}
	case *syntax.DeclClause:
		c.declClause(x)
	case *syntax.CallExpr:
		if len(x.Args) > 0 {
			c.simple(words(x.Args), depth)
		}
	case *syntax.Redirect:
		c.redirect(x)
	case *syntax.FuncDecl:
		c.funcs++
		if c.funcs > MaxFunctions {
			c.fail(reasonTooComplex, fmt.Errorf("%w: more than %d function definitions", ErrCommandTooComplex, MaxFunctions))
			return false
		}
		if forkBomb(x) {
			c.escalate(reasonForkBomb)
		}
	}
	return true
}

// record counts a simple command and, for ShellCommands, prints it.
func (c *checker) record(s *syntax.Stmt) {
	c.count++
	if c.count > MaxSimpleCommands {
		c.fail(reasonTooComplex, fmt.Errorf("%w: more than %d simple commands", ErrCommandTooComplex, MaxSimpleCommands))
		return
	}
	if !c.list {
		return
	}
	var b bytes.Buffer
	// A copy without the separator: the list shows commands, not how they
	// were joined (a trailing & is kept, it changes what runs).
	cp := *s
	cp.Comments = nil
	if err := syntax.NewPrinter(syntax.SingleLine(true)).Print(&b, &cp); err != nil {
		c.fail(reasonTooComplex, fmt.Errorf("print shell command: %w", err))
		return
	}
	c.listed += b.Len()
	if c.listed > MaxListedBytes {
		c.fail(reasonTooComplex, fmt.Errorf("%w: printed view longer than %d bytes", ErrCommandTooComplex, MaxListedBytes))
		return
	}
	c.cmds = append(c.cmds, strings.TrimSpace(b.String()))
}

// nested re-parses code found in a string argument (sh -c, trap, alias).
func (c *checker) nested(code arg, depth int) {
	if !code.lit || code.glob {
		c.escalate(reasonShellCode)
		return
	}
	c.parse(code.val, depth+1)
}

// redirect escalates a write whose target is a config file or cannot be read.
func (c *checker) redirect(r *syntax.Redirect) {
	switch r.Op {
	case syntax.RdrOut, syntax.AppOut, syntax.RdrClob, syntax.AppClob, syntax.RdrAll,
		syntax.RdrAllClob, syntax.AppAll, syntax.AppAllClob, syntax.RdrInOut:
	case syntax.DplOut:
		// >&2 and >&- duplicate descriptors; >&file is bash for &>file.
		if v := wordValue(r.Word); v.lit && (v.val == "-" || isDigits(v.val)) {
			return
		}
	default:
		return
	}
	if r.Word == nil {
		return
	}
	t := wordValue(r.Word)
	switch {
	case !t.lit || t.glob:
		c.escalate("redirect to a target that is not a literal")
	case isConfigPath(t.val):
		c.escalate("truncating redirect into a config file")
	}
	// Literal targets only: the cases above escalate the others.
	if t.lit && !t.glob {
		c.written(t.val)
	}
}

// forkBomb reports a function whose body starts a copy of itself in a pipeline
// or in the background: that is what makes it multiply rather than recurse.
// One walk of the body collects the self-calls and the piped/backgrounded
// spans; a span containing a self-call is the bomb.
func forkBomb(f *syntax.FuncDecl) bool {
	if f.Name == nil || f.Body == nil {
		return false
	}
	name := f.Name.Value
	var self []uint
	var spans [][2]uint
	syntax.Walk(f.Body, func(n syntax.Node) bool {
		switch x := n.(type) {
		case *syntax.CallExpr:
			if len(x.Args) > 0 {
				if v := wordValue(x.Args[0]); v.lit && v.val == name {
					self = append(self, x.Pos().Offset())
				}
			}
		case *syntax.Stmt:
			if x.Background {
				spans = append(spans, [2]uint{x.Pos().Offset(), x.End().Offset()})
			}
		case *syntax.BinaryCmd:
			if x.Op == syntax.Pipe || x.Op == syntax.PipeAll {
				spans = append(spans, [2]uint{x.Pos().Offset(), x.End().Offset()})
			}
		}
		return true
	})
	slices.Sort(self)
	for _, sp := range spans {
		i, _ := slices.BinarySearch(self, sp[0])
		if i < len(self) && self[i] < sp[1] {
			return true
		}
	}
	return false
}
