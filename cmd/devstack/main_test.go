package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/correx/sessions/internal/redistest"
	"golang.org/x/sys/unix"
)

func TestParse(t *testing.T) {
	_, _, err := parse([]string{"-log-level", "loud", "-partitions", "0", "-progress", "0s"}, func(string) string { return "" }, &bytes.Buffer{})
	for _, want := range []string{"log-level", "CORREX_PARTITIONS", "-progress"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %s: %v", want, err)
		}
	}
	c, _, err := parse(nil, func(k string) string { return map[string]string{"CORREX_TOPIC": "t"}[k] }, &bytes.Buffer{})
	if err != nil || c.Topic != "t" || c.Partitions != 12 || c.IngestAddr != "127.0.0.1:8081" || !c.Demo {
		t.Fatalf("%+v %v", c, err)
	}
}

// TestRun starts the devstack on free ports against a real redis-server,
// lets the demo run until a progress line counts sessions (or a minute
// passes), and stops it as Ctrl-C would.
func TestRun(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	progress := regexp.MustCompile(`ingested [1-9][0-9]* .* sessions [1-9].*  archived [0-9]+`)
	var out syncBuffer
	var errs bytes.Buffer
	go func() {
		for ctx.Err() == nil && !progress.MatchString(out.String()) {
			time.Sleep(50 * time.Millisecond)
		}
		cancel()
	}()
	err := run(ctx, []string{"-data-dir", t.TempDir(), "-kafka-port", "0", "-ingest-addr", "127.0.0.1:0",
		"-query-addr", "127.0.0.1:0", "-projector-addr", "127.0.0.1:0", "-progress", "500ms", "-demo-rate", "500"},
		func(k string) string { return map[string]string{"CORREX_REDIS_URL": srv.URL()}[k] }, &out, &errs)
	if err != nil {
		t.Fatalf("%v\n%s", err, errs.String())
	}
	o := out.String()
	for _, want := range []string{"/v1/events", "/ui/", "authentication is OFF", `"timeouts":{"inactivity":"5s"}`, "stopped", "/v1/watch", "label=team=demo", "/v1/archive?prefix=demo&limit=5"} {
		if !strings.Contains(o, want) {
			t.Errorf("output lacks %q:\n%s", want, o)
		}
	}
	if !progress.MatchString(o) {
		t.Errorf("no progress line with events and sessions within a minute:\n%s\n%s", o, errs.String())
	}
}

// TestMakeRunStopsWithStatusZero runs `make run` on a terminal (a
// pseudo-terminal the test drives) and types Ctrl-C, as a person would:
// make must exit with status 0 after the clean stop.
func TestMakeRunStopsWithStatusZero(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the devstack through make")
	}
	makePath, err := exec.LookPath("make")
	if err != nil {
		t.Fatalf("make is needed: %v", err)
	}
	master, tty := openPTY(t)
	var out syncBuffer
	copied := make(chan struct{})
	go func() { _, _ = io.Copy(&out, master); close(copied) }()
	cmd := exec.Command(makePath, "-s", "-C", "../..", "run",
		"ARGS=-data-dir= -demo=false -kafka-port 0 -ingest-addr 127.0.0.1:0 -query-addr 127.0.0.1:0 -projector-addr 127.0.0.1:0 -progress 200ms")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = tty.Close() // the child holds it now
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	// Wait for the first progress line: the stack is up.
	deadline := time.After(3 * time.Minute)
	for !strings.Contains(out.String(), "ingested") {
		select {
		case err := <-done:
			t.Fatalf("make run ended before it was up: %v\n%s", err, out.String())
		case <-deadline:
			t.Fatalf("make run did not come up:\n%s", out.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
	if _, err := master.Write([]byte{3}); err != nil { // Ctrl-C
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("make run after Ctrl-C: %v (want exit status 0)\n%s", err, out.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("make run did not stop after Ctrl-C:\n%s", out.String())
	}
	// The process has exited, but its last lines may still be on their way
	// through the terminal: read until the terminal has nothing more.
	select {
	case <-copied:
	case <-time.After(10 * time.Second):
	}
	if !strings.Contains(out.String(), "stopped") {
		t.Errorf("no clean stop in the output:\n%s", out.String())
	}
}

// openPTY opens a pseudo-terminal: the master side the test types into and
// reads from, and the terminal a child process gets as its own.
func openPTY(t *testing.T) (master, tty *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { _ = master.Close() })
	fd := int(master.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	return master, tty
}

// syncBuffer is a bytes.Buffer that a child process's output copiers and the
// test may use at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
