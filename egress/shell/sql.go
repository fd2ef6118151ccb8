package shell

import (
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// Database clients (issue 47, item 5): the SQL they are given inline (psql
// -c, mysql -e, sqlite3 DB 'SQL', a here-string or here-document) is read
// and escalates when it destroys data — DROP, TRUNCATE, DELETE or UPDATE
// without WHERE (or with a WHERE that is always true) — or runs a command
// (psql \!, sqlite .shell, COPY … PROGRAM). SQL the check cannot read — a
// file (psql -f, mysql < dump.sql, \i, .read), a pipe, a value that is not a
// literal — escalates too: a dump restore usually starts with DROP. A client
// with no SQL at all (an interactive session on an empty stdin) passes.

var dbClients = set("psql", "mysql", "mariadb", "sqlite3", "sqlite", "duckdb", "redis-cli", "valkey-cli",
	"dropdb", "dropuser", "mysqladmin", "mariadb-admin", "pg_restore")

// Per client: short options whose value is SQL, a file of SQL, or anything
// else (attached or the next word); long ones likewise. Options not listed
// take no value.
type dbSpec struct {
	sqlShort, fileShort, valShort string
	sqlLong, fileLong, valLong    map[string]bool
	info                          map[string]bool
	// sqlOperands: operands after the first (the database) are SQL (sqlite3).
	sqlOperands bool
	// attachedOnly: a short option takes only an attached value (mysql -pSECRET).
	attachedOnly string
}

var dbSpecs = map[string]dbSpec{
	"psql": {
		sqlShort: "c", fileShort: "f", valShort: "dhpUvoLPFRT",
		sqlLong: set("--command"), fileLong: set("--file"),
		valLong: set("--dbname", "--host", "--port", "--username", "--set", "--variable", "--output",
			"--log-file", "--pset", "--field-separator", "--record-separator", "--table-attr"),
		info: set("-l", "--list", "-V", "--version", "--help", "-?"),
	},
	"mysql": {
		sqlShort: "e", valShort: "DhuPSO", attachedOnly: "p",
		sqlLong: set("--execute", "--init-command"),
		valLong: set("--database", "--host", "--user", "--port", "--socket", "--default-character-set",
			"--defaults-file", "--defaults-extra-file", "--login-path", "--protocol", "--delimiter", "--pager",
			"--tee", "--bind-address", "--character-sets-dir", "--connect-timeout", "--max-allowed-packet",
			"--net-buffer-length", "--plugin-dir", "--default-auth", "--ssl-ca", "--ssl-cert", "--ssl-key",
			"--ssl-mode", "--ssl-cipher", "--tls-version", "--server-public-key-path"),
		info: set("-V", "--version", "--help", "-?", "-I"),
	},
	"sqlite3": {
		sqlOperands: true,
		sqlLong:     set("-cmd", "--cmd"),
		fileLong:    set("-init", "--init"),
		valLong: set("-separator", "--separator", "-newline", "--newline", "-nullvalue", "--nullvalue", "-vfs",
			"--vfs", "-maxsize", "--maxsize", "-mmap", "--mmap", "-lookaside", "--lookaside", "-pagecache",
			"--pagecache", "-heap", "--heap", "-escape", "--escape"),
		info: set("-version", "--version", "-help", "--help", "-A", "-archive", "--archive"),
	},
	"duckdb": {
		sqlOperands: true,
		sqlShort:    "cs",
		fileShort:   "f",
		sqlLong:     set("-cmd", "--cmd", "-c", "-s"),
		fileLong:    set("-init", "--init", "-f"),
		valLong:     set("-separator", "-newline", "-nullvalue"),
		info:        set("-version", "--version", "-help", "--help"),
	},
}

func init() {
	dbSpecs["mariadb"] = dbSpecs["mysql"]
	dbSpecs["sqlite"] = dbSpecs["sqlite3"]
}

// database judges one database client invocation.
func (c *checker) database(base string, rest []arg) {
	esc := func(shape string) { c.escalate(because(classDatabase, base+" "+shape)) }
	switch base {
	case "dropdb", "dropuser":
		esc("drops a database or role")
		return
	case "mysqladmin", "mariadb-admin":
		for _, a := range rest {
			if !a.lit || strings.EqualFold(a.val, "drop") {
				esc("drop")
				return
			}
		}
		return
	case "pg_restore":
		if hasOpt(parseOptsOnly(rest), "-c", "--clean") {
			esc("--clean drops objects first")
		}
		return
	case "redis-cli", "valkey-cli":
		c.redis(base, rest)
		return
	}
	spec := dbSpecs[base]
	var sqls []arg
	var files []arg
	operands := 0
	info := false
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		v := a.val
		// A word that is not a literal is read as an operand ("$DATABASE_URL"):
		// as SQL (sqlite3 DB "$Q") it escalates below.
		if !a.lit || v == "--" || !strings.HasPrefix(v, "-") || v == "-" {
			operands++
			if spec.sqlOperands && operands > 1 {
				sqls = append(sqls, a)
			}
			continue
		}
		if spec.info[v] {
			info = true
			continue
		}
		name, val, hasVal := strings.Cut(v, "=")
		long := strings.HasPrefix(v, "--") || spec.sqlLong[name] || spec.fileLong[name] || spec.valLong[name]
		if long {
			kind := 0
			switch {
			case spec.sqlLong[name]:
				kind = 1
			case spec.fileLong[name]:
				kind = 2
			case spec.valLong[name]:
				kind = 3
			}
			if kind == 0 {
				continue
			}
			va := arg{val: val, lit: true}
			if !hasVal && i+1 < len(rest) {
				i++
				va = rest[i]
			}
			switch kind {
			case 1:
				sqls = append(sqls, va)
			case 2:
				files = append(files, va)
			}
			continue
		}
		for j := 1; j < len(v); j++ {
			ch := v[j : j+1]
			if strings.Contains(spec.attachedOnly, ch) {
				break
			}
			isSQL, isFile := strings.Contains(spec.sqlShort, ch), strings.Contains(spec.fileShort, ch)
			if !isSQL && !isFile && !strings.Contains(spec.valShort, ch) {
				continue
			}
			va := arg{val: v[j+1:], lit: true}
			if j+1 == len(v) && i+1 < len(rest) {
				i++
				va = rest[i]
			}
			switch {
			case isSQL:
				sqls = append(sqls, va)
			case isFile:
				files = append(files, va)
			}
			break
		}
	}
	for _, f := range files {
		if f.val != "-" {
			esc("runs SQL from a file the check cannot read (" + f.val + ")")
			return
		}
		sqls = nil // -f - reads stdin, below
	}
	for _, s := range sqls {
		if !s.lit {
			esc("with SQL that is not a literal")
			return
		}
		if r := c.judgeSQL(base, s.val); r != "" {
			return
		}
	}
	if len(sqls) > 0 || info {
		return
	}
	c.dbStdin(base, esc)
}

// dbStdin judges the SQL a client reads from stdin: a literal here-string
// or here-document is read; a file, a pipe or a here-document with
// expansions is not, and escalates.
func (c *checker) dbStdin(base string, esc func(string)) {
	for _, r := range c.redirs {
		if r.N != nil && r.N.Value != "0" {
			continue
		}
		var w *syntax.Word
		switch r.Op {
		case syntax.Hdoc, syntax.DashHdoc:
			w = r.Hdoc
		case syntax.WordHdoc:
			w = r.Word
		case syntax.RdrIn:
			esc("runs SQL from a file the check cannot read (< " + wordValue(r.Word).val + ")")
			return
		default:
			continue
		}
		v := wordValue(w)
		if !v.lit {
			esc("with SQL that is not a literal")
			return
		}
		c.judgeSQL(base, v.val)
		return
	}
	if c.piped {
		esc("runs SQL from a pipe the check cannot read")
	}
}

// redis escalates FLUSHALL, FLUSHDB and SHUTDOWN, in any case.
func (c *checker) redis(base string, rest []arg) {
	_, ops, _ := parseOpts(rest, set("-h", "-p", "-s", "-a", "-u", "-n", "-r", "-i", "-d", "-D", "--user",
		"--pass", "--cacert", "--cert", "--key", "--sni"), false)
	for _, a := range ops {
		if !a.lit {
			c.escalate(because(classDatabase, base+" with an argument that is not a literal"))
			return
		}
	}
	if len(ops) == 0 {
		c.dbStdin(base, func(shape string) { c.escalate(because(classDatabase, base+" "+shape)) })
		return
	}
	switch v := strings.ToLower(ops[0].val); v {
	case "flushall", "flushdb", "shutdown":
		c.escalate(because(classDatabase, base+" "+strings.ToUpper(v)))
	}
}

// judgeSQL escalates SQL (with the client's meta-commands) that destroys
// data or runs a command, and returns the reason ("" if it passes). For
// redis-cli input, lines are judged as redis commands.
func (c *checker) judgeSQL(client, sql string) string {
	r := sqlReason(client, sql)
	c.escalate(r)
	return r
}

func sqlReason(client, sql string) string {
	lower := strings.ToLower(sql)
	run := func(shape string) string { return because(classDBCommand, client+" "+shape) }
	destroy := func(shape string) string { return because(classDatabase, client+" "+shape) }
	if client == "redis-cli" || client == "valkey-cli" {
		for _, line := range strings.Split(lower, "\n") {
			switch f := strings.Fields(line); {
			case len(f) > 0 && (f[0] == "flushall" || f[0] == "flushdb" || f[0] == "shutdown"):
				return destroy(strings.ToUpper(f[0]))
			}
		}
		return ""
	}
	// Meta-commands: psql \! and \o|/\g| pipes, mysql \! and system, sqlite
	// .shell/.system run commands; \i, source, .read read a file.
	for _, line := range strings.Split(lower, "\n") {
		t := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(t, ".shell"), strings.HasPrefix(t, ".system"):
			return run(t)
		case strings.HasPrefix(t, ".read"), strings.HasPrefix(t, ".restore"),
			strings.HasPrefix(t, ".open") && strings.Contains(t, "--new"):
			return destroy("runs SQL from a file the check cannot read (" + t + ")")
		case strings.HasPrefix(t, "system ") || t == "system":
			return run("system")
		case strings.HasPrefix(t, "source "):
			return destroy("runs SQL from a file the check cannot read (" + t + ")")
		}
	}
	if i := strings.Index(lower, `\`); i >= 0 {
		for _, m := range []string{`\!`, `\o |`, `\o|`, `\g |`, `\g|`, `\gexec`, `\i `, `\ir `, `\include`, `\.`,
			`\copy`} {
			if strings.Contains(lower, m) && !(m == `\copy` && !strings.Contains(lower, "program")) {
				if m == `\i ` || m == `\ir ` || m == `\include` || m == `\.` || m == `\gexec` {
					return destroy("runs SQL the check cannot read (" + strings.TrimSpace(m) + ")")
				}
				return run(strings.TrimSpace(m))
			}
		}
	}
	toks := sqlTokens(lower)
	start := 0
	for i := 0; i <= len(toks); i++ {
		if i < len(toks) && toks[i] != ";" {
			continue
		}
		if r := sqlStatement(toks[start:i]); r != "" {
			if r == "PROGRAM" {
				return run("COPY … PROGRAM")
			}
			return destroy(r)
		}
		start = i + 1
	}
	return ""
}

// sqlTokens splits lower-cased SQL into words and the punctuation that
// matters ( ) , = ;, without comments and single-quoted strings (a string
// saying 'drop table' is data). Dollar-quoted bodies (DO $$ … $$) stay:
// their statements run.
func sqlTokens(s string) []string {
	var toks []string
	isWord := func(b byte) bool {
		return b == '_' || b == '$' || b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 0x80
	}
	for i := 0; i < len(s); {
		ch := s[i]
		switch {
		case ch == '-' && i+1 < len(s) && s[i+1] == '-', ch == '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case ch == '/' && i+1 < len(s) && s[i+1] == '*':
			end := strings.Index(s[i+2:], "*/")
			if end < 0 {
				return toks
			}
			i += end + 4
		case ch == '\'':
			i++
			for i < len(s) {
				if s[i] == '\\' {
					i += 2
					continue
				}
				if s[i] == '\'' {
					if i+1 < len(s) && s[i+1] == '\'' {
						i += 2
						continue
					}
					break
				}
				i++
			}
			i++
			toks = append(toks, "'")
		case strings.IndexByte("(),=;", ch) >= 0:
			toks = append(toks, string(ch))
			i++
		case isWord(ch):
			j := i
			for j < len(s) && isWord(s[j]) {
				j++
			}
			toks = append(toks, strings.Trim(s[i:j], "$"))
			i = j
		default:
			i++
		}
	}
	return toks
}

// notDML are the words before DELETE/UPDATE that make it something else: a
// foreign-key action (ON DELETE), a trigger event (AFTER DELETE OR UPDATE), a
// privilege (GRANT DELETE), a row lock (FOR UPDATE), an upsert (DO UPDATE,
// ON DUPLICATE KEY UPDATE).
var notDML = set("on", ",", "grant", "revoke", "before", "after", "instead", "or", "of", "for", "do", "key", "no")

// sqlStatement returns the destructive shape of one statement, or "".
func sqlStatement(toks []string) string {
	hasCopy := false
	for i, w := range toks {
		prev := ""
		if i > 0 {
			prev = toks[i-1]
		}
		switch w {
		case "drop":
			return "DROP"
		case "truncate":
			return "TRUNCATE"
		case "copy":
			hasCopy = true
		case "program":
			if hasCopy {
				return "PROGRAM"
			}
		case "delete", "update":
			if notDML[prev] {
				continue
			}
			if !hasWhere(toks[i+1:]) {
				return strings.ToUpper(w) + " without WHERE"
			}
		}
	}
	return ""
}

// hasWhere reports a WHERE at the statement's own level whose condition is
// not always true (WHERE 1=1, WHERE true).
func hasWhere(toks []string) bool {
	depth := 0
	for i, w := range toks {
		switch w {
		case "(":
			depth++
		case ")":
			depth--
		case "where":
			if depth != 0 {
				continue
			}
			cond := toks[i+1:]
			switch {
			case len(cond) == 1 && (cond[0] == "true" || isDigits(cond[0]) && cond[0] != "0"),
				len(cond) == 3 && cond[1] == "=" && cond[0] == cond[2]:
				return false
			}
			return true
		}
	}
	return false
}

// dbInside judges a database client run inside a container (docker exec db
// psql -c …): its data is the project's.
func (c *checker) dbInside(cmd []arg, depth int) {
	if len(cmd) == 0 || !cmd[0].lit {
		return
	}
	if dbClients[baseName(cmd[0].val)] || shells[baseName(cmd[0].val)] && len(cmd) > 2 && cmd[1].val == "-c" {
		inner := &checker{redirs: c.redirs, piped: c.piped}
		inner.simple(cmd, depth)
		if strings.HasPrefix(inner.reason, classDatabase) || strings.HasPrefix(inner.reason, classDBCommand) {
			c.escalate(inner.reason)
		}
	}
}
