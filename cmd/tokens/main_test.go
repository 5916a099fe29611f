package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/correx/sessions/internal/auth"
	"github.com/correx/sessions/internal/cli"
)

// runTokens runs the command as main does and returns its error output when
// it exits non-zero.
func runTokens(args []string, stdin io.Reader, stdout, stderr *bytes.Buffer) error {
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	var errOut bytes.Buffer
	code := run(args, cli.Env{Stdin: stdin, Stdout: stdout, Stderr: &errOut, Getenv: func(string) string { return "" }})
	stderr.Write(errOut.Bytes())
	if code != 0 {
		return fmt.Errorf("exit %d: %s", code, errOut.String())
	}
	return nil
}

// TestNewThenAuthenticate issues a token, appends its line to a file, and
// checks that the file authenticates the token with the asked scopes and
// prefix, while the file holds no trace of the token itself.
func TestNewThenAuthenticate(t *testing.T) {
	var out bytes.Buffer
	if err := runTokens([]string{"new", "-scopes", "events:write,sessions:read", "-prefix", "acme:", "-name", "acme-app"}, nil, &out, &out); err != nil {
		t.Fatal(err)
	}
	tok := regexp.MustCompile(`(?m)^  (cxs_\S+)$`).FindStringSubmatch(out.String())
	line := regexp.MustCompile(`(?m)^  ([0-9a-f]{64} .*)$`).FindStringSubmatch(out.String())
	if tok == nil || line == nil {
		t.Fatalf("output:\n%s", out.String())
	}
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte("# tokens\n"+line[1]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	k, err := auth.LoadKeyring(path)
	if err != nil {
		t.Fatal(err)
	}
	p, ok := k.Lookup(tok[1])
	if !ok || p.Name != "acme-app" || p.Prefix != "acme:" || !p.Has(auth.ScopeEventsWrite) || !p.Has(auth.ScopeSessionsRead) || p.Has(auth.ScopeAdmin) {
		t.Fatalf("principal %+v %v", p, ok)
	}
	b, _ := os.ReadFile(path)
	if strings.Contains(string(b), tok[1]) || strings.Contains(string(b), tok[1][4:]) {
		t.Fatal("the file holds the token")
	}

	var hashed bytes.Buffer
	if err := runTokens([]string{"hash"}, strings.NewReader(tok[1]+"\n"), &hashed, &hashed); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(line[1], strings.TrimSpace(hashed.String())+" ") {
		t.Fatalf("hash %q does not start the line %q", hashed.String(), line[1])
	}
	var listed bytes.Buffer
	if err := runTokens([]string{"check", path}, nil, &listed, &listed); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(listed.String(), "1 token(s)") || !strings.Contains(listed.String(), "acme-app") {
		t.Fatalf("check:\n%s", listed.String())
	}
}

func TestRefusals(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{nil, "tokens needs a command"},
		{[]string{"new"}, "--scopes is required"},
		{[]string{"new", "-scopes", "write"}, `unknown scope "write"`},
		{[]string{"new", "-scopes", "admin", "-prefix", "a b"}, "prefix"},
		{[]string{"new", "-scopes", "admin", "stray"}, "takes no arguments"},
		{[]string{"check"}, "takes FILE"},
		{[]string{"check", "/nonexistent/tokens"}, "/nonexistent/tokens"},
		{[]string{"frobnicate"}, "unknown command"},
	}
	for _, tc := range tests {
		var out bytes.Buffer
		err := runTokens(tc.args, nil, &out, &out)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.args, err, tc.want)
		}
		if strings.Contains(out.String(), "cxs_") {
			t.Errorf("%q: a token was printed although the command failed", tc.args)
		}
	}
	if err := runTokens([]string{"hash"}, strings.NewReader(""), &bytes.Buffer{}, &bytes.Buffer{}); err == nil {
		t.Error("hash of nothing")
	}
}
