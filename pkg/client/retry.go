package client

import (
	"crypto/tls"
	"errors"
	"net"
	"syscall"
)

// refusedAttempts is the most attempts a request gets while its connections
// are refused: a service restarting on the same address refuses for a
// moment, but an address where nothing listens (a wrong port) refuses for
// ever, and 10 attempts with backoff cost it about 20 s.
const refusedAttempts = 3

// gaveUp reports whether attempt, which failed with err, is the last one:
// the attempts ran out, or err is one that sending again cannot cure.
//
//   - A *StatusError other than 429, 502, 503 and 504: the service refused.
//   - A host name that does not resolve (DNS "no such host"), a certificate
//     that does not verify, or a server that does not speak TLS: the URL or
//     the TLS configuration is wrong.
//   - A refused connection: retried, but for at most refusedAttempts
//     attempts in all.
//
// Everything else (reset or dropped connections, timeouts, a DNS server
// that did not answer, the other statuses) is retried up to the Retry
// option's attempts. The caller's context ending is the caller's to check.
func (r retryPolicy) gaveUp(err error, attempt int) bool {
	if attempt >= r.attempts {
		return true
	}
	var se *StatusError
	if errors.As(err, &se) {
		return !se.Temporary()
	}
	var dns *net.DNSError
	if errors.As(err, &dns) && dns.IsNotFound {
		return true
	}
	var cert *tls.CertificateVerificationError
	var rec tls.RecordHeaderError
	if errors.As(err, &cert) || errors.As(err, &rec) {
		return true
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return attempt >= refusedAttempts
	}
	return false
}
