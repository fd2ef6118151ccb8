package cli

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/fleettest"
)

// `aetherium dev` without api.tokens runs an API that asks for the token it
// generated: not for nothing, not for another token. The CLI finds the token in
// the file dev wrote; the printed sign-in URL carries it in its fragment.
// Not parallel: it sets AETHERIUM_API_TOKEN_FILE, as a developer would.
func TestDevWithoutTokensRequiresTheGeneratedToken(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data", DevTokenFile)
	t.Setenv("AETHERIUM_API_TOKEN_FILE", path)
	t.Setenv("AETHERIUM_API_TOKEN", "")
	cfg := fleettest.Config(t)
	cfg.API.Tokens = nil
	var out bytes.Buffer
	stop, err := startDevToken(&cfg, &out)
	require.NoError(t, err)
	require.Len(t, cfg.API.Tokens, 1)
	f := fleettest.StartWith(t, cfg, fleettest.Options{NoWorker: true})

	st, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "the token file is its owner's only")
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	secret := strings.TrimSpace(string(raw))
	require.GreaterOrEqual(t, len(secret), 43, "256 bits of randomness")
	require.Contains(t, out.String(), "/app/#token="+secret)
	require.Contains(t, out.String(), path)

	get := func(auth string) int {
		req, err := http.NewRequest("GET", f.URL+"/api/runs", nil)
		require.NoError(t, err)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusUnauthorized, get(""))
	require.Equal(t, http.StatusUnauthorized, get("Bearer not-the-token"))
	require.Equal(t, http.StatusOK, get("Bearer "+secret))

	// The client commands read the file: a run submitted and listed with no
	// token in the environment.
	var o, e bytes.Buffer
	require.Equal(t, 0, Main([]string{"run", "--api", f.URL, "--template", "demo", "--prompt", "hi", "--var", "topic=t"}, &o, &e), e.String())
	o.Reset()
	require.Equal(t, 0, Main([]string{"approvals", "list", "--api", f.URL}, &o, &e), e.String())
	// Without the file, the same command is refused.
	stop()
	_, err = os.Stat(path)
	require.ErrorIs(t, err, os.ErrNotExist, "dev removes its token file when it stops")
	e.Reset()
	require.Equal(t, 1, Main([]string{"approvals", "list", "--api", f.URL}, &o, &e))
	require.Contains(t, e.String(), "401")

	// A configuration with tokens is left alone: no token made, no file.
	cfg2 := fleettest.Config(t)
	cfg2.API.Tokens = cfg.API.Tokens
	out.Reset()
	stop, err = startDevToken(&cfg2, &out)
	require.NoError(t, err)
	defer stop()
	require.Empty(t, out.String())
	_, err = os.Stat(path)
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestSignInURL(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{
		"127.0.0.1:8080": "http://127.0.0.1:8080/app/#token=s",
		"0.0.0.0:9000":   "http://127.0.0.1:9000/app/#token=s",
		"[::]:9000":      "http://127.0.0.1:9000/app/#token=s",
		"[::1]:8080":     "http://[::1]:8080/app/#token=s",
		"localhost:1":    "http://localhost:1/app/#token=s",
	} {
		require.Equal(t, want, signInURL(addr, "s"), addr)
	}
}
