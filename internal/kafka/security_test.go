package kafka_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/kafkatest"
	"github.com/correx/sessions/internal/tlstest"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

func secretFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(content+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// lockedBuffer collects log output from the client's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// roundTrip creates a topic, produces a record and consumes it back with
// clients built from cfg, within timeout.
func roundTrip(t *testing.T, cfg kafka.Config, timeout time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	topic := "sec-" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	cl, err := kafka.NewClient(cfg)
	if err != nil {
		return err
	}
	defer cl.Close()
	if _, err := kafka.EnsureTopic(ctx, kadm.NewClient(cl.Client), topic, 1); err != nil {
		return cl.Explain(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte("k"), Value: []byte("hello")}).FirstErr(); err != nil {
		return cl.Explain(err)
	}
	consumer, err := kafka.NewClient(cfg, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	defer consumer.Close()
	fetches := consumer.PollFetches(ctx)
	if err := fetches.Err(); err != nil {
		return consumer.Explain(err)
	}
	recs := fetches.Records()
	if len(recs) != 1 || string(recs[0].Value) != "hello" {
		t.Fatalf("consumed %d records, want the one produced", len(recs))
	}
	return nil
}

// TestSASLAndTLS produces and consumes through kfake with SASL (PLAIN,
// SCRAM-SHA-256, SCRAM-SHA-512), TLS and mutual TLS, and checks that wrong
// credentials fail with an error that names authentication.
func TestSASLAndTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "kafka")
	server := ca.Server(t, "broker")
	client := ca.Client(t, "correx")
	otherCA := tlstest.NewCA(t, "other")

	plaintext := kafkatest.Start(t, kfake.EnableSASL(),
		kfake.Superuser(kafka.MechanismScramSHA256, "svc256", "pw-256"),
		kfake.Superuser(kafka.MechanismScramSHA512, "svc512", "pw-512"))
	mtls := kafkatest.Start(t, kfake.EnableSASL(),
		kfake.Superuser(kafka.MechanismPlain, "plain", "pw-plain"),
		kfake.Superuser(kafka.MechanismScramSHA512, "svc512", "pw-512"),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{server.TLS}, ClientAuth: tls.RequireAndVerifyClientCert,
			ClientCAs: ca.Pool(), MinVersion: tls.VersionTLS12}))

	sasl := func(c *kfake.Cluster, mech, user, pw string) kafka.Config {
		return kafka.Config{Brokers: c.ListenAddrs(), ClientID: "sec-test", SASLMechanism: mech, SASLUsername: user,
			SASLPasswordFile: secretFile(t, pw)}
	}
	withTLS := func(cfg kafka.Config, caFile string, pair *tlstest.Pair) kafka.Config {
		cfg.TLS, cfg.TLSCAFile = true, caFile
		if pair != nil {
			cfg.TLSCertFile, cfg.TLSKeyFile = pair.CertFile, pair.KeyFile
		}
		return cfg
	}
	tests := []struct {
		name    string
		cfg     kafka.Config
		wantErr string // "" for success
		auth    bool   // the error must be an *AuthError
	}{
		{"scram-sha-256", sasl(plaintext, kafka.MechanismScramSHA256, "svc256", "pw-256"), "", false},
		{"scram-sha-512", sasl(plaintext, kafka.MechanismScramSHA512, "svc512", "pw-512"), "", false},
		{"plain over mutual tls", withTLS(sasl(mtls, kafka.MechanismPlain, "plain", "pw-plain"), ca.CertFile, &client), "", false},
		{"scram-sha-512 over mutual tls", withTLS(sasl(mtls, kafka.MechanismScramSHA512, "svc512", "pw-512"), ca.CertFile, &client), "", false},
		{"scram-sha-256 wrong password", sasl(plaintext, kafka.MechanismScramSHA256, "svc256", "nope"), "authentication failed", true},
		{"scram-sha-512 unknown user", sasl(plaintext, kafka.MechanismScramSHA512, "mallory", "pw-512"), "authentication failed", true},
		{"plain wrong password", withTLS(sasl(mtls, kafka.MechanismPlain, "plain", "nope"), ca.CertFile, &client), "authentication failed", true},
		{"no sasl on a sasl broker", kafka.Config{Brokers: plaintext.ListenAddrs(), ClientID: "sec-test"}, "SASL", false},
		{"server certificate from another ca", withTLS(sasl(mtls, kafka.MechanismPlain, "plain", "pw-plain"), otherCA.CertFile, &client), "certificate", false},
		{"no client certificate", withTLS(sasl(mtls, kafka.MechanismPlain, "plain", "pw-plain"), ca.CertFile, nil), "certificate", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			logs := &lockedBuffer{}
			tc.cfg.Log = slog.New(slog.NewTextHandler(logs, nil))
			if tc.wantErr == "" {
				if problems := tc.cfg.Validate(); len(problems) > 0 {
					t.Fatalf("valid settings refused: %v", problems)
				}
			}
			timeout := 10 * time.Second
			if tc.wantErr != "" {
				timeout = 3 * time.Second // failures retry until the deadline
			}
			err := roundTrip(t, tc.cfg, timeout)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("round trip: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("round trip succeeded, want an error naming %q", tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %q does not name %q", err, tc.wantErr)
			}
			var ae *kafka.AuthError
			if tc.auth {
				if !errors.As(err, &ae) || ae.User != tc.cfg.SASLUsername {
					t.Fatalf("error %v is not an AuthError for user %s", err, tc.cfg.SASLUsername)
				}
				if !strings.Contains(logs.String(), "kafka authentication failed") {
					t.Fatalf("no log line names the failure: %s", logs.String())
				}
				pw, _ := os.ReadFile(tc.cfg.SASLPasswordFile)
				if strings.Contains(err.Error()+logs.String(), strings.TrimSpace(string(pw))) {
					t.Fatal("the password appears in the error or the log")
				}
			} else if errors.As(err, &ae) {
				t.Fatalf("error %v blamed on authentication", err)
			}
		})
	}
}

func TestValidateSecurity(t *testing.T) {
	ca := tlstest.NewCA(t, "v")
	pair := ca.Client(t, "c")
	pw := secretFile(t, "pw")
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	base := kafka.Config{Brokers: []string{"b:9092"}}
	tests := []struct {
		name string
		edit func(c *kafka.Config)
		want []string // substrings of the problems; none: valid
	}{
		{"plaintext", func(c *kafka.Config) {}, nil},
		{"tls with ca and client certificate", func(c *kafka.Config) {
			c.TLS, c.TLSCAFile, c.TLSCertFile, c.TLSKeyFile = true, ca.CertFile, pair.CertFile, pair.KeyFile
		}, nil},
		{"scram", func(c *kafka.Config) { c.SASLMechanism, c.SASLUsername, c.SASLPasswordFile = "SCRAM-SHA-256", "u", pw }, nil},
		{"plain without tls", func(c *kafka.Config) { c.SASLMechanism, c.SASLUsername, c.SASLPasswordFile = "PLAIN", "u", pw },
			[]string{"clear text"}},
		{"unknown mechanism", func(c *kafka.Config) { c.SASLMechanism, c.SASLUsername, c.SASLPasswordFile = "GSSAPI", "u", pw },
			[]string{"GSSAPI"}},
		{"mechanism without user or password", func(c *kafka.Config) { c.SASLMechanism = "SCRAM-SHA-512" },
			[]string{"CORREX_KAFKA_SASL_USERNAME", "CORREX_KAFKA_SASL_PASSWORD_FILE"}},
		{"empty password file", func(c *kafka.Config) {
			c.SASLMechanism, c.SASLUsername, c.SASLPasswordFile = "SCRAM-SHA-512", "u", empty
		},
			[]string{"empty"}},
		{"missing password file", func(c *kafka.Config) {
			c.SASLMechanism, c.SASLUsername, c.SASLPasswordFile = "SCRAM-SHA-512", "u", "/nonexistent/pw"
		}, []string{"/nonexistent/pw"}},
		{"user without mechanism", func(c *kafka.Config) { c.SASLUsername = "u" }, []string{"need CORREX_KAFKA_SASL_MECHANISM"}},
		{"files without tls", func(c *kafka.Config) { c.TLSCAFile = ca.CertFile }, []string{"need CORREX_KAFKA_TLS=true"}},
		{"certificate without key", func(c *kafka.Config) { c.TLS, c.TLSCertFile = true, pair.CertFile }, []string{"go together"}},
		{"ca file without pem", func(c *kafka.Config) { c.TLS, c.TLSCAFile = true, pw }, []string{"no PEM certificate"}},
		{"key that does not match", func(c *kafka.Config) {
			c.TLS, c.TLSCertFile, c.TLSKeyFile = true, pair.CertFile, ca.Client(t, "other").KeyFile
		}, []string{"CORREX_KAFKA_TLS_CERT_FILE"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			tc.edit(&c)
			got := strings.Join(c.Validate(), "\n")
			if len(tc.want) == 0 && got != "" {
				t.Fatalf("problems %q, want none", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("problems %q do not name %q", got, w)
				}
			}
		})
	}
}

// TestUnloadableSettingsFailEveryConnection: a client built from settings
// that cannot be loaded never connects without the security asked for.
func TestUnloadableSettingsFailEveryConnection(t *testing.T) {
	c := kafkatest.Start(t)
	cfg := kafka.Config{Brokers: c.ListenAddrs(), TLS: true, TLSCAFile: "/nonexistent/ca.crt"}
	cl, err := kafka.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := cl.Ping(ctx); err == nil || !strings.Contains(err.Error(), "CORREX_KAFKA_TLS_CA_FILE") {
		t.Fatalf("ping: %v, want the CA file's error", err)
	}
}
