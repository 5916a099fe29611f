// Command kafkabroker is a single-node Kafka-protocol broker for development
// and tests (internal/kafkabroker): franz-go's kfake, listening where it is
// told, advertising the address clients dial, and keeping its log in a data
// directory so that a restart keeps every topic, record and committed offset.
// It is what the project's container image `kafkabroker` runs; it is not a
// production Kafka (one broker, no replication).
//
//	kafkabroker -listen 0.0.0.0:9092 -advertised-addr kafka:9092 -data-dir /var/lib/kfake
//
// Every flag also reads an environment variable (KFAKE_LISTEN_ADDR,
// KFAKE_ADVERTISED_ADDR, KFAKE_DATA_DIR, KFAKE_PARTITIONS, KFAKE_SYNC_WRITES,
// KFAKE_LOG_LEVEL); -h lists them. When the broker listens on an unspecified
// address (0.0.0.0) and no address is advertised, it advertises 127.0.0.1 and
// the listening port.
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
	"os"
	"os/signal"
	"syscall"

	"github.com/correx/sessions/internal/config"
	"github.com/correx/sessions/internal/kafkabroker"
	"github.com/correx/sessions/internal/service"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stderr, nil); err != nil {
		fmt.Fprintln(os.Stderr, "kafkabroker:", err)
		os.Exit(1)
	}
}

// parse builds the configuration from args and the environment.
func parse(args []string, getenv func(string) string, stderr io.Writer) (kafkabroker.Config, *config.Binder, error) {
	var cfg kafkabroker.Config
	b, err := service.Parse("kafkabroker", &cfg, args, getenv, stderr)
	return cfg, b, err
}

// run serves the broker until ctx is done. ready, when set, gets the
// advertised address once the broker accepts connections (tests).
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer, ready func(addr string)) error {
	cfg, b, err := parse(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil // -h: the usage is printed, which is what was asked
	}
	if err != nil {
		return err
	}
	service.Banner(stderr, "kafkabroker", b.Effective())
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("service", "kafkabroker")
	return kafkabroker.Run(ctx, cfg, log, stderr, ready)
}
