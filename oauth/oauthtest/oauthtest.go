// Package oauthtest starts a real OpenID provider for tests: zitadel's
// (github.com/zitadel/oidc/v3 pkg/op) on its example in-memory storage, serving
// discovery, JWKS and a token endpoint on 127.0.0.1. Its clients get JWT access
// tokens by the client credentials grant, with the audience, scopes and
// lifetime a test gives them; Sign issues any claims with the provider's own
// signing key, for the cases no grant produces (a forged issuer, a future nbf).
package oauthtest

import (
	"context"
	"crypto/sha256"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/crypto"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
	"golang.org/x/text/language"
)

// Client is a confidential client of the provider (client credentials grant).
type Client struct {
	ID, Secret string
	// Subject is the tokens' sub. Default ID.
	Subject string
	// Audience is the tokens' aud (the resource they are for). Default [ID],
	// as the example storage does.
	Audience []string
	// Lifetime is how long a token lives from its issue; negative issues
	// tokens already expired. Default 5 minutes.
	Lifetime time.Duration
}

// Provider is a running OpenID provider.
type Provider struct {
	// Issuer is its issuer URL (http://127.0.0.1:<port>), the iss of its tokens.
	Issuer string
	st     *store
}

// Start starts a provider; it stops when the test ends.
func Start(t testing.TB) *Provider {
	t.Helper()
	var handler http.Handler
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handler.ServeHTTP(w, r) }))
	t.Cleanup(srv.Close)
	st := &store{Storage: storage.NewStorage(storage.NewUserStore(srv.URL)), clients: map[string]Client{}}
	provider, err := op.NewProvider(&op.Config{
		CryptoKey: sha256.Sum256([]byte(t.Name())), CryptoKeyId: "key1",
		SupportedUILocales: []language.Tag{language.English},
	}, st, op.StaticIssuer(srv.URL), op.WithAllowInsecure())
	if err != nil {
		t.Fatalf("oauthtest: provider: %v", err)
	}
	handler = provider
	return &Provider{Issuer: srv.URL, st: st}
}

// AddClient registers c.
func (p *Provider) AddClient(c Client) {
	p.st.mu.Lock()
	defer p.st.mu.Unlock()
	if c.Subject == "" {
		c.Subject = c.ID
	}
	if c.Lifetime == 0 {
		c.Lifetime = 5 * time.Minute
	}
	p.st.clients[c.ID] = c
}

// Token obtains an access token for client id with scopes, through the
// provider's token endpoint (found by discovery), as a client would.
func (p *Provider) Token(t testing.TB, id string, scopes ...string) string {
	t.Helper()
	p.st.mu.Lock()
	c, ok := p.st.clients[id]
	p.st.mu.Unlock()
	if !ok {
		t.Fatalf("oauthtest: no client %q", id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	disc, err := discover(ctx, p.Issuer)
	if err != nil {
		t.Fatalf("oauthtest: discovery: %v", err)
	}
	// A plain form POST rather than x/oauth2: an expired token's expires_in
	// comes out negative as zitadel's uint64, which x/oauth2 refuses to parse.
	form := url.Values{"grant_type": {"client_credentials"}, "scope": {strings.Join(scopes, " ")}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, disc.TokenEndpoint, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatalf("oauthtest: %v", err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(url.QueryEscape(c.ID), url.QueryEscape(c.Secret))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("oauthtest: token of %s: %v", id, err)
	}
	defer resp.Body.Close()
	var tok struct {
		AccessToken string `json:"access_token"`
		TokenType   string `json:"token_type"`
	}
	if err := decodeJSON(resp, &tok); err != nil || tok.AccessToken == "" {
		t.Fatalf("oauthtest: token of %s: %v (%+v)", id, err, tok)
	}
	return tok.AccessToken
}

// Sign signs claims with the provider's signing key, the way it signs its own
// tokens (zitadel's op.SignerFromKey and crypto.Sign).
func (p *Provider) Sign(t testing.TB, claims any) string {
	t.Helper()
	key, err := p.st.SigningKey(context.Background())
	if err != nil {
		t.Fatalf("oauthtest: signing key: %v", err)
	}
	signer, err := op.SignerFromKey(key)
	if err != nil {
		t.Fatalf("oauthtest: signer: %v", err)
	}
	raw, err := crypto.Sign(claims, signer)
	if err != nil {
		t.Fatalf("oauthtest: sign: %v", err)
	}
	return raw
}

func discover(ctx context.Context, issuer string) (*oidc.DiscoveryConfiguration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(issuer, "/")+oidc.DiscoveryEndpoint, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var d oidc.DiscoveryConfiguration
	return &d, decodeJSON(resp, &d)
}

// store is the example storage with the clients of the test: zitadel's example
// gives its one service user opaque tokens for itself, so the client
// credentials grant is answered here with JWTs of the client's audience,
// scopes and lifetime. Everything else (keys, JWKS, token records) is the
// example's.
type store struct {
	*storage.Storage
	mu      sync.Mutex
	clients map[string]Client
}

func (s *store) client(id string) (Client, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.clients[id]
	return c, ok
}

func (s *store) ClientCredentials(_ context.Context, id, secret string) (op.Client, error) {
	c, ok := s.client(id)
	if !ok || c.Secret != secret {
		return nil, oidc.ErrInvalidClient().WithDescription("wrong client or secret")
	}
	return opClient{c}, nil
}

func (s *store) ClientCredentialsTokenRequest(_ context.Context, id string, scopes []string) (op.TokenRequest, error) {
	c, ok := s.client(id)
	if !ok {
		return nil, oidc.ErrInvalidClient()
	}
	aud := c.Audience
	if len(aud) == 0 {
		aud = []string{c.ID}
	}
	return &ccRequest{JWTTokenRequest: &oidc.JWTTokenRequest{Subject: c.Subject, Audience: aud, Scopes: scopes}, client: c}, nil
}

// ccRequest is a client credentials token request that remembers its client
// (for its lifetime: clients may share a subject).
type ccRequest struct {
	*oidc.JWTTokenRequest
	client Client
}

// CreateAccessToken records the token as the example does, with the client's
// lifetime (the example's is a fixed 5 minutes).
func (s *store) CreateAccessToken(ctx context.Context, req op.TokenRequest) (string, time.Time, error) {
	id, exp, err := s.Storage.CreateAccessToken(ctx, req)
	if err != nil {
		return "", time.Time{}, err
	}
	if cc, ok := req.(*ccRequest); ok {
		return id, time.Now().Add(cc.client.Lifetime), nil
	}
	return id, exp, nil
}

// GetPrivateClaimsFromScopes puts the granted scopes in the token (RFC 9068's
// scope claim), which zitadel leaves to the storage.
func (s *store) GetPrivateClaimsFromScopes(ctx context.Context, userID, clientID string, scopes []string) (map[string]any, error) {
	claims, err := s.Storage.GetPrivateClaimsFromScopes(ctx, userID, clientID, scopes)
	if err != nil {
		return nil, err
	}
	if claims == nil {
		claims = map[string]any{}
	}
	if len(scopes) > 0 {
		claims["scope"] = strings.Join(scopes, " ")
	}
	return claims, nil
}

// opClient is a confidential client that gets JWT access tokens.
type opClient struct{ c Client }

func (o opClient) GetID() string                       { return o.c.ID }
func (o opClient) RedirectURIs() []string              { return nil }
func (o opClient) PostLogoutRedirectURIs() []string    { return nil }
func (o opClient) ApplicationType() op.ApplicationType { return op.ApplicationTypeWeb }
func (o opClient) AuthMethod() oidc.AuthMethod         { return oidc.AuthMethodBasic }
func (o opClient) ResponseTypes() []oidc.ResponseType  { return nil }
func (o opClient) GrantTypes() []oidc.GrantType {
	return []oidc.GrantType{oidc.GrantTypeClientCredentials}
}
func (o opClient) LoginURL(string) string               { return "" }
func (o opClient) AccessTokenType() op.AccessTokenType  { return op.AccessTokenTypeJWT }
func (o opClient) IDTokenLifetime() time.Duration       { return time.Hour }
func (o opClient) DevMode() bool                        { return true }
func (o opClient) IsScopeAllowed(string) bool           { return true }
func (o opClient) IDTokenUserinfoClaimsAssertion() bool { return false }
func (o opClient) ClockSkew() time.Duration             { return 0 }
func (o opClient) RestrictAdditionalIdTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
func (o opClient) RestrictAdditionalAccessTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
