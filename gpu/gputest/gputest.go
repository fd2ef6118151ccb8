// Package gputest builds the stand-in GPU service image tests lease: FROM scratch +
// Debian's static busybox serving /www (with a /health file) by busybox httpd on
// port 8080, built locally through the Engine API (nothing is pulled).
package gputest

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/client"
)

// StaticBusybox returns Debian's busybox-static binary, refusing a dynamically
// linked one (it would not run in a scratch image).
func StaticBusybox() ([]byte, error) {
	for _, p := range []string{"/bin/busybox", "/usr/bin/busybox"} {
		f, err := elf.Open(p)
		if err != nil {
			continue
		}
		dynamic := false
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				dynamic = true
			}
		}
		f.Close()
		if !dynamic {
			return os.ReadFile(p)
		}
	}
	return nil, fmt.Errorf("no statically linked busybox (apt-get install busybox-static)")
}

// BuildStandin builds the stand-in image under tag.
func BuildStandin(ctx context.Context, dc *client.Client, tag string) error {
	bb, err := StaticBusybox()
	if err != nil {
		return err
	}
	return BuildContext(ctx, dc, tag, []File{
		{Name: "Dockerfile", Mode: 0o644, Body: []byte("FROM scratch\nCOPY busybox /bin/busybox\nCOPY www /www\n" +
			`CMD ["/bin/busybox", "httpd", "-f", "-p", "8080", "-h", "/www"]` + "\n")},
		{Name: "busybox", Mode: 0o755, Body: bb},
		{Name: "www/health", Mode: 0o644, Body: []byte("ok\n")},
	})
}

// File is one file of a build context.
type File struct {
	Name string
	Mode int64
	Body []byte
}

// BuildContext builds the image a build context of files (a Dockerfile among
// them, FROM scratch: nothing is pulled) describes, under tag, through the
// Engine API, and reports the build's own error.
func BuildContext(ctx context.Context, dc *client.Client, tag string, files []File) error {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f.Name, Mode: f.Mode, Size: int64(len(f.Body)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := tw.Write(f.Body); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	resp, err := dc.ImageBuild(ctx, &buf, build.ImageBuildOptions{Tags: []string{tag}, Remove: true, ForceRemove: true, Version: build.BuilderV1})
	if err != nil {
		return fmt.Errorf("build image %s: %w", tag, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Error != "" {
			return fmt.Errorf("build image %s: %s", tag, line.Error)
		}
	}
	return sc.Err()
}

// BuildGoImages compiles the module's commands pkgs (e.g. "./cmd/fenceproxy")
// as static binaries (CGO_ENABLED=0) and builds one FROM-scratch image per
// command through the Engine API, tagged tagPrefix+"-"+<command name>; it
// returns the tags by command name. Nothing is pulled. dir is the module root.
func BuildGoImages(ctx context.Context, dc *client.Client, dir, tagPrefix string, pkgs ...string) (map[string]string, error) {
	bins, err := compile(ctx, dir, pkgs...)
	if err != nil {
		return nil, err
	}
	tags := map[string]string{}
	for name, bin := range bins {
		tag := tagPrefix + "-" + name
		if err := BuildContext(ctx, dc, tag, []File{
			{Name: "Dockerfile", Mode: 0o644, Body: []byte("FROM scratch\nCOPY " + name + " /" + name + "\n" + `ENTRYPOINT ["/` + name + `"]` + "\n")},
			{Name: name, Mode: 0o755, Body: bin},
		}); err != nil {
			return nil, err
		}
		tags[name] = tag
	}
	return tags, nil
}

// BuildGoImageOn compiles the module's command pkg as a static binary and
// builds it into an image FROM base, a local image (nothing is pulled), as
// /usr/local/bin/<command name>, its entrypoint, under tag. It is how a
// simulator that needs a base image's tools runs (comfysim's video workflows
// run ffmpeg, so their image is the media image plus comfysim).
func BuildGoImageOn(ctx context.Context, dc *client.Client, dir, base, tag, pkg string) error {
	bins, err := compile(ctx, dir, pkg)
	if err != nil {
		return err
	}
	name := filepath.Base(pkg)
	return BuildContext(ctx, dc, tag, []File{
		{Name: "Dockerfile", Mode: 0o644, Body: []byte("FROM " + base + "\nCOPY " + name + " /usr/local/bin/" + name + "\n" + `ENTRYPOINT ["/usr/local/bin/` + name + `"]` + "\n")},
		{Name: name, Mode: 0o755, Body: bins[name]},
	})
}

// compile builds pkgs as static binaries and returns them by command name.
func compile(ctx context.Context, dir string, pkgs ...string) (map[string][]byte, error) {
	out, err := os.MkdirTemp("", "gputest-bin-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(out)
	args := append([]string{"build", "-trimpath", "-ldflags=-s -w", "-o", out + "/"}, pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build %v: %v\n%s", pkgs, err, b)
	}
	bins := map[string][]byte{}
	for _, p := range pkgs {
		name := filepath.Base(p)
		bin, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			return nil, err
		}
		bins[name] = bin
	}
	return bins, nil
}
