package sandbox_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/sandbox"
	"github.com/aetherium-engine/aetherium/sandbox/sandboxtest"
)

// DialProject reaches what listens on the sandbox's own loopback (the run's app
// that run_shell started), reports nc's refusal when nothing listens there, and
// needs a running project sandbox.
func TestDialProject(t *testing.T) {
	t.Parallel()
	d := sandboxtest.Docker(t)
	ctx := context.Background()
	project, ws := sandboxtest.Project(), sandboxtest.Workspace(t)

	_, err := d.DialProject(ctx, project, "localhost:8000")
	require.ErrorIs(t, err, sandbox.ErrNoSandbox)

	res, err := d.Exec(ctx, sandbox.Request{Project: project, Workspace: ws,
		Command: "mkdir -p site && echo hello > site/index.html && httpd -p 127.0.0.1:8000 -h /workspace/site && echo started"})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, res.Output)

	for _, tc := range []struct {
		addr, want string
	}{
		{"localhost:8000", "hello\n"},
		{"127.0.0.1:8000", "hello\n"},
	} {
		conn, err := d.DialProject(ctx, project, tc.addr)
		require.NoError(t, err)
		_, err = fmt.Fprintf(conn, "GET /index.html HTTP/1.0\r\nHost: localhost\r\n\r\n")
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, 200, resp.StatusCode)
		require.Equal(t, tc.want, string(body))
		require.NoError(t, conn.Close())
	}

	conn, err := d.DialProject(ctx, project, "localhost:8001")
	require.NoError(t, err)
	_, err = io.ReadAll(conn)
	require.ErrorContains(t, err, "Connection refused")
	_ = conn.Close()

	// A relay to an app that never answers is killed after its stream closed:
	// it does not keep one of the sandbox's pids.
	res, err = d.Exec(ctx, sandbox.Request{Project: project, Workspace: ws,
		Command: "mkdir -p hang/cgi-bin && printf '#!/bin/sh\\nsleep 60\\n' > hang/cgi-bin/hang && chmod +x hang/cgi-bin/hang && httpd -p 127.0.0.1:8001 -h /workspace/hang"})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, res.Output)
	conn, err = d.DialProject(ctx, project, "localhost:8001")
	require.NoError(t, err)
	_, err = fmt.Fprintf(conn, "GET /cgi-bin/hang HTTP/1.0\r\nHost: localhost\r\n\r\n")
	require.NoError(t, err)
	require.NoError(t, conn.Close())
	require.Eventually(t, func() bool {
		res, err := d.Exec(ctx, sandbox.Request{Project: project, Workspace: ws, Command: "ps -o args | grep -c '^nc 127.0.0.1 8001' || true"})
		return err == nil && strings.TrimSpace(res.Output) == "0"
	}, 10*time.Second, 500*time.Millisecond, "the relay to the hung app still runs")

	for _, bad := range []string{"localhost", "-e:80", "localhost:0", "localhost:99999", "a b:80"} {
		_, err := d.DialProject(ctx, project, bad)
		require.ErrorIs(t, err, sandbox.ErrInvalidRequest, bad)
	}
}
