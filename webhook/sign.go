package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The Standard Webhooks signature (https://www.standardwebhooks.com, "Webhook
// signature"): three headers on every delivery, and the signature covers the id
// and the time as well as the body, so a captured delivery cannot be replayed
// once its timestamp is outside the receiver's tolerance (and within it, the id
// repeats: receivers dedupe by it).
const (
	// HeaderID is the delivery id: "<hook>-<event id>", the same on every retry.
	HeaderID = "webhook-id"
	// HeaderTimestamp is the attempt's time in Unix seconds.
	HeaderTimestamp = "webhook-timestamp"
	// HeaderSignature is "v1,<base64 HMAC-SHA256 of id.timestamp.body>"; a
	// receiver accepts any one of its space-separated signatures (a secret being
	// rotated signs twice).
	HeaderSignature = "webhook-signature"
	// SecretPrefix marks a secret in the Standard Webhooks format: whsec_ and the
	// key in base64. A secret without it is the key's bytes as written.
	SecretPrefix = "whsec_"
	// DefaultTolerance is how far a delivery's timestamp may be from the
	// receiver's clock (either way) in Verify.
	DefaultTolerance = 5 * time.Minute
)

// Errors of Verify.
var (
	ErrMissingHeaders = errors.New("webhook: missing webhook-id, webhook-timestamp or webhook-signature")
	ErrTimestamp      = errors.New("webhook: timestamp outside the tolerance (a replay or a skewed clock)")
	ErrSignature      = errors.New("webhook: no matching v1 signature")
)

// Key returns the HMAC key of a configured secret: whsec_<base64> is decoded,
// anything else is used as written.
func Key(secret string) ([]byte, error) {
	b64, ok := strings.CutPrefix(secret, SecretPrefix)
	if !ok {
		return []byte(secret), nil
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("webhook secret: %s followed by invalid base64: %w", SecretPrefix, err)
	}
	if len(key) == 0 {
		return nil, fmt.Errorf("webhook secret: %s with an empty key", SecretPrefix)
	}
	return key, nil
}

// Sign returns the webhook-signature value of a delivery: "v1," and the base64
// HMAC-SHA256, keyed by the secret (Key), of id + "." + the Unix seconds of ts
// + "." + body.
func Sign(secret, id string, ts time.Time, body []byte) (string, error) {
	key, err := Key(secret)
	if err != nil {
		return "", err
	}
	return "v1," + base64.StdEncoding.EncodeToString(mac(key, id, strconv.FormatInt(ts.Unix(), 10), body)), nil
}

func mac(key []byte, id, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// Verify is what a receiver written in Go runs on a delivery: the three headers
// present, the timestamp within tolerance of now (DefaultTolerance when
// tolerance is 0), and one v1 signature equal, in constant time, to the HMAC of
// the id, timestamp and body. It returns nil or the reason.
func Verify(secret string, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	id, ts, sigs := h.Get(HeaderID), h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	if id == "" || ts == "" || sigs == "" {
		return ErrMissingHeaders
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %q is not Unix seconds", ErrTimestamp, ts)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: %s off", ErrTimestamp, d.Round(time.Second))
	}
	key, err := Key(secret)
	if err != nil {
		return err
	}
	want := mac(key, id, ts, body)
	for _, s := range strings.Fields(sigs) {
		v, sig, ok := strings.Cut(s, ",")
		if !ok || v != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(sig)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return ErrSignature
}
