package oauth

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Defaults of Config.
const (
	// DefaultPrincipalClaim names the principal: the subject, as OpenID
	// providers fill it for users and service clients alike.
	DefaultPrincipalClaim = "sub"
	// DefaultLeeway tolerates the clock skew between the issuer and this host
	// when exp and nbf are checked.
	DefaultLeeway = 30 * time.Second
)

// Config is a resource server's trust in one authorization server (an OpenID
// provider): the section mcp.oauth. Zero fields take their defaults
// (WithDefaults); an empty Issuer turns OAuth off (Enabled).
type Config struct {
	// Issuer is the authorization server, exactly as its tokens' iss claim names
	// it (https; http only on a loopback host). Its
	// /.well-known/openid-configuration gives jwks_uri unless JWKSURL is set.
	Issuer string `yaml:"issuer"`
	// Resource is this server's resource identifier (RFC 8707): the audience a
	// token must carry, and the resource of the protected resource metadata.
	// Empty: the caller derives it (mcpserver: the listener's URL + /mcp on a
	// loopback address).
	Resource string `yaml:"resource"`
	// JWKSURL locates the issuer's signing keys instead of OpenID discovery.
	JWKSURL string `yaml:"jwks_url"`
	// Scopes map each OAuth scope to the fleet roles it grants: a token holds the
	// union of the roles of its scopes, and a scope not listed grants nothing.
	Scopes map[string][]string `yaml:"scopes"`
	// PrincipalClaim is the claim naming the principal (a string). Default
	// DefaultPrincipalClaim.
	PrincipalClaim string `yaml:"principal_claim"`
	// Leeway is the clock skew tolerated on exp and nbf. Default DefaultLeeway.
	Leeway time.Duration `yaml:"leeway"`
}

// WithDefaults returns c with every zero field filled in (a disabled Config
// stays empty, so Validate can tell it apart from a half-written one).
func (c Config) WithDefaults() Config {
	if !c.Enabled() {
		return c
	}
	if c.PrincipalClaim == "" {
		c.PrincipalClaim = DefaultPrincipalClaim
	}
	if c.Leeway == 0 {
		c.Leeway = DefaultLeeway
	}
	return c
}

// Enabled reports whether tokens of an authorization server are accepted.
func (c Config) Enabled() bool { return c.Issuer != "" }

// FieldError is an invalid field, by its key inside the section (issuer,
// scopes.<scope>): the caller names the section (mcp.oauth.issuer).
type FieldError struct {
	Key string
	Err error
}

func (e *FieldError) Error() string { return e.Key + ": " + e.Err.Error() }

func (e *FieldError) Unwrap() error { return e.Err }

// Validate reports every invalid field as a *FieldError (joined). A disabled
// Config is valid only when it sets nothing else: a resource or scopes without
// an issuer would silently accept no token.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, &FieldError{Key: key, Err: fmt.Errorf(format, args...)})
	}
	if !c.Enabled() {
		if c.Resource != "" || c.JWKSURL != "" || len(c.Scopes) > 0 || c.PrincipalClaim != "" || c.Leeway != 0 {
			bad("issuer", "required: the other oauth keys are set")
		}
		return errors.Join(errs...)
	}
	if err := checkURL(c.Issuer); err != nil {
		bad("issuer", "%w", err)
	}
	if c.JWKSURL != "" {
		if err := checkURL(c.JWKSURL); err != nil {
			bad("jwks_url", "%w", err)
		}
	}
	if c.Resource != "" {
		// RFC 8707 §2: an absolute URI without a fragment.
		if u, err := url.Parse(c.Resource); err != nil || !u.IsAbs() || u.Host == "" || u.Fragment != "" {
			bad("resource", "want an absolute URL without a fragment, got %q", c.Resource)
		}
	}
	if len(c.Scopes) == 0 {
		bad("scopes", "required: map at least one scope to fleet roles (a token without roles may do nothing)")
	}
	for _, s := range slices.Sorted(maps.Keys(c.Scopes)) {
		if !scopeToken(s) {
			bad("scopes."+s, "not a scope token (RFC 6749 §3.3: printable ASCII without space, \" or \\)")
		}
		if len(c.Scopes[s]) == 0 {
			bad("scopes."+s, "grants no role")
		}
	}
	if c.Leeway < 0 {
		bad("leeway", "must not be negative, got %s", c.Leeway)
	}
	return errors.Join(errs...)
}

// checkURL accepts https, and http only on a loopback host (a local provider,
// the tests): keys fetched in clear from elsewhere could be anyone's.
func checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return fmt.Errorf("want an https URL, got %q", raw)
	}
	if u.Scheme == "http" && !loopback(u.Hostname()) {
		return fmt.Errorf("want https (http only on a loopback host), got %q", raw)
	}
	return nil
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// scopeToken is RFC 6749's scope-token: %x21 / %x23-5B / %x5D-7E.
func scopeToken(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < 0x21 || r > 0x7e || r == '"' || r == '\\' {
			return false
		}
	}
	return true
}

// Roles is the union of the roles of scopes, sorted; unknown scopes grant none.
func (c Config) Roles(scopes []string) []string {
	set := map[string]bool{}
	for _, s := range scopes {
		for _, r := range c.Scopes[s] {
			set[r] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// ScopesGranting are the configured scopes (sorted) one of whose roles
// satisfies want: what a client must ask for to be let in.
func (c Config) ScopesGranting(want func(role string) bool) []string {
	var out []string
	for _, s := range slices.Sorted(maps.Keys(c.Scopes)) {
		for _, r := range c.Scopes[s] {
			if want(r) {
				out = append(out, s)
				break
			}
		}
	}
	return out
}

// ResourceName names the protected resource in its metadata (resource_name).
const ResourceName = "Aetherium fleet"

// Metadata is the OAuth 2.0 protected resource metadata of RFC 9728 §2.
type Metadata struct {
	Resource               string   `json:"resource"`
	AuthorizationServers   []string `json:"authorization_servers"`
	ScopesSupported        []string `json:"scopes_supported"`
	BearerMethodsSupported []string `json:"bearer_methods_supported"`
	ResourceName           string   `json:"resource_name,omitempty"`
}

// Metadata is the document a client reads to find the authorization server of
// resource and the scopes to ask for. Bearer tokens are taken from the
// Authorization header only: a token in a query string ends up in logs.
func (c Config) Metadata(resource string) Metadata {
	return Metadata{
		Resource:               resource,
		AuthorizationServers:   []string{c.Issuer},
		ScopesSupported:        slices.Sorted(maps.Keys(c.Scopes)),
		BearerMethodsSupported: []string{"header"},
		ResourceName:           ResourceName,
	}
}

// MetadataURL is where the metadata of the resource at path (/mcp/ide) is
// served on the resource's origin (RFC 9728 §3.1: the well-known segment goes
// between the host and the path).
func MetadataURL(resource, path string) string {
	u, err := url.Parse(resource)
	if err != nil {
		return ""
	}
	return u.Scheme + "://" + u.Host + WellKnownPath + strings.TrimSuffix(path, "/")
}

// WellKnownPath is the RFC 9728 well-known path of protected resource metadata.
const WellKnownPath = "/.well-known/oauth-protected-resource"
