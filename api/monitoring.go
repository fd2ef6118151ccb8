package api

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
)

// asynqmon in a browser (issue 41). /monitoring wants an admin; a browser's
// navigation cannot send an Authorization header, and the Studio keeps its
// token out of cookies (docs/api-edge.md). So an admin's page exchanges its
// bearer token for a short-lived cookie scoped to asynqmon:
//
//   - POST /api/monitoring/session (admin, bearer) answers 204 with
//     Set-Cookie: aetherium_monitoring=<ticket>; Path=/monitoring; HttpOnly;
//     SameSite=Strict; Max-Age=<api.monitoring_session_ttl> (and Secure over
//     TLS). DELETE clears it.
//   - The ticket is stateless: base64url({"p": principal, "exp": unix}) "."
//     base64url(HMAC-SHA256(key, the payload and the principal's configured
//     token hash)). Stateless rather than a ticket in Redis: asynqmon is a
//     Redis tool that should open while the fleet's own Redis keys are in
//     trouble, and no table of sessions needs sweeping. The price is that a
//     cookie cannot be withdrawn before it expires, hence a short TTL, and
//     revocation by the token: every request re-checks that the principal
//     still exists, still holds admin and still has the token hash the ticket
//     was signed with (a rotated secret ends its cookies).
//   - The key is api.monitoring_session_key, or 32 random bytes per process:
//     with several API processes behind a balancer, configure one shared key,
//     else a cookie works only on the process that made it.
//   - The cookie is read only by the /monitoring mount: every /api route reads
//     the Authorization header alone, so the cookie cannot make the API
//     CSRF-able. On /monitoring, a request that changes something (any method
//     but GET and HEAD) authenticated by the cookie must prove it comes from
//     the API's own origin (Sec-Fetch-Site: same-origin, or an Origin equal to
//     the Host), else 403 — stricter than the edge's origin check, which lets a
//     request with neither header pass as a non-browser client.

// Monitoring paths and the cookie's name.
const (
	// MonitoringPath is asynqmon's root.
	MonitoringPath = "/monitoring"
	// MonitoringSessionPath mints (POST) and clears (DELETE) the cookie.
	MonitoringSessionPath = "/api/monitoring/session"
	// MonitoringCookie is the cookie's name.
	MonitoringCookie = "aetherium_monitoring"
)

// ticketer signs and checks monitoring tickets.
type ticketer struct {
	key []byte
	ttl time.Duration
}

func newTicketer(cfg Config) (*ticketer, error) {
	key := []byte(cfg.MonitoringSessionKey)
	if len(key) == 0 {
		key = make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, fmt.Errorf("monitoring session key: %w", err)
		}
	} else if len(key) < MinMonitoringSessionKeyBytes {
		return nil, fmt.Errorf("api.monitoring_session_key: want at least %d bytes, got %d", MinMonitoringSessionKeyBytes, len(key))
	}
	return &ticketer{key: key, ttl: cfg.MonitoringSessionTTL}, nil
}

// ticket is a ticket's payload.
type ticket struct {
	Principal string `json:"p"`
	Expires   int64  `json:"exp"`
}

// mac binds a payload to the key and to the principal's token hash.
func (t *ticketer) mac(payload, tokenHash string) []byte {
	m := hmac.New(sha256.New, t.key)
	m.Write([]byte("aetherium-monitoring-v1\x00"))
	m.Write([]byte(payload))
	m.Write([]byte{0})
	m.Write([]byte(strings.ToLower(tokenHash)))
	return m.Sum(nil)
}

func (t *ticketer) sign(principal, tokenHash string, now time.Time) string {
	raw, _ := json.Marshal(ticket{Principal: principal, Expires: now.Add(t.ttl).Unix()})
	payload := base64.RawURLEncoding.EncodeToString(raw)
	return payload + "." + base64.RawURLEncoding.EncodeToString(t.mac(payload, tokenHash))
}

// errTicket is every ticket that does not verify: forged, signed by another
// key, or of a principal whose token is gone or changed.
var errTicket = errors.New("the monitoring session is not valid here (signed by another key, or its token was revoked or changed): sign in again")

// verify checks value and returns the principal's token; tokens are looked up
// by name.
func (t *ticketer) verify(value string, tokens map[string]Token, now time.Time) (Token, error) {
	payload, sig, ok := strings.Cut(value, ".")
	if !ok {
		return Token{}, errTicket
	}
	raw, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return Token{}, errTicket
	}
	var tk ticket
	if err := json.Unmarshal(raw, &tk); err != nil {
		return Token{}, errTicket
	}
	// The MAC is checked whether or not the principal has a token, so the
	// time taken does not tell which names are configured.
	tok, found := tokens[tk.Principal]
	mac, err := base64.RawURLEncoding.DecodeString(sig)
	if valid := hmac.Equal(mac, t.mac(payload, tok.SHA256)); !valid || !found || err != nil {
		return Token{}, errTicket
	}
	if now.Unix() >= tk.Expires {
		return Token{}, fmt.Errorf("the monitoring session expired at %s: sign in again", time.Unix(tk.Expires, 0).UTC().Format(time.RFC3339))
	}
	return tok, nil
}

// createMonitoringSession serves POST /api/monitoring/session.
func (s *Server) createMonitoringSession(c *fiber.Ctx) error {
	if s.tickets == nil {
		return &Error{Status: http.StatusServiceUnavailable, Message: "monitoring sessions are off: api.monitoring_session_key is invalid (see the log)"}
	}
	hash := ""
	if tok, ok := s.tokenOf(principal(c)); ok {
		hash = tok.SHA256
	}
	c.Cookie(&fiber.Cookie{Name: MonitoringCookie, Value: s.tickets.sign(principal(c), hash, time.Now()), Path: MonitoringPath,
		MaxAge: int(s.tickets.ttl / time.Second), HTTPOnly: true, SameSite: fiber.CookieSameSiteStrictMode, Secure: c.Protocol() == "https"})
	return c.SendStatus(http.StatusNoContent)
}

// deleteMonitoringSession serves DELETE /api/monitoring/session: the
// browser drops the cookie (a copy of it stays valid until it expires).
func (s *Server) deleteMonitoringSession(c *fiber.Ctx) error {
	c.Cookie(&fiber.Cookie{Name: MonitoringCookie, Value: "", Path: MonitoringPath, Expires: time.Unix(0, 0).UTC(),
		HTTPOnly: true, SameSite: fiber.CookieSameSiteStrictMode, Secure: c.Protocol() == "https"})
	return c.SendStatus(http.StatusNoContent)
}

// tokenOf is the configured token of a principal.
func (s *Server) tokenOf(name string) (Token, bool) {
	for _, t := range s.cfg.Tokens {
		if t.Name == name {
			return t, true
		}
	}
	return Token{}, false
}

// monitoringAuth guards asynqmon: an admin bearer token as every route, or
// the monitoring cookie of a principal that still holds admin. Without
// tokens, the local principal passes as everywhere.
func (s *Server) monitoringAuth() fiber.Handler {
	bearer := s.auth(RoleAdmin)
	tokens := make(map[string]Token, len(s.cfg.Tokens))
	for _, t := range s.cfg.Tokens {
		tokens[t.Name] = t
	}
	return func(c *fiber.Ctx) error {
		value := c.Cookies(MonitoringCookie)
		if len(tokens) == 0 || c.Get(fiber.HeaderAuthorization) != "" || value == "" || s.tickets == nil {
			err := bearer(c)
			var ae *Error
			if errors.As(err, &ae) && ae.Status == http.StatusUnauthorized && value == "" {
				ae.Message += fmt.Sprintf(": %s needs an admin's bearer token, or the cookie POST %s sets for one (the Studio's Monitoring link)", MonitoringPath, MonitoringSessionPath)
			}
			return err
		}
		tok, err := s.tickets.verify(value, tokens, time.Now())
		if err != nil {
			c.Set(fiber.HeaderWWWAuthenticate, `Bearer realm="aetherium"`)
			return &Error{Status: http.StatusUnauthorized, Message: err.Error()}
		}
		roles := map[string]bool{}
		for _, r := range tok.Roles {
			roles[r] = true
		}
		if !roles[RoleAdmin] {
			return &Error{Status: http.StatusUnauthorized, Message: fmt.Sprintf("the monitoring session's principal %q no longer holds role admin: sign in again", tok.Name)}
		}
		if m := c.Method(); m != http.MethodGet && m != http.MethodHead && !sameOrigin(c) {
			return &Error{Status: http.StatusForbidden, Message: fmt.Sprintf(
				"%s %s with the monitoring cookie must come from the API's own pages (Sec-Fetch-Site: same-origin, or an Origin equal to the Host); got Origin %q, Sec-Fetch-Site %q",
				m, c.Path(), c.Get("Origin"), c.Get("Sec-Fetch-Site"))}
		}
		c.Locals(principalKey{}, tok.Name)
		c.Locals(rolesKey{}, roles)
		return c.Next()
	}
}

// sameOrigin reports whether a browser says the request comes from the API's
// own origin: Sec-Fetch-Site same-origin when it sends it, else an Origin
// whose host is the Host. A request with neither is not taken as same-origin.
func sameOrigin(c *fiber.Ctx) bool {
	if site := c.Get("Sec-Fetch-Site"); site != "" {
		return site == "same-origin"
	}
	o := c.Get("Origin")
	if o == "" || o == "null" {
		return false
	}
	u, err := url.Parse(o)
	return err == nil && u.Host != "" && (u.Scheme == "http" || u.Scheme == "https") &&
		strings.EqualFold(u.Host, string(c.Request().Host()))
}
