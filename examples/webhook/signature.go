package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"
)

// SignatureHeader carries "t=<unix seconds>,v1=<hex HMAC-SHA256 of
// "<t>.<body>" under the shared secret>"; DeliveryHeader carries the
// change's idempotency key, "<sessionId>/<partition>:<offset>".
const (
	SignatureHeader = "Correx-Signature"
	DeliveryHeader  = "Correx-Delivery"
)

// Sign returns the SignatureHeader value of body sent at t.
func Sign(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

func mac(secret []byte, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// Verify checks a SignatureHeader value against body, as a receiver does:
// the HMAC compared in constant time, and the timestamp within tolerance
// of now (against replays of a captured request).
func Verify(secret []byte, header string, body []byte, now time.Time, tolerance time.Duration) error {
	var ts, sig string
	for part := range strings.SplitSeq(header, ",") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sig = v
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return errors.New("signature: no timestamp")
	}
	got, err := hex.DecodeString(sig)
	if err != nil || len(got) != sha256.Size {
		return errors.New("signature: no v1 signature")
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return errors.New("signature: timestamp outside the tolerance")
	}
	if !hmac.Equal(got, mac(secret, ts, body)) {
		return errors.New("signature: mismatch")
	}
	return nil
}
