package oauth

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// Errors of Verify. Every error of the token itself wraps ErrInvalidToken (a
// 401 invalid_token) and one of the others, which say why; ErrUnavailable is
// not the token's fault (the issuer's keys could not be read).
var (
	ErrInvalidToken = errors.New("invalid token")
	ErrMalformed    = fmt.Errorf("%w: malformed", ErrInvalidToken)
	ErrAlgorithm    = fmt.Errorf("%w: algorithm not allowed", ErrInvalidToken)
	ErrSignature    = fmt.Errorf("%w: bad signature", ErrInvalidToken)
	ErrIssuer       = fmt.Errorf("%w: foreign issuer", ErrInvalidToken)
	ErrAudience     = fmt.Errorf("%w: wrong audience", ErrInvalidToken)
	ErrExpired      = fmt.Errorf("%w: expired", ErrInvalidToken)
	ErrNotYetValid  = fmt.Errorf("%w: not yet valid", ErrInvalidToken)
	ErrNoPrincipal  = fmt.Errorf("%w: no principal", ErrInvalidToken)
	ErrUnavailable  = errors.New("the issuer's keys are unavailable")
)

// Algorithms are the signature algorithms accepted: asymmetric only. none
// proves nothing, and an HS* key would be a secret shared with the issuer
// (and a public key read as an HMAC secret is the classic forgery).
var Algorithms = []jose.SignatureAlgorithm{
	jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512,
	jose.ES256, jose.ES384, jose.ES512, jose.EdDSA,
}

const (
	// MinRefetch spaces the JWKS fetches an unknown kid triggers: a stream of
	// tokens with made-up key ids must not turn into a stream of requests to
	// the issuer.
	MinRefetch = 10 * time.Second
	// KeysMaxAge is how long fetched keys are used before they are read again
	// (a rotation that removed a key takes effect then).
	KeysMaxAge = time.Hour
	// maxDocument bounds a discovery document or JWKS read.
	maxDocument = 1 << 20
	// defaultTimeout bounds a fetch when New is given no client.
	defaultTimeout = 10 * time.Second
)

// Identity is a verified token's principal and grants.
type Identity struct {
	// Principal is the PrincipalClaim's value.
	Principal string
	// Roles are the fleet roles of the token's scopes (Config.Roles), sorted.
	Roles []string
	// Scopes are the token's scopes as it carries them (scope or scp).
	Scopes []string
	// Expiry is the token's exp.
	Expiry time.Time
}

// Verifier verifies the access tokens of one issuer for one resource. It is
// safe for concurrent use; keys are fetched on the first Verify, so a server
// starts while its issuer is down.
type Verifier struct {
	cfg    Config
	client *http.Client
	now    func() time.Time

	mu        sync.Mutex
	keys      jose.JSONWebKeySet
	jwksURL   string
	fetched   time.Time // last successful fetch
	attempted time.Time // last attempt, successful or not
}

// New returns a Verifier of cfg (defaults applied). client fetches discovery
// and keys; nil is a client with a 10 s timeout.
func New(cfg Config, client *http.Client) (*Verifier, error) {
	cfg = cfg.WithDefaults()
	if !cfg.Enabled() {
		return nil, errors.New("oauth: no issuer configured")
	}
	if cfg.Resource == "" {
		return nil, errors.New("oauth: no resource: a token's audience could not be checked")
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("oauth: %w", err)
	}
	if client == nil {
		client = &http.Client{Timeout: defaultTimeout}
	}
	return &Verifier{cfg: cfg, client: client, now: time.Now, jwksURL: cfg.JWKSURL}, nil
}

// Config is the verifier's configuration, defaults applied.
func (v *Verifier) Config() Config { return v.cfg }

type header struct {
	Alg string `json:"alg"`
	Kid string `json:"kid"`
}

// Verify checks raw and returns who it names. Its errors wrap ErrInvalidToken
// and the reason's sentinel, or ErrUnavailable.
func (v *Verifier) Verify(ctx context.Context, raw string) (Identity, error) {
	h, err := peekHeader(raw)
	if err != nil {
		return Identity{}, err
	}
	tok, err := jwt.ParseSigned(raw, Algorithms)
	if err != nil {
		return Identity{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	// The issuer is read before the signature is checked only to name the
	// refusal: a foreign provider's token must not make us fetch our issuer's
	// keys again for its unknown kid. A forged token naming our issuer goes on
	// to the signature check below.
	var unsafe jwt.Claims
	if err := tok.UnsafeClaimsWithoutVerification(&unsafe); err != nil {
		return Identity{}, fmt.Errorf("%w: claims: %v", ErrMalformed, err)
	}
	if unsafe.Issuer != v.cfg.Issuer {
		return Identity{}, fmt.Errorf("%w: iss %q, want %q", ErrIssuer, unsafe.Issuer, v.cfg.Issuer)
	}
	keys, err := v.keysFor(ctx, h.Kid)
	if err != nil {
		return Identity{}, err
	}
	var std jwt.Claims
	var extra map[string]any
	verified := false
	for _, k := range keys {
		if tok.Claims(k.Key, &std, &extra) == nil {
			verified = true
			break
		}
	}
	if !verified {
		return Identity{}, fmt.Errorf("%w: no key of the issuer (kid %q) verifies it", ErrSignature, h.Kid)
	}
	return v.identity(std, extra)
}

// identity checks the verified claims.
func (v *Verifier) identity(std jwt.Claims, extra map[string]any) (Identity, error) {
	now := v.now()
	switch {
	case std.Issuer != v.cfg.Issuer:
		return Identity{}, fmt.Errorf("%w: iss %q, want %q", ErrIssuer, std.Issuer, v.cfg.Issuer)
	case !std.Audience.Contains(v.cfg.Resource):
		return Identity{}, fmt.Errorf("%w: aud %q does not name %s", ErrAudience, []string(std.Audience), v.cfg.Resource)
	case std.Expiry == nil:
		return Identity{}, fmt.Errorf("%w: no exp claim (a token must end)", ErrMalformed)
	case now.After(std.Expiry.Time().Add(v.cfg.Leeway)):
		return Identity{}, fmt.Errorf("%w: at %s", ErrExpired, std.Expiry.Time().UTC().Format(time.RFC3339))
	case std.NotBefore != nil && now.Add(v.cfg.Leeway).Before(std.NotBefore.Time()):
		return Identity{}, fmt.Errorf("%w: nbf %s", ErrNotYetValid, std.NotBefore.Time().UTC().Format(time.RFC3339))
	}
	principal, _ := extra[v.cfg.PrincipalClaim].(string)
	if principal == "" {
		return Identity{}, fmt.Errorf("%w: claim %q is not a non-empty string", ErrNoPrincipal, v.cfg.PrincipalClaim)
	}
	scopes := scopesOf(extra)
	return Identity{Principal: principal, Roles: v.cfg.Roles(scopes), Scopes: scopes, Expiry: std.Expiry.Time()}, nil
}

// scopesOf reads the scope claim (RFC 9068: a space-delimited string) or, as
// some providers write it, scp (a list or a string).
func scopesOf(claims map[string]any) []string {
	var out []string
	for _, name := range []string{"scope", "scp"} {
		switch s := claims[name].(type) {
		case string:
			out = append(out, strings.Fields(s)...)
		case []any:
			for _, e := range s {
				if str, ok := e.(string); ok {
					out = append(out, str)
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// peekHeader reads the JOSE header, to refuse a disallowed algorithm by name
// (jwt.ParseSigned would call it malformed).
func peekHeader(raw string) (header, error) {
	first, _, ok := strings.Cut(raw, ".")
	if !ok || strings.Count(raw, ".") != 2 {
		return header{}, fmt.Errorf("%w: not a compact JWS (three dot-separated parts)", ErrMalformed)
	}
	b, err := base64.RawURLEncoding.DecodeString(first)
	if err != nil {
		return header{}, fmt.Errorf("%w: header: %v", ErrMalformed, err)
	}
	var h header
	if err := json.Unmarshal(b, &h); err != nil {
		return header{}, fmt.Errorf("%w: header: %v", ErrMalformed, err)
	}
	for _, a := range Algorithms {
		if string(a) == h.Alg {
			return h, nil
		}
	}
	return header{}, fmt.Errorf("%w: %q", ErrAlgorithm, h.Alg)
}

// keysFor returns the signing keys that may have signed a token of kid: those
// of that id, or every signing key for a token without one. Keys older than
// KeysMaxAge are fetched again; an unknown kid fetches them again at most
// every MinRefetch (a rotated-in key appears without a restart).
func (v *Verifier) keysFor(ctx context.Context, kid string) ([]jose.JSONWebKey, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	now := v.now()
	stale := v.fetched.IsZero() || now.Sub(v.fetched) > KeysMaxAge
	if !stale {
		if keys := v.match(kid); len(keys) > 0 {
			return keys, nil
		}
	}
	if !v.attempted.IsZero() && now.Sub(v.attempted) < MinRefetch {
		if v.fetched.IsZero() {
			return nil, fmt.Errorf("%w: the last fetch failed less than %s ago", ErrUnavailable, MinRefetch)
		}
		if keys := v.match(kid); len(keys) > 0 {
			return keys, nil
		}
		return nil, fmt.Errorf("%w: no key %q in the issuer's key set", ErrSignature, kid)
	}
	v.attempted = now
	if err := v.fetch(ctx); err != nil {
		if keys := v.match(kid); len(keys) > 0 && !v.fetched.IsZero() {
			return keys, nil // the issuer is briefly away: the keys we had still hold
		}
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	v.fetched = now
	if keys := v.match(kid); len(keys) > 0 {
		return keys, nil
	}
	return nil, fmt.Errorf("%w: no key %q in the issuer's key set", ErrSignature, kid)
}

// match is the keys of kid fit to verify a signature (held under mu).
func (v *Verifier) match(kid string) []jose.JSONWebKey {
	candidates := v.keys.Keys
	if kid != "" {
		candidates = v.keys.Key(kid)
	}
	var out []jose.JSONWebKey
	for _, k := range candidates {
		if k.Use == "" || k.Use == "sig" {
			out = append(out, k)
		}
	}
	return out
}

// fetch reads the key set, discovering its URL first when not configured
// (held under mu).
func (v *Verifier) fetch(ctx context.Context) error {
	if v.jwksURL == "" {
		var doc struct {
			Issuer  string `json:"issuer"`
			JWKSURI string `json:"jwks_uri"`
		}
		if err := v.getJSON(ctx, strings.TrimSuffix(v.cfg.Issuer, "/")+"/.well-known/openid-configuration", &doc); err != nil {
			return fmt.Errorf("discovery: %w", err)
		}
		// OpenID Discovery §4.3: the document must name the issuer it was read
		// from, or it is another provider's.
		if doc.Issuer != v.cfg.Issuer {
			return fmt.Errorf("discovery: the document names issuer %q, want %q", doc.Issuer, v.cfg.Issuer)
		}
		if err := checkURL(doc.JWKSURI); err != nil {
			return fmt.Errorf("discovery: jwks_uri: %w", err)
		}
		v.jwksURL = doc.JWKSURI
	}
	var set jose.JSONWebKeySet
	if err := v.getJSON(ctx, v.jwksURL, &set); err != nil {
		return fmt.Errorf("jwks: %w", err)
	}
	public := set.Keys[:0]
	for _, k := range set.Keys {
		if k.Valid() && k.IsPublic() {
			public = append(public, k)
		}
	}
	v.keys = jose.JSONWebKeySet{Keys: public}
	return nil
}

func (v *Verifier) getJSON(ctx context.Context, url string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := v.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxDocument)).Decode(out); err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	return nil
}
