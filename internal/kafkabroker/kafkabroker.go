// Package kafkabroker is a single-node Kafka-protocol broker for development
// and tests: franz-go's kfake behind a listener that can bind every interface
// and advertise the address clients dial, with its log kept in a data
// directory so that a restart keeps every topic, record and committed offset.
// cmd/kafkabroker (the container image `kafkabroker`) runs it; it is not a
// production Kafka (one broker, no replication).
//
// Kafka clients learn broker addresses from metadata, so the advertised
// address must be the one clients can reach: inside a Docker network that is
// the container's alias and port. When the broker listens on an unspecified
// address (0.0.0.0) and no address is advertised, it advertises 127.0.0.1 and
// the listening port.
package kafkabroker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"

	"github.com/correx/sessions/internal/config"
	"github.com/twmb/franz-go/pkg/kfake"
)

// Config is the broker's configuration. DefaultConfig holds the defaults;
// Bind registers them as the flags' and environment variables' defaults.
type Config struct {
	Listen     string // KFAKE_LISTEN_ADDR; default 0.0.0.0:9092
	Advertised string // KFAKE_ADVERTISED_ADDR; default the listen address (127.0.0.1 for 0.0.0.0)
	DataDir    string // KFAKE_DATA_DIR; default "" (in memory: nothing survives a restart)
	Partitions int    // KFAKE_PARTITIONS: partitions of topics created without a count; default 12
	SyncWrites bool   // KFAKE_SYNC_WRITES: fsync every produced batch; default false
	LogLevel   string // KFAKE_LOG_LEVEL: none, error, warn, info, debug; default warn
}

// DefaultConfig returns the broker's defaults.
func DefaultConfig() Config {
	return Config{Listen: "0.0.0.0:9092", Partitions: config.DefaultPartitions, LogLevel: "warn"}
}

// Bind registers the flags and their KFAKE_* environment variables.
func (c *Config) Bind(b *config.Binder) {
	d := DefaultConfig()
	b.String(&c.Listen, "listen", "KFAKE_LISTEN_ADDR", d.Listen, "address to listen on")
	b.String(&c.Advertised, "advertised-addr", "KFAKE_ADVERTISED_ADDR", d.Advertised, "host:port advertised to clients in metadata (default the listen address; 127.0.0.1:PORT when listening on 0.0.0.0)")
	b.String(&c.DataDir, "data-dir", "KFAKE_DATA_DIR", d.DataDir, "directory that keeps the log and group state across restarts (empty: in memory)")
	b.Int(&c.Partitions, "partitions", "KFAKE_PARTITIONS", d.Partitions, "partitions of a topic created without a partition count")
	b.Bool(&c.SyncWrites, "sync-writes", "KFAKE_SYNC_WRITES", d.SyncWrites, "fsync every produced batch (slower; survives a machine crash, not only a process crash)")
	b.String(&c.LogLevel, "log-level", "KFAKE_LOG_LEVEL", d.LogLevel, "kfake's log level: none, error, warn, info, debug")
}

// Validate reports every problem at once.
func (c *Config) Validate() error {
	var p config.Problems
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		p.Addf("KFAKE_LISTEN_ADDR: %q: %v", c.Listen, err)
	}
	if c.Advertised != "" {
		if h, port, err := net.SplitHostPort(c.Advertised); err != nil || h == "" || port == "" || port == "0" {
			p.Addf("KFAKE_ADVERTISED_ADDR: %q: want HOST:PORT with a port clients can dial", c.Advertised)
		}
	}
	if c.Partitions < 1 {
		p.Addf("KFAKE_PARTITIONS: %d, must be at least 1", c.Partitions)
	}
	if _, ok := logLevels[strings.ToLower(c.LogLevel)]; !ok {
		p.Addf("KFAKE_LOG_LEVEL: %q, must be none, error, warn, info or debug", c.LogLevel)
	}
	return p.Err()
}

var logLevels = map[string]kfake.LogLevel{
	"none": kfake.LogLevelNone, "error": kfake.LogLevelError, "warn": kfake.LogLevelWarn,
	"info": kfake.LogLevelInfo, "debug": kfake.LogLevelDebug,
}

// advertised is a listener whose Addr is the address clients should dial:
// kfake puts its listener's Addr in metadata responses.
type advertised struct {
	net.Listener
	addr hostPort
}

func (l advertised) Addr() net.Addr { return l.addr }

// hostPort is a net.Addr spelled as the advertised host:port.
type hostPort string

func (hostPort) Network() string  { return "tcp" }
func (a hostPort) String() string { return string(a) }

// listen opens c.Listen and wraps it so that it advertises the configured
// address (or a dialable form of the one it got).
func (c *Config) listen() (net.Listener, error) {
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return nil, err
	}
	adv := c.Advertised
	if adv == "" {
		tcp := ln.Addr().(*net.TCPAddr)
		host := tcp.IP.String()
		if tcp.IP.IsUnspecified() {
			host = "127.0.0.1"
		}
		adv = net.JoinHostPort(host, fmt.Sprint(tcp.Port))
	}
	return advertised{Listener: ln, addr: hostPort(adv)}, nil
}

// Run starts the broker and serves until ctx is done; then it closes the
// broker, which applies pending offset commits and writes the state to the
// data directory. kfake logs to kfakeLog at cfg.LogLevel. Once the broker
// accepts connections, Run logs msg="broker ready" (what a readiness check
// waits for) and calls ready, when set, with the advertised address.
func Run(ctx context.Context, cfg Config, log *slog.Logger, kfakeLog io.Writer, ready func(addr string)) error {
	var ln net.Listener
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		// kfake asks for 127.0.0.1:0; the broker listens where it was told.
		kfake.ListenFn(func(string, string) (net.Listener, error) {
			if ln != nil {
				return nil, errors.New("kafkabroker: one listener only")
			}
			var err error
			ln, err = cfg.listen()
			return ln, err
		}),
		kfake.DefaultNumPartitions(cfg.Partitions),
		kfake.WithLogger(kfake.BasicLogger(kfakeLog, logLevels[strings.ToLower(cfg.LogLevel)])),
	}
	if cfg.DataDir != "" {
		if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
			return err
		}
		opts = append(opts, kfake.DataDir(cfg.DataDir))
	}
	if cfg.SyncWrites {
		opts = append(opts, kfake.SyncWrites())
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return err
	}
	addr := c.ListenAddrs()[0]
	// listen is the address bound (the port chosen, for a port of 0).
	listen := cfg.Listen
	if a, ok := ln.(advertised); ok {
		listen = a.Listener.Addr().String()
	}
	log.Info("broker ready", "listen", listen, "advertised", addr, "dataDir", cfg.DataDir)
	if ready != nil {
		ready(addr)
	}
	<-ctx.Done()
	log.Info("shutting down")
	c.Close() // writes the state to the data directory
	log.Info("stopped")
	return nil
}
