// Package kafka holds how the services talk to Kafka: client options built
// from the shared settings, topic creation, the record headers, and how an
// events-topic record is read (DecodeEvent: the system's ids only on the
// system's records). Records are keyed by session id and partitioned with
// Kafka's default key hash (murmur2), so any Kafka producer (Java,
// librdkafka, kcat) puts a session on the same partition.
package kafka

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/correx/sessions/internal/config"
	"github.com/correx/sessions/pkg/backoff"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Config is what every service needs to reach Kafka. The zero value of the
// security settings is plaintext without SASL.
type Config struct {
	// Brokers are the bootstrap brokers (CORREX_KAFKA_BROKERS), bound by
	// each service with its own usage text.
	// default: 127.0.0.1:9092 (config.DefaultBroker, in each service's DefaultConfig)
	Brokers []string
	// ClientID names the service to the brokers; not a setting.
	// default: the service's name (correx-ingest, correx-projector, correx-query)
	ClientID string

	// TLS dials the brokers over TLS (CORREX_KAFKA_TLS).
	// default: false
	TLS bool
	// TLSCAFile is a PEM bundle of the CAs that signed the brokers'
	// certificates (CORREX_KAFKA_TLS_CA_FILE).
	// default: none (the system roots)
	TLSCAFile string
	// TLSCertFile and TLSKeyFile are a client certificate for brokers that
	// require mutual TLS (CORREX_KAFKA_TLS_CERT_FILE,
	// CORREX_KAFKA_TLS_KEY_FILE); both or neither. They are read at every
	// handshake, so a renewed certificate is used without a restart.
	// default: none
	TLSCertFile, TLSKeyFile string
	// SASLMechanism is "", PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
	// (CORREX_KAFKA_SASL_MECHANISM). PLAIN needs TLS.
	// default: none (no SASL)
	SASLMechanism string
	// SASLUsername is the SASL user (CORREX_KAFKA_SASL_USERNAME).
	// default: none
	SASLUsername string
	// SASLPasswordFile holds the SASL password (CORREX_KAFKA_SASL_PASSWORD_FILE).
	// It is read at every authentication, so a rotated password is picked
	// up by the next connection; the password is never in the environment.
	// default: none
	SASLPasswordFile string

	// Log receives the client's authentication failures; not a setting.
	// default: slog.Default()
	Log *slog.Logger
}

// SASL mechanisms the services support.
const (
	MechanismPlain       = "PLAIN"
	MechanismScramSHA256 = "SCRAM-SHA-256"
	MechanismScramSHA512 = "SCRAM-SHA-512"
)

// BindSecurity registers the TLS and SASL settings (every service binds
// them; the brokers are bound by each service with its own usage text).
func (c *Config) BindSecurity(b *config.Binder) {
	var d Config // every security setting's default is its zero value
	b.Bool(&c.TLS, "kafka-tls", "CORREX_KAFKA_TLS", d.TLS, "connect to the Kafka brokers over TLS")
	b.String(&c.TLSCAFile, "kafka-tls-ca-file", "CORREX_KAFKA_TLS_CA_FILE", d.TLSCAFile, "PEM CA bundle of the brokers' certificates (empty: system roots)")
	b.String(&c.TLSCertFile, "kafka-tls-cert-file", "CORREX_KAFKA_TLS_CERT_FILE", d.TLSCertFile, "PEM client certificate for brokers that require mutual TLS")
	b.String(&c.TLSKeyFile, "kafka-tls-key-file", "CORREX_KAFKA_TLS_KEY_FILE", d.TLSKeyFile, "PEM key of the client certificate")
	b.String(&c.SASLMechanism, "kafka-sasl-mechanism", "CORREX_KAFKA_SASL_MECHANISM", d.SASLMechanism, "SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (empty: no SASL)")
	b.String(&c.SASLUsername, "kafka-sasl-username", "CORREX_KAFKA_SASL_USERNAME", d.SASLUsername, "SASL user name")
	b.String(&c.SASLPasswordFile, "kafka-sasl-password-file", "CORREX_KAFKA_SASL_PASSWORD_FILE", d.SASLPasswordFile, "file holding the SASL password")
}

// Validate reports every problem with the settings. It reads the
// certificate and password files, so that a missing or unreadable one stops
// a service at start rather than at its first connection.
func (c Config) Validate() []string {
	var out []string
	if len(c.Brokers) == 0 {
		out = append(out, "CORREX_KAFKA_BROKERS: at least one broker address (host:port) is required")
	}
	if !c.TLS && (c.TLSCAFile != "" || c.TLSCertFile != "" || c.TLSKeyFile != "") {
		out = append(out, "CORREX_KAFKA_TLS_CA_FILE, CORREX_KAFKA_TLS_CERT_FILE and CORREX_KAFKA_TLS_KEY_FILE need CORREX_KAFKA_TLS=true")
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		out = append(out, "CORREX_KAFKA_TLS_CERT_FILE and CORREX_KAFKA_TLS_KEY_FILE go together: set both or neither")
	}
	if c.TLS {
		if _, err := c.tlsConfig(); err != nil {
			out = append(out, err.Error())
		}
	}
	switch c.SASLMechanism {
	case "":
		if c.SASLUsername != "" || c.SASLPasswordFile != "" {
			out = append(out, "CORREX_KAFKA_SASL_USERNAME and CORREX_KAFKA_SASL_PASSWORD_FILE need CORREX_KAFKA_SASL_MECHANISM")
		}
		return out
	case MechanismPlain:
		if !c.TLS {
			out = append(out, "CORREX_KAFKA_SASL_MECHANISM=PLAIN sends the password in clear text: set CORREX_KAFKA_TLS=true as well")
		}
	case MechanismScramSHA256, MechanismScramSHA512:
	default:
		out = append(out, fmt.Sprintf("CORREX_KAFKA_SASL_MECHANISM=%q: must be PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", c.SASLMechanism))
	}
	if c.SASLUsername == "" {
		out = append(out, "CORREX_KAFKA_SASL_USERNAME: required with a SASL mechanism")
	}
	if c.SASLPasswordFile == "" {
		out = append(out, "CORREX_KAFKA_SASL_PASSWORD_FILE: required with a SASL mechanism")
	} else if _, err := config.ReadSecretFile(c.SASLPasswordFile); err != nil {
		out = append(out, "CORREX_KAFKA_SASL_PASSWORD_FILE: "+err.Error())
	}
	return out
}

// Opts returns the client options shared by every service: the brokers, the
// client id, the retry backoff, and the TLS dialer and SASL mechanism when
// configured. Settings that cannot be loaded (Validate reports them at
// start) give a client whose every connection fails with the reason, never a
// client that silently connects without the security asked for.
func (c Config) Opts() []kgo.Opt {
	opts, _ := c.opts()
	return opts
}

// requestRetryWait is the wait before a Kafka request is tried again, after
// its first failure: 100 ms, doubling, at most 2 s.
var requestRetryWait = backoff.Exponential{Min: 100 * time.Millisecond, Max: 2 * time.Second}

func (c Config) opts() ([]kgo.Opt, *authWatch) {
	opts := []kgo.Opt{
		kgo.SeedBrokers(c.Brokers...),
		kgo.ClientID(c.ClientID),
		kgo.RetryBackoffFn(func(tries int) time.Duration { return requestRetryWait.Wait(tries - 1) }),
	}
	sec, err := c.securityOpts()
	if err != nil {
		return append(opts, kgo.Dialer(func(context.Context, string, string) (net.Conn, error) {
			return nil, err
		})), nil
	}
	opts = append(opts, sec...)
	if c.SASLMechanism == "" {
		return opts, nil
	}
	w := &authWatch{mechanism: c.SASLMechanism, user: c.SASLUsername, log: c.Log}
	return append(opts, kgo.WithHooks(w)), w
}

func (c Config) securityOpts() ([]kgo.Opt, error) {
	var opts []kgo.Opt
	if c.TLS {
		tc, err := c.tlsConfig()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if c.SASLMechanism != "" {
		m, err := c.mechanism()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

// tlsConfig builds the client TLS configuration. The client certificate is
// read at each handshake (GetClientCertificate), so that a certificate
// renewed on disk is used by the next connection.
func (c Config) tlsConfig() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.TLSCAFile != "" {
		pem, err := os.ReadFile(c.TLSCAFile)
		if err != nil {
			return nil, fmt.Errorf("CORREX_KAFKA_TLS_CA_FILE: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CORREX_KAFKA_TLS_CA_FILE: %s holds no PEM certificate", c.TLSCAFile)
		}
		tc.RootCAs = pool
	}
	if c.TLSCertFile != "" && c.TLSKeyFile != "" {
		if _, err := tls.LoadX509KeyPair(c.TLSCertFile, c.TLSKeyFile); err != nil {
			return nil, fmt.Errorf("CORREX_KAFKA_TLS_CERT_FILE/CORREX_KAFKA_TLS_KEY_FILE: %w", err)
		}
		certFile, keyFile := c.TLSCertFile, c.TLSKeyFile
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			pair, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				return nil, fmt.Errorf("kafka client certificate: %w", err)
			}
			return &pair, nil
		}
	}
	return tc, nil
}

// mechanism returns the SASL mechanism. The password file is read at every
// authentication; a failure to read it fails that authentication.
func (c Config) mechanism() (sasl.Mechanism, error) {
	user, file := c.SASLUsername, c.SASLPasswordFile
	password := func() (string, error) {
		p, err := config.ReadSecretFile(file)
		if err != nil {
			return "", fmt.Errorf("kafka SASL password: %w", err)
		}
		return p, nil
	}
	switch c.SASLMechanism {
	case MechanismPlain:
		return plain.Plain(func(context.Context) (plain.Auth, error) {
			p, err := password()
			return plain.Auth{User: user, Pass: p}, err
		}), nil
	case MechanismScramSHA256, MechanismScramSHA512:
		fn := func(context.Context) (scram.Auth, error) {
			p, err := password()
			return scram.Auth{User: user, Pass: p}, err
		}
		if c.SASLMechanism == MechanismScramSHA256 {
			return scram.Sha256(fn), nil
		}
		return scram.Sha512(fn), nil
	}
	return nil, fmt.Errorf("CORREX_KAFKA_SASL_MECHANISM=%q: must be PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", c.SASLMechanism)
}

// Partitioner is the partitioner every producer here uses: Kafka's default
// for keyed records (murmur2, high bit masked, modulo the partition count).
func Partitioner() kgo.Partitioner { return kgo.StickyKeyPartitioner(nil) }

// PartitionerKeepingPartitions is Partitioner, except for records to the
// given topics: those go to the partition the record names (r.Partition).
// The projector writes the change feed with it, each record on its source
// record's partition, while its dead letters keep Kafka's key hash.
func PartitionerKeepingPartitions(topics ...string) kgo.Partitioner {
	return keepPartitions{topics: topics, keyed: Partitioner(), manual: kgo.ManualPartitioner()}
}

type keepPartitions struct {
	topics        []string
	keyed, manual kgo.Partitioner
}

func (k keepPartitions) ForTopic(topic string) kgo.TopicPartitioner {
	for _, t := range k.topics {
		if t == topic {
			return k.manual.ForTopic(topic)
		}
	}
	return k.keyed.ForTopic(topic)
}

// DLQTopic is the dead-letter topic of a topic.
func DLQTopic(topic string) string { return topic + ".dlq" }

// EnsureTopic creates topic with the given partitions and unlimited retention
// when it does not exist. An existing topic is left as it is (its partition
// count is reported back, since partitioning depends on it).
func EnsureTopic(ctx context.Context, adm *kadm.Client, topic string, partitions int32) (int32, error) {
	return EnsureTopicRetention(ctx, adm, topic, partitions, 0)
}

// EnsureTopicRetention is EnsureTopic with the created topic's retention.ms
// set from retention (CORREX_EVENTS_RETENTION); 0 keeps every record (-1).
// An existing topic's retention is left as it is, as its partitions are.
func EnsureTopicRetention(ctx context.Context, adm *kadm.Client, topic string, partitions int32, retention time.Duration) (int32, error) {
	retentionMS := "-1"
	if retention > 0 {
		retentionMS = strconv.FormatInt(retention.Milliseconds(), 10)
	}
	return EnsureTopicConfigs(ctx, adm, topic, partitions, map[string]*string{"retention.ms": &retentionMS})
}

// EnsureTopicConfigs is EnsureTopic with the given topic configs instead of
// unlimited retention. An existing topic is left as it is: the caller
// checks its configs if they matter (kadm.Client.DescribeTopicConfigs).
func EnsureTopicConfigs(ctx context.Context, adm *kadm.Client, topic string, partitions int32, configs map[string]*string) (int32, error) {
	// For one topic, kadm returns the topic's own error as err as well.
	_, err := adm.CreateTopic(ctx, partitions, -1, configs, topic)
	switch {
	case err == nil:
		return partitions, nil
	case !errors.Is(err, kerr.TopicAlreadyExists):
		return 0, fmt.Errorf("create topic %s: %w", topic, err)
	}
	// Created a moment ago by another service, the topic may not be in the
	// metadata yet: wait for it briefly rather than report an error.
	var d kadm.TopicDetail
	for attempt := 0; ; attempt++ {
		details, err := adm.ListTopics(ctx, topic)
		if err != nil {
			return 0, fmt.Errorf("describe topic %s: %w", topic, err)
		}
		var ok bool
		if d, ok = details[topic]; ok && d.Err == nil {
			break
		}
		if attempt == 20 || (d.Err != nil && !errors.Is(d.Err, kerr.UnknownTopicOrPartition)) {
			return 0, fmt.Errorf("describe topic %s: %v", topic, d.Err)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return int32(len(d.Partitions)), nil
}

// HeaderEventType is the record header carrying the event type, so tools can
// filter without decoding values.
const HeaderEventType = "correx-event-type"

// DLQ record headers.
const (
	HeaderDLQReason = "correx-dlq-reason" // why the record was set aside
	HeaderDLQDetail = "correx-dlq-detail" // the decoder's or fold's message
	HeaderDLQSource = "correx-dlq-source" // topic/partition/offset of the original
)

// Source formats where a record came from, for HeaderDLQSource.
func Source(r *kgo.Record) string {
	return r.Topic + "/" + strconv.Itoa(int(r.Partition)) + "/" + strconv.FormatInt(r.Offset, 10)
}
