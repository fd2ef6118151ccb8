package egress_test

import (
	"errors"
	"fmt"

	"github.com/aetherium-engine/aetherium/egress"
)

// The destination policy an outbound tool's URL passes before the call runs:
// http(s) only, the host in the team's allowed_domains (exact or *.domain, which
// matches subdomains only), no credentials in the URL, and never a link-local or
// metadata address.
func ExampleCheckURL() {
	allowed := []string{"example.com", "*.docs.example.org"}
	for _, u := range []string{
		"https://example.com/page",
		"https://api.docs.example.org/v1",
		"https://docs.example.org/",
		"https://evil.test/",
		"ftp://example.com/file",
		"https://user:pw@example.com/",
		"http://169.254.169.254/latest/meta-data/",
	} {
		err := egress.CheckURL(u, allowed)
		fmt.Printf("%-45s %v\n", u, err == nil)
		if err != nil && !errors.Is(err, egress.ErrEgressDenied) {
			fmt.Println("unexpected:", err)
		}
	}
	// Output:
	// https://example.com/page                      true
	// https://api.docs.example.org/v1               true
	// https://docs.example.org/                     false
	// https://evil.test/                            false
	// ftp://example.com/file                        false
	// https://user:pw@example.com/                  false
	// http://169.254.169.254/latest/meta-data/      false
}

// DLP scans an outbound call's arguments for credentials (gitleaks' rules, run on
// the text as written and on every value it carries once decoded) before the call
// leaves (one secret may match several rules); the gate refuses a call with
// findings, and Redact masks them for the audit trail.
func ExampleDLP_ScanArgs() {
	dlp, err := egress.NewDLP()
	if err != nil {
		fmt.Println(err)
		return
	}
	args := []byte(`{"url":"https://example.com/hook","body":"token=ghp_R7x9Kq2LmN4pV8sT1wZ5yB3cD6fG0hJ2kL4m"}`)
	findings, err := dlp.ScanArgs(args)
	fmt.Println(egress.RuleIDs(findings), err)
	fmt.Println(egress.Redact(string(args), findings))

	clean, _ := dlp.ScanArgs([]byte(`{"url":"https://example.com/hook","body":"hello"}`))
	fmt.Println(len(clean))
	// Output:
	// [github-pat github-token-prefix] <nil>
	// {"url":"https://example.com/hook","body":"token=[REDACTED:github-pat]"}
	// 0
}
