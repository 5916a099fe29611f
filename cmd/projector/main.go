// Command projector folds session events from Kafka into snapshots in Redis,
// as a member of a consumer group. Configuration: flags or CORREX_*
// variables; -h lists them.
//
//	projector            run
//	projector reset -yes delete the read model under CORREX_REDIS_PREFIX
//	                     (snapshots, indexes, children, checkpoints,
//	                     outbox, deadlines) so it is rebuilt from the log;
//	                     the recovery for a recreated topic. Change-feed
//	                     consumers' checkpoints (<prefix>:feed:) are kept
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
	"github.com/correx/sessions/internal/projector"
	"github.com/correx/sessions/internal/service"
	_ "github.com/correx/sessions/otel/otlpexport" // the otlp exporters of OTEL_TRACES_EXPORTER and OTEL_METRICS_EXPORTER
	_ "github.com/correx/sessions/otel/promexport" // the Prometheus exporter behind /metrics
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "projector:", err)
		os.Exit(1)
	}
}

// parse builds the configuration from args and the environment. reset
// reports the `reset` subcommand and yes its confirmation.
func parse(args []string, getenv func(string) string, stderr io.Writer) (cfg projector.Config, b *config.Binder, reset, yes bool, err error) {
	if len(args) > 0 && args[0] == "reset" {
		reset, args = true, args[1:]
	}
	b, err = service.Parse("projector", &cfg, args, getenv, stderr, func(fs *flag.FlagSet) {
		fs.BoolVar(&yes, "yes", false, "with reset: really delete the read model")
	})
	return
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, b, reset, yes, err := parse(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil // -h: the usage is printed, which is what was asked
	}
	if err != nil {
		return err
	}
	if reset {
		service.Banner(stderr, "projector", b.Effective())
		if !yes {
			return errors.New("reset deletes every snapshot and checkpoint of the projector under the prefix " + cfg.Redis.Prefix + "; run `projector reset -yes` to confirm")
		}
		n, err := projector.Reset(ctx, cfg)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "reset: deleted the projector's %d keys under %s; projectors will rebuild from the earliest offset\n", n, cfg.Redis.Prefix)
		return nil
	}
	rt, shutdown, err := service.Start(ctx, "projector", b, getenv, stderr)
	if err != nil {
		return err
	}
	defer shutdown()
	return projector.Serve(ctx, cfg, rt)
}
