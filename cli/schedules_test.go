package cli

import (
	"bytes"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/fleettest"
)

// schedules create, list, show, pause, resume and delete over a real API; a
// schedule the API refuses is its message.
func TestSchedulesCommands(t *testing.T) {
	t.Parallel()
	f := fleettest.Start(t, fleettest.Options{NoWorker: true})
	cli := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := Main(append(append([]string{"schedules"}, args...), "--api", f.URL), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	code, out, errOut := cli("create", "--name", "nightly", "--cron", "0 3 * * *", "--tz", "Europe/Paris", "--template", "demo",
		"--prompt", "summarize", "--var", "topic=news", "--overlap", "queue_one", "--catch-up", "last", "--jitter", "5m")
	require.Equal(t, 0, code, errOut)
	id := regexp.MustCompile(`sch_[a-z0-9]+`).FindString(out)
	require.NotEmpty(t, id, out)
	require.Contains(t, out, "overlap queue_one, catch-up last, jitter up to 5m0s")
	require.Contains(t, out, "next: ")

	code, _, errOut = cli("create", "--name", "never", "--cron", "0 0 30 2 *", "--template", "demo", "--prompt", "x", "--var", "topic=t")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "HTTP 400")
	require.Contains(t, errOut, "never fires")

	code, out, errOut = cli("list")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, id)
	require.Contains(t, out, "Europe/Paris")
	code, out, errOut = cli("show", id, "--next", "2")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "no ticks yet")
	for _, sub := range []string{"pause", "resume", "delete"} {
		code, out, errOut = cli(sub, id)
		require.Equal(t, 0, code, errOut)
		require.Contains(t, out, id)
	}
	code, _, errOut = cli("show", id)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "HTTP 404")
	code, _, errOut = cli("show", "not-an-id")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "sch_")
}
