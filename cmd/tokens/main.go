// Command tokens is `correx tokens` under its former name: it issues and
// checks the bearer tokens of the ingest and query services (internal/cli;
// docs/security.md). It takes the flags in either spelling, -scopes or
// --scopes.
//
//	tokens new -scopes events:write,sessions:read [-prefix acme:] [-name acme-app]
//	tokens hash < token
//	tokens check FILE
package main

import (
	"context"
	"os"

	"github.com/correx/sessions/internal/cli"
)

func main() {
	os.Exit(run(os.Args[1:], cli.OSEnv()))
}

func run(args []string, env cli.Env) int {
	out := []string{"tokens"}
	for _, a := range args {
		// The flag package's -name is pflag's --name.
		if len(a) > 2 && a[0] == '-' && a[1] != '-' {
			a = "-" + a
		}
		out = append(out, a)
	}
	return cli.Main(context.Background(), out, env)
}
