package inbound

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Schemes a hook verifies its deliveries by.
const (
	// SchemeGitHub: X-Hub-Signature-256: sha256=<hex HMAC-SHA256(secret, body)>;
	// the delivery id is X-GitHub-Delivery. GitHub signs no timestamp and not
	// the delivery id, so a captured delivery could be resent under a fresh
	// id at any time: a github hook dedupes by the body's SHA-256 (DedupeKey).
	SchemeGitHub = "github"
	// SchemeStripe: Stripe-Signature: t=<unix>,v1=<hex HMAC-SHA256(secret,
	// t + "." + body)>[,v1=…] (any v1 may match; v0 and other schemes are
	// ignored), t within the tolerance; the delivery id is the event's "id"
	// (evt_…), which the signature covers.
	SchemeStripe = "stripe"
	// SchemeHMAC is the generic scheme, for any sender that can compute an
	// HMAC: X-Aetherium-Timestamp: <unix>, X-Aetherium-Delivery: <id> and
	// X-Aetherium-Signature: sha256=<hex HMAC-SHA256(secret, timestamp + "." +
	// delivery + "." + body)>. The delivery id is signed so that, within the
	// window, a captured delivery cannot be resent under a fresh id.
	SchemeHMAC = "hmac"
)

// Schemes lists every scheme.
var Schemes = []string{SchemeGitHub, SchemeStripe, SchemeHMAC}

// Headers of the schemes.
const (
	HeaderGitHubSignature = "X-Hub-Signature-256"
	HeaderGitHubDelivery  = "X-GitHub-Delivery"
	HeaderStripeSignature = "Stripe-Signature"
	HeaderSignature       = "X-Aetherium-Signature"
	HeaderTimestamp       = "X-Aetherium-Timestamp"
	HeaderDelivery        = "X-Aetherium-Delivery"
)

// MaxDeliveryIDLen bounds a delivery id (a header or an event id).
const MaxDeliveryIDLen = 200

// Errors of Verify: ErrSignature is reason bad_signature, ErrStale is stale.
var (
	ErrSignature = errors.New("inbound webhook: missing or wrong signature")
	ErrStale     = errors.New("inbound webhook: signed timestamp outside the tolerance (a replay or a skewed clock)")
	ErrScheme    = errors.New("inbound webhook: unknown scheme")
)

// Header reads a request header by its canonical name ("" when absent).
type Header func(name string) string

// Verify checks a delivery's signature under scheme with the hook's secret
// (its bytes are the HMAC key, as GitHub and Stripe use theirs). It returns
// nil, or an error wrapping ErrSignature or ErrStale. Every comparison is
// constant-time (hmac.Equal); a signature is decoded from hex before it is
// compared, so its case does not matter.
func Verify(scheme, secret string, h Header, body []byte, now time.Time, tolerance time.Duration) error {
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	key := []byte(secret)
	switch scheme {
	case SchemeGitHub:
		sig, ok := strings.CutPrefix(h(HeaderGitHubSignature), "sha256=")
		if !ok {
			return fmt.Errorf("%w: %s needs sha256=<hex>", ErrSignature, HeaderGitHubSignature)
		}
		return equalHex(sig, sign(key, body))
	case SchemeStripe:
		ts, sigs, err := parseStripe(h(HeaderStripeSignature))
		if err != nil {
			return err
		}
		if err := fresh(ts, now, tolerance); err != nil {
			return err
		}
		want := sign(key, []byte(ts), []byte{'.'}, body)
		for _, s := range sigs {
			if equalHex(s, want) == nil {
				return nil
			}
		}
		return fmt.Errorf("%w: no v1 signature of %s matches", ErrSignature, HeaderStripeSignature)
	case SchemeHMAC:
		ts, id := h(HeaderTimestamp), h(HeaderDelivery)
		sig, ok := strings.CutPrefix(h(HeaderSignature), "sha256=")
		if !ok || ts == "" || id == "" {
			return fmt.Errorf("%w: needs %s, %s and %s: sha256=<hex>", ErrSignature, HeaderTimestamp, HeaderDelivery, HeaderSignature)
		}
		if err := fresh(ts, now, tolerance); err != nil {
			return err
		}
		return equalHex(sig, sign(key, []byte(ts), []byte{'.'}, []byte(id), []byte{'.'}, body))
	default:
		return fmt.Errorf("%w %q", ErrScheme, scheme)
	}
}

// SignGitHub is the X-Hub-Signature-256 value of body (for tests and senders).
func SignGitHub(secret string, body []byte) string {
	return "sha256=" + hex.EncodeToString(sign([]byte(secret), body))
}

// SignStripe is a Stripe-Signature value of body at ts.
func SignStripe(secret string, ts time.Time, body []byte) string {
	t := strconv.FormatInt(ts.Unix(), 10)
	return "t=" + t + ",v1=" + hex.EncodeToString(sign([]byte(secret), []byte(t), []byte{'.'}, body))
}

// SignHMAC is the X-Aetherium-Signature value of a generic delivery.
func SignHMAC(secret string, ts time.Time, delivery string, body []byte) string {
	t := strconv.FormatInt(ts.Unix(), 10)
	return "sha256=" + hex.EncodeToString(sign([]byte(secret), []byte(t), []byte{'.'}, []byte(delivery), []byte{'.'}, body))
}

func sign(key []byte, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, key)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

func equalHex(got string, want []byte) error {
	b, err := hex.DecodeString(got)
	if err != nil || !hmac.Equal(b, want) {
		return ErrSignature
	}
	return nil
}

// parseStripe splits a Stripe-Signature header: its one t and its v1 values.
func parseStripe(v string) (ts string, v1 []string, err error) {
	for _, part := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			continue
		}
		switch k {
		case "t":
			if ts != "" {
				return "", nil, fmt.Errorf("%w: %s has two timestamps", ErrSignature, HeaderStripeSignature)
			}
			ts = val
		case "v1":
			if len(v1) < 8 {
				v1 = append(v1, val)
			}
		}
	}
	if ts == "" || len(v1) == 0 {
		return "", nil, fmt.Errorf("%w: %s needs t=<unix> and v1=<hex>", ErrSignature, HeaderStripeSignature)
	}
	return ts, v1, nil
}

// fresh checks a signed Unix timestamp against now ± tolerance.
func fresh(ts string, now time.Time, tolerance time.Duration) error {
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: timestamp %q is not Unix seconds", ErrSignature, ts)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: %s off", ErrStale, d.Round(time.Second))
	}
	return nil
}

// DedupeKey is what a verified delivery is deduplicated by within its hook:
// github: "sha256:<hex of the body>" (GitHub's delivery id is not signed, see
// SchemeGitHub; a redelivery from GitHub's UI sends the same body, so it
// dedupes too); stripe: the event's id (signed), else the body's digest; hmac:
// the signed X-Aetherium-Delivery. eventID is the payload's top-level "id"
// string (stripe), "" when none.
func DedupeKey(scheme string, h Header, body []byte, eventID string) string {
	switch scheme {
	case SchemeStripe:
		if eventID != "" {
			return plainOrDigest(eventID)
		}
	case SchemeHMAC:
		return plainOrDigest(h(HeaderDelivery))
	}
	return digest(body)
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// plainOrDigest keeps an id of printable ASCII up to MaxDeliveryIDLen as it is
// and replaces any other by its digest (a key is stored and indexed).
func plainOrDigest(id string) string {
	if len(id) > MaxDeliveryIDLen || strings.HasPrefix(id, "sha256:") {
		return digest([]byte(id))
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x20 || id[i] > 0x7e {
			return digest([]byte(id))
		}
	}
	return id
}

// DeliveryID is the sender's name of a delivery, for the record (not for
// dedupe: see DedupeKey), cut to MaxDeliveryIDLen.
func DeliveryID(scheme string, h Header, eventID string) string {
	var id string
	switch scheme {
	case SchemeGitHub:
		id = h(HeaderGitHubDelivery)
	case SchemeStripe:
		id = eventID
	case SchemeHMAC:
		id = h(HeaderDelivery)
	}
	if len(id) > MaxDeliveryIDLen {
		id = id[:MaxDeliveryIDLen]
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e {
			return -1
		}
		return r
	}, id)
}
