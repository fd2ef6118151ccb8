package egressproxy

import "github.com/aetherium-engine/aetherium/security"

// Policy is the destination policy the proxy applies: the same one the outbound
// tools use. CheckURL runs before dialing (scheme, allowlist, metadata addresses
// given literally); CheckDial runs on every address actually dialed, after DNS.
type Policy interface {
	CheckURL(raw string, allowlist []string) error
	CheckDial(network, address string) error
}

// SecurityPolicy adapts today's package-level checks of package security. When the
// security package grows a policy value with these methods (control-plane
// denials), it replaces this adapter.
type SecurityPolicy struct{}

// CheckURL implements Policy.
func (SecurityPolicy) CheckURL(raw string, allowlist []string) error {
	return security.CheckURL(raw, allowlist)
}

// CheckDial implements Policy.
func (SecurityPolicy) CheckDial(network, address string) error {
	return security.CheckDialAddress(network, address)
}
