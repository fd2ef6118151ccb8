package inbound_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
)

func hexHMAC(key, msg string) string {
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte(msg))
	return hex.EncodeToString(m.Sum(nil))
}
