package sim

import (
	"bufio"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aetherium-engine/aetherium/device/apk"
	"github.com/aetherium-engine/aetherium/device/fps"
)

// Env names the simulator reads.
const (
	EnvScenario = "FRAME_SIM_SCENARIO"
	EnvState    = "FRAME_SIM_STATE"
)

// Main runs the simulator as the command named by argv0 (its base name: ssh or
// adb) and returns the exit code.
func Main(argv0 string, args []string, stdout, stderr io.Writer) int {
	h, unlock, err := open(os.Getenv(EnvScenario), os.Getenv(EnvState))
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	defer unlock()
	out := bufio.NewWriter(stdout)
	defer out.Flush()
	var code int
	switch filepath.Base(argv0) {
	case "ssh":
		code = h.ssh(args, out, stderr)
	case "adb":
		code = h.adb(args, out, stderr)
	default:
		fmt.Fprintf(stderr, "framesim: call me as ssh or adb, not %q\n", argv0)
		return 2
	}
	if err := h.save(); err != nil {
		fmt.Fprintln(stderr, "framesim: save state:", err)
		return 1
	}
	return code
}

// ---- ssh ------------------------------------------------------------------------

// sshArgOpts are OpenSSH's options that take an argument.
const sshArgOpts = "BbcDEeFIiJLlmOoPpQRSWw"

func (h *headset) ssh(args []string, out, errw io.Writer) int {
	port, user, key, host := 22, "", "", ""
	var cmd []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--" && host != "":
			cmd = args[i+1:]
			i = len(args)
		case len(a) >= 2 && a[0] == '-' && strings.IndexByte(sshArgOpts, a[1]) >= 0:
			val := a[2:]
			if val == "" {
				if i+1 >= len(args) {
					fmt.Fprintf(errw, "ssh: option requires an argument -- %c\n", a[1])
					return 255
				}
				i++
				val = args[i]
			}
			switch a[1] {
			case 'p':
				n, err := strconv.Atoi(val)
				if err != nil {
					fmt.Fprintf(errw, "ssh: Bad port '%s'\n", val)
					return 255
				}
				port = n
			case 'i':
				key = val
			case 'l':
				user = val
			}
		case len(a) >= 2 && a[0] == '-':
			// flag without argument (-T, -q, …)
		case host == "":
			host = a
			if u, hst, ok := strings.Cut(a, "@"); ok {
				user, host = u, hst
			}
		default:
			// OpenSSH keeps parsing options after the destination; the first other
			// word starts the remote command.
			cmd = args[i:]
			i = len(args)
		}
	}
	if host == "" {
		fmt.Fprintln(errw, "usage: ssh destination [command]")
		return 255
	}
	if h.sc.Unreachable || host != h.sc.Host || port != h.sc.SSHPort {
		fmt.Fprintf(errw, "ssh: connect to host %s port %d: Connection refused\n", host, port)
		return 255
	}
	if h.sc.Unpaired || user != h.sc.User || (h.sc.Key != "" && key != h.sc.Key) {
		fmt.Fprintf(errw, "%s@%s: Permission denied (publickey).\n", user, host)
		return 255
	}
	// ssh hands the remote shell one line: split it the way sh would for plain words.
	line := strings.Join(cmd, " ")
	if strings.ContainsAny(line, shellMeta) {
		fmt.Fprintf(errw, "framesim: remote command %q uses shell syntax the simulator does not model\n", line)
		return 127
	}
	w := strings.Fields(line)
	if len(w) == 0 || w[0] != "frame-ctl" {
		fmt.Fprintf(errw, "bash: line 1: %s: command not found\n", strings.Join(w, " "))
		return 127
	}
	switch {
	case len(w) == 2 && w[1] == "container-status":
		if h.st.ContainerRunning {
			fmt.Fprintln(out, "running")
		} else {
			fmt.Fprintln(out, "stopped")
		}
	case len(w) == 2 && w[1] == "container-start":
		h.startContainer()
		fmt.Fprintln(out, "starting")
	case len(w) == 3 && w[1] == "perf-start":
		h.st.Perf[w[2]] = h.now
		h.dirty = true
	case len(w) == 3 && w[1] == "perf-dump":
		start, ok := h.st.Perf[w[2]]
		if !ok {
			fmt.Fprintf(errw, "frame-ctl: no recording session %s\n", w[2])
			return 1
		}
		delete(h.st.Perf, w[2])
		h.dirty = true
		end := h.now
		if a := h.st.App; a != nil && !a.Ended.IsZero() && a.Ended.After(start) {
			end = a.Ended
		}
		if err := fps.Write(out, Frames(h.sc.App.Frames, end.Sub(start))); err != nil {
			fmt.Fprintln(errw, "frame-ctl:", err)
			return 1
		}
	default:
		fmt.Fprintf(errw, "frame-ctl: unknown command %q\n", strings.Join(w[1:], " "))
		return 2
	}
	return 0
}

// Frames renders a profile over d, the recording the compositor would have made.
func Frames(p Profile, d time.Duration) []fps.Frame {
	if p.FPS <= 0 {
		p.FPS = 72
	}
	rng := rand.New(rand.NewPCG(p.Seed, p.Seed^0x9e3779b97f4a7c15))
	base := 1e9 / p.FPS
	var out []fps.Frame
	var t int64
	steady := 0
	for t < d.Nanoseconds() {
		ft := base
		if time.Duration(t) < p.WarmUp && p.WarmUpFrameMs > 0 {
			ft = p.WarmUpFrameMs * 1e6
		} else {
			steady++
			if p.LongEvery > 0 && steady%p.LongEvery == 0 {
				ft = p.LongFrameMs * 1e6
			} else if p.JitterMs > 0 {
				ft += (rng.Float64()*2 - 1) * p.JitterMs * 1e6
			}
		}
		ns := max(int64(math.Round(ft)), 1)
		t += ns
		out = append(out, fps.Frame{PresentNS: t, FrameNS: ns})
	}
	return out
}

// ---- adb ------------------------------------------------------------------------

// shellMeta are characters a remote shell would interpret; the scripts never send
// them, and the simulator refuses them rather than pretend to be a shell.
const shellMeta = ";&|<>$`\\\"'(){}*?![]~\n#"

func (h *headset) adb(args []string, out, errw io.Writer) int {
	serial := ""
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		switch args[0] {
		case "-s":
			if len(args) < 2 {
				fmt.Fprintln(errw, "adb: -s requires an argument")
				return 1
			}
			serial, args = args[1], args[2:]
		default:
			fmt.Fprintf(errw, "framesim: adb option %s is not modelled\n", args[0])
			return 127
		}
	}
	if len(args) == 0 {
		fmt.Fprintln(errw, "adb: no command")
		return 1
	}
	me := h.sc.Serial()
	switch args[0] {
	case "devices":
		fmt.Fprintln(out, "List of devices attached")
		if h.st.ADB != "" {
			fmt.Fprintf(out, "%s\t%s\n", me, h.st.ADB)
		}
		fmt.Fprintln(out)
		return 0
	case "connect":
		if len(args) != 2 {
			fmt.Fprintln(errw, "adb: usage: adb connect HOST[:PORT]")
			return 1
		}
		if args[1] != me || h.sc.Unreachable || !h.st.ContainerRunning {
			fmt.Fprintf(out, "failed to connect to '%s': Connection refused\n", args[1])
			return 1
		}
		if h.sc.ADBUnauthorized {
			h.st.ADB, h.dirty = "unauthorized", true
			fmt.Fprintf(out, "failed to authenticate to %s\n", me)
			return 1
		}
		if h.st.ADB == "device" {
			fmt.Fprintf(out, "already connected to %s\n", me)
			return 0
		}
		h.st.ADB, h.dirty = "device", true
		fmt.Fprintf(out, "connected to %s\n", me)
		return 0
	case "disconnect":
		if h.st.ADB != "" {
			h.st.ADB, h.dirty = "", true
			fmt.Fprintf(out, "disconnected %s\n", me)
			return 0
		}
		fmt.Fprintf(out, "error: no such device '%s'\n", me)
		return 1
	}
	// Everything else talks to the device.
	if serial != me || h.st.ADB == "" || !h.st.ContainerRunning {
		if serial == me && h.st.ADB != "" {
			// The container went away under an open connection.
			h.st.ADB, h.dirty = "", true
		}
		fmt.Fprintf(errw, "adb: device '%s' not found\n", serial)
		return 1
	}
	if h.st.ADB == "unauthorized" {
		fmt.Fprintln(errw, "adb: device unauthorized.")
		return 1
	}
	switch args[0] {
	case "get-state":
		fmt.Fprintln(out, "device")
		return 0
	case "install":
		return h.install(args[1:], out)
	case "shell":
		return h.shell(args[1:], out, errw)
	case "exec-out":
		if strings.Join(args[1:], " ") == "screencap -p" {
			return h.screencap(out, errw)
		}
		return h.shell(args[1:], out, errw)
	case "logcat":
		return h.logcat(args[1:], out, errw)
	case "pull":
		return h.pull(args[1:], out, errw)
	case "push":
		return h.push(args[1:], out, errw)
	}
	fmt.Fprintf(errw, "framesim: adb %s is not modelled\n", args[0])
	return 127
}

func (h *headset) install(args []string, out io.Writer) int {
	var path string
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			path = a
		}
	}
	fmt.Fprintln(out, "Performing Streamed Install")
	// The package manager parses the archive; the simulator does it with the same
	// reader the driver validated it with, so a bad APK fails here too.
	info, err := apk.Inspect(path, apk.Limits{})
	if err != nil {
		fmt.Fprintf(out, "adb: failed to install %s: Failure [INSTALL_PARSE_FAILED_NOT_APK: %v]\n", path, err)
		return 1
	}
	if old, ok := h.st.Installed[info.Package]; ok && old.VersionCode > info.VersionCode {
		fmt.Fprintf(out, "adb: failed to install %s: Failure [INSTALL_FAILED_VERSION_DOWNGRADE]\n", path)
		return 1
	}
	if a := h.running(); a != nil && a.Package == info.Package {
		h.end("stopped", h.now)
	}
	h.st.Installed[info.Package] = Package{VersionName: info.VersionName, VersionCode: info.VersionCode}
	h.dirty = true
	fmt.Fprintln(out, "Success")
	return 0
}

func (h *headset) shell(args []string, out, errw io.Writer) int {
	line := strings.Join(args, " ")
	if strings.ContainsAny(line, shellMeta) {
		fmt.Fprintf(errw, "framesim: shell line %q uses shell syntax the simulator does not model\n", line)
		return 127
	}
	w := strings.Fields(line)
	if len(w) == 0 {
		fmt.Fprintln(errw, "framesim: interactive shells are not modelled")
		return 127
	}
	switch {
	case w[0] == "pidof" && len(w) == 2:
		if a := h.running(); a != nil && a.Package == w[1] {
			fmt.Fprintln(out, a.PID)
			return 0
		}
		return 1
	case w[0] == "monkey" && len(w) == 6 && w[1] == "-p" && w[3] == "-c" && w[4] == "android.intent.category.LAUNCHER" && w[5] == "1":
		pkg := w[2]
		if _, ok := h.st.Installed[pkg]; !ok {
			fmt.Fprintln(out, "** No activities found to run, monkey aborted.")
			return 252
		}
		if h.running() == nil || h.running().Package != pkg {
			if a := h.running(); a != nil {
				h.end("stopped", h.now)
			}
			h.st.NextPID++
			h.st.App = &AppRun{Package: pkg, PID: h.st.NextPID, Started: h.now}
			h.logf(h.now, 1000, "I", "ActivityManager", "Start proc %d:%s/u0a120 for top-activity {%s/.MainActivity}", h.st.NextPID, pkg, pkg)
		}
		fmt.Fprintln(out, "  bash arg: -p\n  bash arg: "+pkg+"\nEvents injected: 1\n## Network stats: elapsed time=12ms")
		return 0
	case w[0] == "am" && len(w) == 3 && w[1] == "force-stop":
		if a := h.running(); a != nil && a.Package == w[2] {
			h.end("stopped", h.now)
			h.logf(h.now, 1000, "I", "ActivityManager", "Force stopping %s appid=10120 user=0: from pid 2000", w[2])
		}
		return 0
	case w[0] == "dumpsys" && len(w) == 3 && w[1] == "package":
		p, ok := h.st.Installed[w[2]]
		if !ok {
			fmt.Fprintf(out, "Unable to find package: %s\n", w[2])
			return 0
		}
		fmt.Fprintf(out, "Packages:\n  Package [%s] (5e2b1c0):\n    userId=10120\n    versionCode=%d minSdk=30 targetSdk=30\n    versionName=%s\n", w[2], p.VersionCode, p.VersionName)
		return 0
	case w[0] == "find" && len(w) == 4 && w[2] == "-type" && w[3] == "f":
		root, err := h.sdcard(w[1])
		if err != nil {
			fmt.Fprintln(errw, "find:", err)
			return 1
		}
		if _, err := os.Stat(root); err != nil {
			fmt.Fprintf(errw, "find: %s: No such file or directory\n", w[1])
			return 1
		}
		var files []string
		_ = filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
			if err == nil && e.Type().IsRegular() {
				rel, _ := filepath.Rel(root, p)
				files = append(files, w[1]+"/"+filepath.ToSlash(rel))
			}
			return nil
		})
		slices.Sort(files)
		for _, f := range files {
			fmt.Fprintln(out, f)
		}
		return 0
	case w[0] == "ls" && len(w) == 2:
		p, err := h.sdcard(w[1])
		if err != nil {
			fmt.Fprintln(errw, "ls:", err)
			return 1
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			fmt.Fprintf(errw, "ls: %s: No such file or directory\n", w[1])
			return 1
		}
		for _, e := range entries {
			fmt.Fprintln(out, e.Name())
		}
		return 0
	case w[0] == "rm" && len(w) == 3 && w[1] == "-rf":
		p, err := h.sdcard(w[2])
		if err != nil {
			fmt.Fprintln(errw, "rm:", err)
			return 1
		}
		_ = os.RemoveAll(p)
		return 0
	case w[0] == "mkdir" && len(w) == 3 && w[1] == "-p":
		p, err := h.sdcard(w[2])
		if err != nil {
			fmt.Fprintln(errw, "mkdir:", err)
			return 1
		}
		if err := os.MkdirAll(p, 0o755); err != nil {
			fmt.Fprintln(errw, "mkdir:", err)
			return 1
		}
		return 0
	case w[0] == "screencap" && len(w) == 2 && w[1] == "-p":
		return h.screencap(out, errw)
	}
	fmt.Fprintf(errw, "framesim: shell command %q is not modelled\n", line)
	return 127
}

func (h *headset) logcat(args []string, out, errw io.Writer) int {
	switch strings.Join(args, " ") {
	case "-c":
		h.st.Log, h.dirty = nil, true
		return 0
	case "-d", "-d -v threadtime":
		fmt.Fprintln(out, "--------- beginning of main")
		for _, l := range h.st.Log {
			fmt.Fprintln(out, l)
		}
		return 0
	}
	fmt.Fprintf(errw, "framesim: logcat %s is not modelled (streaming would never end)\n", strings.Join(args, " "))
	return 127
}

// pull and push follow adb's rule: copying a directory onto a path that does not
// exist creates it with the directory's contents.
func (h *headset) pull(args []string, out, errw io.Writer) int {
	if len(args) != 2 {
		fmt.Fprintln(errw, "adb: usage: adb pull REMOTE LOCAL")
		return 1
	}
	src, err := h.sdcard(args[0])
	if err != nil {
		fmt.Fprintln(errw, "adb: error:", err)
		return 1
	}
	if _, err := os.Stat(src); err != nil {
		fmt.Fprintf(errw, "adb: error: failed to stat remote object '%s': No such file or directory\n", args[0])
		return 1
	}
	dst := args[1]
	if fi, err := os.Stat(dst); err == nil && fi.IsDir() {
		dst = filepath.Join(dst, filepath.Base(src))
	}
	n, err := copyTree(src, dst)
	if err != nil {
		fmt.Fprintln(errw, "adb: error:", err)
		return 1
	}
	fmt.Fprintf(out, "%s/: %d files pulled, 0 skipped.\n", args[0], n)
	return 0
}

func (h *headset) push(args []string, out, errw io.Writer) int {
	if len(args) != 2 {
		fmt.Fprintln(errw, "adb: usage: adb push LOCAL REMOTE")
		return 1
	}
	dst, err := h.sdcard(args[1])
	if err != nil {
		fmt.Fprintln(errw, "adb: error:", err)
		return 1
	}
	if fi, err := os.Stat(dst); err == nil && fi.IsDir() {
		dst = filepath.Join(dst, filepath.Base(args[0]))
	}
	if _, err := os.Stat(filepath.Dir(dst)); err != nil {
		fmt.Fprintf(errw, "adb: error: failed to copy '%s' to '%s': remote No such file or directory\n", args[0], args[1])
		return 1
	}
	n, err := copyTree(args[0], dst)
	if err != nil {
		fmt.Fprintln(errw, "adb: error:", err)
		return 1
	}
	fmt.Fprintf(out, "%s/: %d files pushed, 0 skipped.\n", args[0], n)
	return 0
}

func copyTree(from, to string) (int, error) {
	n := 0
	err := filepath.WalkDir(from, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		switch {
		case e.IsDir():
			return os.MkdirAll(dst, 0o755)
		case e.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			n++
			return os.WriteFile(dst, b, 0o644)
		}
		return nil
	})
	return n, err
}

// screencap draws what the simulated headset shows: the app's scene while it
// runs (a horizon with a marker that moves with the app's clock), the SteamOS
// home grid otherwise. Each capture is tinted a little differently so a contact
// sheet shows a sequence.
func (h *headset) screencap(out, errw io.Writer) int {
	w, ht := h.sc.CaptureWidth, h.sc.CaptureHeight
	img := image.NewNRGBA(image.Rect(0, 0, w, ht))
	h.st.Captures++
	h.dirty = true
	tint := uint8(h.st.Captures * 23 % 200)
	a := h.running()
	var phase float64
	if a != nil {
		phase = h.now.Sub(a.Started).Seconds()
	}
	for y := range ht {
		for x := range w {
			var c color.NRGBA
			switch {
			case a == nil:
				c = color.NRGBA{R: 40, G: 44, B: 52, A: 255}
				if x%40 == 0 || y%40 == 0 {
					c = color.NRGBA{R: 90, G: 96, B: 110, A: 255}
				}
			case y < ht/2:
				c = color.NRGBA{R: uint8(60 + 120*y/ht), G: uint8(120 + 100*y/ht), B: 230, A: 255}
			default:
				c = color.NRGBA{R: 60 + tint/4, G: uint8(140 - 60*y/ht), B: 70, A: 255}
			}
			img.SetNRGBA(x, y, c)
		}
	}
	if a != nil {
		cx := int(float64(w)/2 + float64(w)/3*math.Sin(phase))
		for y := ht/2 - 30; y < ht/2+30; y++ {
			for x := cx - 30; x < cx+30; x++ {
				if x >= 0 && x < w && y >= 0 && y < ht {
					img.SetNRGBA(x, y, color.NRGBA{R: 255, G: 200 - tint/2, B: tint, A: 255})
				}
			}
		}
	}
	if err := png.Encode(out, img); err != nil {
		fmt.Fprintln(errw, "screencap:", err)
		return 1
	}
	return 0
}
