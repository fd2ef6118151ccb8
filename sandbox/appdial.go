package sandbox

import (
	"context"
	"fmt"
	"io"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
)

// dialHostRE is what a host handed to nc may look like: a name or an address,
// never an option (no leading dash) and nothing a shell would read (argv is
// passed without one anyway).
var dialHostRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.:-]*$`)

// DialProject opens a TCP stream that starts inside the project's running
// sandbox container: addr is read as the sandbox reads it, so localhost:8000 is
// the app a run_shell command of this run started there, and nothing else. It
// runs busybox nc in the container through an exec whose standard input and
// output are the stream (the attach API, as StartAttached: no port is published
// and the worker makes no connection into the run's network). ErrNoSandbox when
// the project has no running container (it starts with the first run_shell).
//
// The stream's first failure (nc cannot connect) is returned by Read with nc's
// own message, so an HTTP client reports "connection refused" rather than EOF.
func (d *Docker) DialProject(ctx context.Context, projectID, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("%w: address %q: %v", ErrInvalidRequest, addr, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return nil, fmt.Errorf("%w: port %q", ErrInvalidRequest, port)
	}
	if !dialHostRE.MatchString(host) {
		return nil, fmt.Errorf("%w: host %q", ErrInvalidRequest, host)
	}
	if strings.EqualFold(host, "localhost") {
		// The sandbox's hosts file need not name localhost (busybox then
		// says "bad address"); it means the container's own loopback.
		host = "127.0.0.1"
	}
	name := d.ContainerName(projectID)
	insp, err := d.cli.ContainerInspect(ctx, name)
	if cerrdefs.IsNotFound(err) {
		return nil, fmt.Errorf("%w: the container starts with the first run_shell (start the app there first)", ErrNoSandbox)
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox inspect: %w", err)
	}
	if insp.State == nil || !insp.State.Running {
		return nil, fmt.Errorf("%w: the container %s is not running", ErrNoSandbox, name)
	}
	marker := randomHex(12)
	created, err := d.cli.ContainerExecCreate(ctx, insp.ID, container.ExecOptions{
		Env: []string{execMarker + "=" + marker},
		// The shell writes one byte once it runs: starting an exec takes tens of
		// milliseconds, which DialProject waits out so a caller timing the app
		// (validate_web_app's max_ms) counts it as connection setup.
		Cmd:         []string{"/bin/sh", "-c", `printf R && exec nc "$0" "$1"`, host, port},
		AttachStdin: true, AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		return nil, fmt.Errorf("sandbox dial exec: %w", err)
	}
	att, err := d.cli.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{})
	if err != nil {
		return nil, fmt.Errorf("sandbox dial attach: %w", err)
	}
	pr, pw := io.Pipe()
	c := &execConn{conn: att.Conn, r: pr, addr: addr}
	c.close = func() {
		att.Close()
		// Closing the stream ends nc's stdin, but nc keeps waiting on a peer that
		// never answers (a hung app): such a relay is killed after a grace period
		// rather than left to hold one of the sandbox's pids.
		go d.reapRelay(insp.ID, created.ID, marker)
	}
	go func() {
		// The exec's stdout is the stream; its stderr is nc's complaint.
		_, err := stdcopy.StdCopy(pw, &c.stderr, att.Reader)
		if err == nil {
			if msg := strings.TrimSpace(c.stderr.String()); msg != "" {
				err = fmt.Errorf("in the sandbox: %s", msg)
			} else {
				err = io.EOF
			}
		}
		_ = pw.CloseWithError(err)
	}()
	ready := make(chan error, 1)
	go func() {
		b := make([]byte, 1)
		_, err := io.ReadFull(pr, b)
		if err == nil && b[0] != 'R' {
			err = fmt.Errorf("unexpected first byte %q", b[0])
		}
		ready <- err
	}()
	select {
	case err := <-ready:
		if err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("sandbox dial: the relay did not start: %w", err)
		}
	case <-ctx.Done():
		_ = c.Close()
		return nil, fmt.Errorf("sandbox dial: %w", ctx.Err())
	}
	return c, nil
}

// relayGrace is how long a closed relay may take to exit on its own.
const relayGrace = 2 * time.Second

// reapRelay kills a relay still running relayGrace after its stream closed.
func (d *Docker) reapRelay(cid, execID, marker string) {
	ctx, cancel := context.WithTimeout(context.Background(), relayGrace+15*time.Second)
	defer cancel()
	deadline := time.Now().Add(relayGrace)
	for time.Now().Before(deadline) {
		ins, err := d.cli.ContainerExecInspect(ctx, execID)
		if err != nil || !ins.Running {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	d.kill(ctx, cid, marker)
}

// execConn is an exec's stdio as a net.Conn.
type execConn struct {
	conn   net.Conn
	r      *io.PipeReader
	close  func()
	once   sync.Once
	addr   string
	stderr lockedBuffer
}

func (c *execConn) Read(b []byte) (int, error)  { return c.r.Read(b) }
func (c *execConn) Write(b []byte) (int, error) { return c.conn.Write(b) }

func (c *execConn) Close() error {
	c.once.Do(func() {
		c.close()
		_ = c.r.Close()
	})
	return nil
}

func (c *execConn) LocalAddr() net.Addr  { return sandboxAddr("sandbox") }
func (c *execConn) RemoteAddr() net.Addr { return sandboxAddr(c.addr) }

// Deadlines apply to the engine connection that carries both directions: a read
// deadline that passes fails the copy, which fails Read.
func (c *execConn) SetDeadline(t time.Time) error      { return c.conn.SetDeadline(t) }
func (c *execConn) SetReadDeadline(t time.Time) error  { return c.conn.SetReadDeadline(t) }
func (c *execConn) SetWriteDeadline(t time.Time) error { return c.conn.SetWriteDeadline(t) }

type sandboxAddr string

func (a sandboxAddr) Network() string { return "sandbox" }
func (a sandboxAddr) String() string  { return string(a) }

// lockedBuffer keeps the first 4 KiB of nc's stderr.
type lockedBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if room := 4096 - len(l.b); room > 0 {
		l.b = append(l.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b)
}
