package oauth

import (
	"strings"
)

// The WWW-Authenticate values of a resource server (RFC 6750 §3, with RFC
// 9728 §5.1's resource_metadata so a client can find the authorization server).

// MissingChallenge answers a request without a token: where the metadata is
// and the scopes that would let it in.
func MissingChallenge(metadataURL string, scopes []string) string {
	params := []string{param("resource_metadata", metadataURL)}
	if len(scopes) > 0 {
		params = append(params, param("scope", strings.Join(scopes, " ")))
	}
	return "Bearer " + strings.Join(params, ", ")
}

// InvalidChallenge answers a token that failed verification (expired, wrong
// audience, foreign issuer, bad signature, malformed): the client should get a
// new one.
func InvalidChallenge(metadataURL string, err error) string {
	desc := "the access token is invalid"
	if err != nil {
		desc = err.Error()
	}
	return "Bearer " + strings.Join([]string{
		param("error", "invalid_token"), param("error_description", truncate(desc, maxDescription)), param("resource_metadata", metadataURL),
	}, ", ")
}

// InsufficientChallenge answers a valid token whose scopes grant too little:
// scopes names what would suffice.
func InsufficientChallenge(metadataURL string, scopes []string) string {
	return "Bearer " + strings.Join([]string{
		param("error", "insufficient_scope"), param("scope", strings.Join(scopes, " ")), param("resource_metadata", metadataURL),
	}, ", ")
}

// maxDescription bounds error_description: it is a hint, not a log.
const maxDescription = 200

// param is name="value" with value cut to the characters RFC 6750 allows in a
// quoted value (%x20-21 / %x23-5B / %x5D-7E): a claim echoed in a description
// must not break the header.
func param(name, value string) string {
	b := []byte(value)
	for i, c := range b {
		switch {
		case c == '"' || c == '\\':
			b[i] = '\''
		case c < 0x20 || c > 0x7e:
			b[i] = '?'
		}
	}
	return name + `="` + string(b) + `"`
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
