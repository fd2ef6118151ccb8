package mcpserver

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aetherium-engine/aetherium/api"
	"github.com/aetherium-engine/aetherium/oauth"
	"github.com/aetherium-engine/aetherium/store"
)

// verifiedKey carries the TokenInfo authorize made to the SDK's middleware, so
// a token is looked up (or a JWT verified) once per request.
type verifiedKey struct{}

// authorize is the API's bearer check (api.tokens, admin holds every role)
// and, with mcp.oauth, the resource server's: a bearer that is no static token
// is verified as a JWT access token, its roles those of its scopes. A missing,
// unknown or invalid token is 401, a token without the profile's list or call
// role (or not among its principals) 403; with OAuth the answers carry the
// challenges of docs/mcp.md (resource_metadata, invalid_token,
// insufficient_scope). The SDK's middleware then carries the principal to the
// tool handlers as auth.TokenInfo (UserID the principal, Scopes its roles) and
// binds each session to it, so another token cannot ride a session it did not
// open.
//
// Without tokens and without OAuth every request is the one local principal
// (loopback only, CheckAuth). With OAuth and no tokens, a token is required all
// the same: a listener that trusts an issuer serves that issuer's principals,
// not an anonymous local one.
func (s *Server) authorize(p Profile, next http.Handler) http.Handler {
	if s.open() {
		return next
	}
	attach := auth.RequireBearerToken(func(ctx context.Context, _ string, _ *http.Request) (*auth.TokenInfo, error) {
		if info, ok := ctx.Value(verifiedKey{}).(*auth.TokenInfo); ok {
			return info, nil
		}
		return nil, auth.ErrInvalidToken
	}, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true, ClockSkew: s.cfg.OAuth.Leeway})(next)
	scopes := s.scopesFor(p)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		metadata := ""
		if s.verifier != nil {
			metadata = oauth.MetadataURL(s.cfg.OAuth.Resource, r.URL.Path)
		}
		secret, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || secret == "" {
			if s.verifier != nil {
				w.Header().Set("WWW-Authenticate", oauth.MissingChallenge(metadata, scopes))
			} else {
				w.Header().Set("WWW-Authenticate", `Bearer realm="aetherium"`)
			}
			http.Error(w, "missing bearer token", http.StatusUnauthorized)
			return
		}
		var info *auth.TokenInfo
		if t, ok := s.lookup(secret); ok {
			if !holds(t.roles, p.ListRole) && !holds(t.roles, p.CallRole) {
				http.Error(w, fmt.Sprintf("token %q lacks role %q for MCP profile %s", t.name, p.ListRole, p.Name), http.StatusForbidden)
				return
			}
			info = &auth.TokenInfo{UserID: t.name, Scopes: t.roleList()}
		} else if s.verifier == nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="aetherium", error="invalid_token"`)
			http.Error(w, "invalid bearer token", http.StatusUnauthorized)
			return
		} else {
			id, err := s.verifier.Verify(r.Context(), secret)
			switch {
			case errors.Is(err, oauth.ErrInvalidToken):
				w.Header().Set("WWW-Authenticate", oauth.InvalidChallenge(metadata, err))
				http.Error(w, "invalid access token: "+err.Error(), http.StatusUnauthorized)
				return
			case err != nil:
				// The issuer's keys cannot be read: the token may be fine, so no
				// invalid_token that would send the client for a new one.
				s.d.Log.Warn("mcp oauth: cannot verify a token", "err", err)
				http.Error(w, "cannot verify the access token now: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
			roles := set(id.Roles)
			if !holds(roles, p.ListRole) && !holds(roles, p.CallRole) {
				w.Header().Set("WWW-Authenticate", oauth.InsufficientChallenge(metadata, scopes))
				http.Error(w, fmt.Sprintf("the access token of %q grants neither role %q nor %q for MCP profile %s: ask for scope %s",
					id.Principal, p.ListRole, p.CallRole, p.Name, strings.Join(scopes, " ")), http.StatusForbidden)
				return
			}
			info = &auth.TokenInfo{UserID: id.Principal, Scopes: id.Roles, Expiration: id.Expiry}
		}
		if len(p.Principals) > 0 && !slices.Contains(p.Principals, info.UserID) {
			http.Error(w, fmt.Sprintf("token %q may not use MCP profile %s", info.UserID, p.Name), http.StatusForbidden)
			return
		}
		attach.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), verifiedKey{}, info)))
	})
}

// open reports whether requests need no token: no api.tokens and no OAuth.
func (s *Server) open() bool { return len(s.tokens) == 0 && s.verifier == nil }

// scopesFor are the OAuth scopes that let a client into profile p: those
// granting its list or its call role (what the challenges name).
func (s *Server) scopesFor(p Profile) []string {
	if s.verifier == nil {
		return nil
	}
	return s.cfg.OAuth.ScopesGranting(func(role string) bool {
		r := set([]string{role})
		return holds(r, p.ListRole) || holds(r, p.CallRole)
	})
}

// metadata serves the RFC 9728 protected resource metadata. Every path names
// the one resource of the listener (mcp.oauth.resource): tokens are bound to
// the listener, and a profile is told apart by roles, not audiences; a client
// checks that resource is its endpoint or a prefix of it (/mcp of /mcp/ide).
func (s *Server) metadata() http.Handler {
	doc, err := json.Marshal(s.cfg.OAuth.Metadata(s.cfg.OAuth.Resource))
	if err != nil {
		panic(err) // strings and lists of strings
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Public by design (RFC 9728 §3): any origin may read where to get a token.
		w.Header().Set("Access-Control-Allow-Origin", "*")
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "max-age=300")
		_, _ = w.Write(doc)
	})
}

func (s *Server) lookup(secret string) (token, bool) {
	sum := sha256.Sum256([]byte(secret))
	for _, t := range s.tokens {
		if subtle.ConstantTimeCompare(sum[:], t.hash) == 1 {
			return t, true
		}
	}
	return token{}, false
}

func (t token) roleList() []string {
	roles := make([]string, 0, len(t.roles))
	for r := range t.roles {
		roles = append(roles, r)
	}
	sort.Strings(roles)
	return roles
}

func set(list []string) map[string]bool {
	m := make(map[string]bool, len(list))
	for _, e := range list {
		m[e] = true
	}
	return m
}

// holds is the API's role rule: admin holds every role, read_all implies read.
func holds(roles map[string]bool, want string) bool {
	return roles[api.RoleAdmin] || roles[want] || (want == api.RoleRead && roles[api.RoleReadAll])
}

// caller is who makes a request: the token's principal and roles, or the local
// principal holding every role when no tokens nor OAuth are configured.
func (s *Server) caller(extra *mcp.RequestExtra) (string, map[string]bool, bool) {
	if s.open() {
		return store.LocalOwner, map[string]bool{api.RoleAdmin: true}, true
	}
	if extra == nil || extra.TokenInfo == nil || extra.TokenInfo.UserID == "" {
		return "", nil, false
	}
	return extra.TokenInfo.UserID, set(extra.TokenInfo.Scopes), true
}
