package egressproxy

// Policy is the destination policy the proxy applies: the same one the outbound
// tools use (security.EgressPolicy: metadata addresses, the fleet's own endpoints,
// the private switch). CheckURL runs before dialing (scheme, allowlist, addresses
// given literally); CheckDial runs on every address actually dialed, after DNS.
type Policy interface {
	CheckURL(raw string, allowlist []string) error
	CheckDial(network, address string) error
}
