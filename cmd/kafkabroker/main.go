// Command kafkabroker is a single-node Kafka-protocol broker for development
// and tests: franz-go's kfake behind a listener that can bind every interface
// and advertise the address clients dial, with its log kept in a data
// directory so that a restart keeps every topic, record and committed offset.
// It is what the project's container image `kafkabroker` runs; it is not a
// production Kafka (one broker, no replication).
//
//	kafkabroker -listen 0.0.0.0:9092 -advertised-addr kafka:9092 -data-dir /var/lib/kfake
//
// Every flag also reads an environment variable (KFAKE_LISTEN_ADDR,
// KFAKE_ADVERTISED_ADDR, KFAKE_DATA_DIR, KFAKE_PARTITIONS, KFAKE_SYNC_WRITES,
// KFAKE_LOG_LEVEL); -h lists them. Kafka clients learn broker addresses from
// metadata, so the advertised address must be the one clients can reach:
// inside a Docker network that is the container's alias and port. When the
// broker listens on an unspecified address (0.0.0.0) and no address is
// advertised, it advertises 127.0.0.1 and the listening port.
//
// Once it accepts connections it logs a line with msg="broker ready" (what a
// readiness check waits for). SIGTERM or SIGINT closes it cleanly: pending
// offset commits are applied and the state is written to the data directory
// before it exits.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/correx/sessions/internal/config"
	"github.com/correx/sessions/internal/service"
	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stderr, nil); err != nil {
		fmt.Fprintln(os.Stderr, "kafkabroker:", err)
		os.Exit(1)
	}
}

// Config is the broker's configuration.
type Config struct {
	Listen     string // KFAKE_LISTEN_ADDR; default 0.0.0.0:9092
	Advertised string // KFAKE_ADVERTISED_ADDR; default the listen address (127.0.0.1 for 0.0.0.0)
	DataDir    string // KFAKE_DATA_DIR; default "" (in memory: nothing survives a restart)
	Partitions int    // KFAKE_PARTITIONS: partitions of topics created without a count; default 12
	SyncWrites bool   // KFAKE_SYNC_WRITES: fsync every produced batch; default false
	LogLevel   string // KFAKE_LOG_LEVEL: none, error, warn, info, debug; default warn
}

// parse builds the configuration from args and the environment.
func parse(args []string, getenv func(string) string, stderr io.Writer) (Config, *config.Binder, error) {
	var c Config
	fs := flag.NewFlagSet("kafkabroker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	b := config.NewBinder(fs, getenv)
	b.String(&c.Listen, "listen", "KFAKE_LISTEN_ADDR", "0.0.0.0:9092", "address to listen on")
	b.String(&c.Advertised, "advertised-addr", "KFAKE_ADVERTISED_ADDR", "", "host:port advertised to clients in metadata (default the listen address; 127.0.0.1:PORT when listening on 0.0.0.0)")
	b.String(&c.DataDir, "data-dir", "KFAKE_DATA_DIR", "", "directory that keeps the log and group state across restarts (empty: in memory)")
	b.Int(&c.Partitions, "partitions", "KFAKE_PARTITIONS", 12, "partitions of a topic created without a partition count")
	b.Bool(&c.SyncWrites, "sync-writes", "KFAKE_SYNC_WRITES", false, "fsync every produced batch (slower; survives a machine crash, not only a process crash)")
	b.String(&c.LogLevel, "log-level", "KFAKE_LOG_LEVEL", "warn", "kfake's log level: none, error, warn, info, debug")
	if err := b.Parse(args); err != nil {
		return c, b, err
	}
	return c, b, c.Validate()
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

// run starts the broker and serves until ctx is done. ready, when set, gets
// the advertised address once the broker accepts connections (tests).
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer, ready func(addr string)) error {
	cfg, b, err := parse(args, getenv, stderr)
	if err != nil {
		return err
	}
	service.Banner(stderr, "kafkabroker", b.Effective())
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("service", "kafkabroker")
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
		kfake.WithLogger(kfake.BasicLogger(stderr, logLevels[strings.ToLower(cfg.LogLevel)])),
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
	log.Info("broker ready", "listen", cfg.Listen, "advertised", addr, "dataDir", cfg.DataDir)
	if ready != nil {
		ready(addr)
	}
	<-ctx.Done()
	log.Info("shutting down")
	c.Close() // writes the state to the data directory
	log.Info("stopped")
	return nil
}
