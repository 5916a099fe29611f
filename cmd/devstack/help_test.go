package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/correx/sessions/internal/devstack"
)

// TestHelp: -h prints the usage and succeeds (exit 0), with no error line
// and no empty default.
func TestHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"-h"}, func(string) string { return "" }, &stdout, &stderr); err != nil {
		t.Fatalf("-h: %v, want success", err)
	}
	out := stderr.String()
	if !strings.HasPrefix(out, "Usage of devstack:\n") {
		t.Errorf("-h prints\n%s\nwant the usage", out)
	}
	for _, bad := range []string{"help requested", "default )", "default \"\")"} {
		if strings.Contains(out, bad) {
			t.Errorf("-h prints %q:\n%s", bad, out)
		}
	}
}

// TestPortInUse: an address already in use is named once, with the flag
// that moves it, and the command's name once.
func TestPortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addr := l.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	free := []string{"-data-dir", "", "-archive-dir", "", "-demo=false", "-kafka-port", "0", "-ingest-addr", "127.0.0.1:0",
		"-query-addr", "127.0.0.1:0", "-projector-addr", "127.0.0.1:0"}
	for _, tc := range []struct{ flag, value, want string }{
		{"-ingest-addr", addr, "devstack: ingest " + addr + " is already in use (another devstack?): stop what listens there, or choose another with -ingest-addr"},
		{"-query-addr", addr, "devstack: query " + addr + " is already in use (another devstack?): stop what listens there, or choose another with -query-addr"},
		{"-projector-addr", addr, "devstack: projector " + addr + " is already in use (another devstack?): stop what listens there, or choose another with -projector-addr"},
		{"-kafka-port", port, "devstack: kafka 127.0.0.1:" + port + " is already in use (another devstack?): stop what listens there, or choose another with -kafka-port"},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			args := append(slices.Clone(free), tc.flag, tc.value)
			err := run(context.Background(), args, func(string) string { return "" }, &stdout, &stderr)
			if err == nil {
				t.Fatal("started on an address in use")
			}
			if got := message(err); got != tc.want {
				t.Errorf("message\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestDocumentedPortFlags parses the ARGS that the README and `make help`
// give to move the stack off its default ports: each names flags that
// exist, and moves all four ports.
func TestDocumentedPortFlags(t *testing.T) {
	args := regexp.MustCompile(`make run ARGS="([^"]+)"|run: ##.*ARGS="([^"]+)"`)
	for _, file := range []string{"../../README.md", "../../Makefile"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		m := args.FindSubmatch(b)
		if m == nil {
			t.Errorf("%s says nothing of make run ARGS=\"...\"", file)
			continue
		}
		line := string(m[1]) + string(m[2])
		c, _, err := parse(strings.Fields(line), func(string) string { return "" }, io.Discard)
		if err != nil {
			t.Errorf("%s: %q: %v", file, line, err)
			continue
		}
		d := devstack.DefaultConfig()
		if c.IngestAddr == d.IngestAddr || c.QueryAddr == d.QueryAddr || c.ProjectorAddr == d.ProjectorAddr || c.KafkaPort == d.KafkaPort {
			t.Errorf("%s: %q leaves a default port", file, line)
		}
	}
}
