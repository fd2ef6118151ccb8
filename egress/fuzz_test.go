package egress_test

import (
	"math/rand/v2"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/egress"
)

// fuzzSecrets are credential-shaped strings built from a fixed seed (nothing here is
// a live credential), the DLP fuzz target's seeds.
func fuzzSecrets() []string {
	r := rand.New(rand.NewPCG(7, 11))
	pick := func(alphabet string, n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		return string(b)
	}
	const b62 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	gh := "ghp_" + pick(b62, 36)
	aws := "AKIA" + pick("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16)
	return []string{
		`{"url":"https://api.example.com/v1/items?token=` + gh + `","method":"GET"}`,
		`{"headers":{"Authorization":"Bearer ` + gh + `"},"body":"x"}`,
		`{"url":"https://h/?k=` + url.QueryEscape(aws) + `%"}`,
		"aws_access_key_id = " + aws + "\nand again " + aws,
		strings.Repeat("%", 3) + url.PathEscape(gh) + "%4",
		"nothing secret here",
		"",
	}
}

// FuzzDLPScan scans arbitrary text. Every finding names its rule and secret, and
// redaction removes every found secret from the text, whatever surrounds it.
func FuzzDLPScan(f *testing.F) {
	for _, s := range fuzzSecrets() {
		f.Add(s)
	}
	d, err := egress.NewDLP()
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 1<<14 {
			t.Skip("bounded sizes keep the fuzzer fast")
		}
		fs := d.Scan(s)
		for _, x := range fs {
			require.NotEmpty(t, x.Rule)
			require.NotEmpty(t, x.Secret)
		}
		red := egress.Redact(s, fs)
		for _, x := range fs {
			if len(x.Secret) >= 4 {
				require.NotContains(t, red, x.Secret, "rule %s: the secret survived redaction", x.Rule)
			}
		}
		if len(fs) == 0 {
			require.Equal(t, s, red, "nothing found, nothing changed")
		}
	})
}

// FuzzCheckURL checks the egress decision on arbitrary URLs: an allowed URL is http(s)
// with a host, carries no credentials, and names either the allowlisted domain,
// localhost, or an IP that is loopback/private — never a link-local or metadata
// address, in any spelling.
func FuzzCheckURL(f *testing.F) {
	for _, s := range []string{
		"https://example.com/x", "http://api.example.com:8080/", "https://evil.com/", "http://169.254.169.254/latest",
		"http://[fd00:ec2::254]/", "http://[::ffff:169.254.169.254]/", "http://127.0.0.1:9/", "http://10.0.0.1/",
		"http://user:pass@example.com/", "ftp://example.com/", "http://example.com@169.254.169.254/",
		"http://0xa9fea9fe/", "http://2852039166/", "http://[fe80::1%25eth0]/", "//example.com", "http://EXAMPLE.com./",
		"http://localhost/", "http://[::1]/", "https://a.b.example.com/",
	} {
		f.Add(s)
	}
	allow := []string{"example.com", "*.b.example.com"}
	f.Fuzz(func(t *testing.T, raw string) {
		err := egress.CheckURL(raw, allow)
		if err != nil {
			require.ErrorIs(t, err, egress.ErrEgressDenied)
			return
		}
		u, perr := url.Parse(raw)
		require.NoError(t, perr)
		require.Contains(t, []string{"http", "https"}, u.Scheme)
		require.Nil(t, u.User)
		host := u.Hostname()
		require.NotEmpty(t, host)
		if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
			a = a.Unmap().WithZone("")
			require.False(t, a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast(), "allowed a link-local address: %s", raw)
			require.NotEqual(t, netip.MustParseAddr("fd00:ec2::254"), a, "allowed the metadata address: %s", raw)
			return
		}
		h := strings.ToLower(strings.TrimSuffix(host, "."))
		require.True(t, h == "localhost" || h == "example.com" || strings.HasSuffix(h, ".b.example.com"), "allowed host %q of %q", host, raw)
	})
}

// FuzzNormalize checks the rule normalizations never panic and are idempotent: a
// normalized value is already in the form rules match, so a second pass changes
// nothing (otherwise a pattern written against the documented form could miss).
func FuzzNormalize(f *testing.F) {
	for _, s := range []string{
		"./secret/x", "/workspace/secret/x", "a/../secret/x", "secret//x", "../etc/passwd", "/ws/run/secret", "",
		"HTTP://Example.COM:80/a/./b//c", "http://example.com.:/%61/x/%2e%2E/b/%63", "https://[::1]:443/?q=%41%2f#f",
		"http://u:p@h/", "mailto:x@y", "http://[fe80::1%25en0]/", "http://h/a%zz", "//h/p",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p := egress.NormalizePath(s, "/ws/run")
		require.Equal(t, p, egress.NormalizePath(p, "/ws/run"), "path %q", s)
		u, ok := egress.NormalizeURL(s)
		if !ok {
			require.Equal(t, s, u, "an unparseable URL is matched raw")
			return
		}
		again, ok := egress.NormalizeURL(u)
		require.True(t, ok, "normalized %q to %q, which does not parse", s, u)
		require.Equal(t, u, again, "normalizing %q twice", s)
	})
}
