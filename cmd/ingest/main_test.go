package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/securitytest"
	"github.com/correx/sessions/internal/service"
)

func TestParse(t *testing.T) {
	getenv := func(k string) string {
		return map[string]string{"CORREX_PRODUCE_TIMEOUT": "3s", "CORREX_HTTP_ADDR": ":9999", "CORREX_AUTH_DISABLED": "true"}[k]
	}
	cfg, _, err := parse(nil, getenv, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ProduceTimeout != 3*time.Second || cfg.HTTPAddr != ":9999" || cfg.Topic != "correx.session-events" {
		t.Fatalf("%+v", cfg)
	}
	_, _, err = parse([]string{"-kafka-brokers", "", "-partitions", "0", "-produce-timeout", "1ms"}, getenv, &bytes.Buffer{})
	for _, want := range []string{"CORREX_KAFKA_BROKERS", "CORREX_PARTITIONS", "CORREX_PRODUCE_TIMEOUT"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %s: %v", want, err)
		}
	}
	if _, _, err := parse([]string{"extra"}, getenv, &bytes.Buffer{}); err == nil {
		t.Error("stray argument accepted")
	}
}

// TestAuthIsRequired: without a token file, ingest refuses to start unless
// authentication is explicitly disabled.
func TestAuthIsRequired(t *testing.T) {
	_, _, err := parse(nil, func(string) string { return "" }, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "authentication is required") ||
		!strings.Contains(err.Error(), "CORREX_AUTH_DISABLED=true") || !strings.Contains(err.Error(), "CORREX_AUTH_TOKENS_FILE") {
		t.Fatalf("started without authentication: %v", err)
	}
}

// TestSecuritySettings: every security variable is read, and no secret
// behind them appears in the printed configuration.
func TestSecuritySettings(t *testing.T) {
	f := securitytest.Write(t)
	cfg, b, err := parse(nil, securitytest.Getenv(f.Env, nil), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Auth.TokensFile == "" || cfg.Auth.RateLimit != 50 || cfg.Auth.RateBurst != 100 || cfg.TLS.ClientCAFile == "" ||
		!cfg.Kafka.TLS || cfg.Kafka.SASLMechanism != "SCRAM-SHA-512" || cfg.Kafka.SASLPasswordFile == "" || cfg.Kafka.TLSKeyFile == "" {
		t.Fatalf("settings not read: %+v", cfg)
	}
	var out bytes.Buffer
	service.Banner(&out, "ingest", b.Effective())
	for _, s := range f.Secrets {
		if strings.Contains(out.String(), s) {
			t.Fatalf("a secret is printed: %s", out.String())
		}
	}
	for _, name := range []string{"CORREX_AUTH_TOKENS_FILE", "CORREX_KAFKA_SASL_PASSWORD_FILE", "CORREX_TLS_CLIENT_CA_FILE", "CORREX_RATE_LIMIT"} {
		if !strings.Contains(out.String(), name) {
			t.Errorf("%s missing from the banner", name)
		}
	}
	// A broken token file stops ingest at start, naming the line.
	_, _, err = parse(nil, securitytest.Getenv(f.Env, map[string]string{"CORREX_AUTH_TOKENS_FILE": f.Env["CORREX_KAFKA_SASL_PASSWORD_FILE"]}), &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "line 1") || strings.Contains(err.Error(), "kafka-sasl-pw") {
		t.Fatalf("broken token file: %v", err)
	}
}
