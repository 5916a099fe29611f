// Command query serves session snapshots over HTTP. Configuration: flags or
// CORREX_* variables; -h lists them.
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
	"github.com/correx/sessions/internal/query"
	"github.com/correx/sessions/internal/service"
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
	fs := flag.NewFlagSet("query", flag.ContinueOnError)
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
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("service", "query")
	rt, shutdown, err := service.Telemetry(ctx, "query", getenv, log)
	if err != nil {
		return err
	}
	defer shutdown()
	return query.Serve(ctx, cfg, rt)
}

func printBanner(w io.Writer, b *config.Binder) { service.Banner(w, "query", b.Effective()) }
