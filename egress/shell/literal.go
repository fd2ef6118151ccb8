package shell

import (
	"errors"
	"fmt"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// ErrNotLiteral is a command line whose commands are not all known before it
// runs: an expansion, a substitution, an assignment, a function, a redirection
// to a file. A grant by command words never covers such a line.
var ErrNotLiteral = errors.New("the command line is not literal words")

// Words returns the words of every simple command a command line runs, in
// source order, when every one of them is a literal word (quotes removed). A
// command line with anything whose value is only known when it runs (parameter
// or arithmetic expansion, command or process substitution, an assignment, a
// function or declaration, a redirection other than to a file descriptor) is
// ErrNotLiteral: a grant for "go test *" must not cover `go test $(curl …)` or
// `go test > ~/.bashrc`. The code inside sh -c strings is not looked into: its
// shell is the first word, which a grant must name itself.
func Words(command string) ([][]string, error) {
	if len(command) > MaxCommandBytes {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrCommandTooLong, len(command), MaxCommandBytes)
	}
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(command), "")
	if err != nil {
		return nil, fmt.Errorf("parse shell command: %w", err)
	}
	var out [][]string
	var bad error
	syntax.Walk(f, func(n syntax.Node) bool {
		if bad != nil {
			return false
		}
		switch x := n.(type) {
		case *syntax.CmdSubst, *syntax.ProcSubst, *syntax.ParamExp, *syntax.ArithmExp, *syntax.ArithmCmd,
			*syntax.FuncDecl, *syntax.DeclClause, *syntax.LetClause, *syntax.Assign, *syntax.ExtGlob, *syntax.BraceExp:
			bad = fmt.Errorf("%w: %T", ErrNotLiteral, n)
		case *syntax.Redirect:
			if x.Op != syntax.DplOut && x.Op != syntax.DplIn {
				bad = fmt.Errorf("%w: a redirection (%s)", ErrNotLiteral, x.Op)
			}
		case *syntax.CallExpr:
			if len(x.Args) == 0 {
				return true
			}
			ws := make([]string, 0, len(x.Args))
			for _, w := range x.Args {
				s, ok := literal(w)
				if !ok {
					bad = fmt.Errorf("%w: a word that is not literal", ErrNotLiteral)
					return false
				}
				ws = append(ws, s)
			}
			out = append(out, ws)
		}
		return true
	})
	if bad != nil {
		return nil, bad
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no command", ErrNotLiteral)
	}
	return out, nil
}

// literal is a word's value when it is made of literal text and quotes only.
func literal(w *syntax.Word) (string, bool) {
	var b strings.Builder
	for _, p := range w.Parts {
		switch x := p.(type) {
		case *syntax.Lit:
			b.WriteString(x.Value)
		case *syntax.SglQuoted:
			if x.Dollar {
				return "", false
			}
			b.WriteString(x.Value)
		case *syntax.DblQuoted:
			for _, q := range x.Parts {
				l, ok := q.(*syntax.Lit)
				if !ok {
					return "", false
				}
				b.WriteString(l.Value)
			}
		default:
			return "", false
		}
	}
	return b.String(), true
}
