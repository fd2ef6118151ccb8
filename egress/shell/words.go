package shell

import (
	"path"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// arg is a shell word as the check sees it: its value when the word is fully
// literal once quotes and backslashes are removed, and whether the shell
// would still expand it (glob, brace expansion) at run time.
type arg struct {
	val  string
	lit  bool // false: a parameter, substitution, arithmetic or data-provided ({} of find, xargs input)
	glob bool // unquoted *, ?, […], {a,b}, {1..3}: the shell expands it
	// pwd: the word is literal but for $PWD, ${PWD} or $(pwd), which val
	// spells pwdMark: the working directory, which a docker bind mount names.
	pwd bool
	// secret: the word expands a variable whose name says it holds a secret.
	secret bool
}

// unknownArg stands for words the check cannot see: file names find -exec
// substitutes for {}, the input xargs appends.
var unknownArg = arg{val: "{}"}

func words(ws []*syntax.Word) []arg {
	out := make([]arg, len(ws))
	for i, w := range ws {
		out[i] = wordValue(w)
	}
	return out
}

// wordValue resolves a word to its literal value: `\rm`, `"rm"`, `r""m` and
// `'r'm` are all rm; `rm$IFS-rf` or `$(echo rm)` are not literal.
func wordValue(w *syntax.Word) arg {
	if w == nil {
		return arg{}
	}
	var b strings.Builder
	a := arg{lit: true}
	pwd := false
	for _, p := range w.Parts {
		if isPWD(p) {
			b.WriteString(pwdMark)
			pwd = true
			continue
		}
		switch x := p.(type) {
		case *syntax.Lit:
			v, glob := unquoteLit(x.Value)
			b.WriteString(v)
			a.glob = a.glob || glob
		case *syntax.SglQuoted:
			if x.Dollar && strings.ContainsRune(x.Value, '\\') {
				a.lit = false // $'\x72m' decodes at run time
			}
			b.WriteString(x.Value)
		case *syntax.DblQuoted:
			for _, q := range x.Parts {
				l, ok := q.(*syntax.Lit)
				if !ok && isPWD(q) {
					b.WriteString(pwdMark)
					pwd = true
					continue
				}
				if !ok {
					a.lit = false
					a.secret = a.secret || secretParam(q)
					continue
				}
				b.WriteString(unquoteDbl(l.Value))
			}
		default:
			a.lit = false
			a.secret = a.secret || secretParam(p)
		}
	}
	a.val = b.String()
	if pwd {
		a.pwd = a.lit
		a.lit = false
	}
	return a
}

// pwdMark stands for the working directory in the value of a pwd word.
const pwdMark = "$PWD"

// isPWD reports $PWD, ${PWD}, $(pwd) or `pwd`, alone or double-quoted.
func isPWD(p syntax.WordPart) bool {
	switch x := p.(type) {
	case *syntax.DblQuoted:
		return len(x.Parts) == 1 && isPWD(x.Parts[0])
	case *syntax.ParamExp:
		return x.Param != nil && x.Param.Value == "PWD" && x.Exp == nil && x.Repl == nil &&
			x.Slice == nil && x.Index == nil && !x.Length && !x.Excl && !x.Width
	case *syntax.CmdSubst:
		if len(x.Stmts) != 1 || len(x.Stmts[0].Redirs) > 0 {
			return false
		}
		call, ok := x.Stmts[0].Cmd.(*syntax.CallExpr)
		if !ok || len(call.Args) != 1 || len(call.Assigns) > 0 {
			return false
		}
		v := wordValue(call.Args[0])
		return v.lit && v.val == "pwd"
	}
	return false
}

// secretParam reports $NAME whose name says it holds a secret ($API_TOKEN,
// ${DB_PASSWORD}): echoing it into a served file publishes it.
func secretParam(p syntax.WordPart) bool {
	x, ok := p.(*syntax.ParamExp)
	if !ok || x.Param == nil {
		return false
	}
	return isSecretName(x.Param.Value)
}

func isSecretName(name string) bool {
	n := strings.ToUpper(name)
	for _, s := range []string{"SECRET", "TOKEN", "PASSWORD", "PASSWD", "API_KEY", "APIKEY", "PRIVATE_KEY",
		"ACCESS_KEY", "CREDENTIAL"} {
		if strings.Contains(n, s) {
			return true
		}
	}
	return false
}

// unquoteLit removes backslash escapes from an unquoted literal and reports
// whether an unescaped glob or brace-expansion character remains.
func unquoteLit(s string) (string, bool) {
	var b strings.Builder
	var plain strings.Builder // unescaped characters only, for the glob test
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if ch == '\\' && i+1 < len(s) {
			i++
			if s[i] != '\n' {
				b.WriteByte(s[i])
				plain.WriteByte('_')
			}
			continue
		}
		b.WriteByte(ch)
		plain.WriteByte(ch)
	}
	return b.String(), hasExpansion(plain.String())
}

func hasExpansion(s string) bool {
	if strings.ContainsAny(s, "*?") {
		return true
	}
	if i := strings.IndexByte(s, '['); i >= 0 && strings.IndexByte(s[i+1:], ']') >= 0 {
		return true
	}
	if i := strings.IndexByte(s, '{'); i >= 0 {
		if j := strings.IndexByte(s[i:], '}'); j > 0 {
			inner := s[i+1 : i+j]
			return strings.Contains(inner, ",") || strings.Contains(inner, "..")
		}
	}
	return false
}

// unquoteDbl removes the escapes that are escapes inside double quotes.
func unquoteDbl(s string) string {
	if !strings.ContainsRune(s, '\\') {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("$`\"\\\n", s[i+1]) >= 0 {
			i++
			if s[i] != '\n' {
				b.WriteByte(s[i])
			}
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// configFilePatterns is THE table of config files: a write, copy, move, link,
// truncate, touch or in-place edit whose target matches escalates. Patterns
// match the lower-cased base name (path.Match syntax). Besides these, anything
// under /etc, and anything inside a .git or .ssh directory (git hooks and
// config run code; authorized_keys grants access), is a config file.
var configFilePatterns = []string{
	"appsettings*.json", // .NET
	"config.json",       // the common tool/app config name
	"settings.json",     // editors, many apps
	".env", ".env.*",    // dotenv: .env, .env.local, .env.production
	"*.yaml", "*.yml",
	"*.toml",
	"*.ini",
	"*.conf",
	"*.cfg",
	"*.properties",
	".*rc", // .bashrc, .npmrc, .zshrc
	".profile", ".bash_profile", ".gitconfig",
}

// configDirs are path components that make everything under them config.
var configDirs = []string{".git", ".ssh"}

// isConfigPath reports whether a write target is a config file.
func isConfigPath(p string) bool {
	if p == "" {
		return false
	}
	// host:path (rsync, scp) writes path on the remote; judge the path.
	if i := strings.IndexByte(p, ':'); i > 0 && !strings.Contains(p[:i], "/") {
		p = p[i+1:]
	}
	clean := path.Clean(p)
	if clean == "/etc" || strings.HasPrefix(clean, "/etc/") {
		return true
	}
	parts := strings.Split(clean, "/")
	for i, part := range parts {
		for _, d := range configDirs {
			if part == d {
				return true
			}
		}
		// ../../etc/x from an unknown directory may well be /etc/x.
		if part == "etc" && i > 0 && parts[i-1] == ".." {
			return true
		}
	}
	base := strings.ToLower(path.Base(clean))
	for _, pat := range configFilePatterns {
		if ok, _ := path.Match(pat, base); ok {
			return true
		}
	}
	return false
}
