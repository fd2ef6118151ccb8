package inbound_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/webhook/inbound"
)

func headers(kv ...string) inbound.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h.Get
}

// GitHub's documented test values ("Validating webhook deliveries", "Testing
// the webhook payload validation"): this secret and payload give this
// signature. Checked here against the code and, independently, against
// `printf 'Hello, World!' | openssl dgst -sha256 -hmac "It's a Secret to Everybody"`.
const (
	githubSecret  = "It's a Secret to Everybody"
	githubPayload = "Hello, World!"
	githubSig     = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
)

func TestVerify(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	const secret = "whsec_a-test-secret-of-some-length"
	body := []byte(`{"id":"evt_1","type":"invoice.paid"}`)
	stripeSig := func(ts time.Time, b []byte) string { return inbound.SignStripe(secret, ts, b) }
	// Stripe's scheme written out as its documentation states it, not through
	// SignStripe: hex(HMAC-SHA256(secret, t + "." + payload)).
	stripeDoc := "t=1700000000,v1=" + hexHMAC(secret, "1700000000."+string(body))
	tests := []struct {
		name   string
		scheme string
		secret string
		h      inbound.Header
		body   []byte
		want   error
	}{
		{"github: the documented test vector", inbound.SchemeGitHub, githubSecret, headers(inbound.HeaderGitHubSignature, githubSig), []byte(githubPayload), nil},
		{"github: upper-case hex", inbound.SchemeGitHub, githubSecret, headers(inbound.HeaderGitHubSignature, "sha256="+strings.ToUpper(githubSig[7:])), []byte(githubPayload), nil},
		{"github: tampered body", inbound.SchemeGitHub, githubSecret, headers(inbound.HeaderGitHubSignature, githubSig), []byte("Hello, World?"), inbound.ErrSignature},
		{"github: wrong secret", inbound.SchemeGitHub, "It's a Secret to Nobody", headers(inbound.HeaderGitHubSignature, githubSig), []byte(githubPayload), inbound.ErrSignature},
		{"github: sha1 header only", inbound.SchemeGitHub, githubSecret, headers("X-Hub-Signature", "sha1=0123"), []byte(githubPayload), inbound.ErrSignature},
		{"github: no header", inbound.SchemeGitHub, githubSecret, headers(), []byte(githubPayload), inbound.ErrSignature},
		{"stripe: the documented scheme", inbound.SchemeStripe, secret, headers(inbound.HeaderStripeSignature, stripeDoc), body, nil},
		{"stripe: v0 and a second v1, one matching", inbound.SchemeStripe, secret, headers(inbound.HeaderStripeSignature, "t=1700000000,v0=00,v1=deadbeef,"+stripeDoc[len("t=1700000000,"):]), body, nil},
		{"stripe: within the window", inbound.SchemeStripe, secret, headers(inbound.HeaderStripeSignature, stripeSig(now.Add(-4*time.Minute), body)), body, nil},
		{"stripe: stale", inbound.SchemeStripe, secret, headers(inbound.HeaderStripeSignature, stripeSig(now.Add(-6*time.Minute), body)), body, inbound.ErrStale},
		{"stripe: from the future", inbound.SchemeStripe, secret, headers(inbound.HeaderStripeSignature, stripeSig(now.Add(6*time.Minute), body)), body, inbound.ErrStale},
		{"stripe: tampered body", inbound.SchemeStripe, secret, headers(inbound.HeaderStripeSignature, stripeDoc), []byte(`{"id":"evt_2","type":"invoice.paid"}`), inbound.ErrSignature},
		{"stripe: wrong secret", inbound.SchemeStripe, secret + "x", headers(inbound.HeaderStripeSignature, stripeDoc), body, inbound.ErrSignature},
		{"stripe: re-timed (t changed, v1 kept)", inbound.SchemeStripe, secret, headers(inbound.HeaderStripeSignature, "t=1700000001"+stripeDoc[len("t=1700000000"):]), body, inbound.ErrSignature},
		{"stripe: two timestamps", inbound.SchemeStripe, secret, headers(inbound.HeaderStripeSignature, "t=1,"+stripeDoc), body, inbound.ErrSignature},
		{"hmac: signed", inbound.SchemeHMAC, secret, headers(inbound.HeaderTimestamp, "1700000000", inbound.HeaderDelivery, "d1", inbound.HeaderSignature, inbound.SignHMAC(secret, now, "d1", body)), body, nil},
		{"hmac: delivery id changed", inbound.SchemeHMAC, secret, headers(inbound.HeaderTimestamp, "1700000000", inbound.HeaderDelivery, "d2", inbound.HeaderSignature, inbound.SignHMAC(secret, now, "d1", body)), body, inbound.ErrSignature},
		{"hmac: stale", inbound.SchemeHMAC, secret, headers(inbound.HeaderTimestamp, "1699999000", inbound.HeaderDelivery, "d1", inbound.HeaderSignature, inbound.SignHMAC(secret, time.Unix(1699999000, 0), "d1", body)), body, inbound.ErrStale},
		{"hmac: no delivery id", inbound.SchemeHMAC, secret, headers(inbound.HeaderTimestamp, "1700000000", inbound.HeaderSignature, inbound.SignHMAC(secret, now, "", body)), body, inbound.ErrSignature},
		{"unknown scheme", "gitlab", secret, headers(), body, inbound.ErrScheme},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := inbound.Verify(tc.scheme, tc.secret, tc.h, tc.body, now, inbound.DefaultTolerance)
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tc.want)
		})
	}
}

func TestSignGitHubMatchesTheDocumentedVector(t *testing.T) {
	t.Parallel()
	require.Equal(t, githubSig, inbound.SignGitHub(githubSecret, []byte(githubPayload)))
}

func TestDepthRefusesDeepNestingCheaply(t *testing.T) {
	t.Parallel()
	deep := strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000)
	start := time.Now()
	_, err := inbound.Parse([]byte(deep), inbound.DefaultMaxDepth)
	require.ErrorIs(t, err, inbound.ErrTooDeep)
	require.Less(t, time.Since(start), time.Second)
	// Brackets inside strings (escaped quotes too) are not nesting.
	_, err = inbound.Parse([]byte(`{"a":"`+strings.Repeat(`[\"{`, 1000)+`"}`), 2)
	require.NoError(t, err)
	_, err = inbound.Parse([]byte(`{"a":{"b":{"c":1}}}`), 2)
	require.ErrorIs(t, err, inbound.ErrTooDeep)
	_, err = inbound.Parse([]byte(`{"a":1} {"b":2}`), 8)
	require.ErrorIs(t, err, inbound.ErrBadJSON)
	_, err = inbound.Parse([]byte(`{"a":`), 8)
	require.ErrorIs(t, err, inbound.ErrBadJSON)
}

func TestResolve(t *testing.T) {
	t.Parallel()
	var doc any
	dec := json.NewDecoder(strings.NewReader(`{"foo":["bar","baz"],"":0,"a/b":1,"m~n":8,"issue":{"title":"T","number":12345678901234567890}}`))
	dec.UseNumber()
	require.NoError(t, dec.Decode(&doc))
	tests := []struct {
		ptr  string
		want any
		err  error
	}{
		// RFC 6901 section 5's examples.
		{"/foo/0", "bar", nil},
		{"/", json.Number("0"), nil},
		{"/a~1b", json.Number("1"), nil},
		{"/m~0n", json.Number("8"), nil},
		{"/issue/title", "T", nil},
		{"/issue/number", json.Number("12345678901234567890"), nil},
		{"/foo/2", nil, inbound.ErrNowhere},
		{"/foo/-", nil, inbound.ErrNowhere},
		{"/foo/01", nil, inbound.ErrNowhere},
		{"/issue/title/x", nil, inbound.ErrNowhere},
		{"/nope", nil, inbound.ErrNowhere},
		{"nope", nil, inbound.ErrPointer},
		{"/a~2", nil, inbound.ErrPointer},
	}
	for _, tc := range tests {
		got, err := inbound.Resolve(doc, tc.ptr)
		if tc.err != nil {
			require.ErrorIs(t, err, tc.err, tc.ptr)
			continue
		}
		require.NoError(t, err, tc.ptr)
		require.Equal(t, tc.want, got, tc.ptr)
	}
}

func TestPayloadByContentType(t *testing.T) {
	t.Parallel()
	doc, err := inbound.Payload("application/x-www-form-urlencoded", []byte("payload=%7B%22a%22%3A1%7D"))
	require.NoError(t, err)
	require.JSONEq(t, `{"a":1}`, string(doc))
	doc, err = inbound.Payload("application/json; charset=utf-8", []byte(`{"a":1}`))
	require.NoError(t, err)
	require.Equal(t, `{"a":1}`, string(doc))
	_, err = inbound.Payload("multipart/form-data; boundary=x", []byte("--x"))
	require.ErrorIs(t, err, inbound.ErrBadJSON)
}

func TestDedupeKey(t *testing.T) {
	t.Parallel()
	body := []byte(`{}`)
	// GitHub's delivery id is unsigned: the key is the body's, whatever the header says.
	require.Equal(t, inbound.DedupeKey(inbound.SchemeGitHub, headers(inbound.HeaderGitHubDelivery, "a"), body, ""),
		inbound.DedupeKey(inbound.SchemeGitHub, headers(inbound.HeaderGitHubDelivery, "b"), body, ""))
	require.Equal(t, "evt_1", inbound.DedupeKey(inbound.SchemeStripe, headers(), body, "evt_1"))
	require.Equal(t, "d1", inbound.DedupeKey(inbound.SchemeHMAC, headers(inbound.HeaderDelivery, "d1"), body, ""))
	require.True(t, strings.HasPrefix(inbound.DedupeKey(inbound.SchemeHMAC, headers(inbound.HeaderDelivery, strings.Repeat("x", 300)), body, ""), "sha256:"))
}

func TestConfig(t *testing.T) {
	t.Parallel()
	c := inbound.Config{}.WithDefaults()
	require.Equal(t, inbound.DefaultBodyLimit, c.BodyLimit)
	require.NoError(t, c.Validate())
	require.ErrorContains(t, inbound.Config{Addr: "nope", MaxDepth: -1}.Validate(), "api.hooks.addr")
}
