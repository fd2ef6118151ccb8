package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/aetherium-engine/aetherium/api"
	"github.com/aetherium-engine/aetherium/config"
)

// An API without tokens is open to whatever runs on the machine and, through the
// browser, to the pages its user visits. So `aetherium dev` never runs one: with
// api.tokens empty it makes a random admin token for the process's life (named
// "local", the principal a tokenless API had, so earlier runs stay the
// caller's), writes it for the CLI and prints a Studio sign-in URL carrying it,
// as Jupyter does.

// DevTokenFile is the name of the file, beside the workspaces directory (data/
// by default), that holds the token `aetherium dev` generated. Env
// AETHERIUM_API_TOKEN_FILE names another file, for dev and for the client
// commands alike.
const DevTokenFile = "dev-token"

// devTokenPath is where dev writes its token and the client commands look for
// it: AETHERIUM_API_TOKEN_FILE, else DevTokenFile beside cfg's workspaces.
func devTokenPath(cfg config.Config) string {
	if p := os.Getenv("AETHERIUM_API_TOKEN_FILE"); p != "" {
		return p
	}
	return filepath.Join(filepath.Dir(filepath.Clean(cfg.Workspaces)), DevTokenFile)
}

// startDevToken gives a dev configuration without tokens one: it adds the
// generated token to cfg, writes its secret to devTokenPath (0600, replaced
// atomically) and prints the sign-in URL to out. The returned stop removes the
// file if it still holds this token. A configuration with tokens is left as is.
func startDevToken(cfg *config.Config, out io.Writer) (stop func(), err error) {
	if len(cfg.API.Tokens) > 0 {
		return func() {}, nil
	}
	secret, tok, err := api.NewDevToken()
	if err != nil {
		return nil, err
	}
	path := devTokenPath(*cfg)
	if err := writeSecret(path, secret); err != nil {
		return nil, fmt.Errorf("dev token: %w", err)
	}
	cfg.API.Tokens = []api.Token{tok}
	// One person submits and decides: the self-approval rule would leave every
	// held call of theirs undecidable.
	cfg.Security.AllowSelfApproval = true
	fmt.Fprintf(out, "aetherium dev: api.tokens is empty, so this process made a token (role admin, principal %q) valid until it stops;\n"+
		"  as its one user you may approve your own runs' calls (security.allow_self_approval).\n"+
		"  The client commands read it from %s (or set AETHERIUM_API_TOKEN).\n"+
		"  Open the Studio: %s\n", tok.Name, path, signInURL(cfg.API.Addr, secret))
	return func() {
		if b, err := os.ReadFile(path); err == nil && bytes.Equal(bytes.TrimSpace(b), []byte(secret)) {
			_ = os.Remove(path)
		}
	}, nil
}

// writeSecret writes secret to path readable by its owner only: a temporary
// file in the same directory (0600 from the start) renamed over path, so the
// secret is never in a file others can read, even for a moment.
func writeSecret(path, secret string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".dev-token-*")
	if err != nil {
		return err
	}
	_, werr := f.WriteString(secret + "\n")
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(f.Name())
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		_ = os.Remove(f.Name())
		return err
	}
	return nil
}

// signInURL is the Studio's address with the token in the fragment: a browser
// never sends a fragment to the server (no log, no Referer holds it), and the
// Studio moves it into the tab's sessionStorage and drops it from the address.
func signInURL(addr, secret string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		host, port = "127.0.0.1", "8080"
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return (&url.URL{Scheme: "http", Host: net.JoinHostPort(host, port), Path: "/app/", Fragment: "token=" + secret}).String()
}

// clientTokenPath is devTokenPath of the client's configuration (the same
// aetherium.yaml and AETHERIUM_* variables dev reads; the defaults when it does
// not load: a client command needs no valid server configuration).
func clientTokenPath() string {
	cfg, err := config.Load()
	if err != nil {
		cfg = config.Default()
	}
	return devTokenPath(cfg)
}

// apiToken is the bearer token the client commands send to u: AETHERIUM_API_TOKEN;
// else the file AETHERIUM_API_TOKEN_FILE names; else, for an API on loopback
// only, the token a local `aetherium dev` wrote. None is "".
func apiToken(u *url.URL) string {
	if tok := os.Getenv("AETHERIUM_API_TOKEN"); tok != "" {
		return tok
	}
	if os.Getenv("AETHERIUM_API_TOKEN_FILE") == "" && !api.IsLoopback(net.JoinHostPort(u.Hostname(), "0")) {
		return ""
	}
	b, err := os.ReadFile(clientTokenPath())
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
