package shell

import (
	"regexp"
	"strings"
)

// Interpreter one-liners (issue 34, item 7). An interpreter given a script
// file or a module runs a program this check never sees (the sandbox bounds
// it); an interpreter given its code inline (-c, -e, -r, awk's program) is
// judged by that code. The rule, per language:
//
//   - code that is not a literal shell word escalates;
//   - code read from stdin (a pipe, a here-document, `-`, interactive mode)
//     escalates, as for shells;
//   - inline code passes only when its whole text — strings and comments
//     included, words compared lower-cased — holds no word of the
//     language's list below (running a program, deleting, renaming,
//     writing or truncating files, killing, loading modules outside a small
//     read-only set, turning strings into code or names into calls) and none
//     of the language's dynamic shapes (backticks, computed member access,
//     variable functions, s///e, …). Reading files and printing pass.
//
// This is a deny list over an open language: it errs toward escalation
// (`print("remove")` escalates) and interpreters it does not know escalate
// any inline code.

type lang int

const (
	langPython lang = iota + 1
	langNode
	langRuby
	langPerl
	langPHP
	langLua
	langAwk
	langOther // knows no rules: inline code or stdin escalates
)

// interpreterLang maps a command name to its language; version suffixes
// (python3.12, lua5.4, perl5.36) are stripped first.
func interpreterLang(base string) (lang, bool) {
	name := strings.TrimRight(base, "0123456789.")
	switch name {
	case "python", "pypy", "python-dbg":
		return langPython, true
	case "node", "nodejs", "bun":
		return langNode, true
	case "ruby", "jruby", "truffleruby":
		return langRuby, true
	case "perl":
		return langPerl, true
	case "php", "php-cli":
		return langPHP, true
	case "lua", "luajit":
		return langLua, true
	case "awk", "gawk", "mawk", "nawk", "original-awk", "busybox-awk":
		return langAwk, true
	case "tclsh", "wish", "expect", "rscript", "Rscript", "R", "julia", "pwsh", "powershell",
		"osascript", "guile", "racket", "sbcl", "clisp", "irb", "jshell", "csi", "gst", "ghci",
		"elixir", "erl", "escript", "scala", "kotlin", "groovy", "swift", "dart", "crystal", "nim",
		"raku", "perl6", "rakudo", "tcc", "qjs", "d8", "jsc", "rhino", "jjs":
		return langOther, true
	}
	return 0, false
}

// interpSpec says what each short and long option of an interpreter does.
type interpSpec struct {
	short map[byte]role
	long  map[string]role
	// codeEnds: the first code option or operand ends the options (python).
	codeEnds bool
	// nextOnly: an option's value is always the next word; -pe is -p -e (node).
	nextOnly bool
}

type role byte

const (
	roleFlag     role = iota // no value
	roleCode                 // value is inline code (rest of the cluster or the next word)
	roleScript               // value is a script file or module: a program this check does not read
	roleLoad                 // value is a library loaded before the code runs
	roleArg                  // value of no interest (rest of the cluster or the next word)
	roleAttached             // optional value, attached only: the rest of the cluster (perl -i.bak, -F:)
	roleDigits               // optional attached digits, then more letters (perl -l, -0777)
	roleInPlace              // edits its file operands in place (optional attached suffix)
	roleInclude              // gawk -i FILE: "inplace" edits in place, other files are scripts
	roleInfo                 // prints and exits (--version)
	roleStdin                // interactive or code from stdin
	roleEscalate             // loads native code or a debugger: escalate
)

var interpSpecs = map[lang]interpSpec{
	langPython: {
		short: map[byte]role{'c': roleCode, 'm': roleScript, 'W': roleArg, 'X': roleArg,
			'V': roleInfo, 'h': roleInfo, 'i': roleStdin},
		long:     map[string]role{"--version": roleInfo, "--help": roleInfo, "--check-hash-based-pycs": roleArg},
		codeEnds: true,
	},
	langNode: {
		short: map[byte]role{'e': roleCode, 'p': roleCode, 'r': roleLoad, 'v': roleInfo, 'h': roleInfo,
			'i': roleStdin, 'c': roleScript, 'C': roleArg},
		long: map[string]role{"--eval": roleCode, "--print": roleCode, "--require": roleLoad, "--import": roleLoad,
			"--loader": roleLoad, "--experimental-loader": roleLoad, "--version": roleInfo, "--help": roleInfo,
			"--interactive": roleStdin, "--check": roleScript, "--conditions": roleArg, "--title": roleArg,
			"--input-type": roleArg, "--env-file": roleArg},
		nextOnly: true,
	},
	langRuby: {
		short: map[byte]role{'e': roleCode, 'r': roleLoad, 'I': roleArg, 'C': roleArg, 'E': roleArg,
			'F': roleAttached, 'x': roleAttached, 'l': roleFlag, 'i': roleInPlace, 'v': roleInfo, 'h': roleInfo,
			'W': roleDigits, '0': roleDigits, 'K': roleDigits, 'T': roleDigits},
		long: map[string]role{"--version": roleInfo, "--help": roleInfo, "--require": roleLoad,
			"--encoding": roleArg, "--external-encoding": roleArg, "--internal-encoding": roleArg},
	},
	langPerl: {
		short: map[byte]role{'e': roleCode, 'E': roleCode, 'M': roleLoad, 'm': roleLoad, 'I': roleArg,
			'i': roleInPlace, 'l': roleDigits, '0': roleDigits, 'C': roleAttached, 'x': roleAttached,
			'F': roleAttached, 'D': roleAttached, 'V': roleInfo, 'v': roleInfo, 'h': roleInfo,
			'd': roleEscalate},
		long: map[string]role{"--version": roleInfo, "--help": roleInfo},
	},
	langPHP: {
		short: map[byte]role{'r': roleCode, 'B': roleCode, 'R': roleCode, 'E': roleCode, 'f': roleScript,
			'F': roleScript, 'd': roleArg, 'c': roleArg, 't': roleArg, 'S': roleArg, 'z': roleEscalate,
			'a': roleStdin, 'v': roleInfo, 'i': roleInfo, 'm': roleInfo, 'h': roleInfo, 'l': roleInfo},
		long: map[string]role{"--version": roleInfo, "--help": roleInfo, "--info": roleInfo, "--modules": roleInfo,
			"--run": roleCode, "--process-begin": roleCode, "--process-code": roleCode, "--process-end": roleCode,
			"--file": roleScript, "--process-file": roleScript, "--define": roleArg, "--php-ini": roleArg,
			"--zend-extension": roleEscalate, "--interactive": roleStdin},
	},
	langLua: {
		short: map[byte]role{'e': roleCode, 'l': roleLoad, 'i': roleStdin, 'v': roleInfo, 'b': roleEscalate,
			'j': roleEscalate, 'O': roleAttached},
		long: map[string]role{},
	},
	langAwk: {
		short: map[byte]role{'e': roleCode, 'f': roleScript, 'E': roleScript, 'F': roleArg, 'v': roleArg,
			'i': roleInclude, 'l': roleLoad, 'W': roleArg, 'd': roleAttached, 'D': roleAttached,
			'o': roleAttached, 'p': roleAttached, 'L': roleAttached, 'V': roleInfo, 'h': roleInfo},
		long: map[string]role{"--source": roleCode, "--file": roleScript, "--exec": roleScript,
			"--include": roleInclude, "--load": roleLoad, "--field-separator": roleArg, "--assign": roleArg,
			"--version": roleInfo, "--help": roleInfo},
	},
}

// interpCall is what the options of one interpreter invocation say.
type interpCall struct {
	code     []arg
	loads    []arg
	script   bool // a script file or module operand
	info     bool
	stdin    bool
	escalate string
	inPlace  bool
	operands []arg // after the code or script: files (awk, perl -n) or arguments
	file     arg   // the script operand, when script is set by one
	notLit   bool  // an option word was not a literal: it could be -c
}

func parseInterp(l lang, rest []arg) interpCall {
	var ic interpCall
	spec := interpSpecs[l]
	take := func(i *int, j int, v string) (arg, bool) {
		if j+1 < len(v) && !spec.nextOnly {
			return arg{val: v[j+1:], lit: true}, true
		}
		if *i+1 < len(rest) {
			*i++
			return rest[*i], true
		}
		return arg{}, false
	}
	apply := func(r role, val arg, hasVal bool) {
		switch r {
		case roleCode:
			if hasVal {
				ic.code = append(ic.code, val)
			} else {
				ic.stdin = true
			}
		case roleScript:
			ic.script = true
		case roleLoad:
			ic.loads = append(ic.loads, val)
		case roleInPlace:
			ic.inPlace = true
		case roleInclude:
			if val.val == "inplace" {
				ic.inPlace = true
			} else if !val.lit {
				ic.notLit = true
			}
		case roleInfo:
			ic.info = true
		case roleStdin:
			ic.stdin = true
		case roleEscalate:
			ic.escalate = "interpreter option that loads native code or a debugger"
		}
	}
	i := 0
	for ; i < len(rest); i++ {
		a := rest[i]
		if !a.lit {
			ic.notLit = true
			return ic
		}
		v := a.val
		if v == "-" {
			ic.stdin = true
			i++
			break
		}
		if v == "--" {
			i++
			break
		}
		if !strings.HasPrefix(v, "-") || len(v) == 1 {
			break
		}
		if strings.HasPrefix(v, "--") {
			name, val, hasVal := strings.Cut(v, "=")
			r := spec.long[name]
			if !hasVal && (r == roleCode || r == roleScript || r == roleLoad || r == roleArg || r == roleInclude) && i+1 < len(rest) {
				i++
				val, hasVal = rest[i].val, true
				if !rest[i].lit {
					ic.notLit = true
					return ic
				}
			}
			apply(r, arg{val: val, lit: true}, hasVal)
		} else {
		cluster:
			for j := 1; j < len(v); j++ {
				r := spec.short[v[j]]
				switch r {
				case roleCode, roleScript, roleLoad, roleArg, roleInclude:
					val, ok := take(&i, j, v)
					if !val.lit && ok {
						if r == roleCode || r == roleLoad || r == roleInclude {
							ic.notLit = true
							return ic
						}
					}
					apply(r, val, ok)
					break cluster
				case roleAttached, roleInPlace:
					apply(r, arg{}, false)
					break cluster
				case roleDigits:
					// -0777, -l015, -0x1F: digits (hex after x), then more letters.
					digits := "0123456789"
					if j+1 < len(v) && v[j+1] == 'x' {
						j++
						digits = "0123456789abcdefABCDEF"
					}
					for j+1 < len(v) && strings.IndexByte(digits, v[j+1]) >= 0 {
						j++
					}
				default:
					apply(r, arg{}, false)
				}
			}
		}
		if spec.codeEnds && (len(ic.code) > 0 || ic.script) {
			i++
			break
		}
	}
	ops := rest[min(i, len(rest)):]
	if l == langAwk && len(ic.code) == 0 && !ic.script && len(ops) > 0 {
		ic.code = append(ic.code, ops[0]) // the program text
		ops = ops[1:]
	} else if len(ic.code) == 0 && !ic.script && len(ops) > 0 && !(spec.codeEnds && i > 0 && rest[i-1].val == "-") {
		ic.script = !ic.stdin
		if ic.script {
			ic.file = ops[0]
			ops = ops[1:]
		}
	}
	ic.operands = ops
	return ic
}

// interpreter judges one interpreter invocation.
func (c *checker) interpreter(l lang, rest []arg) {
	ic := parseInterp(l, rest)
	switch {
	case ic.notLit:
		c.escalate("interpreter option or code that is not a literal")
		return
	case ic.escalate != "":
		c.escalate(ic.escalate)
		return
	}
	if ic.inPlace {
		for _, o := range ic.operands {
			c.target(o, "in-place edit of a config file")
		}
	}
	for _, m := range ic.loads {
		if !safeModule(l, m.val) {
			c.escalate("interpreter loads a module outside the read-only set")
			return
		}
	}
	if len(ic.code) == 0 {
		if ic.script && ic.file.val != "" {
			c.ran(ic.file, "an interpreter runs "+ic.file.val)
		}
		if ic.info || ic.script {
			return
		}
		c.escalate("interpreter reads code from stdin, a pipe or a here-document")
		return
	}
	if l == langOther {
		c.escalate("inline code for an interpreter the check cannot read")
		return
	}
	for _, code := range ic.code {
		if !code.lit {
			c.escalate("interpreter code is not a literal")
			return
		}
		if r := judgeCode(l, code.val); r != "" {
			c.escalate(r)
			return
		}
		if l == langAwk {
			c.awkRedirects(code.val)
		}
	}
}

// Words that run a program, delete, rename, write or truncate files, kill,
// load code or turn strings into code or calls, per language (lower-case).
var (
	pythonWords = set("eval", "exec", "execfile", "compile", "getattr", "setattr", "delattr", "globals",
		"locals", "vars", "breakpoint", "help", "modules", "builtins", "system", "popen", "fork", "forkpty",
		"kill", "killpg", "remove", "removedirs", "unlink", "rmdir", "rmtree", "rename", "renames",
		"truncate", "chmod", "chown", "lchown", "symlink", "link", "mkfifo", "mknod", "write_text",
		"write_bytes", "subprocess", "os", "posix", "nt", "shutil", "pathlib", "ctypes", "cffi", "importlib",
		"pty", "signal", "pickle", "marshal", "shelve", "dill", "code", "codeop", "runpy", "pdb", "timeit",
		"cprofile", "profile", "trace", "multiprocessing", "asyncio", "concurrent", "webbrowser",
		"fileinput", "tarfile", "zipfile", "attrgetter", "methodcaller", "types", "urlretrieve", "sqlite3",
		"commands", "execv", "execve", "execvp", "execl", "execlp", "execute", "executescript", "replace")
	jsWords = set("require", "import", "eval", "function", "constructor", "prototype", "globalthis",
		"global", "reflect", "binding", "_linkedbinding", "dlopen", "kill", "mainmodule", "getbuiltinmodule",
		"execve", "module", "child_process", "exec", "execsync", "execfile", "execfilesync", "spawn",
		"spawnsync", "fork", "unlink", "unlinksync", "rm", "rmsync", "rmdir", "rmdirsync", "writefile",
		"writefilesync", "appendfile", "appendfilesync", "rename", "renamesync", "truncate", "truncatesync",
		"copyfile", "copyfilesync", "cp", "cpsync", "chmod", "chmodsync", "chown", "chownsync", "symlink",
		"symlinksync", "link", "linksync", "open", "opensync", "createwritestream", "deno", "bun", "worker",
		"with", "entries", "values", "getownpropertynames", "getownpropertydescriptor",
		"getownpropertydescriptors", "fromentries", "settimeout", "setinterval", "vm", "wasi")
	rubyWords = set("system", "exec", "spawn", "fork", "syscall", "eval", "instance_eval", "class_eval",
		"module_eval", "instance_exec", "class_exec", "module_exec", "send", "public_send", "method",
		"methods", "instance_method", "public_method", "singleton_method", "define_method", "const_get",
		"binding", "kernel", "process", "io", "popen", "popen3", "open3", "pty", "open", "sysopen", "load",
		"require", "require_relative", "autoload", "fileutils", "delete", "unlink", "rename", "truncate",
		"write", "binwrite", "chmod", "chown", "symlink", "link", "rmdir", "rm", "rm_r", "rm_rf", "rm_f",
		"remove", "remove_dir", "remove_entry", "remove_file", "mv", "objectspace", "fiddle", "dl",
		"to_proc", "to_sym", "intern", "trap", "kill", "exit!", "pathname", "tempfile", "erb")
	perlWords = set("system", "exec", "qx", "readpipe", "fork", "eval", "do", "require", "unlink", "rmdir",
		"rmtree", "remove_tree", "kill", "open", "sysopen", "pipe", "socket", "syscall", "truncate", "rename",
		"link", "symlink", "chmod", "chown", "utime", "dump", "core", "can", "universal", "dbmopen", "move")
	phpWords = set("system", "exec", "shell_exec", "passthru", "popen", "proc_open", "pcntl_exec",
		"pcntl_fork", "eval", "assert", "create_function", "call_user_func", "call_user_func_array",
		"unlink", "rmdir", "rename", "file_put_contents", "fopen", "copy", "ftruncate", "chmod", "chown",
		"chgrp", "symlink", "link", "touch", "posix_kill", "mail", "mb_send_mail", "putenv", "ini_set",
		"dl", "include", "include_once", "require", "require_once", "array_map", "array_filter",
		"array_walk", "array_walk_recursive", "array_reduce", "usort", "uasort", "uksort",
		"preg_replace_callback", "preg_replace_callback_array", "register_shutdown_function",
		"register_tick_function", "set_error_handler", "set_exception_handler", "spl_autoload_register",
		"iterator_apply", "forward_static_call", "forward_static_call_array", "ob_start",
		"header_register_callback", "new", "closure", "fromcallable", "extract", "parse_str", "move_uploaded_file",
		"tempnam", "tmpfile", "splfileobject", "ffi")
	luaWords = set("os", "io", "load", "loadstring", "loadfile", "dofile", "require", "_g", "_env", "debug",
		"package", "getfenv", "setfenv", "rawget", "rawset", "module", "dump", "ffi", "jit")
	awkWords = set("system", "unlink", "rename", "rmdir", "chdir", "fork", "kill")
)

// Module and library names a one-liner may load: read-only, no file or
// process functions.
var safeModules = map[lang]map[string]bool{
	langPython: set("json", "sys", "math", "cmath", "re", "datetime", "time", "collections", "itertools",
		"functools", "base64", "binascii", "hashlib", "hmac", "secrets", "random", "statistics", "string",
		"textwrap", "csv", "uuid", "decimal", "fractions", "pprint", "platform", "unicodedata", "struct",
		"zlib", "html", "enum", "dataclasses", "typing", "copy", "heapq", "bisect", "array", "calendar",
		"difflib", "ipaddress", "urllib.parse", "keyword", "numbers", "operator.add", "shlex"),
	langNode: set("path", "node:path", "util", "node:util", "url", "node:url", "crypto", "node:crypto",
		"assert", "node:assert", "querystring", "node:querystring", "buffer", "node:buffer",
		"string_decoder", "node:string_decoder", "os", "node:os"),
	langRuby: set("json", "set", "date", "time", "csv", "digest", "base64", "securerandom", "pp",
		"bigdecimal", "uri", "English", "english", "prime", "matrix", "ostruct"),
	langPerl: set("strict", "warnings", "utf8", "feature", "List::Util", "Scalar::Util", "JSON::PP",
		"Data::Dumper", "Time::Local", "Time::HiRes", "Getopt::Long", "MIME::Base64", "Digest::MD5",
		"Digest::SHA", "Text::Wrap", "integer", "bigint", "bignum", "constant"),
	langLua: {},
	langPHP: {},
	langAwk: {},
}

// safeModule reports whether a -M/-m/-r/-l/require value names a module of
// the read-only set (perl -MList::Util=sum: the name before =).
func safeModule(l lang, m string) bool {
	name, _, _ := strings.Cut(strings.TrimPrefix(m, "-"), "=")
	return safeModules[l][name]
}

var (
	identRE = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*!?`)
	// Python: `import a, b as c` and `from a.b import c`.
	pyImportRE = regexp.MustCompile(`\bimport\s+([A-Za-z0-9_., \t]+)`)
	pyFromRE   = regexp.MustCompile(`\bfrom\s+([A-Za-z0-9_.]+)\s+import\b`)
	pyOpenRE   = regexp.MustCompile(`\bopen\s*\(`)
	// JS: x[…], f()[…], a?.[…] are computed member accesses: a name built
	// from strings reaches any property. Only x[<digits>] passes.
	jsComputedRE    = regexp.MustCompile(`([\w$)\]]\s*|\?\.\s*)\[`)
	jsIndexRE       = regexp.MustCompile(`([\w$)\]]\s*|\?\.\s*)\[\s*\d+\s*\]`)
	jsRequireRE     = regexp.MustCompile(`^require\s*\(\s*(['"])([\w./:-]+)['"]\s*\)`)
	jsRequireWordRE = regexp.MustCompile(`\brequire\b`)
	// PHP: $f(…), ")(", "](", "'…'(" and "}(" call a value, not a name.
	phpVarCallRE = regexp.MustCompile(`(\$\w+|[)\]}'"])\s*\(|\$\$|\$\w+\s*::|new\s+\$`)
	// Perl: symbolic references, code refs and qualified names.
	perlSymRE  = regexp.MustCompile(`&\s*[{$]|\*\s*\{|->\s*[^\s\[{]|\(\?\??\{`)
	perlQualRE = regexp.MustCompile(`[A-Za-z_]\w*(?:::\w+)+`)
	perlUseRE  = regexp.MustCompile(`\b(?:use|no)\s+([A-Za-z_][\w:]*)`)
	rubyPctRE  = regexp.MustCompile(`%[xX]\W`)
	awkPipeRE  = regexp.MustCompile(`(^|[^|])\|([^|]|$)`)
	awkRedirRE = regexp.MustCompile(`>>?\s*"([^"]*)"`)
)

// judgeCode returns why inline code escalates, or "".
func judgeCode(l lang, code string) string {
	for _, r := range code {
		if r > 0x7e || (r < 0x20 && r != '\n' && r != '\t' && r != '\r') {
			// Python folds non-ASCII identifiers (NFKC); JS reads \u escapes: a
			// non-ASCII or control character can spell a name this check misses.
			return "interpreter code with characters the check does not read"
		}
	}
	words := map[lang]map[string]bool{langPython: pythonWords, langNode: jsWords, langRuby: rubyWords,
		langPerl: perlWords, langPHP: phpWords, langLua: luaWords, langAwk: awkWords}[l]
	for _, w := range identRE.FindAllString(code, -1) {
		lw := strings.ToLower(w)
		if words[lw] || words[strings.TrimSuffix(lw, "!")] {
			if l == langNode && lw == "require" {
				continue // judged with its argument below
			}
			return "interpreter code runs a command, deletes or writes files (" + w + ")"
		}
		switch l {
		case langPython, langRuby, langPerl, langNode:
			if strings.HasPrefix(w, "__") && w != "__name__" && w != "__main__" {
				return "interpreter code reaches internals (" + w + ")"
			}
		}
		if l == langPython && (strings.HasPrefix(lw, "spawn") || strings.HasPrefix(lw, "exec")) {
			return "interpreter code runs a command (" + w + ")"
		}
	}
	switch l {
	case langPython:
		return judgePython(code)
	case langNode:
		return judgeJS(code)
	case langRuby:
		if strings.ContainsRune(code, '`') || rubyPctRE.MatchString(code) {
			return "interpreter code runs a command (backticks)"
		}
	case langPerl:
		return judgePerl(code)
	case langPHP:
		if strings.ContainsRune(code, '`') {
			return "interpreter code runs a command (backticks)"
		}
		if phpVarCallRE.MatchString(code) {
			return "interpreter code calls a value, not a name"
		}
	case langAwk:
		if awkPipeRE.MatchString(code) {
			return "awk pipes to or from a command"
		}
		if strings.ContainsRune(code, '@') {
			return "awk indirect call or extension"
		}
	}
	return ""
}

func judgePython(code string) string {
	for _, m := range pyImportRE.FindAllStringSubmatch(code, -1) {
		for _, part := range strings.Split(m[1], ",") {
			f := strings.Fields(part)
			if len(f) == 0 || !pySafe(f[0]) {
				return "interpreter code imports a module outside the read-only set"
			}
		}
	}
	for _, m := range pyFromRE.FindAllStringSubmatch(code, -1) {
		if !pySafe(m[1]) {
			return "interpreter code imports a module outside the read-only set"
		}
	}
	// open(path) reads; a second argument (a mode, a keyword) may write.
	for _, loc := range pyOpenRE.FindAllStringIndex(code, -1) {
		depth := 1
		i := loc[1]
		for ; i < len(code) && depth > 0; i++ {
			switch code[i] {
			case '(', '[', '{':
				depth++
			case ')', ']', '}':
				depth--
			case ',':
				if depth == 1 {
					return "interpreter code opens a file with a mode (it may write)"
				}
			}
		}
		if depth > 0 {
			return "interpreter code the check cannot read"
		}
	}
	return ""
}

func pySafe(mod string) bool {
	if safeModules[langPython][mod] {
		return true
	}
	top, _, dotted := strings.Cut(mod, ".")
	return dotted && safeModules[langPython][top] && top != "urllib"
}

func judgeJS(code string) string {
	if strings.ContainsRune(code, '\\') && strings.Contains(code, `\u`) {
		return "interpreter code with escapes the check does not read"
	}
	if n := len(jsComputedRE.FindAllStringIndex(code, -1)); n > len(jsIndexRE.FindAllStringIndex(code, -1)) {
		return "interpreter code with computed member access"
	}
	for _, loc := range jsRequireWordRE.FindAllStringIndex(code, -1) {
		m := jsRequireRE.FindStringSubmatch(code[loc[0]:])
		if m == nil || !safeModules[langNode][m[2]] {
			return "interpreter code loads a module outside the read-only set"
		}
	}
	return ""
}

func judgePerl(code string) string {
	if strings.ContainsRune(code, '`') {
		return "interpreter code runs a command (backticks)"
	}
	if perlSymRE.MatchString(code) {
		return "interpreter code calls through a symbolic reference"
	}
	for _, q := range perlQualRE.FindAllString(code, -1) {
		ok := false
		for m := range safeModules[langPerl] {
			if q == m || strings.HasPrefix(q, m+"::") {
				ok = true
			}
		}
		if !ok {
			return "interpreter code calls a qualified name outside the read-only set"
		}
	}
	for _, m := range perlUseRE.FindAllStringSubmatch(code, -1) {
		if !safeModules[langPerl][m[1]] {
			return "interpreter code loads a module outside the read-only set"
		}
	}
	if perlSubstE(code) {
		return "perl s///e runs its replacement as code"
	}
	return ""
}

// perlSubstE reports an s/// whose flags include e (the replacement is run
// as code), or an s operator it cannot read to the end.
func perlSubstE(code string) bool {
	isWord := func(b byte) bool {
		return b == '_' || b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
	}
	closer := map[byte]byte{'{': '}', '(': ')', '[': ']', '<': '>'}
	for i := 0; i < len(code); i++ {
		if code[i] != 's' || (i > 0 && (isWord(code[i-1]) || strings.IndexByte("$@%&*", code[i-1]) >= 0)) {
			continue
		}
		j := i + 1
		for j < len(code) && (code[j] == ' ' || code[j] == '\t') {
			j++
		}
		if j >= len(code) || isWord(code[j]) || strings.IndexByte(" \t\n;,)=", code[j]) >= 0 {
			continue
		}
		d := code[j]
		// skip returns the index after the part closed by end (or -1).
		skip := func(k int, open, end byte) int {
			depth := 1
			for ; k < len(code); k++ {
				switch {
				case code[k] == '\\':
					k++
				case code[k] == end && open != end:
					depth--
					if depth == 0 {
						return k + 1
					}
				case code[k] == end:
					return k + 1
				case code[k] == open && open != end:
					depth++
				}
			}
			return -1
		}
		var k int
		if e, ok := closer[d]; ok {
			k = skip(j+1, d, e)
			for k >= 0 && k < len(code) && (code[k] == ' ' || code[k] == '\t' || code[k] == '\n') {
				k++
			}
			if k < 0 || k >= len(code) {
				return true
			}
			d2 := code[k]
			e2, ok2 := closer[d2]
			if !ok2 {
				e2 = d2
			}
			k = skip(k+1, d2, e2)
		} else {
			k = skip(j+1, d, d)
			if k >= 0 {
				k = skip(k, d, d)
			}
		}
		if k < 0 {
			return true
		}
		for ; k < len(code) && isWord(code[k]); k++ {
			if code[k] == 'e' {
				return true
			}
		}
	}
	return false
}

// awkRedirects judges print > "file" targets of an awk program.
func (c *checker) awkRedirects(code string) {
	for _, m := range awkRedirRE.FindAllStringSubmatch(code, -1) {
		c.target(arg{val: m[1], lit: true}, "awk writes a config file")
	}
}
