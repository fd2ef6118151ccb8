package api_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/api"
)

// The workspace browser's endpoints: a run's owner lists and downloads its
// files as opaque, sandboxed attachments; another submitter gets the run's 404;
// no path, however spelled, leaves the workspace or reaches the engine's own
// directory.
func TestWorkspaceFiles(t *testing.T) {
	t.Parallel()
	o := setupOwners(t, 0)
	ws := o.Workspaces.Dir(o.aliceRun)
	outside := filepath.Join(t.TempDir(), "secret.txt")
	require.NoError(t, os.WriteFile(outside, []byte("outside"), 0o600))
	for name, content := range map[string]string{
		"hello.txt":                 "hello",
		"site/index.html":           "<script>alert(1)</script>",
		"<img src=x onerror=1>.svg": `<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"/>`,
		".aetherium/snap/x":         "engine state",
	} {
		p := filepath.Join(ws, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
	require.NoError(t, os.Symlink(outside, filepath.Join(ws, "escape.txt")))
	require.NoError(t, os.Symlink(filepath.Dir(outside), filepath.Join(ws, "escdir")))

	code, _, raw := o.call(t, "alice", "GET", "/api/runs/"+o.aliceRun+"/files", nil)
	require.Equal(t, http.StatusOK, code, string(raw))
	var list api.FileList
	require.NoError(t, json.Unmarshal(raw, &list))
	var paths []string
	for _, f := range list.Files {
		paths = append(paths, f.Path)
	}
	require.ElementsMatch(t, []string{"hello.txt", "site/index.html", "<img src=x onerror=1>.svg"}, paths,
		"regular files only: no symlink, nothing of .aetherium")
	require.False(t, list.Truncated)

	// bob's own run has no workspace yet: an empty list, not an error.
	code, _, raw = o.call(t, "bob", "GET", "/api/runs/"+o.bobRun+"/files", nil)
	require.Equal(t, http.StatusOK, code, string(raw))
	require.JSONEq(t, `{"files":[],"truncated":false}`, string(raw))

	base := "/api/runs/" + o.aliceRun + "/file?path="
	for _, tc := range []struct {
		name, token, path string
		code              int
		body              string
	}{
		{"owner downloads", "alice", "hello.txt", http.StatusOK, "hello"},
		{"nested, encoded", "alice", "site%2Findex.html", http.StatusOK, "<script>alert(1)</script>"},
		{"odd name", "alice", url.PathEscape("<img src=x onerror=1>.svg"), http.StatusOK, `<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"/>`},
		{"read_all reads it", "auditor", "hello.txt", http.StatusOK, "hello"},
		{"another submitter", "bob", "hello.txt", http.StatusNotFound, ""},
		{"the approver is no reader of files", "oncall", "hello.txt", http.StatusNotFound, ""},
		{"no token", "", "hello.txt", http.StatusUnauthorized, ""},
		{"missing", "alice", "nope.txt", http.StatusNotFound, ""},
		{"dot-dot", "alice", "..%2F..%2F..%2Fetc%2Fpasswd", http.StatusBadRequest, ""},
		{"absolute", "alice", "%2Fetc%2Fpasswd", http.StatusBadRequest, ""},
		{"engine dir", "alice", ".aetherium%2Fsnap%2Fx", http.StatusBadRequest, ""},
		{"symlink out", "alice", "escape.txt", http.StatusBadRequest, ""},
		{"through a symlinked dir", "alice", "escdir%2Fsecret.txt", http.StatusBadRequest, ""},
		{"a directory", "alice", "site", http.StatusBadRequest, ""},
		{"NUL", "alice", "hello.txt%00", http.StatusBadRequest, ""},
		{"no path", "alice", "", http.StatusBadRequest, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, hdr, raw := o.call(t, tc.token, "GET", base+tc.path, nil)
			require.Equal(t, tc.code, code, string(raw))
			require.NotContains(t, string(raw), "outside", "nothing outside the workspace is served")
			if tc.code != http.StatusOK {
				return
			}
			require.Equal(t, tc.body, string(raw))
			require.Equal(t, "application/octet-stream", hdr.Get("Content-Type"))
			require.Regexp(t, `^attachment; filename`, hdr.Get("Content-Disposition"))
			require.Equal(t, "nosniff", hdr.Get("X-Content-Type-Options"))
			require.Equal(t, "sandbox; default-src 'none'", hdr.Get("Content-Security-Policy"))
		})
	}
}

// A template's form asks for the variables its prompts use.
func TestTemplateInfo(t *testing.T) {
	t.Parallel()
	o := setupOwners(t, 1)
	code, _, raw := o.call(t, "alice", "GET", "/api/templates/demo", nil)
	require.Equal(t, http.StatusOK, code, string(raw))
	var info api.TemplateInfo
	require.NoError(t, json.Unmarshal(raw, &info))
	require.Equal(t, []string{"topic"}, info.Variables)
	require.Equal(t, "demo", info.Name)
	code, _, raw = o.call(t, "alice", "GET", "/api/templates/no-such", nil)
	require.Equal(t, http.StatusNotFound, code, string(raw))
}

// Whatever run_shell leaves in a workspace — a FIFO, a socket, a symlink loop, a
// link into engine state, a 10 GiB sparse file — the listing and the download
// answer promptly with a clear refusal: nothing blocks on an open (a blocked
// openat outlives the request and leaks an OS thread).
func TestWorkspaceFilesHostileKinds(t *testing.T) {
	t.Parallel()
	o := setupOwners(t, 0)
	ws := o.Workspaces.Dir(o.aliceRun)
	require.NoError(t, os.MkdirAll(filepath.Join(ws, ".aetherium"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(ws, ".aetherium", "state"), []byte("ENGINE-STATE"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(ws, "ok.txt"), []byte("ok"), 0o644))
	require.NoError(t, syscall.Mkfifo(filepath.Join(ws, "pipe"), 0o644))
	require.NoError(t, os.Symlink("pipe", filepath.Join(ws, "to-pipe")))
	require.NoError(t, os.Symlink("loop-b", filepath.Join(ws, "loop-a")))
	require.NoError(t, os.Symlink("loop-a", filepath.Join(ws, "loop-b")))
	require.NoError(t, os.Symlink(".aetherium", filepath.Join(ws, "meta")))
	sock, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(ws, "sock"), Net: "unix"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sock.Close() })
	sparse, err := os.Create(filepath.Join(ws, "sparse"))
	require.NoError(t, err)
	require.NoError(t, sparse.Truncate(10<<30+1))
	require.NoError(t, sparse.Close())

	get := func(t *testing.T, path string) (int, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, "GET", o.URL+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer alice-secret")
		resp, err := o.Client().Do(req)
		require.NoError(t, err, "GET %s must answer before the deadline", path)
		defer resp.Body.Close()
		raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		require.NoError(t, err)
		return resp.StatusCode, string(raw)
	}
	for _, tc := range []struct{ name, path, says string }{
		{"fifo", "pipe", "named pipe"},
		{"symlink to a fifo", "to-pipe", "named pipe"},
		{"unix socket", "sock", "socket"},
		{"symlink loop", "loop-a", "symlink"},
		{"engine state through a symlink", "meta%2Fstate", "reserved"},
		{"10 GiB sparse file", "sparse", "limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, body := get(t, "/api/runs/"+o.aliceRun+"/file?path="+tc.path)
			require.Equal(t, http.StatusBadRequest, code, body)
			require.Contains(t, body, tc.says)
			require.NotContains(t, body, "ENGINE-STATE")
		})
	}
	code, body := get(t, "/api/runs/"+o.aliceRun+"/files")
	require.Equal(t, http.StatusOK, code, body)
	var list api.FileList
	require.NoError(t, json.Unmarshal([]byte(body), &list))
	var paths []string
	for _, f := range list.Files {
		paths = append(paths, f.Path)
	}
	require.ElementsMatch(t, []string{"ok.txt", "sparse"}, paths)
	code, body = get(t, "/api/runs/"+o.aliceRun+"/file?path=ok.txt")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok", body)
}
