package workspace

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"strings"

	"github.com/aetherium-engine/aetherium/tools"
)

// ListArgs are list_files' arguments.
type ListArgs struct {
	Path       string `json:"path,omitempty" jsonschema:"description=Directory to list, relative to the workspace (default: the workspace)"`
	MaxDepth   int    `json:"max_depth,omitempty" jsonschema:"description=How many directory levels to descend (default 4),minimum=1,maximum=20"`
	ShowHidden bool   `json:"show_hidden,omitempty" jsonschema:"description=Also list dot files and dot directories"`
}

// SearchArgs are search_files' arguments.
type SearchArgs struct {
	Pattern    string `json:"pattern,omitempty" jsonschema:"description=File name glob: *.go matches names anywhere; a pattern with / matches the path (** spans directories)"`
	Query      string `json:"query,omitempty" jsonschema:"description=Text to find in lines (or a regular expression with regex true)"`
	Regex      bool   `json:"regex,omitempty" jsonschema:"description=Treat query as a regular expression (RE2 syntax)"`
	IgnoreCase bool   `json:"ignore_case,omitempty" jsonschema:"description=Match query case-insensitively"`
	Path       string `json:"path,omitempty" jsonschema:"description=Directory to search in, relative to the workspace (default: the workspace)"`
	MaxResults int    `json:"max_results,omitempty" jsonschema:"description=Stop after this many results (default 100),minimum=1"`
}

// Search bounds beyond the configured ones: a search is a locate step, not a scan
// of an arbitrarily large tree.
const (
	maxScannedFiles = 20000
	maxScannedBytes = 64 << 20
	maxLineShown    = 300
)

func (s *server) list(ctx context.Context, call tools.Call, a ListArgs) (tools.Result, error) {
	base := "."
	if a.Path != "" {
		var err error
		if base, err = Clean(a.Path); err != nil {
			return tools.Result{}, fmt.Errorf("list_files: %w", err)
		}
	}
	depth := a.MaxDepth
	if depth <= 0 {
		depth = 4
	}
	depth = min(depth, 20)
	d, _, err := s.open(call)
	if err != nil {
		return tools.Result{}, err
	}
	defer d.Close()
	fi, err := d.root.Stat(base)
	if err != nil {
		return tools.Result{}, fmt.Errorf("list_files: %w", pathErr(base, err))
	}
	if !fi.IsDir() {
		return tools.Result{}, fmt.Errorf("list_files: %s is not a directory", base)
	}
	fsys := d.root.FS()
	var b strings.Builder
	if base == "." {
		b.WriteString("./\n")
	} else {
		b.WriteString(base + "/\n")
	}
	shown, files, dirs := 0, 0, 0
	capped := false
	var walk func(dir string, level int)
	walk = func(dir string, level int) {
		entries, err := fs.ReadDir(fsys, dir)
		if err != nil {
			fmt.Fprintf(&b, "%s[cannot read: %v]\n", strings.Repeat("  ", level), err)
			return
		}
		for _, e := range entries {
			name := e.Name()
			if dir == "." && name == InternalDir {
				continue
			}
			if strings.HasPrefix(name, ".") && !a.ShowHidden {
				continue
			}
			if shown >= s.cfg.MaxListEntries || b.Len() >= s.cfg.MaxOutputBytes {
				capped = true
				return
			}
			shown++
			indent := strings.Repeat("  ", level)
			rel := path.Join(dir, name)
			switch t := e.Type(); {
			case t&fs.ModeSymlink != 0:
				target, _ := fs.ReadLink(fsys, rel)
				fmt.Fprintf(&b, "%s%s -> %s\n", indent, name, target)
			case e.IsDir():
				dirs++
				if level >= depth {
					fmt.Fprintf(&b, "%s%s/ …\n", indent, name)
					continue
				}
				fmt.Fprintf(&b, "%s%s/\n", indent, name)
				walk(rel, level+1)
				if capped {
					return
				}
			default:
				files++
				if info, err := e.Info(); err == nil && info.Mode().IsRegular() {
					fmt.Fprintf(&b, "%s%s  (%s)\n", indent, name, human(info.Size()))
				} else {
					fmt.Fprintf(&b, "%s%s  (%s)\n", indent, name, "special")
				}
			}
		}
	}
	walk(base, 1)
	fmt.Fprintf(&b, "[%d files, %d directories shown", files, dirs)
	if capped {
		fmt.Fprintf(&b, "; listing capped at %d entries: list a subdirectory with path, or lower max_depth", shown)
	}
	b.WriteString("]")
	return tools.Text("%s", b.String()), nil
}

func (s *server) search(ctx context.Context, call tools.Call, a SearchArgs) (tools.Result, error) {
	if a.Pattern == "" && a.Query == "" {
		return tools.Result{}, errors.New("search_files: give pattern (file names), query (lines), or both")
	}
	if a.Pattern != "" {
		if _, err := path.Match(a.Pattern, ""); err != nil {
			return tools.Result{}, fmt.Errorf("search_files: pattern %q: %w", a.Pattern, err)
		}
	}
	match, err := lineMatcher(a)
	if err != nil {
		return tools.Result{}, fmt.Errorf("search_files: %w", err)
	}
	base := "."
	if a.Path != "" {
		if base, err = Clean(a.Path); err != nil {
			return tools.Result{}, fmt.Errorf("search_files: %w", err)
		}
	}
	limit := a.MaxResults
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, s.cfg.MaxSearchResults)
	d, _, err := s.open(call)
	if err != nil {
		return tools.Result{}, err
	}
	defer d.Close()
	if fi, err := d.root.Stat(base); err != nil {
		return tools.Result{}, fmt.Errorf("search_files: %w", pathErr(base, err))
	} else if !fi.IsDir() {
		return tools.Result{}, fmt.Errorf("search_files: %s is not a directory", base)
	}
	// Through confine: a file swapped for a FIFO after the walk saw it is
	// refused instead of blocking the read, no symlink leads out, and no file
	// over MaxFileBytes is read.
	fsys := d.conf.FS()
	var out strings.Builder
	results, filesHit, scanned := 0, 0, 0
	var scannedBytes int64
	stop := ""
	err = fs.WalkDir(fsys, base, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil // unreadable entries are skipped, not fatal
		}
		if e.IsDir() {
			// Dot directories (.git, .frame, the engine's .aetherium) are never
			// searched below the starting point.
			if p != base && strings.HasPrefix(e.Name(), ".") {
				return fs.SkipDir
			}
			return nil
		}
		if !e.Type().IsRegular() {
			return nil
		}
		rel := p
		if a.Pattern != "" && !globMatch(a.Pattern, rel) {
			return nil
		}
		if match == nil {
			results++
			fmt.Fprintf(&out, "%s\n", rel)
		} else {
			if scanned >= maxScannedFiles || scannedBytes >= maxScannedBytes {
				stop = fmt.Sprintf("stopped after scanning %d files (%s): narrow the pattern or path", scanned, human(scannedBytes))
				return fs.SkipAll
			}
			info, err := e.Info()
			if err != nil || info.Size() > s.cfg.MaxFileBytes {
				return nil
			}
			data, err := fs.ReadFile(fsys, p)
			if err != nil || bytes.IndexByte(data[:min(len(data), 8000)], 0) >= 0 {
				return nil // unreadable or binary
			}
			scanned++
			scannedBytes += int64(len(data))
			hit := false
			for ln, line := range strings.Split(string(data), "\n") {
				line = strings.TrimRight(line, "\r")
				if !match(line) {
					continue
				}
				hit = true
				results++
				fmt.Fprintf(&out, "%s:%d: %s\n", rel, ln+1, clip(line, maxLineShown))
				if results >= limit || out.Len() >= s.cfg.MaxOutputBytes {
					break
				}
			}
			if hit {
				filesHit++
			}
		}
		if results >= limit || out.Len() >= s.cfg.MaxOutputBytes {
			stop = fmt.Sprintf("results capped at %d (%s): narrow the pattern, query or path, or raise max_results", results, human(int64(out.Len())))
			return fs.SkipAll
		}
		return nil
	})
	if err != nil {
		return tools.Result{}, fmt.Errorf("search_files: %w", err)
	}
	switch {
	case results == 0 && match == nil:
		out.WriteString("no file names match")
	case results == 0:
		out.WriteString("no lines match")
	case match == nil:
		fmt.Fprintf(&out, "[%d files]", results)
	default:
		fmt.Fprintf(&out, "[%d matching lines in %d files]", results, filesHit)
	}
	if stop != "" {
		out.WriteString("\n[" + stop + "]")
	}
	return tools.Text("%s", out.String()), nil
}

// lineMatcher compiles query; nil when there is no query.
func lineMatcher(a SearchArgs) (func(string) bool, error) {
	if a.Query == "" {
		return nil, nil
	}
	if a.Regex {
		expr := a.Query
		if a.IgnoreCase {
			expr = "(?i)" + expr
		}
		re, err := regexp.Compile(expr)
		if err != nil {
			return nil, fmt.Errorf("query is not a valid regular expression: %w", err)
		}
		return re.MatchString, nil
	}
	if a.IgnoreCase {
		q := strings.ToLower(a.Query)
		return func(s string) bool { return strings.Contains(strings.ToLower(s), q) }, nil
	}
	return func(s string) bool { return strings.Contains(s, a.Query) }, nil
}

// globMatch matches a slash path against pattern: a pattern without "/" matches
// the base name; otherwise segment by segment, "**" spanning any number of them.
func globMatch(pattern, p string) bool {
	if !strings.Contains(pattern, "/") {
		ok, _ := path.Match(pattern, path.Base(p))
		return ok
	}
	return matchSegments(strings.Split(strings.TrimPrefix(pattern, "./"), "/"), strings.Split(p, "/"))
}

func matchSegments(pat, segs []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for i := 0; i <= len(segs); i++ {
				if matchSegments(pat[1:], segs[i:]) {
					return true
				}
			}
			return false
		}
		if len(segs) == 0 {
			return false
		}
		if ok, _ := path.Match(pat[0], segs[0]); !ok {
			return false
		}
		pat, segs = pat[1:], segs[1:]
	}
	return len(segs) == 0
}

func human(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
