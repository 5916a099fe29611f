package service

import (
	"context"
	"flag"
	"io"
	"log/slog"

	"github.com/correx/sessions/internal/config"
)

// Configurable is a service's configuration: flags with CORREX_* fallbacks,
// and one validation that reports every problem.
type Configurable interface {
	Bind(*config.Binder)
	Validate() error
}

// Parse binds cfg to a flag set named name and parses args, reading the
// environment through getenv. extra registers more flags (subcommand
// options) before parsing.
func Parse(name string, cfg Configurable, args []string, getenv func(string) string, stderr io.Writer, extra ...func(*flag.FlagSet)) (*config.Binder, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	b := config.NewBinder(fs, getenv)
	cfg.Bind(b)
	for _, f := range extra {
		f(fs)
	}
	if err := b.Parse(args); err != nil {
		return b, err
	}
	return b, cfg.Validate()
}

// Start prints a service's effective configuration and returns its runtime
// (logger and telemetry) and the function that flushes telemetry at exit.
func Start(ctx context.Context, name string, b *config.Binder, getenv func(string) string, stderr io.Writer) (Runtime, func(), error) {
	Banner(stderr, name, b.Effective())
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("service", name)
	return Telemetry(ctx, name, getenv, log)
}
