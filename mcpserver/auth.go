package mcpserver

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aetherium-engine/aetherium/api"
	"github.com/aetherium-engine/aetherium/store"
)

// authorize is the API's bearer check (api.tokens, admin holds every role): an
// unknown or missing token is 401, a token without the profile's list role (or
// not among its principals) 403. The SDK's middleware then carries the
// principal to the tool handlers and binds each session to it, so another
// token cannot ride a session it did not open.
func (s *Server) authorize(p Profile, next http.Handler) http.Handler {
	if len(s.tokens) == 0 {
		return next // loopback only (CheckAuth): the one local principal
	}
	attach := auth.RequireBearerToken(func(_ context.Context, secret string, _ *http.Request) (*auth.TokenInfo, error) {
		t, ok := s.lookup(secret)
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		roles := make([]string, 0, len(t.roles))
		for r := range t.roles {
			roles = append(roles, r)
		}
		sort.Strings(roles)
		return &auth.TokenInfo{UserID: t.name, Scopes: roles}, nil
	}, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		secret, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || secret == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="aetherium"`)
			http.Error(w, "missing bearer token", http.StatusUnauthorized)
			return
		}
		t, ok := s.lookup(secret)
		switch {
		case !ok:
			w.Header().Set("WWW-Authenticate", `Bearer realm="aetherium", error="invalid_token"`)
			http.Error(w, "invalid bearer token", http.StatusUnauthorized)
			return
		case !holds(t.roles, p.ListRole) && !holds(t.roles, p.CallRole):
			http.Error(w, fmt.Sprintf("token %q lacks role %q for MCP profile %s", t.name, p.ListRole, p.Name), http.StatusForbidden)
			return
		case len(p.Principals) > 0 && !slices.Contains(p.Principals, t.name):
			http.Error(w, fmt.Sprintf("token %q may not use MCP profile %s", t.name, p.Name), http.StatusForbidden)
			return
		}
		attach.ServeHTTP(w, r)
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

// holds is the API's role rule: admin holds every role, read_all implies read.
func holds(roles map[string]bool, want string) bool {
	return roles[api.RoleAdmin] || roles[want] || (want == api.RoleRead && roles[api.RoleReadAll])
}

// caller is who makes a request: the token's principal and roles, or the local
// principal holding every role when no tokens are configured.
func (s *Server) caller(extra *mcp.RequestExtra) (string, map[string]bool, bool) {
	if len(s.tokens) == 0 {
		return store.LocalOwner, map[string]bool{api.RoleAdmin: true}, true
	}
	if extra == nil || extra.TokenInfo == nil || extra.TokenInfo.UserID == "" {
		return "", nil, false
	}
	roles := map[string]bool{}
	for _, r := range extra.TokenInfo.Scopes {
		roles[r] = true
	}
	return extra.TokenInfo.UserID, roles, true
}
