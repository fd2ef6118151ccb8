package api

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/aetherium-engine/aetherium/store"
)

// Roles a token may hold.
const (
	RoleSubmit  = "submit"
	RoleRead    = "read"
	RoleApprove = "approve"
	RoleAdmin   = "admin"
	// RoleReadAll reads every principal's runs; RoleRead reads only the caller's own.
	RoleReadAll = "read_all"
	// RoleMetrics reads /metrics on the API's port and nothing else (a scraper).
	RoleMetrics = "metrics"
	// RoleGrantBroad lets an approver make a grant that covers any command (a
	// bare *, or * after a shell or interpreter). Admin does not imply it: it
	// must be given by name.
	RoleGrantBroad = "grant_broad"
)

// Token is an API bearer token as configured (api.tokens): only the SHA-256 of its
// secret is configured.
type Token struct {
	Name string `yaml:"name"`
	// SHA256 is the hex SHA-256 of the secret (printf %s "$TOKEN" | sha256sum).
	SHA256 string   `yaml:"sha256"`
	Roles  []string `yaml:"roles"`
}

type principalKey struct{}

type rolesKey struct{}

// principal names who is calling: the token's name, or "local" when auth is off.
func principal(c *fiber.Ctx) string {
	if p, ok := c.Locals(principalKey{}).(string); ok && p != "" {
		return p
	}
	return store.LocalOwner
}

// hasRole reports whether the caller's token holds role (admin holds every role).
// Without authentication the one local principal holds them all.
func hasRole(c *fiber.Ctx, role string) bool {
	roles, ok := c.Locals(rolesKey{}).(map[string]bool)
	if !ok {
		return true
	}
	return roles[role] || roles[RoleAdmin]
}

// hasOwnRole reports whether the caller's token names role itself: admin does
// not stand in, and without authentication nobody holds it.
func hasOwnRole(c *fiber.Ctx, role string) bool {
	roles, ok := c.Locals(rolesKey{}).(map[string]bool)
	return ok && roles[role]
}

// callerRoles lists the caller's roles; nil without authentication (the one
// local principal holds them all).
func callerRoles(c *fiber.Ctx) []string {
	roles, ok := c.Locals(rolesKey{}).(map[string]bool)
	if !ok {
		return nil
	}
	out := make([]string, 0, len(roles))
	for r, held := range roles {
		if held {
			out = append(out, r)
		}
	}
	return out
}

// seesAllRuns reports whether the caller reads every principal's runs.
func seesAllRuns(c *fiber.Ctx) bool { return hasRole(c, RoleReadAll) }

// ownerScope is the owner filter of the caller's listings: "" for every owner.
func ownerScope(c *fiber.Ctx) string {
	if seesAllRuns(c) {
		return ""
	}
	return principal(c)
}

// HashToken returns the hex SHA-256 of a token secret (for the config file).
func HashToken(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

// ValidateTokens checks configured tokens.
func ValidateTokens(tokens []Token) error {
	seen := map[string]bool{}
	for i, t := range tokens {
		if t.Name == "" || seen[t.Name] {
			return fmt.Errorf("config: api.tokens[%d].name: empty or duplicate", i)
		}
		seen[t.Name] = true
		if b, err := hex.DecodeString(t.SHA256); err != nil || len(b) != sha256.Size {
			return fmt.Errorf("config: api.tokens[%d].sha256: want 64 hex characters (sha256 of the token)", i)
		}
		for _, r := range t.Roles {
			switch r {
			case RoleSubmit, RoleRead, RoleReadAll, RoleApprove, RoleMetrics, RoleAdmin, RoleGrantBroad:
			default:
				return fmt.Errorf("config: api.tokens[%d].roles: unknown role %q", i, r)
			}
		}
	}
	return nil
}

// NewDevToken makes the token of an API that would otherwise have none
// (`aetherium dev`): 256 random bits as base64url, role admin, named
// store.LocalOwner so its principal is the one a tokenless API had. It returns
// the secret and the configured token (its SHA-256 only).
func NewDevToken() (string, Token, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", Token{}, fmt.Errorf("dev token: %w", err)
	}
	secret := base64.RawURLEncoding.EncodeToString(b)
	return secret, Token{Name: store.LocalOwner, SHA256: HashToken(secret), Roles: []string{RoleAdmin}}, nil
}

// IsLoopback reports whether a listen address only accepts local connections.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// auth returns a middleware demanding a token with one of roles (admin implies
// every role, read_all implies read). With no tokens configured it lets everything
// through (loopback-only deployments; the server refuses to listen elsewhere
// without tokens).
func (s *Server) auth(roles ...string) fiber.Handler {
	type entry struct {
		name  string
		hash  []byte
		roles map[string]bool
	}
	var entries []entry
	for _, t := range s.cfg.Tokens {
		h, _ := hex.DecodeString(t.SHA256)
		roles := map[string]bool{}
		for _, r := range t.Roles {
			roles[r] = true
		}
		entries = append(entries, entry{t.Name, h, roles})
	}
	return func(c *fiber.Ctx) error {
		if len(entries) == 0 {
			return c.Next()
		}
		hdr := c.Get("Authorization")
		secret, ok := strings.CutPrefix(hdr, "Bearer ")
		if !ok || secret == "" {
			c.Set("WWW-Authenticate", `Bearer realm="aetherium"`)
			return &Error{Status: http.StatusUnauthorized, Message: "missing bearer token"}
		}
		sum := sha256.Sum256([]byte(secret))
		for _, e := range entries {
			if subtle.ConstantTimeCompare(sum[:], e.hash) == 1 {
				if !holdsAny(e.roles, roles) {
					return &Error{Status: http.StatusForbidden, Message: fmt.Sprintf("token %q lacks role %q", e.name, strings.Join(roles, `" or "`))}
				}
				c.Locals(principalKey{}, e.name)
				c.Locals(rolesKey{}, e.roles)
				return c.Next()
			}
		}
		return &Error{Status: http.StatusUnauthorized, Message: "invalid bearer token"}
	}
}

func holdsAny(held map[string]bool, want []string) bool {
	if held[RoleAdmin] {
		return true
	}
	for _, r := range want {
		if held[r] || (r == RoleRead && held[RoleReadAll]) {
			return true
		}
	}
	return false
}

// CheckAuth refuses an API reachable beyond loopback without tokens: every agent
// can write files and run commands, so an open API is a code-execution surface.
// InsecureNoAuth (api.insecure_no_auth, --insecure-no-auth) allows it when an
// authenticating proxy guards the API. The role checks it before it listens (the
// flag is applied after the configuration is loaded).
func (c Config) CheckAuth() error {
	if err := ValidateTokens(c.Tokens); err != nil {
		return err
	}
	if len(c.Tokens) == 0 && !IsLoopback(c.Addr) && !c.InsecureNoAuth {
		return fmt.Errorf("api.addr %s is not loopback and api.tokens is empty: configure bearer tokens, or pass --insecure-no-auth if an authenticating proxy guards it", c.Addr)
	}
	return nil
}
