// Command loadgen drives a realistic workload against a running ingest
// service and, with -verify, checks every session's final snapshot through
// the query service against its own fold of what ingest accepted. It exits
// non-zero when a snapshot differs. It sends and reads through pkg/client.
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
	"time"

	"github.com/correx/sessions/internal/config"
	"github.com/correx/sessions/internal/loadgen"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

func parse(args []string, getenv func(string) string, stderr io.Writer) (loadgen.Config, error) {
	var c loadgen.Config
	var seed int
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	b := config.NewBinder(fs, getenv)
	b.String(&c.IngestURL, "ingest", "CORREX_INGEST_URL", "http://127.0.0.1:8081", "ingest base URL")
	b.String(&c.QueryURL, "query", "CORREX_QUERY_URL", "http://127.0.0.1:8082", "query base URL (for -verify)")
	b.Int(&c.Sessions, "sessions", "", 1000, "sessions to run")
	b.Int(&c.Concurrency, "concurrency", "", 8, "concurrent workers")
	b.Float(&c.Rate, "rate", "", 0, "target events per second (0: as fast as possible)")
	b.Int(&c.Batch, "batch", "", 50, "events per request (1: single events)")
	b.Float(&c.InvalidShare, "invalid", "", 0.05, "share of lifecycle-invalid events")
	b.Float(&c.DuplicateShare, "duplicates", "", 0.05, "share of resent events (same eventId)")
	b.Int(&seed, "seed", "", int(time.Now().Unix()%1_000_000), "random seed (the run is reproducible from it)")
	b.String(&c.Prefix, "prefix", "", "lg", "session id prefix")
	b.Bool(&c.Verify, "verify", "", true, "check every final snapshot against the reference fold")
	b.Secret(&c.Token, "token", "CORREX_TOKEN", "", "bearer token (events:write, and sessions:read for -verify)")
	if err := b.Parse(args); err != nil {
		return c, err
	}
	c.Seed = uint64(seed)
	var p config.Problems
	if c.Sessions < 1 || c.Concurrency < 1 || c.Batch < 1 || c.Batch > 1000 {
		p.Addf("-sessions and -concurrency must be positive, -batch between 1 and 1000")
	}
	if c.Rate < 0 || c.InvalidShare < 0 || c.InvalidShare > 1 || c.DuplicateShare < 0 || c.DuplicateShare > 1 {
		p.Addf("-rate must be non-negative, -invalid and -duplicates between 0 and 1")
	}
	return c, p.Err()
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c, err := parse(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil // -h: the usage is printed, which is what was asked
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "loadgen: %d sessions, %d workers, batch %d, seed %d\n", c.Sessions, c.Concurrency, c.Batch, c.Seed)
	rep, err := loadgen.Run(ctx, c)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "sent %d events in %d requests in %v (%.0f events/s), %d resent after a 503 or a dropped connection\n",
		rep.Events, rep.Requests, rep.Elapsed.Round(time.Millisecond), rep.EventsPerSecond(), rep.Retries)
	if c.Verify {
		fmt.Fprintf(stdout, "verified %d of %d sessions\n", rep.Verified, rep.Sessions)
		for i, m := range rep.Mismatches {
			if i == 20 {
				fmt.Fprintf(stdout, "... and %d more\n", len(rep.Mismatches)-20)
				break
			}
			fmt.Fprintln(stdout, "MISMATCH", m)
		}
		if len(rep.Mismatches) > 0 {
			return fmt.Errorf("%d sessions differ from the reference fold (seed %d)", len(rep.Mismatches), c.Seed)
		}
	}
	return nil
}
