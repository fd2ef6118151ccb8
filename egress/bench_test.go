package egress

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// argsOf64KiB renders http_request arguments whose body is 64 KiB of ordinary prose
// and code, with the keywords (key, token, secret, api, auth) that make gitleaks run
// its heavier rules, but no credential.
func argsOf64KiB(tb testing.TB) string {
	tb.Helper()
	r := rand.New(rand.NewPCG(1, 2))
	words := strings.Fields(`the fleet agent reads a file and writes a plan then calls the api with a key
		token secret auth header config value func return err nil if for range map string int
		package import struct type interface method request response status body json yaml`)
	var body strings.Builder
	for body.Len() < 64<<10 {
		for i := range 12 {
			if i > 0 {
				body.WriteByte(' ')
			}
			body.WriteString(words[r.IntN(len(words))])
		}
		fmt.Fprintf(&body, " = %d;\n", r.IntN(1000))
	}
	raw, err := json.Marshal(map[string]any{
		"method":  "POST",
		"url":     "https://api.example.com/v1/documents?lang=en&draft=false",
		"headers": map[string]string{"Content-Type": "text/plain", "Accept": "application/json"},
		"body":    body.String()[:64<<10],
	})
	if err != nil {
		tb.Fatal(err)
	}
	return string(raw)
}

// oneLineOf64KiB renders http_request arguments whose body is 64 KiB of a single
// line (minified text: no newline for a line-by-line scan to split on), dense with
// the keywords of gitleaks' generic rule and of provider rules (sk, ey, api-, live_,
// s.), but with no assignment (no "=", ":" or ",", which the generic rule also reads
// as one), so no rule's regexp can match.
func oneLineOf64KiB(tb testing.TB) string {
	tb.Helper()
	return argsWithBody(tb, keywordLine(rand.New(rand.NewPCG(3, 4)), false))
}

// assignmentsOf64KiB is oneLineOf64KiB with assignments of long words to the
// keywords ("token: credentials_endpoint"): the generic rule's regexp matches them
// (and its entropy floor and allowlist reject them), so gitleaks must run it over
// the whole text. The worst case for the scan of a text without credentials.
func assignmentsOf64KiB(tb testing.TB) string {
	tb.Helper()
	return argsWithBody(tb, keywordLine(rand.New(rand.NewPCG(5, 6)), true))
}

func keywordLine(r *rand.Rand, assign bool) string {
	words := strings.Fields(`key token secret auth api access password passwd credential creds
		sk ey task ask desk they money api-docs live_demo test_case s. the a of to and data value
		config header request json list`)
	long := strings.Fields(`credentials_endpoint secret_manager_name token_refresh_url
		api_version_latest password_policy_document authentication_header`)
	var body strings.Builder
	for body.Len() < 64<<10 {
		if assign && r.IntN(8) == 0 {
			fmt.Fprintf(&body, "%s: %s, ", words[r.IntN(10)], long[r.IntN(len(long))])
			continue
		}
		body.WriteString(words[r.IntN(len(words))])
		body.WriteByte(" .;"[r.IntN(3)])
	}
	return body.String()[:64<<10]
}

func argsWithBody(tb testing.TB, body string) string {
	tb.Helper()
	raw, err := json.Marshal(map[string]any{
		"method":  "POST",
		"url":     "https://api.example.com/v1/documents?lang=en&draft=false",
		"headers": map[string]string{"Content-Type": "text/plain", "Accept": "application/json"},
		"body":    body,
	})
	if err != nil {
		tb.Fatal(err)
	}
	return string(raw)
}

// BenchmarkDLPScan64KiB measures Scan ("plan") and, in the same run, the scan with
// every gitleaks rule over each text that Scan replaced ("all rules"), on 64 KiB
// arguments without a credential.
func BenchmarkDLPScan64KiB(b *testing.B) {
	d, err := NewDLP()
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args string
	}{
		{"prose", argsOf64KiB(b)},
		{"one-line", oneLineOf64KiB(b)},
		{"assignments", assignmentsOf64KiB(b)},
	} {
		for _, s := range []struct {
			name string
			scan func(string) []Finding
		}{
			{"plan", d.Scan},
			{"all-rules", func(args string) []Finding { return ScanAllRules(d, args) }},
		} {
			if fs := s.scan(c.args); len(fs) != 0 {
				b.Fatalf("the benchmark text %s must be clean, found %v", c.name, RuleIDs(fs))
			}
			b.Run(c.name+"/"+s.name, func(b *testing.B) {
				b.SetBytes(int64(len(c.args)))
				b.ReportAllocs()
				for b.Loop() {
					s.scan(c.args)
				}
			})
		}
	}
}
