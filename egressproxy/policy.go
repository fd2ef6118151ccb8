package egressproxy

// Policy is the destination policy the proxy applies: the same one the outbound
// tools use (egress.EgressPolicy: metadata addresses, the fleet's own endpoints,
// the private switch). CheckURL runs before dialing (scheme, allowlist, addresses
// given literally); CheckDialFor runs on every address actually dialed, after DNS.
// denyPrivate is the team's own egress.private: deny, which can only tighten the
// deployment's switch.
type Policy interface {
	CheckURLFor(raw string, allowlist []string, denyPrivate bool) error
	CheckDialFor(network, address string, denyPrivate bool) error
}
