package egress

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strings"
)

// Team secrets: named credentials of the fleet's configuration, bound to the domains
// they may be sent to. Arguments and tool_defaults carry only a reference,
// {{secret:NAME}}; the egress client swaps in the value after every gate layer has
// judged the call, and only for a request whose host is bound to the secret. What
// comes back (body, headers, errors) has the value replaced by the reference again,
// so the model, the audit trail, events and logs only ever hold the reference.

// ErrSecretRefused is a request whose secret references the egress client will not
// fill in: an unknown secret, or a host the secret is not bound to. It is also an
// ErrEgressDenied.
var ErrSecretRefused = errors.New("secret refused")

// MinSecretLen is the shortest value accepted: a shorter one would be found by
// accident in ordinary text and scrubbed there, and is no credential anyway.
const MinSecretLen = 8

// secretName is what a reference may name.
var secretName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// secretRef finds references, also percent-encoded (a reference in a URL path is
// escaped when the URL is built).
var secretRef = regexp.MustCompile(`(?i)(?:\{|%7b)(?:\{|%7b)secret(?::|%3a)([A-Za-z0-9_.-]{1,64})(?:\}|%7d)(?:\}|%7d)`)

// SecretRef returns the reference text for a secret name.
func SecretRef(name string) string { return "{{secret:" + name + "}}" }

// SecretSource says where one secret's value comes from and where it may go.
type SecretSource struct {
	// Env names the environment variable holding the value.
	Env string `yaml:"env"`
	// File is a path whose content (trailing newline dropped) is the value.
	File string `yaml:"file"`
	// Domains the value may be sent to: exact names and *.example.com wildcards
	// (subdomains, not the apex), as in allowed_domains.
	Domains []string `yaml:"domains"`
}

type boundSecret struct {
	name    string
	value   string
	domains []string
}

// Secrets holds the loaded team secrets. A nil *Secrets holds none: references are
// then refused and scrubbing is a no-op.
type Secrets struct {
	byName map[string]boundSecret
	// scrub replaces every known form of every value by its reference.
	scrub *strings.Replacer
	// hold is the longest value form: a streamed body keeps that many bytes minus
	// one back, so a value split across reads is still found.
	hold int
}

// ValidateSecretSource checks one secret's definition without reading its value.
func ValidateSecretSource(name string, s SecretSource) error {
	var errs []error
	if !secretName.MatchString(name) {
		errs = append(errs, fmt.Errorf("name %q: want 1-64 of A-Z a-z 0-9 _ . -", name))
	}
	if (s.Env == "") == (s.File == "") {
		errs = append(errs, errors.New("set exactly one of env and file (a value is never written inline)"))
	}
	if len(s.Domains) == 0 {
		errs = append(errs, errors.New("domains: at least one domain the value may be sent to"))
	}
	for _, d := range s.Domains {
		host := strings.TrimPrefix(d, "*.")
		if host == "" || strings.ContainsAny(host, "/:@?#* \t") || strings.HasPrefix(host, ".") {
			errs = append(errs, fmt.Errorf("domains: %q is not a host name or *.wildcard (no scheme, port or path)", d))
		}
	}
	return errors.Join(errs...)
}

// LoadSecrets reads every secret's value (env is os.LookupEnv outside tests). A
// missing variable or file, or a value too short to scrub reliably, is an error
// naming the secret: the fleet refuses to boot rather than send an empty credential.
func LoadSecrets(srcs map[string]SecretSource, env func(string) (string, bool)) (*Secrets, error) {
	if len(srcs) == 0 {
		return nil, nil
	}
	names := make([]string, 0, len(srcs))
	for n := range srcs {
		names = append(names, n)
	}
	sort.Strings(names)
	s := &Secrets{byName: map[string]boundSecret{}}
	type pair struct{ old, new string }
	var pairs []pair
	var errs []error
	for _, name := range names {
		src := srcs[name]
		if err := ValidateSecretSource(name, src); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		var value string
		switch {
		case src.Env != "":
			v, ok := env(src.Env)
			if !ok || v == "" {
				errs = append(errs, fmt.Errorf("%s: environment variable %s is not set", name, src.Env))
				continue
			}
			value = v
		default:
			raw, err := os.ReadFile(src.File)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: file: %w", name, err))
				continue
			}
			value = strings.TrimRight(string(raw), "\r\n")
		}
		if len(value) < MinSecretLen {
			errs = append(errs, fmt.Errorf("%s: the value is shorter than %d characters", name, MinSecretLen))
			continue
		}
		s.byName[name] = boundSecret{name: name, value: value, domains: append([]string(nil), src.Domains...)}
		for _, form := range valueForms(value) {
			pairs = append(pairs, pair{form, SecretRef(name)})
			s.hold = max(s.hold, len(form))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	// strings.Replacer takes the first listed match at a position: longest first, so
	// an encoded form is not half-replaced through a shorter form it contains.
	sort.SliceStable(pairs, func(i, j int) bool { return len(pairs[i].old) > len(pairs[j].old) })
	args := make([]string, 0, 2*len(pairs))
	for _, p := range pairs {
		args = append(args, p.old, p.new)
	}
	s.scrub = strings.NewReplacer(args...)
	return s, nil
}

// valueForms are the spellings a value comes back in: as it is, percent-encoded
// (echoed URLs) and JSON-escaped (echoed JSON). Other encodings (base64 inside a
// Basic header, hex) are not recognised.
func valueForms(v string) []string {
	forms := []string{v}
	add := func(f string) {
		for _, g := range forms {
			if g == f {
				return
			}
		}
		forms = append(forms, f)
	}
	add(queryEscape(v))
	add(url.PathEscape(v))
	add(url.QueryEscape(v))
	// JSON as Go writes it (<, >, & as \u00XX) and as everything else does.
	if b, err := json.Marshal(v); err == nil {
		add(string(b[1 : len(b)-1]))
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if enc.Encode(v) == nil {
		b := bytes.TrimSpace(buf.Bytes())
		add(string(b[1 : len(b)-1]))
	}
	return forms
}

// queryEscape escapes for both a path and a query (a space as %20, never +).
func queryEscape(v string) string { return strings.ReplaceAll(url.QueryEscape(v), "+", "%20") }

// Names lists the configured secret names, sorted.
func (s *Secrets) Names() []string {
	if s == nil {
		return nil
	}
	out := make([]string, 0, len(s.byName))
	for n := range s.byName {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Scrub replaces every secret value in text by its reference.
func (s *Secrets) Scrub(text string) string {
	if s == nil || s.scrub == nil || text == "" {
		return text
	}
	return s.scrub.Replace(text)
}

// ScrubError returns err with every secret value in its message replaced by the
// reference; errors.Is and errors.As still see the original chain.
func (s *Secrets) ScrubError(err error) error {
	if err == nil || s == nil {
		return err
	}
	msg := err.Error()
	if clean := s.Scrub(msg); clean != msg {
		return &scrubbedError{msg: clean, err: err}
	}
	return err
}

type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }

// refsIn returns the secret names referenced in text.
func refsIn(text string, into map[string]bool) {
	for _, m := range secretRef.FindAllStringSubmatch(text, -1) {
		into[m[1]] = true
	}
}

// check refuses unknown names and hosts a referenced secret is not bound to.
func (s *Secrets) check(host string, names map[string]bool) error {
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	for _, n := range sorted {
		var b boundSecret
		ok := false
		if s != nil {
			b, ok = s.byName[n]
		}
		if !ok {
			known := "none are configured"
			if names := s.Names(); len(names) > 0 {
				known = "configured: " + strings.Join(names, ", ")
			}
			return fmt.Errorf("%w: %w: unknown secret %q (%s)", ErrEgressDenied, ErrSecretRefused, n, known)
		}
		if !DomainAllowed(host, b.domains) {
			return fmt.Errorf("%w: %w: secret %s may only be sent to %s, not %s", ErrEgressDenied, ErrSecretRefused, n, strings.Join(b.domains, ", "), host)
		}
	}
	return nil
}

// inject returns a copy of req with every reference replaced by its value, after
// checking each referenced secret may go to req's host. It returns req itself when
// nothing is referenced. req's body is consumed (RoundTrip owns it).
func (s *Secrets) inject(req *http.Request) (*http.Request, error) {
	names := map[string]bool{}
	refsIn(req.URL.String(), names)
	refsIn(req.URL.Path, names)
	for _, vs := range req.Header {
		for _, v := range vs {
			refsIn(v, names)
		}
	}
	var body []byte
	hasBody := req.Body != nil && req.Body != http.NoBody
	if hasBody {
		var err error
		body, err = io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("reading the request body: %w", err)
		}
		refsIn(string(body), names)
	}
	restore := func(r *http.Request, b []byte) *http.Request {
		if !hasBody {
			return r
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
		r.ContentLength = int64(len(b))
		return r
	}
	if len(names) == 0 {
		return restore(req.Clone(req.Context()), body), nil
	}
	if secretRef.MatchString(req.URL.Host) || secretRef.MatchString(req.Host) {
		return nil, fmt.Errorf("%w: %w: a secret reference in the host name", ErrEgressDenied, ErrSecretRefused)
	}
	if err := s.check(req.URL.Hostname(), names); err != nil {
		return nil, err
	}
	fill := func(text string, escape bool) string {
		return secretRef.ReplaceAllStringFunc(text, func(ref string) string {
			v := s.byName[secretRef.FindStringSubmatch(ref)[1]].value
			if escape {
				return queryEscape(v)
			}
			return v
		})
	}
	out := req.Clone(req.Context())
	out.URL.Path = fill(out.URL.Path, false)
	out.URL.RawPath = fill(out.URL.RawPath, true)
	out.URL.RawQuery = fill(out.URL.RawQuery, true)
	for k, vs := range out.Header {
		for i, v := range vs {
			vs[i] = fill(v, false)
		}
		out.Header[k] = vs
	}
	if hasBody {
		body = []byte(fill(string(body), false))
	}
	return restore(out, body), nil
}

// scrubResponse replaces secret values in resp's headers and body by their
// references, so what a tool reads back never holds a value even when the server
// echoes it.
func (s *Secrets) scrubResponse(resp *http.Response) {
	if s == nil || s.scrub == nil {
		return
	}
	for k, vs := range resp.Header {
		for i, v := range vs {
			vs[i] = s.Scrub(v)
		}
		resp.Header[k] = vs
	}
	for k, vs := range resp.Trailer {
		for i, v := range vs {
			vs[i] = s.Scrub(v)
		}
		resp.Trailer[k] = vs
	}
	if resp.Body != nil && resp.Body != http.NoBody {
		resp.Body = &scrubReader{src: resp.Body, s: s}
		// The scrubbed body may be shorter: the announced length no longer holds.
		resp.ContentLength = -1
		resp.Header.Del("Content-Length")
	}
}

// scrubReader streams a body with secret values replaced. It keeps the last
// hold-1 bytes of what it read back until more arrives, so a value split across
// reads is still found.
type scrubReader struct {
	src  io.ReadCloser
	s    *Secrets
	in   []byte // read, not yet scrubbed
	out  []byte // scrubbed, not yet returned
	eof  bool
	rerr error
}

func (r *scrubReader) Read(p []byte) (int, error) {
	for len(r.out) == 0 {
		if r.eof {
			if len(r.in) > 0 {
				r.out, r.in = []byte(r.s.Scrub(string(r.in))), nil
				continue
			}
			return 0, r.rerr
		}
		buf := make([]byte, 32<<10)
		n, err := r.src.Read(buf)
		r.in = append(r.in, buf[:n]...)
		if err != nil {
			r.eof = true
			r.rerr = err
			continue
		}
		keep := r.s.hold - 1
		if len(r.in) <= keep {
			continue
		}
		// Scrub everything, then hold back the tail: a value wholly inside the
		// buffer is already replaced; one still arriving starts in the tail.
		scrubbed := r.s.Scrub(string(r.in))
		cut := len(scrubbed) - keep
		r.out = []byte(scrubbed[:cut])
		r.in = []byte(scrubbed[cut:])
	}
	n := copy(p, r.out)
	r.out = r.out[n:]
	return n, nil
}

func (r *scrubReader) Close() error { return r.src.Close() }

// withoutSecretRefs drops DLP findings that are (part of) a secret reference: a
// reference is a name, not a credential, and must pass the scan.
func withoutSecretRefs(text string, fs []Finding) []Finding {
	if len(fs) == 0 {
		return fs // nothing to drop; spares a regexp pass over the whole text
	}
	refs := secretRef.FindAllString(text, -1)
	if len(refs) == 0 {
		return fs
	}
	out := fs[:0]
	for _, f := range fs {
		inRef := strings.Contains(strings.ToLower(f.Secret), "{secret:") || strings.Contains(strings.ToLower(f.Secret), "%7bsecret")
		for _, r := range refs {
			inRef = inRef || strings.Contains(r, f.Secret)
		}
		if !inRef {
			out = append(out, f)
		}
	}
	return out
}
