package cli

import (
	"bytes"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/webhook/inbound"
)

// hooks create, list, show, deliveries, rotate and delete over a real API: the
// secret is printed by create and rotate only, a signed delivery shows up as
// accepted with its run, and the API's refusals are its message.
func TestHooksCommands(t *testing.T) {
	t.Parallel()
	f := fleettest.Start(t, fleettest.Options{NoWorker: true})
	cli := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := Main(append(args, "--api", f.URL), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	code, out, errOut := cli("hooks", "create", "--name", "issues", "--scheme", "github", "--template", "demo",
		"--prompt", "Triage: {{.topic}}", "--var", "topic=/issue/title")
	require.Equal(t, 0, code, errOut)
	id := regexp.MustCompile(`hk_[0-9a-f]{32}`).FindString(out)
	secret := regexp.MustCompile(`secret: (\S+)`).FindStringSubmatch(out)
	require.NotEmpty(t, id, out)
	require.Len(t, secret, 2, out)
	require.Contains(t, out, "/hooks/"+id)

	code, out, _ = cli("hooks", "list")
	require.Equal(t, 0, code)
	require.Contains(t, out, id)
	code, out, _ = cli("hooks", "show", id)
	require.Equal(t, 0, code)
	require.Contains(t, out, `variable topic = payload at "/issue/title"`)
	require.NotContains(t, out, secret[1])

	body := []byte(`{"issue":{"title":"from the CLI test"}}`)
	req, err := http.NewRequest("POST", f.URL+"/hooks/"+id, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(inbound.HeaderGitHubSignature, inbound.SignGitHub(secret[1], body))
	req.Header.Set(inbound.HeaderGitHubDelivery, "cli-1")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	code, out, _ = cli("hooks", "deliveries", id, "--limit", "5")
	require.Equal(t, 0, code)
	require.Contains(t, out, "cli-1")
	require.Contains(t, out, "accepted")

	code, out, _ = cli("hooks", "rotate", id)
	require.Equal(t, 0, code)
	require.Regexp(t, `secret: \S+`, out)
	require.NotContains(t, out, secret[1])

	code, _, errOut = cli("hooks", "create", "--name", "x", "--scheme", "github", "--template", "demo", "--prompt", "p", "--var", "colour=/c")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "422")
	require.Contains(t, errOut, "topic")
	require.False(t, strings.Contains(errOut, `{"error"`), errOut)
	code, _, errOut = cli("hooks", "show", "nope")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "want a hook id")
	code, _, errOut = cli("hooks", "list", "--limit", "3")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "does not take --limit")

	code, out, _ = cli("hooks", "delete", id)
	require.Equal(t, 0, code, out)
	code, _, errOut = cli("hooks", "show", id)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "404")
}
