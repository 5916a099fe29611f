package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/securitytest"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestParsePrecedence(t *testing.T) {
	getenv := env(map[string]string{"CORREX_TOPIC": "from-env", "CORREX_GROUP": "g-env",
		"CORREX_KAFKA_BROKERS": "k1:9092, k2:9092", "CORREX_FLUSH_INTERVAL": "100ms",
		"CORREX_REDIS_URL": "redis://user:hunter2@r:6379/1"})
	cfg, b, _, _, err := parse([]string{"-group", "g-flag"}, getenv, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Topic != "from-env" || cfg.Group != "g-flag" || cfg.FlushInterval != 100*time.Millisecond {
		t.Fatalf("flag > env > default broken: %+v", cfg)
	}
	if len(cfg.Kafka.Brokers) != 2 || cfg.Kafka.Brokers[1] != "k2:9092" {
		t.Fatalf("brokers %v", cfg.Kafka.Brokers)
	}
	if cfg.Partitions != 12 || cfg.Redis.Prefix != "correx" || cfg.HTTPAddr != ":8083" {
		t.Fatalf("defaults: %+v", cfg)
	}
	eff := strings.Join(b.Effective(), "\n")
	if strings.Contains(eff, "hunter2") || !strings.Contains(eff, "redis-url=redis://user:xxxxx@r:6379/1 (CORREX_REDIS_URL)") {
		t.Fatalf("effective configuration leaks or hides too much:\n%s", eff)
	}
}

func TestParseReportsEveryProblem(t *testing.T) {
	getenv := env(map[string]string{"CORREX_PARTITIONS": "0", "CORREX_FLUSH_SIZE": "0", "CORREX_SESSION_TIMEOUT": "1s"})
	_, _, _, _, err := parse([]string{"-topic", ""}, getenv, &bytes.Buffer{})
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"CORREX_TOPIC", "CORREX_PARTITIONS", "CORREX_FLUSH_SIZE", "CORREX_SESSION_TIMEOUT"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %s: %v", want, err)
		}
	}
	if _, _, _, _, err := parse(nil, env(map[string]string{"CORREX_FLUSH_INTERVAL": "soon"}), &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "CORREX_FLUSH_INTERVAL") {
		t.Errorf("bad duration in the environment: %v", err)
	}
}

func TestResetNeedsConfirmation(t *testing.T) {
	var out, errs bytes.Buffer
	err := run(context.Background(), []string{"reset"}, env(nil), &out, &errs)
	if err == nil || !strings.Contains(err.Error(), "reset -yes") {
		t.Fatalf("reset without -yes: %v", err)
	}
}

// TestSecuritySettings: the projector reads the Kafka, Redis and HTTPS
// settings (not the auth ones), and prints no secret.
func TestSecuritySettings(t *testing.T) {
	f := securitytest.Write(t)
	env := map[string]string{}
	for k, v := range f.Env {
		if !strings.HasPrefix(k, "CORREX_AUTH_") && !strings.HasPrefix(k, "CORREX_RATE_") {
			env[k] = v
		}
	}
	cfg, b, _, _, err := parse(nil, securitytest.Getenv(env, nil), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Redis.PasswordFile == "" || cfg.TLS.ClientCAFile == "" || cfg.Kafka.SASLMechanism != "SCRAM-SHA-512" || cfg.Kafka.TLSCertFile == "" {
		t.Fatalf("settings not read: %+v", cfg)
	}
	out := strings.Join(b.Effective(), "\n")
	for _, s := range f.Secrets {
		if strings.Contains(out, s) {
			t.Fatalf("a secret is printed: %s", out)
		}
	}
	if strings.Contains(out, "CORREX_AUTH_") {
		t.Fatalf("the projector takes no auth settings: %s", out)
	}
}
