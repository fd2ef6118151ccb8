package egressproxy

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// relayMagic starts the line the egress service writes on each connection it
// hands a worker's relay listener: magic, token, run, the sandbox's address.
const relayMagic = "AETHERIUM-EGRESS/1"

// runIDRE is what a run id in the service's API may look like (it travels in the
// relay's first line, space-separated).
var runIDRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,128}$`)

// ServiceBinding is what a worker tells the egress service about one run's
// sandbox network (PUT /v1/runs/{run}).
type ServiceBinding struct {
	Subnet  string `json:"subnet"`
	Gateway string `json:"gateway"`
	// RelayPort is the worker's relay listener's port, on the address the
	// service saw the request come from.
	RelayPort int `json:"relay_port"`
}

// ServiceState is the egress service's answer to GET /v1/state and to a PUT:
// every address of the host (a worker's proxy refuses them as destinations, as
// it refuses its own) and the runs whose networks it serves.
type ServiceState struct {
	HostAddrs []string `json:"host_addrs"`
	Runs      []string `json:"runs"`
}

// Service is the egress service (`aetherium egress`): in the host's network
// namespace with NET_ADMIN, it installs the firewall rules, listens on the
// gateway of each run network a worker binds (accepting only that network's
// addresses, as the worker's own listener would) and relays each connection to
// the worker's relay listener, whose proxy applies the policy, DLP and records.
// It holds no policy, no database and no Docker socket: a worker that wants a
// run served says so over the API, with the shared token.
type Service struct {
	cfg   Config
	token string
	log   *slog.Logger

	mu   sync.Mutex
	runs map[string]*relayRun
}

type relayRun struct {
	run    string
	subnet netip.Prefix
	gw     netip.Addr
	target string // the worker's relay listener (guarded by Service.mu)
	ln     net.Listener
}

// NewService reads the shared token (TokenFile), writing a random one when the
// file is missing.
func NewService(cfg Config, log *slog.Logger) (*Service, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	token, err := ensureToken(cfg.Service.TokenFile)
	if err != nil {
		return nil, err
	}
	return &Service{cfg: cfg, token: token, log: log, runs: map[string]*relayRun{}}, nil
}

// ensureToken returns the token in path, creating the file (0600, 32 random
// bytes in hex) when it does not exist.
func ensureToken(path string) (string, error) {
	if t, err := readToken(path); err == nil {
		return t, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("egress service token: %w", err)
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("egress service token: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(hex.EncodeToString(b)+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("egress service token: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("egress service token: %w", err)
	}
	return readToken(path)
}

// readToken reads a token file; an empty one is an error.
func readToken(path string) (string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("egress service token %s: %w", path, err)
	}
	t := strings.TrimSpace(string(raw))
	if t == "" || strings.ContainsAny(t, " \n\t") {
		return "", fmt.Errorf("egress service token %s: empty or malformed", path)
	}
	return t, nil
}

// Run installs the firewall rules and serves the API on Service.Listen until
// ctx ends (Serve).
func (s *Service) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Service.Listen)
	if err != nil {
		return fmt.Errorf("egress service: %w", err)
	}
	return s.Serve(ctx, ln)
}

// Serve installs the firewall rules, serves the API on ln until ctx ends, then
// closes every gateway listener and removes the rules (only when no sandbox
// bridge is left on the host: RemoveFirewall). A firewall that cannot be
// installed is an error: no gateway is ever served without it.
func (s *Service) Serve(ctx context.Context, ln net.Listener) error {
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err := s.cfg.InstallFirewall(fctx)
	cancel()
	if err != nil {
		_ = ln.Close()
		return fmt.Errorf("egress service: %w", err)
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	s.log.Info("egress service: serving", "addr", ln.Addr().String(), "proxy_port", s.cfg.Port, "subnet_pool", s.cfg.SubnetPool)
	t := time.NewTicker(30 * time.Second)
	defer t.Stop()
	var serveErr error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case serveErr = <-errc:
			break loop
		case <-t.C:
			s.sweep()
		}
	}
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = srv.Shutdown(sctx)
	scancel()
	s.mu.Lock()
	for run := range s.runs {
		s.stopLocked(run)
	}
	s.mu.Unlock()
	rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer rcancel()
	if _, err := s.cfg.RemoveFirewall(rctx); err != nil {
		s.log.Warn("egress service: firewall rules left in place", "err", err)
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return fmt.Errorf("egress service: %w", serveErr)
	}
	return nil
}

// sweep closes the listeners whose network is gone (the run's cleanup removed it).
func (s *Service) sweep() {
	local, err := localAddrs()
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for run, r := range s.runs {
		if !local[r.gw] {
			s.stopLocked(run)
		}
	}
}

func (s *Service) stopLocked(run string) {
	if r, ok := s.runs[run]; ok {
		delete(s.runs, run)
		_ = r.ln.Close()
	}
}

// Handler is the service's API, every route behind the shared token:
//
//	PUT    /v1/runs/{run}   serve a run's network (ServiceBinding); answers ServiceState
//	DELETE /v1/runs/{run}   stop serving it
//	GET    /v1/state        ServiceState
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /v1/runs/{run}", s.put)
	mux.HandleFunc("DELETE /v1/runs/{run}", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.stopLocked(r.PathValue("run"))
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /v1/state", func(w http.ResponseWriter, _ *http.Request) { s.writeState(w) })
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(s.token)) != 1 {
			http.Error(w, "egress service: missing or wrong token", http.StatusUnauthorized)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func (s *Service) writeState(w http.ResponseWriter) {
	st := ServiceState{HostAddrs: []string{}, Runs: []string{}}
	local, err := localAddrs()
	if err != nil {
		http.Error(w, "egress service: "+err.Error(), http.StatusInternalServerError)
		return
	}
	for a := range local {
		st.HostAddrs = append(st.HostAddrs, a.String())
	}
	s.mu.Lock()
	for run := range s.runs {
		st.Runs = append(st.Runs, run)
	}
	s.mu.Unlock()
	slices.Sort(st.HostAddrs)
	slices.Sort(st.Runs)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(st)
}

func (s *Service) put(w http.ResponseWriter, r *http.Request) {
	run := r.PathValue("run")
	var b ServiceBinding
	if !runIDRE.MatchString(run) {
		http.Error(w, "egress service: bad run id", http.StatusBadRequest)
		return
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&b); err != nil {
		http.Error(w, "egress service: body: "+err.Error(), http.StatusBadRequest)
		return
	}
	subnet, err1 := netip.ParsePrefix(b.Subnet)
	gw, err2 := netip.ParseAddr(b.Gateway)
	pool := s.cfg.Pool()
	switch {
	case err1 != nil || err2 != nil || b.RelayPort < 1 || b.RelayPort > 65535:
		http.Error(w, "egress service: want a subnet, a gateway and a relay port", http.StatusBadRequest)
		return
	case subnet.Bits() < pool.Bits() || !pool.Contains(subnet.Addr()) || !subnet.Contains(gw):
		// Only gateways of sandbox networks: the token must not open a
		// listener anywhere else on the host.
		http.Error(w, fmt.Sprintf("egress service: %s (gateway %s) is not a sandbox network of %s", subnet, gw, pool), http.StatusBadRequest)
		return
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		http.Error(w, "egress service: "+err.Error(), http.StatusBadRequest)
		return
	}
	target := net.JoinHostPort(host, strconv.Itoa(b.RelayPort))
	if err := s.bind(r.Context(), run, subnet.Masked(), gw, target); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	s.writeState(w)
}

// bind serves run's network, relaying to target (the worker that bound it last).
func (s *Service) bind(ctx context.Context, run string, subnet netip.Prefix, gw netip.Addr, target string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.runs[run]; ok && r.gw == gw && r.subnet == subnet {
		if r.target != target {
			s.log.Info("egress service: run rebound", "run", run, "worker", target)
		}
		r.target = target
		return nil
	} else if ok {
		s.stopLocked(run)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", netip.AddrPortFrom(gw, uint16(s.cfg.Port)).String())
	if err != nil {
		return fmt.Errorf("egress service: listen on %s: %w", gw, err)
	}
	r := &relayRun{run: run, subnet: subnet, gw: gw, target: target, ln: subnetListener{Listener: ln, subnet: subnet}}
	s.runs[run] = r
	go s.accept(r)
	s.log.Info("egress service: serving a run network", "run", run, "gateway", gw, "worker", target)
	return nil
}

func (s *Service) accept(r *relayRun) {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		go s.relay(r, c)
	}
}

// relay hands one sandbox connection to the worker's relay listener, after the
// line that says whose it is, and copies both ways until both sides are done.
func (s *Service) relay(r *relayRun, c net.Conn) {
	defer c.Close()
	s.mu.Lock()
	target := r.target
	s.mu.Unlock()
	up, err := (&net.Dialer{Timeout: 5 * time.Second}).Dial("tcp", target)
	if err != nil {
		s.log.Warn("egress service: the worker's relay does not answer", "run", r.run, "worker", target, "err", err)
		return
	}
	defer up.Close()
	if _, err := fmt.Fprintf(up, "%s %s %s %s\n", relayMagic, s.token, r.run, c.RemoteAddr().String()); err != nil {
		return
	}
	pipe(c, up)
}

// pipe copies a→b and b→a, half-closing each direction as it ends.
func pipe(a, b net.Conn) {
	var wg sync.WaitGroup
	cp := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			_ = dst.Close()
		}
	}
	wg.Add(2)
	go cp(a, b)
	go cp(b, a)
	wg.Wait()
}
