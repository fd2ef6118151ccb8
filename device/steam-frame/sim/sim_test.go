package sim_test

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/device/steam-frame/sim"
)

// The simulator answers only the command shapes the scripts use; anything else, in
// particular anything a remote shell would interpret, is refused loudly.
func TestSimulatorIsStrict(t *testing.T) {
	dir := t.TempDir()
	sc := filepath.Join(dir, "scenario.yaml")
	require.NoError(t, sim.WriteScenario(sc, sim.Scenario{Installed: map[string]sim.Package{"com.x.game": {VersionName: "1", VersionCode: 1}}}))
	t.Setenv(sim.EnvScenario, sc)
	t.Setenv(sim.EnvState, filepath.Join(dir, "state"))
	run := func(argv0 string, args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := sim.Main(argv0, args, &out, &errb)
		return code, out.String(), errb.String()
	}
	ssh := []string{"-p", "22", "-o", "BatchMode=yes", "deck@127.0.0.1", "--"}

	code, out, _ := run("/x/ssh", append(ssh, "frame-ctl", "container-status")...)
	require.Equal(t, 0, code)
	require.Equal(t, "running\n", out)

	code, _, errs := run("ssh", "-p", "2222", "deck@127.0.0.1", "--", "frame-ctl", "container-status")
	require.Equal(t, 255, code)
	require.Contains(t, errs, "Connection refused")

	code, _, errs = run("ssh", "-p", "22", "root@127.0.0.1", "--", "frame-ctl", "container-status")
	require.Equal(t, 255, code)
	require.Contains(t, errs, "Permission denied")

	code, _, errs = run("ssh", append(ssh, "frame-ctl", "container-status;", "reboot")...)
	require.Equal(t, 127, code)
	require.Contains(t, errs, "shell syntax")

	code, _, _ = run("ssh", append(ssh, "reboot")...)
	require.Equal(t, 127, code)

	code, out, _ = run("adb", "connect", "127.0.0.1:5555")
	require.Equal(t, 0, code, out)
	adb := []string{"-s", "127.0.0.1:5555"}
	for _, bad := range [][]string{
		{"shell", "pidof", "com.x.game;reboot"},
		{"shell", "pidof com.x.game && reboot"},
		{"shell", "am", "force-stop", "$(id)"},
		{"shell", "reboot"},
		{"shell", "rm", "-rf", "/data"},
		{"logcat"},
		{"root"},
	} {
		code, _, errs = run("adb", append(adb, bad...)...)
		require.NotEqual(t, 0, code, "%v", bad)
		require.NotEmpty(t, errs, "%v", bad)
	}
	code, _, errs = run("adb", "-s", "10.0.0.9:5555", "get-state")
	require.Equal(t, 1, code)
	require.Contains(t, errs, "not found")
	code, _, errs = run("adb", append(adb, "pull", "/sdcard/../data/x", dir)...)
	require.Equal(t, 1, code)
	require.Contains(t, errs, "Permission denied")

	code, _, errs = run("sh", "-c", "id")
	require.Equal(t, 2, code)
	require.Contains(t, errs, "call me as ssh or adb")
}
