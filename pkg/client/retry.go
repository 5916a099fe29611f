package client

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
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
//   - An error net/http makes before the request leaves: a header value
//     it refuses (a token with a line ending) is refused the same way
//     every time. New refuses such a token and user agent already; this
//     catches what a caller's HTTPClient adds.
//   - A refused connection: retried, but for at most refusedAttempts
//     attempts in all.
//
// Everything else (reset or dropped connections, timeouts, a DNS server
// that did not answer, the other statuses) is retried up to the Retry
// option's attempts. The caller's context ending is the caller's to check.
func (r retryPolicy) gaveUp(err error, attempt int) bool {
	return r.gaveUpRefused(err, attempt, refusedAttempts)
}

// gaveUpRefused is gaveUp with refused connections given refused attempts
// in all instead of refusedAttempts: a watch whose stream was established
// knows the address is right, so a refusal there is a restart, and it
// gives refusals the Retry option's whole budget.
func (r retryPolicy) gaveUpRefused(err error, attempt, refused int) bool {
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
	if notSent(err) {
		return true
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return attempt >= refused
	}
	return false
}

// notSent reports whether err is net/http refusing a request before it is
// sent: an invalid header field name or value. net/http has no type for
// these errors, only their words ("net/http: invalid header field value
// for %q"), which have not changed since Go 1.6.
func notSent(err error) bool {
	return strings.Contains(err.Error(), "net/http: invalid header field")
}

// headerValueError reports the first byte of v that no header field value
// may carry (a control character other than a tab, as net/http refuses),
// without quoting v, which may be a secret.
func headerValueError(opt, v string) error {
	for i := 0; i < len(v); i++ {
		if b := v[i]; (b < ' ' && b != '\t') || b == 0x7f {
			hint := ""
			if b == '\n' || b == '\r' {
				hint = " (a line ending: read from a file with its newline?)"
			}
			return fmt.Errorf("client: %s: byte %d of %d is the control character 0x%02x, which no HTTP header may carry%s", opt, i+1, len(v), b, hint)
		}
	}
	return nil
}
