// Command correx is the command line of correx-sessions: it sends session
// events, reads sessions, watches the change feed, shows a live board and
// issues tokens (internal/cli holds the commands; `correx --help` lists
// them, the README's "Command line" section shows them at work).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/correx/sessions/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], cli.OSEnv())
	stop()
	os.Exit(code)
}
