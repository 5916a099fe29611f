// Command query serves session snapshots over HTTP. Configuration: flags or
// CORREX_* variables; -h lists them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	_ "github.com/correx/sessions/internal/archive/cloudblob" // the archive's s3:// and gs:// drivers
	"github.com/correx/sessions/internal/config"
	"github.com/correx/sessions/internal/query"
	"github.com/correx/sessions/internal/service"
	_ "github.com/correx/sessions/otel/otlpexport" // the otlp exporters of OTEL_TRACES_EXPORTER and OTEL_METRICS_EXPORTER
	_ "github.com/correx/sessions/otel/promexport" // the Prometheus exporter behind /metrics
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "query:", err)
		os.Exit(1)
	}
}

// parse builds the configuration from args and the environment.
func parse(args []string, getenv func(string) string, stderr io.Writer) (query.Config, *config.Binder, error) {
	var cfg query.Config
	b, err := service.Parse("query", &cfg, args, getenv, stderr)
	return cfg, b, err
}

func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	cfg, b, err := parse(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil // -h: the usage is printed, which is what was asked
	}
	if err != nil {
		return err
	}
	rt, shutdown, err := service.Start(ctx, "query", b, getenv, stderr)
	if err != nil {
		return err
	}
	defer shutdown()
	return query.Serve(ctx, cfg, rt)
}
