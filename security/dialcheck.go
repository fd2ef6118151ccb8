package security

// CheckDialAddress applies the dial-time check (the address actually dialed, after
// DNS) outside this package's own HTTP client: the sandbox egress proxy dials for
// commands and must refuse the same addresses.
func CheckDialAddress(network, address string) error {
	return dialControl(network, address, nil)
}
