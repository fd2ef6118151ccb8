package egress

import (
	"net/netip"
	"net/url"
	"path"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// SandboxWorkspace is where the sandbox mounts a run's workspace (sandbox/docker.go);
// agents see their files there, so a path under it names a workspace file.
const SandboxWorkspace = "/workspace"

// NormalizePath is the form of a path argument that path_pattern matches: cleaned
// (dot segments, duplicate and trailing slashes) and, when it names a file of the
// workspace, relative to the workspace root ("." for the root itself). The sandbox's
// view (/workspace/…) and the host's (workspace/…) both count as the workspace. A
// path outside the workspace comes back absolute, so a rule can still name it: a
// relative path that climbs out is resolved as the sandbox would, from /workspace.
// Without this, `./secret/x`, `a/../secret/x` and `/workspace/secret/x` walked past
// `^secret/`.
func NormalizePath(p, workspace string) string {
	if p == "" {
		return ""
	}
	c := path.Clean(p)
	if !path.IsAbs(c) {
		if c != ".." && !strings.HasPrefix(c, "../") {
			return c
		}
		c = path.Join(SandboxWorkspace, c)
	}
	for _, root := range []string{SandboxWorkspace, hostRoot(workspace)} {
		if root == "" {
			continue
		}
		if c == root {
			return "."
		}
		if rest, ok := strings.CutPrefix(c, root+"/"); ok {
			return rest
		}
	}
	return c
}

// hostRoot is the workspace's absolute host path in slash form, or "" when there is
// none worth stripping (unset, relative, or the filesystem root).
func hostRoot(workspace string) string {
	if workspace == "" || !filepath.IsAbs(workspace) {
		return ""
	}
	r := path.Clean(filepath.ToSlash(workspace))
	if r == "/" {
		return ""
	}
	return r
}

// NormalizeURL is the form of a URL argument that url_pattern matches:
// scheme://host[:port]/path[?query], with the scheme and host lowercased, the
// host's trailing dot and the scheme's default port (http :80, https :443) dropped,
// percent-encoded unreserved characters decoded (other escapes upper-cased), the
// path's dot segments and duplicate slashes removed (a trailing slash is kept: it
// names another resource), and an empty path written "/". Credentials and the
// fragment are dropped: egress refuses URLs with credentials, and a fragment never
// leaves the client. ok is false for input that is not an absolute URL with a host
// (a parse error, no scheme, no host); it comes back unchanged.
func NormalizeURL(raw string) (norm string, ok bool) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" || u.Opaque != "" {
		return raw, false
	}
	// A host that is not UTF-8 (an IPv6 zone may hold any byte) is no name any
	// resolver answers, and ToLower would turn its bytes into U+FFFD, a different
	// host whose escaped form does not parse.
	if !utf8.ValidString(u.Hostname()) {
		return raw, false
	}
	host := strings.ToLower(u.Hostname())
	scheme := strings.ToLower(u.Scheme)
	if strings.Contains(host, ":") {
		// Only an IP address may hold a colon in its host ("A://::" parses, with
		// host ":", but its bracketed form would not): anything else is unparseable.
		// Its zone is kept as written (a trailing dot of a zone is no name's root:
		// "[::%25.]" trimmed to "[::%25]" would not parse), and may not be empty.
		addr, zone, zoned := strings.Cut(host, "%")
		if _, err := netip.ParseAddr(addr); err != nil || (zoned && zone == "") {
			return raw, false
		}
		host = "[" + host + "]"
	} else if host = strings.TrimRight(host, "."); host == "" {
		return raw, false
	}
	if port := u.Port(); port != "" && !(scheme == "http" && port == "80") && !(scheme == "https" && port == "443") {
		host += ":" + port
	}
	var b strings.Builder
	// Hostname() decoded the host's escapes ("%25" is "%", as is an IPv6 zone's
	// separator, RFC 6874): URL.String escapes them again, so the result parses
	// back to the same host.
	b.WriteString((&url.URL{Scheme: scheme, Host: host}).String() + cleanURLPath(unescapeUnreserved(u.EscapedPath())))
	if q := unescapeUnreserved(u.RawQuery); q != "" {
		b.WriteString("?" + q)
	}
	return b.String(), true
}

// cleanURLPath removes dot segments and duplicate slashes from an escaped URL path.
// A path ending in a slash, "." or ".." names a directory and keeps its slash.
func cleanURLPath(p string) string {
	if p == "" {
		return "/"
	}
	dir := strings.HasSuffix(p, "/") || strings.HasSuffix(p, "/.") || strings.HasSuffix(p, "/..") || p == "." || p == ".."
	c := path.Clean("/" + p)
	if dir && c != "/" {
		c += "/"
	}
	return c
}

// unescapeUnreserved decodes %XX escapes of unreserved characters (RFC 3986 2.3:
// letters, digits, - . _ ~), which mean the same decoded, and upper-cases the hex
// of the others, which must stay encoded (%2F is not a path separator).
func unescapeUnreserved(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '%' || i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
			b.WriteByte(s[i])
			continue
		}
		c := unhex(s[i+1])<<4 | unhex(s[i+2])
		if isUnreserved(c) {
			b.WriteByte(c)
		} else {
			b.WriteString("%" + strings.ToUpper(s[i+1:i+3]))
		}
		i += 2
	}
	return b.String()
}

func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}
