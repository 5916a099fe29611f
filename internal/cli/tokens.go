package cli

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/correx/sessions/internal/auth"
	"github.com/spf13/cobra"
)

// tokensCommand issues and checks the bearer tokens of the ingest and query
// services (package auth; docs/security.md). It works offline: it reads
// and writes no service.
func tokensCommand(s *settings) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tokens",
		Short: "Issue and check bearer tokens (offline)",
		Long: `tokens issues and checks the bearer tokens of the ingest and query services.
The token file (CORREX_AUTH_TOKENS_FILE) stores only each token's SHA-256.
After changing it, send SIGHUP to the services, or wait: they notice a
changed file within 30 seconds.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unknown command %q for %q", args[0], cmd.CommandPath())
			}
			return usageError{errors.New("tokens needs a command: new, hash or check")}
		},
	}
	cmd.AddCommand(tokensNewCommand(s), tokensHashCommand(s), tokensCheckCommand(s))
	return cmd
}

func tokensNewCommand(s *settings) *cobra.Command {
	var scopes, prefix, name string
	cmd := &cobra.Command{
		Use:     "new --scopes SCOPES",
		Short:   "Print a new token once, and the line to append to the token file",
		Example: `  correx tokens new --scopes events:write,sessions:read --prefix acme: --name acme-app`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if scopes == "" {
				return usagef("--scopes is required: events:write, sessions:read and/or admin")
			}
			secret, err := auth.NewToken()
			if err != nil {
				return err
			}
			line := auth.HashToken(secret) + " " + scopes
			if prefix != "" {
				line += " prefix=" + prefix
			}
			if name != "" {
				line += " name=" + name
			}
			// The line goes through the file parser, so that what is
			// printed is what the services accept.
			if _, err := auth.ParseTokens(strings.NewReader(line)); err != nil {
				return usageError{err}
			}
			fmt.Fprintf(s.env.Stdout, `token (shown once: hand it to the client; it is not stored anywhere):
  %s

line to append to the token file (CORREX_AUTH_TOKENS_FILE), then SIGHUP the services
or wait up to 30 s for them to reload it:
  %s
`, secret, line)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&scopes, "scopes", "", "comma-separated scopes: events:write, sessions:read, admin (admin implies the others)")
	fl.StringVar(&prefix, "prefix", "", "session-id prefix the token is bound to (a tenant namespace such as acme:); empty: every session")
	fl.StringVar(&name, "name", "", "label of the token in logs (default token-<first 8 hex digits of the hash>)")
	_ = cmd.RegisterFlagCompletionFunc("scopes", fixedCompletion("events:write", "sessions:read", "admin", "events:write,sessions:read"))
	return cmd
}

func tokensHashCommand(s *settings) *cobra.Command {
	return &cobra.Command{
		Use:   "hash",
		Short: "Read a token on standard input and print its SHA-256, for a file line of a token made elsewhere",
		Args:  noArgs,
		RunE: func(*cobra.Command, []string) error {
			sc := bufio.NewScanner(s.env.Stdin)
			if !sc.Scan() {
				if err := sc.Err(); err != nil {
					return err
				}
				return usagef("no token on standard input")
			}
			tok := strings.TrimSpace(sc.Text())
			if tok == "" {
				return usagef("no token on standard input")
			}
			fmt.Fprintln(s.env.Stdout, auth.HashToken(tok))
			return nil
		},
	}
}

func tokensCheckCommand(s *settings) *cobra.Command {
	return &cobra.Command{
		Use:   "check FILE",
		Short: "Parse a token file and list its tokens (names, scopes, prefixes)",
		Args:  exactArgs("FILE"),
		RunE: func(_ *cobra.Command, args []string) error {
			tokens, err := auth.ReadTokenFile(args[0])
			if err != nil {
				return err
			}
			type entry struct {
				Name   string   `json:"name"`
				Scopes []string `json:"scopes"`
				Prefix string   `json:"prefix"`
				Hash   string   `json:"sha256"`
			}
			entries := make([]entry, len(tokens))
			for i, tk := range tokens {
				e := entry{Name: tk.Name, Prefix: tk.Prefix, Hash: hex.EncodeToString(tk.Hash[:])}
				for _, sc := range tk.Scopes {
					e.Scopes = append(e.Scopes, string(sc))
				}
				entries[i] = e
			}
			if ok, err := s.writeData(entries); ok {
				return err
			}
			fmt.Fprintf(s.env.Stdout, "%s: %d token(s)\n", args[0], len(tokens))
			t := &table{header: []string{"NAME", "SCOPES", "PREFIX"}}
			for _, e := range entries {
				prefix := e.Prefix
				if prefix == "" {
					prefix = "(every session)"
				}
				t.add(e.Name, strings.Join(e.Scopes, ","), prefix)
			}
			return t.write(s.env.Stdout)
		},
	}
}
