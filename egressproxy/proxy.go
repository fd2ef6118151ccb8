package egressproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/elazarl/goproxy"

	"github.com/aetherium-engine/aetherium/egress"
)

// ErrDenied is a connection the proxy refused; the reason follows it.
var ErrDenied = errors.New("sandbox egress refused")

// Recorder stores one connection record (store.Store implements it).
type Recorder interface {
	InsertEgress(ctx context.Context, c egress.Connection) error
}

// Deps are the proxy's collaborators.
type Deps struct {
	// Policy is the destination policy. Default: a egress.EgressPolicy that knows
	// no fleet endpoints (the fleet passes its own, which does).
	Policy Policy
	// DLP scans plaintext requests. Required.
	DLP *egress.DLP
	// Recorder stores connection records. Required.
	Recorder Recorder
	// Resolver resolves names for upstream dials. Default net.DefaultResolver;
	// tests point it at their own DNS server.
	Resolver *net.Resolver
	Log      *slog.Logger
}

// Binding is what the proxy knows about one run's sandbox network.
type Binding struct {
	Run string
	// Agent is the agent whose command runs in the sandbox now: connections are
	// attributed to the last agent that started a command (a run's agents share
	// one sandbox).
	Agent string
	// Allowlist is the team's allowed_domains.
	Allowlist []string
	// Ports are the team's extra destination ports (beyond Config.Ports).
	Ports []int
	// DenyPrivate is the team's egress.private: deny (private ranges refused even
	// where the deployment allows them).
	DenyPrivate bool
	Subnet      netip.Prefix
	Gateway     netip.Addr
}

// Proxy serves every egress-enabled sandbox network of this worker.
type Proxy struct {
	cfg  Config
	deps Deps
	log  *slog.Logger
	pool netip.Prefix
	gp   *goproxy.ProxyHttpServer
	tr   *http.Transport

	mu   sync.Mutex
	runs map[string]*runState

	stop chan struct{}
	done chan struct{}

	watchMu  sync.Mutex
	watchSeq int
	watchers map[string]map[int]func(egress.Connection)

	// remote is the egress service's side (Config.Service); nil: this process
	// listens on the gateways itself.
	remote *remote
}

type runState struct {
	mu sync.Mutex
	b  Binding
	// srv is nil when another worker process on this host already listens on the
	// network's gateway, or when the egress service does.
	srv *http.Server
	// bound is when this worker last bound the run at the egress service.
	bound time.Time
}

func (r *runState) binding() Binding {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.b
}

// New builds the proxy; it listens only once Serve binds a run's network.
func New(cfg Config, deps Deps) (*Proxy, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.DLP == nil || deps.Recorder == nil {
		return nil, errors.New("egress proxy: DLP and Recorder are required")
	}
	if deps.Policy == nil {
		p, err := egress.NewEgressPolicy(egress.EgressPolicyConfig{Log: deps.Log})
		if err != nil {
			return nil, fmt.Errorf("egress proxy: default policy: %w", err)
		}
		deps.Policy = p
	}
	if deps.Resolver == nil {
		deps.Resolver = net.DefaultResolver
	}
	if deps.Log == nil {
		deps.Log = slog.Default()
	}
	p := &Proxy{cfg: cfg, deps: deps, log: deps.Log, pool: cfg.Pool(), runs: map[string]*runState{},
		stop: make(chan struct{}), done: make(chan struct{})}
	d := &net.Dialer{Timeout: cfg.DialTimeout, Resolver: deps.Resolver, ControlContext: p.dialControl}
	p.tr = &http.Transport{
		Proxy:       nil,
		DialContext: p.dialRecorded(d.DialContext),
		// One dial per request, so each record carries the address it really
		// reached and the dial check runs for every request.
		DisableKeepAlives:     true,
		ResponseHeaderTimeout: 60 * time.Second,
	}
	gp := goproxy.NewProxyHttpServer()
	gp.Tr = p.tr
	gp.Logger = slogLogger{p.log}
	gp.NonproxyHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "this is the sandbox egress proxy: send absolute-form requests or CONNECT", http.StatusBadRequest)
	})
	gp.OnRequest().HandleConnectFunc(p.onConnect)
	gp.OnRequest().DoFunc(p.onRequest)
	gp.ConnectDialWithReq = func(req *http.Request, network, addr string) (net.Conn, error) {
		return p.connectDial(req, network, addr, d)
	}
	p.gp = gp
	if cfg.Remote() {
		if err := p.openRemote(); err != nil {
			return nil, err
		}
	}
	go p.sweep()
	return p, nil
}

// Port is the port sandboxes reach the proxy on (their gateway's).
func (p *Proxy) Port() int { return p.cfg.Port }

// Config is the proxy's configuration with defaults applied.
func (p *Proxy) Config() Config { return p.cfg }

// URL is the proxy address a sandbox on gw uses.
func (p *Proxy) URL(gw netip.Addr) string {
	return "http://" + netip.AddrPortFrom(gw, uint16(p.cfg.Port)).String()
}

// Serve starts serving b's network, or updates its binding (agent, allowlist) when
// it already does. Idempotent. A gateway port already taken by another worker
// process on this host means that process serves the network: not an error.
func (p *Proxy) Serve(ctx context.Context, b Binding) error {
	if b.Run == "" || !b.Subnet.IsValid() || !b.Gateway.IsValid() || !b.Subnet.Contains(b.Gateway) {
		return fmt.Errorf("egress proxy: bad binding for run %q (subnet %s, gateway %s)", b.Run, b.Subnet, b.Gateway)
	}
	if p.remote != nil {
		return p.serveRemote(ctx, b)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if r, ok := p.runs[b.Run]; ok && r.binding().Gateway == b.Gateway {
		r.mu.Lock()
		r.b = b
		r.mu.Unlock()
		return nil
	} else if ok {
		p.stopLocked(b.Run)
	}
	r := &runState{b: b}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", netip.AddrPortFrom(b.Gateway, uint16(p.cfg.Port)).String())
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		p.log.Info("egress proxy: another process serves this sandbox network", "run", b.Run, "gateway", b.Gateway)
	case err != nil:
		return fmt.Errorf("egress proxy: listen on %s: %w", b.Gateway, err)
	default:
		r.srv = &http.Server{
			Handler:           p.gp,
			ReadHeaderTimeout: 30 * time.Second,
			ConnContext:       func(ctx context.Context, _ net.Conn) context.Context { return context.WithValue(ctx, runKey{}, r) },
		}
		go func() {
			if err := r.srv.Serve(subnetListener{Listener: ln, subnet: b.Subnet}); err != nil && !errors.Is(err, http.ErrServerClosed) {
				p.log.Warn("egress proxy: serve", "run", b.Run, "err", err)
			}
		}()
	}
	p.runs[b.Run] = r
	return nil
}

// Stop closes run's listener (its tunnels end with it). Idempotent.
func (p *Proxy) Stop(run string) {
	p.mu.Lock()
	p.stopLocked(run)
	p.mu.Unlock()
	if p.remote != nil {
		p.stopRemote(run)
	}
}

func (p *Proxy) stopLocked(run string) {
	r, ok := p.runs[run]
	if !ok {
		return
	}
	delete(p.runs, run)
	if r.srv != nil {
		_ = r.srv.Close()
	}
}

// Close stops every listener.
func (p *Proxy) Close() error {
	select {
	case <-p.stop:
		return nil
	default:
	}
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	for run := range p.runs {
		p.stopLocked(run)
	}
	if p.remote != nil {
		// The runs stay bound at the service: the next worker to serve one
		// binds it to itself.
		p.remote.close()
	}
	p.tr.CloseIdleConnections()
	return nil
}

// sweep stops listeners whose network is gone: another worker (the run's cleanup,
// the orphan sweep) may remove a network this process serves.
func (p *Proxy) sweep() {
	defer close(p.done)
	if p.remote != nil {
		// The host's addresses, before the first sandbox asks for anything.
		p.sweepRemote()
	}
	t := time.NewTicker(30 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		if p.remote != nil {
			p.sweepRemote()
			continue
		}
		local, err := localAddrs()
		if err != nil {
			continue
		}
		p.mu.Lock()
		for run, r := range p.runs {
			if !local[r.binding().Gateway] {
				p.stopLocked(run)
			}
		}
		p.mu.Unlock()
	}
}

type runKey struct{}

func runFrom(ctx context.Context) *runState {
	r, _ := ctx.Value(runKey{}).(*runState)
	return r
}

// subnetListener drops connections whose source is not on the run's own network:
// the gateway address of one run's network is reachable from another's bridge
// (both are host addresses), and the listener is how the proxy knows the run.
type subnetListener struct {
	net.Listener
	subnet netip.Prefix
}

func (l subnetListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil && l.subnet.Contains(ap.Addr().Unmap()) {
			return c, nil
		}
		_ = c.Close()
	}
}

// allowedPort reports whether port is open to the run's team.
func (p *Proxy) allowedPort(b Binding, port int) bool {
	return slices.Contains(p.cfg.Ports, port) || slices.Contains(b.Ports, port)
}

// check is the policy before any dial: port, then the destination policy, then this
// proxy's own refusals for an address given literally.
func (p *Proxy) check(b Binding, rawURL, host string, port int) error {
	if !p.allowedPort(b, port) {
		return fmt.Errorf("%w: port %d is not allowed (only %v unless the team's egress_ports allow more)", ErrDenied, port, p.cfg.Ports)
	}
	if err := p.deps.Policy.CheckURLFor(rawURL, b.Allowlist, b.DenyPrivate); err != nil {
		return fmt.Errorf("%w: %w", ErrDenied, err)
	}
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		if err := p.checkAddr(a); err != nil {
			return err
		}
	}
	return nil
}

// checkAddr refuses this host and every sandbox network, whatever the allowlist
// says: the fleet's API, metrics, Redis and PostgreSQL listen here, and one run's
// sandbox must never reach another's.
func (p *Proxy) checkAddr(a netip.Addr) error {
	a = a.Unmap().WithZone("")
	switch {
	case p.pool.Contains(a):
		return fmt.Errorf("%w: %s is on a sandbox network", ErrDenied, a)
	case a.IsLoopback(), a.IsUnspecified():
		return fmt.Errorf("%w: %s is this host (the fleet's own services)", ErrDenied, a)
	}
	local, err := localAddrs()
	if err != nil {
		return fmt.Errorf("%w: cannot list this host's addresses: %v", ErrDenied, err)
	}
	if local[a] {
		return fmt.Errorf("%w: %s is an address of this host (the fleet's own services)", ErrDenied, a)
	}
	if p.remote != nil {
		// This process runs in a network namespace of its own (a container):
		// the host's addresses, where the sandboxes' gateways and the host's
		// services are, come from the egress service.
		host, err := p.remote.isHost(a)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrDenied, err)
		}
		if host {
			return fmt.Errorf("%w: %s is an address of this host (the fleet's own services)", ErrDenied, a)
		}
	}
	return nil
}

// dialControl runs on every address dialed, after DNS and before connect, with the
// binding of the run whose request or tunnel dials (its team's private switch).
func (p *Proxy) dialControl(ctx context.Context, network, address string, _ syscall.RawConn) error {
	r := runFrom(ctx)
	if r == nil {
		return fmt.Errorf("%w: a dial outside any sandbox's request", ErrDenied)
	}
	if err := p.deps.Policy.CheckDialFor(network, address, r.binding().DenyPrivate); err != nil {
		return fmt.Errorf("%w: %w", ErrDenied, err)
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: cannot parse dialed address %q", ErrDenied, address)
	}
	return p.checkAddr(ap.Addr())
}

func localAddrs() (map[netip.Addr]bool, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	out := make(map[netip.Addr]bool, len(addrs))
	for _, a := range addrs {
		if pfx, err := netip.ParsePrefix(a.String()); err == nil {
			out[pfx.Addr().Unmap().WithZone("")] = true
		}
	}
	return out, nil
}

type remoteKey struct{}

// dialRecorded notes the address a plaintext request reached, for its record.
func (p *Proxy) dialRecorded(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err == nil {
			if rp, ok := ctx.Value(remoteKey{}).(*string); ok {
				*rp = c.RemoteAddr().String()
			}
		}
		return c, err
	}
}

func splitHostPort(hostport string, defPort int) (string, int, error) {
	host, ps, err := net.SplitHostPort(hostport)
	if err != nil {
		if defPort == 0 {
			return "", 0, err
		}
		return strings.Trim(hostport, "[]"), defPort, nil
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("bad port %q", ps)
	}
	return host, port, nil
}

func (p *Proxy) record(ev egress.Connection) {
	p.notify(ev)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.deps.Recorder.InsertEgress(ctx, ev); err != nil {
		p.log.Error("egress proxy: record connection", "run", ev.RunID, "host", ev.Host, "err", err)
	}
}

// Watch hands every record of run made from now on to fn (refusals at once,
// allowed connections when they end) until the returned stop is called. A tool
// that drives a client in the sandbox network (capture_reference's browser) learns
// this way what the proxy refused it and why. fn must not block.
func (p *Proxy) Watch(run string, fn func(egress.Connection)) (stop func()) {
	p.watchMu.Lock()
	defer p.watchMu.Unlock()
	if p.watchers == nil {
		p.watchers = map[string]map[int]func(egress.Connection){}
	}
	if p.watchers[run] == nil {
		p.watchers[run] = map[int]func(egress.Connection){}
	}
	p.watchSeq++
	id := p.watchSeq
	p.watchers[run][id] = fn
	return func() {
		p.watchMu.Lock()
		defer p.watchMu.Unlock()
		delete(p.watchers[run], id)
		if len(p.watchers[run]) == 0 {
			delete(p.watchers, run)
		}
	}
}

func (p *Proxy) notify(ev egress.Connection) {
	p.watchMu.Lock()
	defer p.watchMu.Unlock()
	for _, fn := range p.watchers[ev.RunID] {
		fn(ev)
	}
}

func (p *Proxy) refuse(ev egress.Connection, err error) string {
	ev.Allowed, ev.Reason = false, err.Error()
	p.record(ev)
	p.log.Info("egress proxy: refused", "run", ev.RunID, "agent", ev.Agent, "method", ev.Method, "host", ev.Host, "port", ev.Port, "reason", ev.Reason)
	return ev.Reason
}

// onConnect decides a CONNECT tunnel before anything is dialed. What flows through
// an allowed tunnel (TLS) is opaque: no DLP there.
func (p *Proxy) onConnect(hostport string, ctx *goproxy.ProxyCtx) (*goproxy.ConnectAction, string) {
	r := runFrom(ctx.Req.Context())
	ev := egress.Connection{Method: http.MethodConnect, At: time.Now()}
	reject := func(reason string) (*goproxy.ConnectAction, string) {
		ctx.Resp = goproxy.NewResponse(ctx.Req, "text/plain", http.StatusForbidden, reason+"\n")
		return goproxy.RejectConnect, hostport
	}
	if r == nil {
		return reject("sandbox egress refused: unknown sandbox")
	}
	b := r.binding()
	ev.RunID, ev.Agent = b.Run, b.Agent
	host, port, err := splitHostPort(hostport, 0)
	ev.Host, ev.Port = host, port
	if err != nil {
		ev.Host = hostport
		return reject(p.refuse(ev, fmt.Errorf("%w: CONNECT target %q: %v", ErrDenied, hostport, err)))
	}
	u := (&url.URL{Scheme: "https", Host: net.JoinHostPort(host, strconv.Itoa(port)), Path: "/"}).String()
	if err := p.check(b, u, host, port); err != nil {
		return reject(p.refuse(ev, err))
	}
	return goproxy.OkConnect, hostport
}

// connectDial dials an allowed tunnel's target through the checked dialer and
// records the tunnel when it closes.
func (p *Proxy) connectDial(req *http.Request, network, addr string, d *net.Dialer) (net.Conn, error) {
	r := runFrom(req.Context())
	if r == nil {
		return nil, fmt.Errorf("%w: unknown sandbox", ErrDenied)
	}
	b := r.binding()
	host, port, _ := splitHostPort(addr, 0)
	ev := egress.Connection{RunID: b.Run, Agent: b.Agent, Method: http.MethodConnect, Host: host, Port: port, At: time.Now()}
	c, err := d.DialContext(req.Context(), network, addr)
	if err != nil {
		if errors.Is(err, ErrDenied) {
			p.refuse(ev, err)
		} else {
			ev.Allowed, ev.Reason = true, "dial failed: "+err.Error()
			p.record(ev)
		}
		return nil, err
	}
	ev.Allowed, ev.Remote = true, c.RemoteAddr().String()
	return &countingConn{Conn: c, onClose: func(in, out int64) {
		ev.BytesIn, ev.BytesOut, ev.DurationMS = in, out, time.Since(ev.At).Milliseconds()
		p.record(ev)
	}}, nil
}

// onRequest decides a plaintext request: policy, then DLP on its URL, headers and
// body, then forwards it and records it when its response body closes.
func (p *Proxy) onRequest(req *http.Request, ctx *goproxy.ProxyCtx) (*http.Request, *http.Response) {
	r := runFrom(req.Context())
	ev := egress.Connection{Method: req.Method, At: time.Now()}
	forbid := func(reason string) (*http.Request, *http.Response) {
		return req, goproxy.NewResponse(req, "text/plain", http.StatusForbidden, reason+"\n")
	}
	if r == nil {
		return forbid("sandbox egress refused: unknown sandbox")
	}
	b := r.binding()
	ev.RunID, ev.Agent = b.Run, b.Agent
	if req.URL.Scheme != "http" {
		ev.Host = req.URL.Host
		return forbid(p.refuse(ev, fmt.Errorf("%w: scheme %q through the proxy (use CONNECT for https)", ErrDenied, req.URL.Scheme)))
	}
	host, port, err := splitHostPort(req.URL.Host, 80)
	ev.Host, ev.Port = host, port
	if err != nil {
		return forbid(p.refuse(ev, fmt.Errorf("%w: %v", ErrDenied, err)))
	}
	if err := p.check(b, req.URL.String(), host, port); err != nil {
		return forbid(p.refuse(ev, err))
	}
	body, err := p.readBody(req)
	if err != nil {
		return forbid(p.refuse(ev, err))
	}
	if fs := p.deps.DLP.Scan(scanText(req, body)); len(fs) > 0 {
		return forbid(p.refuse(ev, fmt.Errorf("%w: DLP found a credential in the request (%s)", ErrDenied, strings.Join(egress.RuleIDs(fs), ", "))))
	}
	ev.BytesOut = int64(len(body))
	ctx.RoundTripper = goproxy.RoundTripperFunc(func(req *http.Request, _ *goproxy.ProxyCtx) (*http.Response, error) {
		var remote string
		req = req.WithContext(context.WithValue(req.Context(), remoteKey{}, &remote))
		resp, err := p.tr.RoundTrip(req)
		ev.Remote = remote
		if err != nil {
			if errors.Is(err, ErrDenied) {
				return goproxy.NewResponse(req, "text/plain", http.StatusForbidden, p.refuse(ev, err)+"\n"), nil
			}
			ev.Allowed, ev.Reason, ev.Status = true, "upstream: "+err.Error(), http.StatusBadGateway
			ev.DurationMS = time.Since(ev.At).Milliseconds()
			p.record(ev)
			return goproxy.NewResponse(req, "text/plain", http.StatusBadGateway, "upstream: "+err.Error()+"\n"), nil
		}
		ev.Allowed, ev.Status = true, resp.StatusCode
		resp.Body = &countingBody{ReadCloser: resp.Body, onClose: func(n int64) {
			ev.BytesIn, ev.DurationMS = n, time.Since(ev.At).Milliseconds()
			p.record(ev)
		}}
		return resp, nil
	})
	return req, nil
}

// readBody buffers a plaintext body for DLP; one too large to scan is refused.
func (p *Proxy) readBody(req *http.Request) ([]byte, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, nil
	}
	defer req.Body.Close()
	b, err := io.ReadAll(io.LimitReader(req.Body, p.cfg.MaxScanBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: reading the request body: %v", ErrDenied, err)
	}
	if int64(len(b)) > p.cfg.MaxScanBytes {
		return nil, fmt.Errorf("%w: request body over %d bytes cannot be scanned (sandbox.egress_proxy.max_scan_bytes)", ErrDenied, p.cfg.MaxScanBytes)
	}
	req.Body = io.NopCloser(bytes.NewReader(b))
	req.ContentLength = int64(len(b))
	return b, nil
}

// scanText is what DLP reads of a plaintext request: everything that leaves.
func scanText(req *http.Request, body []byte) string {
	var sb strings.Builder
	sb.WriteString(req.URL.String())
	sb.WriteByte('\n')
	for k, vs := range req.Header {
		for _, v := range vs {
			sb.WriteString(k + ": " + v + "\n")
		}
	}
	sb.Write(body)
	return sb.String()
}

// countingConn counts a tunnel's bytes and reports them once, on Close.
type countingConn struct {
	net.Conn
	in, out atomic.Int64
	once    sync.Once
	onClose func(in, out int64)
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.in.Add(int64(n))
	return n, err
}

func (c *countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.out.Add(int64(n))
	return n, err
}

func (c *countingConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.onClose(c.in.Load(), c.out.Load()) })
	return err
}

// CloseWrite keeps half-close working through the wrapper (goproxy uses it).
func (c *countingConn) CloseWrite() error {
	if hc, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return hc.CloseWrite()
	}
	return nil
}

// CloseRead is CloseWrite's counterpart.
func (c *countingConn) CloseRead() error {
	if hc, ok := c.Conn.(interface{ CloseRead() error }); ok {
		return hc.CloseRead()
	}
	return nil
}

type countingBody struct {
	io.ReadCloser
	n       int64
	once    sync.Once
	onClose func(n int64)
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	return n, err
}

func (b *countingBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(func() { b.onClose(b.n) })
	return err
}

// slogLogger routes goproxy's own log lines (Verbose is off: warnings only).
type slogLogger struct{ l *slog.Logger }

func (s slogLogger) Printf(format string, v ...any) {
	s.l.Debug("egress proxy: " + fmt.Sprintf(format, v...))
}
