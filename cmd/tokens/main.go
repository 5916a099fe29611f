// Command tokens issues and checks the bearer tokens of the ingest and query
// services (package auth; docs/security.md).
//
//	tokens new -scopes events:write,sessions:read [-prefix acme:] [-name acme-app]
//	    prints a new token once, and the line to append to the token file
//	    (CORREX_AUTH_TOKENS_FILE): the file stores only the token's SHA-256
//	tokens hash
//	    reads a token on standard input and prints its SHA-256, to write a
//	    file line for a token made elsewhere
//	tokens check FILE
//	    parses a token file and lists its tokens (names, scopes, prefixes)
//
// After changing the file, send SIGHUP to the services, or wait: they
// notice a changed file within 30 seconds.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/correx/sessions/internal/auth"
)

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "tokens:", err)
		os.Exit(2)
	}
}

const usage = `usage:
  tokens new -scopes events:write,sessions:read [-prefix acme:] [-name acme-app]
  tokens hash < token
  tokens check FILE`

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	switch args[0] {
	case "new":
		return newToken(args[1:], stdout, stderr)
	case "hash":
		return hashToken(stdin, stdout)
	case "check":
		if len(args) != 2 {
			return errors.New(usage)
		}
		return check(args[1], stdout)
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(stdout, usage)
		return nil
	}
	return fmt.Errorf("unknown command %q\n%s", args[0], usage)
}

func newToken(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tokens new", flag.ContinueOnError)
	fs.SetOutput(stderr)
	scopes := fs.String("scopes", "", "comma-separated scopes: events:write, sessions:read, admin (admin implies the others)")
	prefix := fs.String("prefix", "", "session-id prefix the token is bound to (a tenant namespace such as acme:); empty: every session")
	name := fs.String("name", "", "label of the token in logs (default token-<first 8 hex digits of the hash>)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *scopes == "" {
		return errors.New("-scopes is required: events:write, sessions:read and/or admin")
	}
	secret, err := auth.NewToken()
	if err != nil {
		return err
	}
	line := auth.HashToken(secret) + " " + *scopes
	if *prefix != "" {
		line += " prefix=" + *prefix
	}
	if *name != "" {
		line += " name=" + *name
	}
	// The line goes through the file parser, so that what is printed is
	// what the services accept.
	if _, err := auth.ParseTokens(strings.NewReader(line)); err != nil {
		return err
	}
	fmt.Fprintf(stdout, `token (shown once: hand it to the client; it is not stored anywhere):
  %s

line to append to the token file (CORREX_AUTH_TOKENS_FILE), then SIGHUP the services
or wait up to 30 s for them to reload it:
  %s
`, secret, line)
	return nil
}

func hashToken(stdin io.Reader, stdout io.Writer) error {
	sc := bufio.NewScanner(stdin)
	if !sc.Scan() {
		if err := sc.Err(); err != nil {
			return err
		}
		return errors.New("no token on standard input")
	}
	tok := strings.TrimSpace(sc.Text())
	if tok == "" {
		return errors.New("no token on standard input")
	}
	fmt.Fprintln(stdout, auth.HashToken(tok))
	return nil
}

func check(path string, stdout io.Writer) error {
	tokens, err := auth.ReadTokenFile(path)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: %d token(s)\n", path, len(tokens))
	for _, t := range tokens {
		scopes := make([]string, len(t.Scopes))
		for i, s := range t.Scopes {
			scopes[i] = string(s)
		}
		prefix := t.Prefix
		if prefix == "" {
			prefix = "(every session)"
		}
		fmt.Fprintf(stdout, "  %-24s %-32s prefix %s\n", t.Name, strings.Join(scopes, ","), prefix)
	}
	return nil
}
