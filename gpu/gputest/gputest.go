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
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(name string, mode int64, body []byte) {
		_ = tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(body)), Typeflag: tar.TypeReg})
		_, _ = tw.Write(body)
	}
	add("Dockerfile", 0o644, []byte("FROM scratch\nCOPY busybox /bin/busybox\nCOPY www /www\n"+
		`CMD ["/bin/busybox", "httpd", "-f", "-p", "8080", "-h", "/www"]`+"\n"))
	add("busybox", 0o755, bb)
	add("www/health", 0o644, []byte("ok\n"))
	if err := tw.Close(); err != nil {
		return err
	}
	resp, err := dc.ImageBuild(ctx, &buf, build.ImageBuildOptions{Tags: []string{tag}, Remove: true, ForceRemove: true, Version: build.BuilderV1})
	if err != nil {
		return fmt.Errorf("build stand-in image: %w", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Error != "" {
			return fmt.Errorf("build stand-in image: %s", line.Error)
		}
	}
	return sc.Err()
}
