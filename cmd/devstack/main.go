// Command devstack runs the whole pipeline in one process on embedded
// defaults: a Kafka-protocol broker (franz-go's kfake) persisting its log
// under ./.devstack, an in-memory Redis (miniredis) unless CORREX_REDIS_URL
// is set, the ingest, projector and query services, and a demo workload. It
// prints the URLs and a line of progress, and stops cleanly on Ctrl-C.
//
// With CORREX_KAFKA_BROKERS set it uses that Kafka instead of the embedded
// broker. The services run without authentication: devstack is for a laptop.
// The stack and the demo are internal/devstack's; -h lists the flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/correx/sessions/internal/config"
	"github.com/correx/sessions/internal/devstack"
	"github.com/correx/sessions/internal/service"
	_ "github.com/correx/sessions/otel/otlpexport" // the otlp exporters of OTEL_TRACES_EXPORTER and OTEL_METRICS_EXPORTER
	_ "github.com/correx/sessions/otel/promexport" // the Prometheus exporter behind /metrics
)

func main() {
	restore := takeTerminal()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	restore()
	if err != nil {
		fmt.Fprintln(os.Stderr, message(err))
		os.Exit(1)
	}
}

// message is the line printed for err: prefixed with the command's name
// once, whether or not the error already carries internal/devstack's.
func message(err error) string {
	return "devstack: " + strings.TrimPrefix(err.Error(), "devstack: ")
}

// parse builds the configuration from args and the environment.
func parse(args []string, getenv func(string) string, stderr io.Writer) (devstack.Config, *config.Binder, error) {
	var c devstack.Config
	b, err := service.Parse("devstack", &c, args, getenv, stderr)
	return c, b, err
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c, b, err := parse(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil // -h: the usage is printed, which is what was asked
	}
	if err != nil {
		return err
	}
	return devstack.Run(ctx, c, b.Effective(), getenv, stdout, stderr)
}
