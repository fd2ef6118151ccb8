package knowledge

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/aetherium-engine/aetherium/confine"
)

// FolderName is the project workspace's knowledge folder: write_knowledge writes
// there and IndexFolder indexes it.
const FolderName = "knowledge"

// frontMatter is the YAML header of a knowledge document.
type frontMatter struct {
	Title string   `yaml:"title"`
	Tags  []string `yaml:"tags"`
}

// ParseMarkdown reads a knowledge document: an optional YAML front matter
// (title, tags) and the Markdown body. Without a title the first "# " heading
// is the title, else the file name. The Document's Source, Path and Language are
// left to the caller.
func ParseMarkdown(name string, raw []byte) Document {
	text := strings.ReplaceAll(string(bytes.ToValidUTF8(raw, []byte("\uFFFD"))), "\r\n", "\n")
	var fm frontMatter
	if rest, ok := strings.CutPrefix(text, "---\n"); ok {
		if head, body, ok := strings.Cut(rest, "\n---\n"); ok {
			if yaml.Unmarshal([]byte(head), &fm) == nil {
				text = body
			} else {
				fm = frontMatter{}
			}
		}
	}
	title := strings.TrimSpace(fm.Title)
	if title == "" {
		for _, line := range strings.Split(text, "\n") {
			if h, ok := strings.CutPrefix(strings.TrimSpace(line), "# "); ok && strings.TrimSpace(h) != "" {
				title = strings.TrimSpace(h)
				break
			}
		}
	}
	if title == "" {
		title = strings.TrimSuffix(path.Base(name), path.Ext(name))
	}
	return Document{Path: name, Title: title, Tags: cleanTags(fm.Tags), Content: text}
}

func cleanTags(tags []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, t := range tags {
		t = clip(strings.TrimSpace(t), 64)
		if t == "" || seen[t] || len(out) == 32 {
			continue
		}
		seen[t] = true
		out = append(out, t)
	}
	return out
}

// RenderMarkdown is the file write_knowledge saves: front matter and content.
// ParseMarkdown reads it back as the same document.
func RenderMarkdown(title string, tags []string, content string) []byte {
	fm, _ := yaml.Marshal(frontMatter{Title: strings.TrimSpace(title), Tags: cleanTags(tags)})
	var b bytes.Buffer
	b.WriteString("---\n")
	b.Write(fm)
	b.WriteString("---\n")
	b.WriteString(strings.ReplaceAll(content, "\r\n", "\n"))
	if !strings.HasSuffix(content, "\n") {
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// File is one Markdown file found by Walk.
type File struct {
	// Rel is the slash path relative to the walked directory.
	Rel  string
	Data []byte
}

// Walk returns the Markdown files (.md, .markdown) under dir, sorted. Dot
// entries are skipped (never descended into); a symlink is read only when it
// resolves to a regular file inside dir whose path there has no dot component
// (so a link to .frame/… or out of dir is skipped) and directory symlinks are
// never followed. Files over MaxDocumentBytes are skipped, and so is anything
// but a regular file (a FIFO, socket or device is refused without a blocking
// open). A missing dir is empty. Reads are confined to dir (package confine).
func Walk(dir string) (files []File, skipped []string, err error) {
	root, err := confine.OpenRoot(dir, confine.Config{MaxBytes: MaxDocumentBytes})
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("knowledge: %s: %w", dir, err)
	}
	defer root.Close()
	err = root.WalkDir(".", func(rel string, d fs.DirEntry, err error) error {
		if err != nil {
			if rel == "." {
				return err
			}
			skipped = append(skipped, rel+": "+err.Error())
			return nil
		}
		if rel == "." {
			return nil
		}
		if strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() || !isMarkdown(d.Name()) {
			return nil
		}
		target := rel
		if d.Type()&fs.ModeSymlink != 0 {
			r, err := root.Resolve(rel)
			if err != nil {
				skipped = append(skipped, rel+": "+err.Error())
				return nil
			}
			if hidden(r) {
				skipped = append(skipped, rel+": link leads into a dot directory")
				return nil
			}
			target = r
		} else if !d.Type().IsRegular() {
			skipped = append(skipped, rel+": is a "+confine.Kind(d.Type())+", not a regular file")
			return nil
		}
		data, err := root.ReadFile(target)
		if err != nil {
			skipped = append(skipped, rel+": "+err.Error())
			return nil
		}
		files = append(files, File{Rel: rel, Data: data})
		return nil
	})
	if err != nil {
		return nil, skipped, fmt.Errorf("knowledge: walk %s: %w", dir, err)
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Rel < files[j].Rel })
	return files, skipped, nil
}

func isMarkdown(name string) bool {
	ext := strings.ToLower(path.Ext(name))
	return ext == ".md" || ext == ".markdown"
}

// SyncReport is what one source's sync did.
type SyncReport struct {
	Source    Source   `json:"source"`
	Files     int      `json:"files"`
	Indexed   int      `json:"indexed"`
	Unchanged int      `json:"unchanged"`
	Deleted   int      `json:"deleted"`
	Skipped   []string `json:"skipped,omitempty"`
}

// syncSource makes src's documents mirror the Markdown files under dir: new and changed
// files are (re-)indexed, unchanged ones cost a hash comparison, documents under
// prefix whose file is gone are deleted. A failing file does not stop the others;
// their errors are joined.
func syncSource(ctx context.Context, b Backend, src Source, dir, prefix, language string) (SyncReport, error) {
	rep := SyncReport{Source: src}
	files, skipped, err := Walk(dir)
	rep.Skipped = skipped
	if err != nil {
		return rep, err
	}
	rep.Files = len(files)
	var errs []error
	present := map[string]bool{}
	for _, f := range files {
		doc := ParseMarkdown(f.Rel, f.Data)
		doc.Source, doc.Path, doc.Language = src, path.Join(prefix, f.Rel), language
		present[doc.Path] = true
		res, err := b.Index(ctx, doc)
		switch {
		case err != nil:
			errs = append(errs, err)
		case res.Changed:
			rep.Indexed++
		default:
			rep.Unchanged++
		}
	}
	docs, err := b.Docs(ctx, src)
	if err != nil {
		return rep, errors.Join(append(errs, err)...)
	}
	for _, d := range docs {
		if present[d.Path] || (prefix != "" && !strings.HasPrefix(d.Path, prefix+"/")) {
			continue
		}
		if err := b.Delete(ctx, src, d.Path); err != nil && !errors.Is(err, ErrNotFound) {
			errs = append(errs, err)
			continue
		}
		rep.Deleted++
	}
	return rep, errors.Join(errs...)
}

// packConfig is a pack's optional pack.yaml.
type packConfig struct {
	// Language is the pack's text-search configuration (default: the backend's).
	Language    string `yaml:"language"`
	Description string `yaml:"description"`
}

var packName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// IndexPacks indexes every pack under dir (one directory each, named
// [a-z0-9][a-z0-9_-]*): changed documents are re-indexed (by content hash), and
// documents whose file is gone are deleted, so calling it at every boot costs a
// read and a hash comparison per file. Packs whose directory is gone are left in
// the index (a pack is removed with `aetherium knowledge delete`-style Delete
// calls). A missing dir indexes nothing.
func IndexPacks(ctx context.Context, b Backend, dir string) ([]SyncReport, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("knowledge: packs %s: %w", dir, err)
	}
	var (
		reps []SyncReport
		errs []error
	)
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if !packName.MatchString(e.Name()) {
			errs = append(errs, fmt.Errorf("knowledge: pack directory %q: names are [a-z0-9][a-z0-9_-]*", e.Name()))
			continue
		}
		var pc packConfig
		if raw, err := os.ReadFile(filepath.Join(dir, e.Name(), "pack.yaml")); err == nil {
			if err := yaml.Unmarshal(raw, &pc); err != nil {
				errs = append(errs, fmt.Errorf("knowledge: pack %s: pack.yaml: %w", e.Name(), err))
				continue
			}
		} else if !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("knowledge: pack %s: %w", e.Name(), err))
			continue
		}
		rep, err := syncSource(ctx, b, Pack(e.Name()), filepath.Join(dir, e.Name()), "", pc.Language)
		reps = append(reps, rep)
		if err != nil {
			errs = append(errs, fmt.Errorf("knowledge: pack %s: %w", e.Name(), err))
		}
	}
	return reps, errors.Join(errs...)
}

// IndexFolder makes project's documents mirror <workspace>/knowledge/: the files
// write_knowledge saved there and any a person added (paths "knowledge/…"). Call
// it at run start. The folder must be a real directory of the workspace, or a
// symlink to one that is inside the workspace and not under a dot directory;
// otherwise nothing is indexed (ErrHiddenPath / ErrInvalidPath) and nothing is
// deleted.
func IndexFolder(ctx context.Context, b Backend, project, workspace string) (SyncReport, error) {
	dir, err := FolderOf(workspace)
	if err != nil {
		return SyncReport{Source: Project(project)}, err
	}
	return syncSource(ctx, b, Project(project), dir, FolderName, "")
}

// FolderOf returns <workspace>/knowledge after checking where it leads: inside
// the workspace and through no dot directory. A missing folder is fine (it is
// empty).
func FolderOf(workspace string) (string, error) {
	dir := filepath.Join(workspace, FolderName)
	real, err := filepath.EvalSymlinks(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return dir, nil
	}
	if err != nil {
		return "", fmt.Errorf("knowledge: %s: %w", dir, err)
	}
	realWS, err := filepath.EvalSymlinks(workspace)
	if err != nil {
		return "", fmt.Errorf("knowledge: workspace %s: %w", workspace, err)
	}
	rel, err := filepath.Rel(realWS, real)
	rel = filepath.ToSlash(rel)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("%w: %s/ leads outside the workspace", ErrInvalidPath, FolderName)
	}
	if hidden(rel) {
		return "", fmt.Errorf("%w: %s/ leads to %s", ErrHiddenPath, FolderName, rel)
	}
	return real, nil
}
