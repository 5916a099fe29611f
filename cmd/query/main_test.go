package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/correx/sessions/internal/securitytest"
	"github.com/correx/sessions/internal/service"
)

func TestParse(t *testing.T) {
	getenv := func(k string) string {
		return map[string]string{"CORREX_REDIS_URL": "rediss://:pw@r:6380/2", "CORREX_REDIS_CLUSTER": "true", "CORREX_AUTH_DISABLED": "true"}[k]
	}
	cfg, b, err := parse(nil, getenv, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Redis.Cluster || cfg.HTTPAddr != ":8082" {
		t.Fatalf("%+v", cfg)
	}
	if eff := strings.Join(b.Effective(), " "); strings.Contains(eff, ":pw@") {
		t.Fatalf("password printed: %s", eff)
	}
	_, _, err = parse(nil, func(k string) string { return map[string]string{"CORREX_REDIS_URL": "http://nope"}[k] }, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "CORREX_REDIS_URL") {
		t.Fatalf("bad Redis URL: %v", err)
	}
	_, _, err = parse(nil, func(k string) string { return map[string]string{"CORREX_REDIS_CLUSTER": "maybe"}[k] }, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "CORREX_REDIS_CLUSTER") {
		t.Fatalf("bad boolean: %v", err)
	}
}

// TestAuthIsRequired: without a token file, query refuses to start unless
// authentication is explicitly disabled.
func TestAuthIsRequired(t *testing.T) {
	_, _, err := parse(nil, func(string) string { return "" }, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "authentication is required") {
		t.Fatalf("started without authentication: %v", err)
	}
}

// TestSecuritySettings: every security variable is read, and no secret
// behind them appears in the printed configuration.
func TestSecuritySettings(t *testing.T) {
	f := securitytest.Write(t)
	env := securitytest.Getenv(f.Env, map[string]string{"CORREX_REDIS_URL": "rediss://correx:url-pw-55@127.0.0.1:6380/0"})
	cfg, b, err := parse(nil, env, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Auth.TokensFile == "" || cfg.Redis.PasswordFile == "" || cfg.Redis.TLSCAFile == "" || cfg.TLS.CertFile == "" ||
		cfg.Kafka.SASLUsername != "correx" || cfg.Auth.RateLimit != 50 {
		t.Fatalf("settings not read: %+v", cfg)
	}
	var out bytes.Buffer
	service.Banner(&out, "query", b.Effective())
	for _, s := range append(f.Secrets, "url-pw-55") {
		if strings.Contains(out.String(), s) {
			t.Fatalf("a secret is printed: %s", out.String())
		}
	}
	if !strings.Contains(out.String(), "CORREX_REDIS_PASSWORD_FILE") {
		t.Fatalf("CORREX_REDIS_PASSWORD_FILE missing: %s", out.String())
	}
	// A CA file with a plain redis:// URL is refused.
	_, _, err = parse(nil, securitytest.Getenv(f.Env, map[string]string{"CORREX_REDIS_URL": "redis://127.0.0.1:6379/0"}), &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "rediss://") {
		t.Fatalf("CA without TLS: %v", err)
	}
}
