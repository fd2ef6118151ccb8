package quality

import (
	"encoding/json"
	"fmt"
	"net/url"
	"path"
	"regexp"
	"strings"

	"github.com/pelletier/go-toml/v2"
	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// Extensions each mark reads.
func lowerExt(rel string) string { return strings.ToLower(path.Ext(rel)) }

func isHTMLFile(rel string) bool { e := lowerExt(rel); return e == ".html" || e == ".htm" }

// isShippedCode is shipped source, where a TODO is a leftover.
func isShippedCode(rel string) bool {
	switch lowerExt(rel) {
	case ".js", ".mjs", ".cjs", ".jsx", ".ts", ".tsx", ".vue", ".svelte", ".astro", ".css", ".scss", ".sass", ".less",
		".html", ".htm", ".py", ".go", ".rs", ".rb", ".php", ".java", ".kt", ".swift", ".c", ".h", ".cc", ".cpp", ".hpp",
		".cs", ".gd", ".lua", ".sh", ".dart", ".ex", ".exs", ".scala", ".sql":
		return true
	}
	return false
}

// isComponentFile is a file whose markup renders lists from data.
func isComponentFile(rel string) bool {
	switch lowerExt(rel) {
	case ".js", ".mjs", ".jsx", ".ts", ".tsx", ".vue", ".svelte", ".astro":
		return true
	}
	return false
}

// isShippedText is shipped content where lorem ipsum or a placeholder image is a leftover.
func isShippedText(rel string) bool {
	switch lowerExt(rel) {
	case ".md", ".markdown", ".txt", ".json", ".yml", ".yaml", ".toml", ".xml", ".svg", ".webmanifest":
		return true
	}
	return isShippedCode(rel)
}

// ---- favicon ----

// checkFavicon: every HTML page (a file with <html>, <head> or a doctype; a
// fragment is not a page) links an icon (<link rel> with the token "icon") whose
// file ships, or links none and a favicon.ico ships at the root the browser asks
// (the project root, public/ or static/).
func checkFavicon(p *shippedProject) ([]FinishingRow, string) {
	var fails []FinishingRow
	pages := 0
	rootIco := p.ships("favicon.ico") || p.ships("public/favicon.ico") || p.ships("static/favicon.ico")
	for _, f := range p.files {
		if !isHTMLFile(f) {
			continue
		}
		src, ok := p.read(f)
		if !ok || !isHTMLPage(src) {
			continue
		}
		pages++
		links, headLine := iconLinks(src)
		if len(links) == 0 {
			if !rootIco {
				fails = append(fails, FinishingRow{File: f, Line: headLine, Detail: "no <link rel=\"icon\"> and no favicon.ico at the root"})
			}
			continue
		}
		okLink := false
		var why string
		for _, l := range links {
			if reason := p.assetMissing(f, l.href); reason == "" {
				okLink = true
				break
			} else if why == "" {
				why = fmt.Sprintf("links favicon %q, which %s", l.href, reason)
				headLine = l.line
			}
		}
		if !okLink {
			fails = append(fails, FinishingRow{File: f, Line: headLine, Detail: why})
		}
	}
	if pages == 0 {
		return fails, "no HTML pages ship"
	}
	return fails, fmt.Sprintf("%d HTML page(s), each with a favicon that ships", pages)
}

// isHTMLPage tells a page from a fragment (a component template, a partial).
func isHTMLPage(src string) bool {
	head := strings.ToLower(src[:min(len(src), 4096)])
	return strings.Contains(head, "<!doctype") || strings.Contains(head, "<html") || strings.Contains(head, "<head")
}

type iconLink struct {
	href string
	line int
}

// iconLinks lists a page's icon links and the line of its <head> (1 without).
func iconLinks(src string) ([]iconLink, int) {
	var out []iconLink
	headLine := 1
	walkTags(src, func(tag string, attrs map[string]string, line int) {
		switch tag {
		case "head":
			headLine = line
		case "link":
			for _, tok := range strings.Fields(strings.ToLower(attrs["rel"])) {
				if tok == "icon" {
					out = append(out, iconLink{href: strings.TrimSpace(attrs["href"]), line: line})
					break
				}
			}
		}
	})
	return out, headLine
}

// walkTags calls fn for each start tag of src with its line.
func walkTags(src string, fn func(tag string, attrs map[string]string, line int)) {
	z := html.NewTokenizer(strings.NewReader(src))
	line := 1
	for {
		tt := z.Next()
		if tt == html.ErrorToken {
			return
		}
		raw := z.Raw()
		if tt == html.StartTagToken || tt == html.SelfClosingTagToken {
			name, hasAttr := z.TagName()
			attrs := map[string]string{}
			for hasAttr {
				var k, v []byte
				k, v, hasAttr = z.TagAttr()
				attrs[string(k)] = string(v)
			}
			fn(string(name), attrs, line)
		}
		line += strings.Count(string(raw), "\n")
	}
}

// assetMissing says why href, referenced from the file from, does not lead to a
// shipped file ("" when it does). Root-relative hrefs are looked up at the
// project root and in public/ and static/, which Vite, CRA and Next serve at /.
func (p *shippedProject) assetMissing(from, href string) string {
	if href == "" {
		return "is empty"
	}
	lower := strings.ToLower(href)
	switch {
	case strings.HasPrefix(lower, "data:"):
		return ""
	case strings.HasPrefix(lower, "//") || strings.Contains(lower, "://"):
		return "is external (not shipped with the project)"
	}
	if i := strings.IndexAny(href, "?#"); i >= 0 {
		href = href[:i]
	}
	if u, err := url.PathUnescape(href); err == nil {
		href = u
	}
	var candidates []string
	if strings.HasPrefix(href, "/") {
		h := strings.TrimLeft(href, "/")
		candidates = []string{h, path.Join("public", h), path.Join("static", h)}
	} else {
		candidates = []string{path.Join(path.Dir(from), href)}
	}
	for _, c := range candidates {
		if p.ships(c) {
			return ""
		}
	}
	return "does not exist in the shipped files"
}

// ---- scaffold ----

var (
	todoRe        = regexp.MustCompile(`\b(TODO|FIXME)\b`)
	loremRe       = regexp.MustCompile(`(?i)lorem ipsum`)
	placeholderRe = regexp.MustCompile(`(?i)\b(via\.placeholder\.com|placehold\.co|placehold\.it|placekitten\.com|picsum\.photos|dummyimage\.com|loremflickr\.com|placeimg\.com|fakeimg\.pl)\b`)
	defaultLogoRe = regexp.MustCompile(`(?i)(?:^|[/"'(\s=])((?:react|vite|next|vercel|vue|svelte|preact|typescript|javascript)\.svg)\b`)
	quotedRe      = regexp.MustCompile("\"([^\"\\n]{1,60})\"|'([^'\\n]{1,60})'|`([^`\\n]{1,60})`")
)

// defaultTitle reports the titles a framework's starter ships with.
func defaultTitle(t string) bool {
	switch strings.ToLower(strings.Join(strings.Fields(t), " ")) {
	case "react app", "vite app", "vite + react", "vite + react + ts", "vite + vue", "vite + vue + ts",
		"vite + svelte", "vite + svelte + ts", "vite + preact", "vite + preact + ts", "vite + lit", "vite + lit + ts",
		"vite + ts", "vite + solid", "vite + solid + ts", "create next app", "welcome to nginx!", "welcome to nginx",
		"svelte app", "sveltekit app", "document", "apache2 debian default page: it works":
		return true
	}
	return false
}

// checkScaffold: no TODO/FIXME (upper case, whole word) in shipped code, no
// lorem ipsum, no default framework title, no default logo referenced, no
// placeholder-image service.
func checkScaffold(p *shippedProject) ([]FinishingRow, string) {
	var fails []FinishingRow
	scanned := 0
	for _, f := range p.files {
		if !isShippedText(f) {
			continue
		}
		src, ok := p.read(f)
		if !ok {
			continue
		}
		scanned++
		for i, line := range strings.Split(src, "\n") {
			n := i + 1
			if isShippedCode(f) {
				if m := todoRe.FindString(line); m != "" {
					fails = append(fails, FinishingRow{File: f, Line: n, Detail: m + " left in shipped code: " + rowSnippet(line)})
				}
			}
			if loremRe.MatchString(line) {
				fails = append(fails, FinishingRow{File: f, Line: n, Detail: "lorem ipsum placeholder text"})
			}
			if m := placeholderRe.FindString(line); m != "" {
				fails = append(fails, FinishingRow{File: f, Line: n, Detail: "placeholder image service " + strings.ToLower(m)})
			}
			if m := defaultLogoRe.FindStringSubmatch(line); m != nil && !strings.HasSuffix(strings.ToLower(f), ".md") {
				fails = append(fails, FinishingRow{File: f, Line: n, Detail: "default framework logo " + m[1] + " referenced"})
			}
			if isComponentFile(f) {
				for _, q := range quotedRe.FindAllStringSubmatch(line, -1) {
					if t := q[1] + q[2] + q[3]; defaultTitle(t) && strings.Contains(strings.ToLower(line), "title") {
						fails = append(fails, FinishingRow{File: f, Line: n, Detail: fmt.Sprintf("default framework title %q", t)})
					}
				}
			}
		}
		if isHTMLFile(f) {
			for _, t := range pageTitles(src) {
				if defaultTitle(t.text) {
					fails = append(fails, FinishingRow{File: f, Line: t.line, Detail: fmt.Sprintf("default framework title %q", strings.TrimSpace(t.text))})
				}
			}
		}
	}
	return fails, fmt.Sprintf("%d shipped text file(s) without scaffold leftovers", scanned)
}

type titleText struct {
	text string
	line int
}

// pageTitles returns the text of each <title> with its line.
func pageTitles(src string) []titleText {
	var out []titleText
	z := html.NewTokenizer(strings.NewReader(src))
	line := 1
	in := -1
	for {
		tt := z.Next()
		if tt == html.ErrorToken {
			return out
		}
		raw := z.Raw()
		switch tt {
		case html.StartTagToken:
			if name, _ := z.TagName(); atom.Lookup(name) == atom.Title {
				out = append(out, titleText{line: line})
				in = len(out) - 1
			}
		case html.TextToken:
			if in >= 0 {
				out[in].text += html.UnescapeString(string(raw))
			}
		case html.EndTagToken:
			in = -1
		}
		line += strings.Count(string(raw), "\n")
	}
}

// ---- README images ----

var (
	mdImageRe   = regexp.MustCompile(`!\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+[^)]*)?\)`)
	mdLinkRe    = regexp.MustCompile(`(?:^|[^!])\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+[^)]*)?\)`)
	mdRefUseRe  = regexp.MustCompile(`!\[([^\]]*)\]\[([^\]]*)\]`)
	mdRefDefRe  = regexp.MustCompile(`^\s{0,3}\[([^\]]+)\]:\s*<?(\S+?)>?(?:\s+.*)?$`)
	htmlImgRe   = regexp.MustCompile(`(?i)<img\b[^>]*?\bsrc\s*=\s*["']([^"']+)["']`)
	imageExtRe  = regexp.MustCompile(`(?i)\.(png|jpe?g|gif|webp|avif|svg|bmp)$`)
	fenceOpenRe = regexp.MustCompile("^\\s{0,3}(```|~~~)")
)

// checkReadmeImages: every image the README shows (![…](…), reference images,
// <img src>) or links to by an image file name ships. External URLs are not
// checked (badges); a missing README fails.
func checkReadmeImages(p *shippedProject) ([]FinishingRow, string) {
	readme := p.rootFile("README.md", "readme.md", "README.markdown")
	if readme == "" {
		return []FinishingRow{{Detail: "no README.md at the project root"}}, ""
	}
	src, ok := p.read(readme)
	if !ok {
		return []FinishingRow{{File: readme, Detail: "README is over the size limit or not text"}}, ""
	}
	type ref struct {
		target string
		line   int
	}
	var refs []ref
	defs := map[string]string{}
	lines := strings.Split(src, "\n")
	inFence := ""
	var uses []ref // reference-style uses, resolved after every definition is read
	for i, line := range lines {
		n := i + 1
		if m := fenceOpenRe.FindStringSubmatch(line); m != nil {
			switch {
			case inFence == "":
				inFence = m[1]
			case m[1] == inFence:
				inFence = ""
			}
			continue
		}
		if inFence != "" {
			continue
		}
		line = stripCodeSpans(line)
		if m := mdRefDefRe.FindStringSubmatch(line); m != nil {
			defs[strings.ToLower(m[1])] = m[2]
			continue
		}
		for _, m := range mdImageRe.FindAllStringSubmatch(line, -1) {
			refs = append(refs, ref{m[1], n})
		}
		for _, m := range htmlImgRe.FindAllStringSubmatch(line, -1) {
			refs = append(refs, ref{m[1], n})
		}
		for _, m := range mdLinkRe.FindAllStringSubmatch(line, -1) {
			if imageExtRe.MatchString(strings.SplitN(m[1], "?", 2)[0]) {
				refs = append(refs, ref{m[1], n})
			}
		}
		for _, m := range mdRefUseRe.FindAllStringSubmatch(line, -1) {
			label := m[2]
			if label == "" {
				label = m[1]
			}
			uses = append(uses, ref{strings.ToLower(label), n})
		}
	}
	for _, u := range uses {
		if t, ok := defs[u.target]; ok {
			refs = append(refs, ref{t, u.line})
		}
	}
	var fails []FinishingRow
	checked := 0
	seen := map[ref]bool{} // [![badge](img.png)](…) is both an image and a link
	for _, r := range refs {
		if seen[r] {
			continue
		}
		seen[r] = true
		lower := strings.ToLower(r.target)
		if strings.HasPrefix(lower, "//") || strings.Contains(lower, "://") || strings.HasPrefix(lower, "#") || strings.HasPrefix(lower, "data:") {
			continue
		}
		checked++
		if reason := p.assetMissing(readme, r.target); reason != "" {
			fails = append(fails, FinishingRow{File: readme, Line: r.line, Detail: fmt.Sprintf("references %q, which %s", r.target, reason)})
		}
	}
	if checked == 0 {
		return fails, "the README references no local images"
	}
	return fails, fmt.Sprintf("the README's %d local image reference(s) all ship", checked)
}

// stripCodeSpans blanks `code` so an example image in backticks is not a reference.
func stripCodeSpans(line string) string {
	var b strings.Builder
	in := false
	for _, r := range line {
		if r == '`' {
			in = !in
			continue
		}
		if !in {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// ---- version ----

var (
	changelogHeadRe = regexp.MustCompile(`^\s{0,3}#{1,6}\s+.*?\bv?(\d+\.\d+(?:\.\d+)?(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?)`)
	tomlVersionRe   = regexp.MustCompile(`^\s*version\s*=`)
	jsonVersionRe   = regexp.MustCompile(`^\s*"version"\s*:`)
)

type manifestVersion struct {
	file, version string
	line          int
}

// manifestVersions reads the version of each manifest at the project root:
// package.json, pyproject.toml ([project] or [tool.poetry]), Cargo.toml
// ([package]), VERSION or VERSION.txt.
func manifestVersions(p *shippedProject) ([]manifestVersion, []FinishingRow) {
	var out []manifestVersion
	var bad []FinishingRow
	lineOf := func(src string, re *regexp.Regexp, v string) int {
		for i, l := range strings.Split(src, "\n") {
			if re.MatchString(l) && strings.Contains(l, v) {
				return i + 1
			}
		}
		return 0
	}
	if f := p.rootFile("package.json"); f != "" {
		if src, ok := p.read(f); ok {
			var pkg struct {
				Version string `json:"version"`
			}
			if err := json.Unmarshal([]byte(src), &pkg); err != nil {
				bad = append(bad, FinishingRow{File: f, Detail: "does not parse: " + err.Error()})
			} else if pkg.Version != "" {
				out = append(out, manifestVersion{f, pkg.Version, lineOf(src, jsonVersionRe, pkg.Version)})
			}
		}
	}
	for _, f := range []string{p.rootFile("pyproject.toml"), p.rootFile("Cargo.toml")} {
		if f == "" {
			continue
		}
		src, ok := p.read(f)
		if !ok {
			continue
		}
		var doc struct {
			Project struct {
				Version any `toml:"version"`
			} `toml:"project"`
			Package struct {
				Version any `toml:"version"`
			} `toml:"package"`
			Tool struct {
				Poetry struct {
					Version any `toml:"version"`
				} `toml:"poetry"`
			} `toml:"tool"`
		}
		if err := toml.Unmarshal([]byte(src), &doc); err != nil {
			bad = append(bad, FinishingRow{File: f, Detail: "does not parse: " + err.Error()})
			continue
		}
		// version.workspace = true (Cargo) or a dynamic version is not a string.
		for _, v := range []any{doc.Project.Version, doc.Package.Version, doc.Tool.Poetry.Version} {
			if s, ok := v.(string); ok && s != "" {
				out = append(out, manifestVersion{f, s, lineOf(src, tomlVersionRe, s)})
				break
			}
		}
	}
	if f := p.rootFile("VERSION", "VERSION.txt"); f != "" {
		if src, ok := p.read(f); ok {
			for i, l := range strings.Split(src, "\n") {
				if v := strings.TrimSpace(l); v != "" {
					out = append(out, manifestVersion{f, v, i + 1})
					break
				}
			}
		}
	}
	return out, bad
}

// changelogHead is the first heading of the changelog that names a version
// ("## [Unreleased]" and the title have none and are passed over).
func changelogHead(src string) (string, int) {
	inFence := false
	for i, l := range strings.Split(src, "\n") {
		if fenceOpenRe.MatchString(l) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		if m := changelogHeadRe.FindStringSubmatch(l); m != nil {
			return m[1], i + 1
		}
	}
	return "", 0
}

// checkVersion: every manifest's version equals the changelog's head version
// (a leading "v" ignored on both sides).
func checkVersion(p *shippedProject) ([]FinishingRow, string) {
	versions, fails := manifestVersions(p)
	cl := p.rootFile("CHANGELOG.md", "CHANGELOG", "CHANGELOG.txt", "CHANGES.md", "HISTORY.md")
	if len(versions) == 0 {
		fails = append(fails, FinishingRow{Detail: "no manifest states a version (package.json, pyproject.toml, Cargo.toml, VERSION)"})
	}
	if cl == "" {
		return append(fails, FinishingRow{Detail: "no CHANGELOG.md at the project root"}), ""
	}
	src, ok := p.read(cl)
	head, headLine := "", 0
	if ok {
		head, headLine = changelogHead(src)
	}
	if head == "" {
		return append(fails, FinishingRow{File: cl, Detail: "no heading with a version"}), ""
	}
	norm := func(v string) string { return strings.TrimPrefix(strings.TrimPrefix(strings.TrimSpace(v), "v"), "V") }
	var okFiles []string
	for _, v := range versions {
		if norm(v.version) != norm(head) {
			fails = append(fails, FinishingRow{File: v.file, Line: v.line,
				Detail: fmt.Sprintf("version %s, but the head of %s (line %d) is %s", v.version, cl, headLine, head)})
			continue
		}
		okFiles = append(okFiles, v.file)
	}
	return fails, fmt.Sprintf("%s: %s, the head of %s", strings.Join(okFiles, ", "), head, cl)
}
