package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/correx/sessions/pkg/client"
	"github.com/spf13/cobra"
)

// Exit codes (the package doc explains them).
const (
	ExitOK       = 0
	ExitError    = 1
	ExitUsage    = 2
	ExitNotFound = 3
	ExitRejected = 4
)

// Env is what a command reads and writes besides its arguments. Stdin and
// Stdout may be terminals (*os.File): top then reads keys in raw mode.
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Getenv         func(string) string
}

// OSEnv is the process's own streams and environment.
func OSEnv() Env {
	return Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}
}

// Main runs the command line args (without the program name) and returns
// the exit code; errors are printed on env.Stderr.
func Main(ctx context.Context, args []string, env Env) int {
	cmd := NewCommand(env)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	var q quiet
	if !errors.As(err, &q) {
		fmt.Fprintln(env.Stderr, Message(err))
	}
	return ExitCode(err)
}

// ExitCode maps an error of a command to its exit code.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var (
		u  usageError
		r  rejectedError
		q  quiet
		ve *client.ValidationError
		se *client.StatusError
	)
	switch {
	case errors.As(err, &q):
		return q.code
	case errors.As(err, &u), errors.Is(err, client.ErrInvalidSessionID), errors.Is(err, client.ErrInvalidEvent),
		strings.HasPrefix(err.Error(), "unknown command"):
		return ExitUsage
	case errors.Is(err, client.ErrNotFound):
		return ExitNotFound
	case errors.As(err, &r), errors.As(err, &ve):
		return ExitRejected
	case errors.As(err, &se) && (se.Status == http.StatusBadRequest || se.Status == http.StatusConflict):
		return ExitRejected
	}
	return ExitError
}

// Message is the line printed for err: "correx: " and the error, without
// pkg/client's "client: " prefix, which names a library the user of the
// command line did not call ("correx: get s-1: status 404: no such
// session").
func Message(err error) string {
	return "correx: " + strings.TrimPrefix(err.Error(), "client: ")
}

// usageError is a wrong command line.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// rejectedError is an outcome the command reports as rejected (exit 4):
// the output already said what happened.
type rejectedError struct{ msg string }

func (e rejectedError) Error() string { return e.msg }

// quiet is an exit code whose reason the output already gave.
type quiet struct{ code int }

func (q quiet) Error() string { return fmt.Sprintf("exit %d", q.code) }

// settings are the flags every command shares.
type settings struct {
	env       Env
	ingestURL string
	queryURL  string
	token     string
	output    string
}

// Defaults of the services' URLs: make run's stack.
const (
	DefaultIngestURL = "http://127.0.0.1:8081"
	DefaultQueryURL  = "http://127.0.0.1:8082"
)

func (s *settings) client() (*client.Client, error) {
	opts := []client.ClientOpt{client.IngestURL(s.ingestURL), client.QueryURL(s.queryURL), client.UserAgent("correx-cli"),
		client.WithoutTracing()}
	if s.token != "" {
		opts = append(opts, client.Token(s.token))
	}
	c, err := client.New(opts...)
	if err != nil {
		// The client names its options; the user set flags.
		return nil, usageError{errors.New(optionFlags.Replace(strings.TrimPrefix(err.Error(), "client: ")))}
	}
	return c, nil
}

// optionFlags names the flags that set the client's options.
var optionFlags = strings.NewReplacer("IngestURL:", "--ingest-url (CORREX_INGEST_URL):", "QueryURL:", "--query-url (CORREX_QUERY_URL):")

func envOr(getenv func(string) string, key, def string) string {
	if v := getenv(key); v != "" {
		return v
	}
	return def
}

// NewCommand returns the root command, writing to env's streams.
func NewCommand(env Env) *cobra.Command {
	root, _ := newCommand(env)
	return root
}

func newCommand(env Env) (*cobra.Command, *settings) {
	if env.Getenv == nil {
		env.Getenv = func(string) string { return "" }
	}
	if env.Stdin == nil {
		env.Stdin = strings.NewReader("")
	}
	s := &settings{env: env}
	root := &cobra.Command{
		Use:   "correx",
		Short: "Send session events to correx-sessions and read its sessions",
		Long: `correx sends session events to the ingest service and reads snapshots,
listings, statistics and the change feed from the query service.

The services: --ingest-url, --query-url and --token, or CORREX_INGEST_URL,
CORREX_QUERY_URL and CORREX_TOKEN (defaults: make run's stack on
127.0.0.1:8081 and :8082, no token).

Exit codes: 0 success, 1 failure (a wrong URL too), 2 usage, 3 session
not found (get, or send to a session never created), 4 rejected or conflict (an event rejected, a 400 or 409, a replay that
does not match the stored snapshot).`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(env.Stdin)
	root.SetOut(env.Stdout)
	root.SetErr(env.Stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	pf := root.PersistentFlags()
	pf.StringVar(&s.ingestURL, "ingest-url", envOr(env.Getenv, "CORREX_INGEST_URL", DefaultIngestURL), "ingest service base URL (CORREX_INGEST_URL)")
	pf.StringVar(&s.queryURL, "query-url", envOr(env.Getenv, "CORREX_QUERY_URL", DefaultQueryURL), "query service base URL (CORREX_QUERY_URL)")
	// The token's default is not shown in --help: it is a secret.
	pf.StringVar(&s.token, "token", "", "bearer token (default: CORREX_TOKEN)")
	pf.StringVarP(&s.output, "output", "o", "", "output format: table (default), wide, json or yaml")
	_ = root.RegisterFlagCompletionFunc("output", fixedCompletion("table", "wide", "json", "yaml"))
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if !cmd.Flags().Changed("token") {
			s.token = env.Getenv("CORREX_TOKEN")
		}
		s.token = trimLineEnding(s.token)
		switch s.output {
		case "", "table", "wide", "json", "yaml":
			return nil
		}
		return usagef("--output %q: want table, wide, json or yaml", s.output)
	}
	root.AddCommand(
		getCommand(s), listCommand(s), archiveCommand(s), watchCommand(s), sendCommand(s),
		approveCommand(s), denyCommand(s), cancelCommand(s), pauseCommand(s), resumeCommand(s), failCommand(s),
		historyCommand(s), replayCommand(s), rebuildCommand(s), verifyCommand(s), statsCommand(s), topCommand(s), tokensCommand(s),
	)
	return root, s
}

// trimLineEnding removes one line ending (CR LF, LF or CR) from the end of
// a token: one read from a file (CORREX_TOKEN="$(cat f)" keeps none, but a
// Secret mounted as a variable, or --token "$(< f)" through some shells,
// keeps it), which no header can carry. Anything else is left for the
// client to refuse, naming the token.
func trimLineEnding(tok string) string {
	if t, ok := strings.CutSuffix(tok, "\r\n"); ok {
		return t
	}
	if t, ok := strings.CutSuffix(tok, "\n"); ok {
		return t
	}
	t, _ := strings.CutSuffix(tok, "\r")
	return t
}

// exactArgs is cobra.ExactArgs with a usage error and the arguments named.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != len(names) {
			return usagef("%s takes %s (got %d arguments)", cmd.CommandPath(), strings.Join(names, " "), len(args))
		}
		return nil
	}
}

func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("%s takes no arguments (got %q)", cmd.CommandPath(), args)
	}
	return nil
}

func fixedCompletion(values ...string) func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	return func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return values, cobra.ShellCompDirectiveNoFileComp
	}
}
