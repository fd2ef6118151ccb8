package egressproxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"
)

// remote is a proxy whose host half is the egress service (Config.Service): it
// binds runs there and takes their connections on its relay listener.
type remote struct {
	cfg  ServiceConfig
	http *http.Client
	ln   net.Listener
	srv  *http.Server
	log  *slog.Logger

	mu   sync.RWMutex
	host map[netip.Addr]bool // nil until the service answered once
}

// openRemote starts the relay listener and the HTTP server behind it.
func (p *Proxy) openRemote() error {
	ln, err := net.Listen("tcp", p.cfg.Service.Relay)
	if err != nil {
		return fmt.Errorf("egress proxy: relay listener: %w", err)
	}
	rm := &remote{cfg: p.cfg.Service, http: &http.Client{Timeout: 10 * time.Second}, ln: ln, log: p.log}
	rm.srv = &http.Server{
		Handler:           p.gp,
		ReadHeaderTimeout: 30 * time.Second,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if rc, ok := c.(*relayConn); ok {
				return context.WithValue(ctx, runKey{}, rc.run)
			}
			return ctx
		},
	}
	rl := &relayListener{Listener: ln, p: p, conns: make(chan net.Conn), done: make(chan struct{})}
	go rl.loop()
	go func() {
		if err := rm.srv.Serve(rl); err != nil && !errors.Is(err, http.ErrServerClosed) {
			p.log.Warn("egress proxy: relay", "err", err)
		}
	}()
	p.remote = rm
	return nil
}

// RelayAddr is the relay listener's address ("" without an egress service).
func (p *Proxy) RelayAddr() string {
	if p.remote == nil {
		return ""
	}
	return p.remote.ln.Addr().String()
}

// do calls the egress service's API with the shared token; out, when not nil,
// receives the JSON answer.
func (rm *remote) do(ctx context.Context, method, path string, in, out any) error {
	token, err := readToken(rm.cfg.TokenFile)
	if err != nil {
		return err
	}
	var body io.Reader
	if in != nil {
		raw, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(rm.cfg.URL, "/")+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := rm.http.Do(req)
	if err != nil {
		return fmt.Errorf("egress service %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("egress service %s %s: HTTP %d: %s", method, path, resp.StatusCode, strings.TrimSpace(string(raw)))
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("egress service %s %s: %w", method, path, err)
		}
	}
	return nil
}

// learn keeps the host's addresses the service reported.
func (rm *remote) learn(st ServiceState) {
	host := make(map[netip.Addr]bool, len(st.HostAddrs))
	for _, s := range st.HostAddrs {
		if a, err := netip.ParseAddr(s); err == nil {
			host[a.Unmap().WithZone("")] = true
		}
	}
	rm.mu.Lock()
	rm.host = host
	rm.mu.Unlock()
}

// isHost reports whether a is an address of the egress service's host; unknown
// (the service never answered) is an error: the proxy then refuses.
func (rm *remote) isHost(a netip.Addr) (bool, error) {
	rm.mu.RLock()
	defer rm.mu.RUnlock()
	if rm.host == nil {
		return false, errors.New("the host's addresses are not known yet (the egress service has not answered)")
	}
	return rm.host[a], nil
}

// serveRemote binds b's network at the egress service (every time: the service
// may have restarted and lost it; the last worker to bind a run is the one its
// connections go to).
func (p *Proxy) serveRemote(ctx context.Context, b Binding) error {
	p.mu.Lock()
	if r, ok := p.runs[b.Run]; ok {
		r.mu.Lock()
		r.b, r.bound = b, time.Now()
		r.mu.Unlock()
	} else {
		p.runs[b.Run] = &runState{b: b, bound: time.Now()}
	}
	p.mu.Unlock()
	_, port, _ := net.SplitHostPort(p.remote.ln.Addr().String())
	relayPort, _ := strconv.Atoi(port)
	var st ServiceState
	err := p.remote.do(ctx, http.MethodPut, "/v1/runs/"+b.Run, ServiceBinding{
		Subnet: b.Subnet.String(), Gateway: b.Gateway.String(), RelayPort: relayPort,
	}, &st)
	if err != nil {
		return fmt.Errorf("egress proxy: %w", err)
	}
	p.remote.learn(st)
	return nil
}

// stopRemote tells the service to stop serving run's network (best effort: the
// service also closes a listener whose network is gone).
func (p *Proxy) stopRemote(run string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.remote.do(ctx, http.MethodDelete, "/v1/runs/"+run, nil, nil); err != nil {
		p.log.Warn("egress proxy: unbind a run at the egress service", "run", run, "err", err)
	}
}

// sweepRemote learns the host's addresses again and forgets the runs the service
// no longer serves (another worker released them), past a minute since this
// worker bound them (a bind in flight is not yet in the service's list).
func (p *Proxy) sweepRemote() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var st ServiceState
	if err := p.remote.do(ctx, http.MethodGet, "/v1/state", nil, &st); err != nil {
		p.log.Warn("egress proxy: the egress service", "err", err)
		return
	}
	p.remote.learn(st)
	served := map[string]bool{}
	for _, r := range st.Runs {
		served[r] = true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for run, r := range p.runs {
		r.mu.Lock()
		old := time.Since(r.bound) > time.Minute
		r.mu.Unlock()
		if !served[run] && old {
			delete(p.runs, run)
		}
	}
}

func (rm *remote) close() {
	_ = rm.srv.Close()
	_ = rm.ln.Close()
}

// relayListener accepts the egress service's connections, reads the line that
// says whose they are and hands the proxy's HTTP server only those that carry
// the token, a run this worker binds and a source on that run's network.
type relayListener struct {
	net.Listener
	p     *Proxy
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *relayListener) loop() {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			l.once.Do(func() { close(l.done) })
			return
		}
		go func() {
			rc, err := l.p.handshake(c)
			if err != nil {
				l.p.log.Warn("egress proxy: relay connection refused", "from", c.RemoteAddr().String(), "err", err)
				_ = c.Close()
				return
			}
			select {
			case l.conns <- rc:
			case <-l.done:
				_ = c.Close()
			}
		}()
	}
}

func (l *relayListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *relayListener) Close() error {
	err := l.Listener.Close()
	l.once.Do(func() { close(l.done) })
	return err
}

// relayConn is a relayed sandbox connection: its first line read, the rest
// (what the sandbox sent) still buffered in br.
type relayConn struct {
	net.Conn
	br  *bufio.Reader
	run *runState
	src netip.AddrPort
}

func (c *relayConn) Read(b []byte) (int, error) { return c.br.Read(b) }

// RemoteAddr is the sandbox's address, not the egress service's.
func (c *relayConn) RemoteAddr() net.Addr { return net.TCPAddrFromAddrPort(c.src) }

// CloseWrite keeps half-close working through the wrapper.
func (c *relayConn) CloseWrite() error {
	if hc, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return hc.CloseWrite()
	}
	return nil
}

func (p *Proxy) handshake(c net.Conn) (*relayConn, error) {
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReaderSize(c, 1024)
	line, err := br.ReadSlice('\n')
	if err != nil {
		return nil, fmt.Errorf("first line: %w", err)
	}
	f := strings.Fields(string(line))
	if len(f) != 4 || f[0] != relayMagic {
		return nil, errors.New("not an egress service connection")
	}
	token, err := readToken(p.cfg.Service.TokenFile)
	if err != nil {
		return nil, err
	}
	if subtle.ConstantTimeCompare([]byte(f[1]), []byte(token)) != 1 {
		return nil, errors.New("wrong token")
	}
	src, err := netip.ParseAddrPort(f[3])
	if err != nil {
		return nil, fmt.Errorf("source %q: %w", f[3], err)
	}
	p.mu.Lock()
	r, ok := p.runs[f[2]]
	p.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("run %s is not bound in this worker", f[2])
	}
	if !r.binding().Subnet.Contains(src.Addr().Unmap()) {
		return nil, fmt.Errorf("source %s is not on run %s's network", src, f[2])
	}
	_ = c.SetReadDeadline(time.Time{})
	return &relayConn{Conn: c, br: br, run: r, src: src}, nil
}
