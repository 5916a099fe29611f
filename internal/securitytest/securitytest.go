// Package securitytest writes a complete set of security settings for
// tests: certificates, password files and a token file, as the CORREX_*
// variables a deployment would set, together with the secret values that
// must never appear in a printed configuration or a log.
package securitytest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/correx/sessions/internal/auth"
	"github.com/correx/sessions/internal/tlstest"
)

// Files are the settings and the secrets behind them.
type Files struct {
	// Env maps every security variable to its value (file paths, the
	// mechanism, the user), for a service's getenv.
	Env map[string]string
	// Secrets are the secret values inside the files (passwords, tokens,
	// private keys).
	Secrets []string
	// Tokens are bearer tokens by name: "writer" (events:write), "reader"
	// (sessions:read), "admin" (admin), "acme" (events:write and
	// sessions:read, prefix acme:), "acme-admin" (admin, prefix acme:).
	Tokens map[string]string
	CA     *tlstest.CA
}

// Write writes the files into a test directory.
func Write(t testing.TB) Files {
	t.Helper()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ca := tlstest.NewCA(t, "correx")
	server := ca.Server(t, "service")
	client := ca.Client(t, "kafka-client")
	f := Files{CA: ca, Tokens: map[string]string{}}
	lines := []string{"# test tokens"}
	for _, tok := range []struct{ name, scopes, prefix string }{
		{"writer", "events:write", ""},
		{"reader", "sessions:read", ""},
		{"admin", "admin", ""},
		{"acme", "events:write,sessions:read", "acme:"},
		{"acme-admin", "admin", "acme:"},
	} {
		secret, err := auth.NewToken()
		if err != nil {
			t.Fatal(err)
		}
		f.Tokens[tok.name] = secret
		f.Secrets = append(f.Secrets, secret)
		line := auth.HashToken(secret) + " " + tok.scopes + " name=" + tok.name
		if tok.prefix != "" {
			line += " prefix=" + tok.prefix
		}
		lines = append(lines, line)
	}
	keyPEM := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		// The body of the key, without the PEM armour lines that every
		// key shares.
		parts := strings.Split(strings.TrimSpace(string(b)), "\n")
		return strings.Join(parts[1:len(parts)-1], "")
	}
	f.Secrets = append(f.Secrets, "kafka-sasl-pw-7d1f", "redis-pw-93ab", keyPEM(server.KeyFile), keyPEM(client.KeyFile))
	f.Env = map[string]string{
		"CORREX_AUTH_TOKENS_FILE":         write("tokens", strings.Join(lines, "\n")+"\n"),
		"CORREX_TLS_CERT_FILE":            server.CertFile,
		"CORREX_TLS_KEY_FILE":             server.KeyFile,
		"CORREX_TLS_CLIENT_CA_FILE":       ca.CertFile,
		"CORREX_KAFKA_TLS":                "true",
		"CORREX_KAFKA_TLS_CA_FILE":        ca.CertFile,
		"CORREX_KAFKA_TLS_CERT_FILE":      client.CertFile,
		"CORREX_KAFKA_TLS_KEY_FILE":       client.KeyFile,
		"CORREX_KAFKA_SASL_MECHANISM":     "SCRAM-SHA-512",
		"CORREX_KAFKA_SASL_USERNAME":      "correx",
		"CORREX_KAFKA_SASL_PASSWORD_FILE": write("kafka-password", "kafka-sasl-pw-7d1f\n"),
		"CORREX_REDIS_URL":                "rediss://correx@127.0.0.1:6380/0",
		"CORREX_REDIS_PASSWORD_FILE":      write("redis-password", "redis-pw-93ab\n"),
		"CORREX_REDIS_TLS_CA_FILE":        ca.CertFile,
		"CORREX_RATE_LIMIT":               "50",
		"CORREX_RATE_BURST":               "100",
	}
	return f
}

// Getenv returns a getenv over env with the values of extra on top.
func Getenv(env map[string]string, extra map[string]string) func(string) string {
	return func(k string) string {
		if v, ok := extra[k]; ok {
			return v
		}
		return env[k]
	}
}
