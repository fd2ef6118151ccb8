package egress_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/egress"
)

// teamSecret is shaped like no gitleaks rule, so only the team-secret scrubbing (not
// DLP redaction) can keep it out of what comes back.
const teamSecret = "tv-9f3c2a7e51d84b06-team-value"

func TestLoadSecrets(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(file, []byte(teamSecret+"\n"), 0o600))
	short := filepath.Join(dir, "short")
	require.NoError(t, os.WriteFile(short, []byte("abc"), 0o600))
	env := func(k string) (string, bool) {
		if k == "GITHUB_TOKEN" {
			return teamSecret, true
		}
		return "", false
	}
	dom := []string{"api.github.com"}
	cases := []struct {
		name    string
		srcs    map[string]egress.SecretSource
		wantErr string
	}{
		{"from the environment", map[string]egress.SecretSource{"github": {Env: "GITHUB_TOKEN", Domains: dom}}, ""},
		{"from a file, newline dropped", map[string]egress.SecretSource{"github": {File: file, Domains: dom}}, ""},
		{"unset variable", map[string]egress.SecretSource{"github": {Env: "NO_SUCH_TOKEN", Domains: dom}}, "github: environment variable NO_SUCH_TOKEN is not set"},
		{"missing file", map[string]egress.SecretSource{"github": {File: filepath.Join(dir, "nope"), Domains: dom}}, "github: file: open"},
		{"too short", map[string]egress.SecretSource{"github": {File: short, Domains: dom}}, "shorter than 8 characters"},
		{"both sources", map[string]egress.SecretSource{"github": {Env: "GITHUB_TOKEN", File: file, Domains: dom}}, "exactly one of env and file"},
		{"no source", map[string]egress.SecretSource{"github": {Domains: dom}}, "exactly one of env and file"},
		{"no domains", map[string]egress.SecretSource{"github": {Env: "GITHUB_TOKEN"}}, "at least one domain"},
		{"a URL for a domain", map[string]egress.SecretSource{"github": {Env: "GITHUB_TOKEN", Domains: []string{"https://api.github.com"}}}, "is not a host name"},
		{"bad name", map[string]egress.SecretSource{"git hub": {Env: "GITHUB_TOKEN", Domains: dom}}, `name "git hub"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := egress.LoadSecrets(tc.srcs, env)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, []string{"github"}, s.Names())
			require.Equal(t, "x {{secret:github}} y", s.Scrub("x "+teamSecret+" y"), "the value is exactly the file/variable content")
		})
	}
}

func TestSecretsScrub(t *testing.T) {
	t.Parallel()
	const odd = "p@ss word/+&=x\"q"
	s, err := egress.LoadSecrets(map[string]egress.SecretSource{
		"a": {Env: "A", Domains: []string{"a.test"}},
		"b": {Env: "B", Domains: []string{"b.test"}},
	}, func(k string) (string, bool) { return map[string]string{"A": teamSecret, "B": odd}[k], true })
	require.NoError(t, err)
	cases := []struct{ in, want string }{
		{"plain " + teamSecret, "plain {{secret:a}}"},
		{"query p%40ss%20word%2F%2B%26%3Dx%22q", "query {{secret:b}}"},
		{"form p%40ss+word%2F%2B%26%3Dx%22q", "form {{secret:b}}"},
		{`json "p@ss word/+&=x\"q"`, `json "{{secret:b}}"`},
		{`go json "p@ss word/+\u0026=x\"q"`, `go json "{{secret:b}}"`},
		{"nothing here", "nothing here"},
	}
	for _, tc := range cases {
		require.Equal(t, tc.want, s.Scrub(tc.in), tc.in)
	}
	base := errors.New("dial: " + teamSecret)
	err = s.ScrubError(base)
	require.EqualError(t, err, "dial: {{secret:a}}")
	require.ErrorIs(t, err, base, "the chain survives scrubbing")
	var nilSecrets *egress.Secrets
	require.Equal(t, teamSecret, nilSecrets.Scrub(teamSecret))
}

// seen is what the test server received, per host.
type seen struct {
	mu   sync.Mutex
	reqs map[string][]string // host → request dumps
}

func (s *seen) add(host, dump string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reqs == nil {
		s.reqs = map[string][]string{}
	}
	s.reqs[host] = append(s.reqs[host], dump)
}

func (s *seen) carried(host string) (n int, withValue int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.reqs[host] {
		n++
		if strings.Contains(d, teamSecret) {
			withValue++
		}
	}
	return n, withValue
}

func TestEgressTeamSecrets(t *testing.T) {
	t.Parallel()
	dns := startDNS(t, map[string]string{"api.bound.test": "127.0.0.1", "x.wild.test": "127.0.0.1", "other.test": "127.0.0.1"})
	secrets, err := egress.LoadSecrets(map[string]egress.SecretSource{
		"gh": {Env: "GH", Domains: []string{"api.bound.test", "*.wild.test"}},
	}, func(string) (string, bool) { return teamSecret, true })
	require.NoError(t, err)
	eg := egress.NewEgress(egress.EgressConfig{Resolver: dns.resolver(), Timeout: 10 * time.Second, Secrets: secrets})

	var got seen
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		host, _, _ := net.SplitHostPort(r.Host)
		dump := fmt.Sprintf("%s %s auth=%s key=%s body=%s", r.Method, r.URL.RequestURI(), r.Header.Get("Authorization"), r.Header.Get("X-Api-Key"), body)
		got.add(host, dump)
		w.Header().Set("X-Echo", r.Header.Get("Authorization"))
		fmt.Fprint(w, dump)
	})
	mux.HandleFunc("/to-other", func(w http.ResponseWriter, r *http.Request) {
		got.add("api.bound.test", "redirect")
		_, port, _ := net.SplitHostPort(r.Host)
		http.Redirect(w, r, "http://other.test:"+port+"/landed", http.StatusFound)
	})
	mux.HandleFunc("/split", func(w http.ResponseWriter, r *http.Request) {
		// The value arrives in two writes, across the reader's buffer boundary.
		fl := w.(http.Flusher)
		fmt.Fprint(w, strings.Repeat("a", 32<<10-5)+teamSecret[:9])
		fl.Flush()
		time.Sleep(20 * time.Millisecond)
		fmt.Fprint(w, teamSecret[9:]+" end")
	})
	srv, _ := countingServer(t, mux.ServeHTTP)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	client := eg.Client([]string{"api.bound.test", "*.wild.test", "other.test"})
	at := func(host, path string) string { return fmt.Sprintf("http://%s:%d%s", host, port, path) }
	do := func(t *testing.T, method, u, body string, hdr map[string]string) (*http.Response, string, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequestWithContext(ctx, method, u, rd)
		require.NoError(t, err)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, string(b), nil
	}
	ref := "{{secret:gh}}"

	t.Run("header, query, path and body are filled in for a bound host; echoes come back as the reference", func(t *testing.T) {
		resp, body, err := do(t, "POST", at("api.bound.test", "/p/"+ref+"?token="+ref), "payload "+ref, map[string]string{"Authorization": "token " + ref})
		require.NoError(t, err)
		require.NotContains(t, body, teamSecret)
		require.Equal(t, "POST /p/"+ref+"?token="+ref+" auth=token "+ref+" key= body=payload "+ref, body)
		require.Equal(t, "token "+ref, resp.Header.Get("X-Echo"))
		require.Contains(t, resp.Request.URL.String(), "secret", "the caller's request keeps the reference")
		require.NotContains(t, resp.Request.URL.String(), teamSecret)
		n, withValue := got.carried("api.bound.test")
		require.Equal(t, 1, n)
		require.Equal(t, 1, withValue, "the server received the value")
		got.mu.Lock()
		dump := got.reqs["api.bound.test"][0]
		got.mu.Unlock()
		require.Equal(t, "POST /p/"+teamSecret+"?token="+teamSecret+" auth=token "+teamSecret+" key= body=payload "+teamSecret, dump)
	})
	t.Run("a wildcard binding", func(t *testing.T) {
		_, body, err := do(t, "GET", at("x.wild.test", "/"), "", map[string]string{"Authorization": ref})
		require.NoError(t, err)
		require.Contains(t, body, "auth="+ref)
		_, withValue := got.carried("x.wild.test")
		require.Equal(t, 1, withValue)
	})
	t.Run("a host the secret is not bound to is refused before anything is sent", func(t *testing.T) {
		_, _, err := do(t, "GET", at("other.test", "/"), "", map[string]string{"Authorization": ref})
		require.ErrorIs(t, err, egress.ErrSecretRefused)
		require.ErrorIs(t, err, egress.ErrEgressDenied)
		require.ErrorContains(t, err, "secret gh may only be sent to api.bound.test, *.wild.test, not other.test")
		n, _ := got.carried("other.test")
		require.Zero(t, n)
	})
	t.Run("an unknown secret is refused", func(t *testing.T) {
		_, _, err := do(t, "GET", at("api.bound.test", "/"), "", map[string]string{"Authorization": "{{secret:nope}}"})
		require.ErrorIs(t, err, egress.ErrSecretRefused)
		require.ErrorContains(t, err, `unknown secret "nope" (configured: gh)`)
	})
	t.Run("a redirect to an unbound host does not carry the value", func(t *testing.T) {
		_, _, err := do(t, "GET", at("api.bound.test", "/to-other"), "", map[string]string{"X-Api-Key": ref})
		require.ErrorIs(t, err, egress.ErrSecretRefused)
		require.ErrorContains(t, err, "not other.test")
		_, withValue := got.carried("other.test")
		require.Zero(t, withValue)
	})
	t.Run("a value split across reads is still scrubbed", func(t *testing.T) {
		_, body, err := do(t, "GET", at("api.bound.test", "/split"), "", nil)
		require.NoError(t, err)
		require.NotContains(t, body, teamSecret)
		require.True(t, strings.HasSuffix(body, "a"+ref+" end"), body[len(body)-40:])
	})
	t.Run("without secrets configured a reference is refused", func(t *testing.T) {
		bare := egress.NewEgress(egress.EgressConfig{Resolver: dns.resolver(), Timeout: 10 * time.Second})
		req, err := http.NewRequest("GET", at("api.bound.test", "/"), nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", ref)
		_, err = bare.Client([]string{"api.bound.test"}).Do(req)
		require.ErrorContains(t, err, `unknown secret "gh" (none are configured)`)
	})
}

func TestDLPLetsSecretReferencesPass(t *testing.T) {
	t.Parallel()
	d, err := egress.NewDLP()
	require.NoError(t, err)
	for _, args := range []string{
		`{"url":"https://api.github.com/user","headers":{"Authorization":"token {{secret:github}}"}}`,
		`{"headers":{"X-Api-Key":"{{secret:openai_prod}}","api_key":"{{secret:k}}"}}`,
		`{"url":"https://h/x?access_token={{secret:github}}&api_key=%7B%7Bsecret%3Agithub%7D%7D"}`,
		`{"body":"password={{secret:db.password}}"}`,
	} {
		require.Empty(t, d.Scan(args), args)
	}
	// A real credential next to a reference is still found.
	require.NotEmpty(t, d.Scan(`{"headers":{"A":"{{secret:github}}","B":"token ghp_R7x9Kq2LmN4pV8sT1wZ5yB3cD6fG0hJ2kL4m"}}`))
}
