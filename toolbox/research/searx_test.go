package research_test

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/toolbox/research"
)

func unavailable(t *testing.T, format string, a ...any) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf(format+" (CI=true: required)", a...)
	}
	t.Skipf(format, a...)
}

// startSearx runs Debian's searx in a network namespace of its own, joined to this
// host by a veth pair and with no route beyond it: its engines fail to resolve
// anything (no packet leaves this machine), and it answers on the namespace's
// address. It returns the base URL.
func startSearx(t *testing.T) string {
	t.Helper()
	for _, bin := range []string{"searx-run", "ip"} {
		if _, err := exec.LookPath(bin); err != nil {
			unavailable(t, "%s not installed (scripts/services.sh installs it)", bin)
		}
	}
	if os.Geteuid() != 0 {
		unavailable(t, "a network namespace needs root")
	}
	tmpl, err := os.ReadFile("/usr/share/doc/searx/examples/settings.yml")
	if err != nil {
		unavailable(t, "searx example settings: %v", err)
	}
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	ns, host, peer := "aeth-sx-"+id, "vsxh"+id, "vsxn"+id
	// A /30 from 10.214.0.0/16, away from the sandbox networks' 10.213.0.0/16.
	last := int(b[1] & 0xfc)
	hostIP, nsIP := fmt.Sprintf("10.214.%d.%d", b[0], last+1), fmt.Sprintf("10.214.%d.%d", b[0], last+2)
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	run("netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	run("link", "add", host, "type", "veth", "peer", "name", peer)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", host).Run() })
	run("link", "set", peer, "netns", ns)
	run("addr", "add", hostIP+"/30", "dev", host)
	run("link", "set", host, "up")
	run("netns", "exec", ns, "ip", "link", "set", "lo", "up")
	run("netns", "exec", ns, "ip", "addr", "add", nsIP+"/30", "dev", peer)
	run("netns", "exec", ns, "ip", "link", "set", peer, "up")

	dir := t.TempDir()
	settings := strings.NewReplacer(`secret_key : "ultrasecretkey"`, `secret_key : "aetherium-test-`+id+`"`,
		`bind_address : "127.0.0.1"`, `bind_address : "`+nsIP+`"`).Replace(string(tmpl))
	require.Contains(t, settings, nsIP, "the example settings changed shape")
	path := filepath.Join(dir, "settings.yml")
	require.NoError(t, os.WriteFile(path, []byte(settings), 0o644))
	log, err := os.Create(filepath.Join(dir, "searx.log"))
	require.NoError(t, err)
	cmd := exec.Command("ip", "netns", "exec", ns, "searx-run")
	cmd.Env = append(os.Environ(), "SEARX_SETTINGS_PATH="+path)
	cmd.Stdout, cmd.Stderr = log, log
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			out, _ := os.ReadFile(log.Name())
			t.Logf("searx log:\n%s", out)
		}
	})
	base := "http://" + nsIP + ":8888"
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(base + "/")
		if err == nil {
			resp.Body.Close()
			return base
		}
		if time.Now().After(deadline) {
			t.Fatalf("searx did not answer on %s within 60s: %v", base, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// A real SearXNG-family server whose engines cannot reach anything answers an empty
// result set and its unresponsive engines: web_search passes that on as a clean,
// empty answer from that backend (no fallback, no error).
func TestWebSearchAgainstSearx(t *testing.T) {
	t.Parallel()
	base := startSearx(t)
	call := webTools(t, research.Config{SearXNGURLs: []string{base}, DuckDuckGo: "off", SearchTimeout: 30 * time.Second})
	var ans research.SearchAnswer
	require.NoError(t, call("web_search", research.SearchArgs{Query: "aetherium fleet"}, &ans))
	require.Equal(t, "searxng "+base, ans.Backend)
	require.Empty(t, ans.Results)
	require.NotEmpty(t, ans.UnresponsiveEngines, "searx names the engines that failed")
	require.Empty(t, ans.Skipped)
}
