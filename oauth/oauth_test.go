package oauth_test

import (
	"context"
	"encoding/base64"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/oauth"
	"github.com/aetherium-engine/aetherium/oauth/oauthtest"
)

const resource = "https://fleet.example.com/mcp"

var scopes = map[string][]string{
	"fleet:read":    {"read"},
	"fleet:call":    {"submit", "read"},
	"fleet:approve": {"approve"},
}

// env is a provider with a client for the resource and one for another, and
// a second provider (foreign) that knows the same client.
type env struct {
	idp, foreign *oauthtest.Provider
	cfg          oauth.Config
}

func setup(t *testing.T) env {
	t.Helper()
	e := env{idp: oauthtest.Start(t), foreign: oauthtest.Start(t)}
	for _, p := range []*oauthtest.Provider{e.idp, e.foreign} {
		p.AddClient(oauthtest.Client{ID: "ide", Secret: "s", Subject: "alice", Audience: []string{resource}})
		p.AddClient(oauthtest.Client{ID: "other", Secret: "s", Subject: "alice", Audience: []string{"https://other.example.com/api"}})
		p.AddClient(oauthtest.Client{ID: "stale", Secret: "s", Subject: "alice", Audience: []string{resource}, Lifetime: -time.Hour})
	}
	e.cfg = oauth.Config{Issuer: e.idp.Issuer, Resource: resource, Scopes: scopes}
	return e
}

func verifier(t *testing.T, cfg oauth.Config, client *http.Client) *oauth.Verifier {
	t.Helper()
	v, err := oauth.New(cfg, client)
	require.NoError(t, err)
	return v
}

// unsigned is a token of alg with the given claims and a junk signature.
func unsigned(alg, claims string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"`+alg+`","typ":"JWT"}`)) + "." + enc([]byte(claims)) + "." + enc([]byte("sig"))
}

func TestVerify(t *testing.T) {
	t.Parallel()
	e := setup(t)
	v := verifier(t, e.cfg, nil)
	now := time.Now()
	claims := func(mod func(c map[string]any)) map[string]any {
		c := map[string]any{"iss": e.idp.Issuer, "sub": "bob", "aud": []string{resource}, "exp": now.Add(time.Minute).Unix(), "scope": "fleet:read"}
		if mod != nil {
			mod(c)
		}
		return c
	}
	hs256, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: []byte("a shared secret of thirty-two b!")}, nil)
	require.NoError(t, err)
	hsToken, err := jwt.Signed(hs256).Claims(claims(nil)).Serialize()
	require.NoError(t, err)

	for _, c := range []struct {
		name      string
		token     func(t *testing.T) string
		want      oauth.Identity
		wantErr   error
		errSubstr string
	}{
		{name: "the provider's token for this resource", token: func(t *testing.T) string {
			return e.idp.Token(t, "ide", "fleet:call", "fleet:approve", "openid-unknown")
		},
			want: oauth.Identity{Principal: "alice", Roles: []string{"approve", "read", "submit"}, Scopes: []string{"fleet:approve", "fleet:call", "openid-unknown"}}},
		{name: "a scope the config does not map grants nothing", token: func(t *testing.T) string { return e.idp.Token(t, "ide", "calendar") },
			want: oauth.Identity{Principal: "alice", Roles: nil, Scopes: []string{"calendar"}}},
		{name: "scp as a list", token: func(t *testing.T) string {
			return e.idp.Sign(t, claims(func(c map[string]any) { delete(c, "scope"); c["scp"] = []string{"fleet:read"} }))
		}, want: oauth.Identity{Principal: "bob", Roles: []string{"read"}, Scopes: []string{"fleet:read"}}},
		{name: "aud as a string", token: func(t *testing.T) string {
			return e.idp.Sign(t, claims(func(c map[string]any) { c["aud"] = resource }))
		},
			want: oauth.Identity{Principal: "bob", Roles: []string{"read"}, Scopes: []string{"fleet:read"}}},
		{name: "expired within the leeway", token: func(t *testing.T) string {
			return e.idp.Sign(t, claims(func(c map[string]any) { c["exp"] = now.Add(-10 * time.Second).Unix() }))
		}, want: oauth.Identity{Principal: "bob", Roles: []string{"read"}, Scopes: []string{"fleet:read"}}},
		{name: "another resource's token", token: func(t *testing.T) string { return e.idp.Token(t, "other", "fleet:call") }, wantErr: oauth.ErrAudience},
		{name: "expired", token: func(t *testing.T) string { return e.idp.Token(t, "stale", "fleet:call") }, wantErr: oauth.ErrExpired},
		{name: "a foreign provider's token", token: func(t *testing.T) string { return e.foreign.Token(t, "ide", "fleet:call") }, wantErr: oauth.ErrIssuer},
		{name: "our issuer forged with a foreign key", token: func(t *testing.T) string { return e.foreign.Sign(t, claims(nil)) }, wantErr: oauth.ErrSignature},
		{name: "a tampered payload", token: func(t *testing.T) string {
			parts := strings.Split(e.idp.Sign(t, claims(nil)), ".")
			parts[1] = base64.RawURLEncoding.EncodeToString([]byte(`{"iss":"` + e.idp.Issuer + `","sub":"root","aud":"` + resource + `","exp":9999999999}`))
			return strings.Join(parts, ".")
		}, wantErr: oauth.ErrSignature},
		{name: "not yet valid", token: func(t *testing.T) string {
			return e.idp.Sign(t, claims(func(c map[string]any) { c["nbf"] = now.Add(time.Hour).Unix() }))
		}, wantErr: oauth.ErrNotYetValid},
		{name: "no exp", token: func(t *testing.T) string { return e.idp.Sign(t, claims(func(c map[string]any) { delete(c, "exp") })) }, wantErr: oauth.ErrMalformed},
		{name: "no principal", token: func(t *testing.T) string { return e.idp.Sign(t, claims(func(c map[string]any) { delete(c, "sub") })) }, wantErr: oauth.ErrNoPrincipal},
		{name: "alg none", token: func(t *testing.T) string { return unsigned("none", `{"iss":"`+e.idp.Issuer+`"}`) }, wantErr: oauth.ErrAlgorithm},
		{name: "HS256 with any secret", token: func(t *testing.T) string { return hsToken }, wantErr: oauth.ErrAlgorithm, errSubstr: `"HS256"`},
		{name: "a static API token", token: func(t *testing.T) string { return "s3cr3t-api-token" }, wantErr: oauth.ErrMalformed},
		{name: "three parts of junk", token: func(t *testing.T) string { return "a.b.c" }, wantErr: oauth.ErrMalformed},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			id, err := v.Verify(context.Background(), c.token(t))
			if c.wantErr != nil {
				require.ErrorIs(t, err, c.wantErr)
				require.ErrorIs(t, err, oauth.ErrInvalidToken)
				if c.errSubstr != "" {
					require.ErrorContains(t, err, c.errSubstr)
				}
				return
			}
			require.NoError(t, err)
			require.WithinDuration(t, time.Now(), id.Expiry, 6*time.Minute)
			id.Expiry = time.Time{}
			require.Equal(t, c.want, id)
		})
	}
}

func TestVerifyPrincipalClaimAndJWKSURL(t *testing.T) {
	t.Parallel()
	e := setup(t)
	cfg := e.cfg
	cfg.PrincipalClaim = "preferred_username"
	cfg.JWKSURL = e.idp.Issuer + "/keys"
	v := verifier(t, cfg, nil)
	raw := e.idp.Sign(t, map[string]any{"iss": e.idp.Issuer, "sub": "u-123", "preferred_username": "carol",
		"aud": resource, "exp": time.Now().Add(time.Minute).Unix(), "scope": "fleet:approve"})
	id, err := v.Verify(context.Background(), raw)
	require.NoError(t, err)
	require.Equal(t, "carol", id.Principal)
	require.Equal(t, []string{"approve"}, id.Roles)
}

// counter counts the requests a verifier makes.
type counter struct{ n atomic.Int32 }

func (c *counter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return http.DefaultTransport.RoundTrip(r)
}

func TestKeysAreCachedAndRefetchedOnAnUnknownKidAtMostEveryMinRefetch(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var count counter
	v := verifier(t, e.cfg, &http.Client{Transport: &count})
	clock := time.Now()
	v.SetClock(func() time.Time { return clock })
	good := e.idp.Token(t, "ide", "fleet:read")
	// Our issuer's claims under a key our issuer never had: an unknown kid.
	forged := e.foreign.Sign(t, map[string]any{"iss": e.idp.Issuer, "sub": "x", "aud": resource, "exp": time.Now().Add(time.Minute).Unix()})

	_, err := v.Verify(context.Background(), good)
	require.NoError(t, err)
	require.EqualValues(t, 2, count.n.Load(), "discovery and JWKS")
	for range 3 {
		_, err = v.Verify(context.Background(), good)
		require.NoError(t, err)
		_, err = v.Verify(context.Background(), forged)
		require.ErrorIs(t, err, oauth.ErrSignature)
	}
	require.EqualValues(t, 2, count.n.Load(), "cached keys; an unknown kid right after a fetch fetches nothing")

	clock = clock.Add(oauth.MinRefetch + time.Second)
	_, err = v.Verify(context.Background(), forged)
	require.ErrorIs(t, err, oauth.ErrSignature)
	require.EqualValues(t, 3, count.n.Load(), "an unknown kid fetches the JWKS again (a rotated-in key)")
	_, err = v.Verify(context.Background(), forged)
	require.ErrorIs(t, err, oauth.ErrSignature)
	require.EqualValues(t, 3, count.n.Load())

	// A foreign issuer's token is refused before any key is looked up.
	clock = clock.Add(oauth.MinRefetch + time.Second)
	_, err = v.Verify(context.Background(), e.foreign.Token(t, "ide", "fleet:read"))
	require.ErrorIs(t, err, oauth.ErrIssuer)
	require.EqualValues(t, 3, count.n.Load())
}

func TestVerifyIssuerAway(t *testing.T) {
	t.Parallel()
	cfg := oauth.Config{Issuer: "http://127.0.0.1:1", Resource: resource, Scopes: scopes}
	v := verifier(t, cfg, &http.Client{Timeout: time.Second})
	e := setup(t)
	raw := e.idp.Sign(t, map[string]any{"iss": cfg.Issuer, "sub": "x", "aud": resource, "exp": time.Now().Add(time.Minute).Unix()})
	_, err := v.Verify(context.Background(), raw)
	require.ErrorIs(t, err, oauth.ErrUnavailable)
	require.NotErrorIs(t, err, oauth.ErrInvalidToken, "not the token's fault")
}

func TestConfig(t *testing.T) {
	t.Parallel()
	ok := oauth.Config{Issuer: "https://id.example.com", Resource: resource, Scopes: scopes}
	for _, c := range []struct {
		name string
		mod  func(c *oauth.Config)
		want []string
	}{
		{name: "valid", mod: func(*oauth.Config) {}},
		{name: "off", mod: func(c *oauth.Config) { *c = oauth.Config{} }},
		{name: "http on loopback", mod: func(c *oauth.Config) { c.Issuer = "http://127.0.0.1:9000" }},
		{name: "keys without an issuer", mod: func(c *oauth.Config) { c.Issuer = "" }, want: []string{"issuer: required"}},
		{name: "http elsewhere", mod: func(c *oauth.Config) { c.Issuer = "http://id.example.com" }, want: []string{"issuer: want https"}},
		{name: "not a URL", mod: func(c *oauth.Config) { c.Issuer = "id.example.com" }, want: []string{"issuer: want an https URL"}},
		{name: "jwks over http", mod: func(c *oauth.Config) { c.JWKSURL = "http://id.example.com/keys" }, want: []string{"jwks_url: want https"}},
		{name: "relative resource", mod: func(c *oauth.Config) { c.Resource = "/mcp" }, want: []string{"resource: want an absolute URL"}},
		{name: "resource with a fragment", mod: func(c *oauth.Config) { c.Resource = resource + "#x" }, want: []string{"resource: want an absolute URL"}},
		{name: "no scopes", mod: func(c *oauth.Config) { c.Scopes = nil }, want: []string{"scopes: required"}},
		{name: "a scope without roles", mod: func(c *oauth.Config) { c.Scopes = map[string][]string{"x": nil} }, want: []string{"scopes.x: grants no role"}},
		{name: "a bad scope token", mod: func(c *oauth.Config) { c.Scopes = map[string][]string{"a b": {"read"}} }, want: []string{"scopes.a b: not a scope token"}},
		{name: "negative leeway", mod: func(c *oauth.Config) { c.Leeway = -time.Second }, want: []string{"leeway: must not be negative"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg := ok
			c.mod(&cfg)
			err := cfg.Validate()
			if len(c.want) == 0 {
				require.NoError(t, err)
				return
			}
			var fe *oauth.FieldError
			require.ErrorAs(t, err, &fe)
			for _, w := range c.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
	d := ok.WithDefaults()
	require.Equal(t, oauth.DefaultPrincipalClaim, d.PrincipalClaim)
	require.Equal(t, oauth.DefaultLeeway, d.Leeway)
	require.Equal(t, oauth.Config{}, oauth.Config{}.WithDefaults(), "off stays empty")
}

func TestMetadataAndChallenges(t *testing.T) {
	t.Parallel()
	cfg := oauth.Config{Issuer: "https://id.example.com", Resource: resource, Scopes: scopes}
	require.Equal(t, oauth.Metadata{Resource: resource, AuthorizationServers: []string{"https://id.example.com"},
		ScopesSupported: []string{"fleet:approve", "fleet:call", "fleet:read"}, BearerMethodsSupported: []string{"header"},
		ResourceName: oauth.ResourceName}, cfg.Metadata(resource))
	require.Equal(t, []string{"fleet:call", "fleet:read"}, cfg.ScopesGranting(func(r string) bool { return r == "read" }))
	require.Equal(t, []string{"approve", "read", "submit"}, cfg.Roles([]string{"fleet:call", "fleet:approve", "nope"}))

	url := oauth.MetadataURL(resource, "/mcp/ide")
	require.Equal(t, "https://fleet.example.com/.well-known/oauth-protected-resource/mcp/ide", url)
	for _, c := range []struct{ name, got, want string }{
		{"missing", oauth.MissingChallenge(url, []string{"fleet:call", "fleet:read"}),
			`Bearer resource_metadata="` + url + `", scope="fleet:call fleet:read"`},
		{"invalid", oauth.InvalidChallenge(url, oauth.ErrExpired),
			`Bearer error="invalid_token", error_description="invalid token: expired", resource_metadata="` + url + `"`},
		{"invalid, a quote in the reason", oauth.InvalidChallenge(url, errorString(`aud "x\y"`+"\n")),
			`Bearer error="invalid_token", error_description="aud 'x'y'?", resource_metadata="` + url + `"`},
		{"insufficient", oauth.InsufficientChallenge(url, []string{"fleet:read"}),
			`Bearer error="insufficient_scope", scope="fleet:read", resource_metadata="` + url + `"`},
	} {
		require.Equal(t, c.want, c.got, c.name)
	}
}

type errorString string

func (e errorString) Error() string { return string(e) }
