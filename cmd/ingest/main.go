// Command ingest accepts session events over HTTP and produces them to Kafka,
// keyed by session id. Configuration: flags or CORREX_* variables; -h lists
// them.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/correx/sessions/internal/config"
	"github.com/correx/sessions/internal/ingest"
	"github.com/correx/sessions/internal/service"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "ingest:", err)
		os.Exit(1)
	}
}

// parse builds the configuration from args and the environment.
func parse(args []string, getenv func(string) string, stderr io.Writer) (ingest.Config, *config.Binder, error) {
	var cfg ingest.Config
	fs := flag.NewFlagSet("ingest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	b := config.NewBinder(fs, getenv)
	cfg.Bind(b)
	if err := b.Parse(args); err != nil {
		return cfg, b, err
	}
	return cfg, b, cfg.Validate()
}

func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	cfg, b, err := parse(args, getenv, stderr)
	if err != nil {
		return err
	}
	printBanner(stderr, b)
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("service", "ingest")
	rt, shutdown, err := service.Telemetry(ctx, "ingest", getenv, log)
	if err != nil {
		return err
	}
	defer shutdown()
	return ingest.Serve(ctx, cfg, rt)
}

func printBanner(w io.Writer, b *config.Binder) { service.Banner(w, "ingest", b.Effective()) }
