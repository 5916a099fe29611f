package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/correx/sessions/internal/testwait"
	"github.com/correx/sessions/pkg/testkit"
	"github.com/creack/pty"
)

// screen collects what a program writes to a pseudo-terminal.
type screen struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *screen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

// frame is the last complete board drawn: what follows the last clear
// screen, once the next one began (or the whole tail).
func (s *screen) frames() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Split(s.buf.String(), "\x1b[H\x1b[2J")
}

// testTop runs top in a pseudo-terminal against the stack: the board shows
// every state with its count, redraws when a session changes state, and q
// quits with exit 0.
func testTop(t *testing.T, st *testkit.Stack, env map[string]string) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	defer tty.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 40, Cols: 120}); err != nil {
		t.Fatal(err)
	}
	var sc screen
	go func() { _, _ = io.Copy(&sc, ptmx) }()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	exited := make(chan int, 1)
	go func() {
		exited <- Main(ctx, []string{"top", "--interval", "200ms", "--token", st.Tokens.Admin},
			Env{Stdin: tty, Stdout: tty, Stderr: tty, Getenv: func(k string) string { return env[k] }})
	}()

	// A board with a line per state and the partitions (the admin token
	// sees them).
	last := func() string {
		f := sc.frames()
		if len(f) < 2 {
			return ""
		}
		return f[len(f)-2] // complete: the next one has begun
	}
	testwait.UntilSeen(t, "a board with every state and the partitions", 30*time.Second, func() (bool, string) {
		b := last()
		for _, name := range stateNames() {
			if !strings.Contains(b, name) {
				return false, b
			}
		}
		return strings.Contains(b, "PARTITION") && strings.Contains(b, "events/s"), b
	})
	countOf := func(b, state string) string {
		for _, l := range strings.Split(b, "\r\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == state {
				return f[1]
			}
		}
		return ""
	}
	before := countOf(last(), "AWAITING_APPROVAL")
	wantCode(t, runCLI(t, env, "", "send", "-t", "SessionCreated", "-s", "acme:top"), ExitOK)
	wantCode(t, runCLI(t, env, "", "send", "-t", "SessionStarted", "-s", "acme:top"), ExitOK)
	wantCode(t, runCLI(t, env, "", "send", "-t", "ApprovalRequested", "-s", "acme:top"), ExitOK)
	testwait.UntilSeen(t, "the board to count the session awaiting approval", 30*time.Second, func() (bool, string) {
		b := last()
		return countOf(b, "AWAITING_APPROVAL") != before && countOf(b, "AWAITING_APPROVAL") != "", b
	})

	t.Logf("the board:\n%s", strings.ReplaceAll(last(), "\r\n", "\n"))
	quitWith(t, ptmx, "q", exited)
	// The board was drawn on the alternate screen, which top left on exit.
	testwait.UntilSeen(t, "top to leave the alternate screen", 30*time.Second, func() (bool, string) {
		all := strings.Join(sc.frames(), "")
		return strings.HasPrefix(all, altScreenOn) && strings.HasSuffix(all, altScreenOff), fmt.Sprintf("%q...%q", all[:min(len(all), 40)], all[max(0, len(all)-40):])
	})

	// Again, quitting with Ctrl-C: in raw mode it is a byte, not a signal.
	go func() {
		exited <- Main(ctx, []string{"top", "--interval", "200ms"},
			Env{Stdin: tty, Stdout: tty, Stderr: tty, Getenv: func(k string) string { return env[k] }})
	}()
	drawn := len(sc.frames())
	testwait.Until(t, "top to draw again", 30*time.Second, func() bool { return len(sc.frames()) > drawn+1 })
	quitWith(t, ptmx, "\x03", exited)
}

// testTopPlain runs top with its output in a buffer, not a terminal: it
// prints one board as plain lines and exits 0.
func testTopPlain(t *testing.T, env map[string]string) {
	r := runCLI(t, env, "", "top", "--interval", "200ms")
	wantCode(t, r, ExitOK)
	if strings.Contains(r.stdout, "\x1b") || strings.Contains(r.stdout, "\r") {
		t.Errorf("top without a terminal printed escape sequences or carriage returns: %q", r.stdout)
	}
	if n := strings.Count(r.stdout, "correx top "); n != 1 {
		t.Errorf("top without a terminal printed %d boards, want 1:\n%s", n, r.stdout)
	}
	for _, name := range stateNames() {
		if !strings.Contains(r.stdout, name) {
			t.Errorf("the board lacks %s:\n%s", name, r.stdout)
		}
	}
}

func quitWith(t *testing.T, ptmx io.Writer, key string, exited <-chan int) {
	t.Helper()
	if _, err := ptmx.Write([]byte(key)); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-exited:
		if code != ExitOK {
			t.Fatalf("top exited %d after %q", code, key)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("top did not quit on %q", key)
	}
}
