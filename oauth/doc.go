// Package oauth makes a listener an OAuth 2.1 resource server (the MCP
// authorization spec, docs/mcp.md "OAuth 2.1"): it verifies the JWT access
// tokens an outside authorization server issues, maps their scopes to fleet
// roles, and says what a client needs to get one (RFC 9728 protected resource
// metadata, RFC 6750 WWW-Authenticate challenges).
//
// A Verifier checks a token's signature against the issuer's JWKS (found by
// OpenID discovery unless configured; cached, fetched again on an unknown key
// id at most every MinRefetch), its issuer (exactly Config.Issuer), its
// audience (Config.Resource, RFC 8707), exp and nbf within Config.Leeway, and
// its algorithm (asymmetric ones only: never none nor HS*, whose key would be a
// secret the resource server shares with the issuer). A token is never passed
// through to anything.
//
// The package stands on the standard library and go-jose alone: it knows no
// fleet role, no principal store, no HTTP route. Its callers (mcpserver) decide
// what a role allows and serve the metadata.
package oauth
