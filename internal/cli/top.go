package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/correx/sessions/pkg/client"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

func topCommand(s *settings) *cobra.Command {
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "top",
		Short: "A live board of sessions per state, lag per partition and events/s (q or Ctrl-C quits)",
		Long: `top redraws a board every --interval from GET /v1/stats: the sessions in each
state, each partition's checkpoint and lag, and the events folded per second
(the checkpoints' progress between two refreshes). The partitions need a token
with the admin scope (devstack runs open). q or Ctrl-C quits.

On a terminal the board is drawn on the alternate screen, which is left as it
was on exit. When the output is not a terminal (a pipe, a file), top prints
one board as plain lines and exits: non-zero when the stats could not be read.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if interval < 100*time.Millisecond {
				return usagef("--interval must be at least 100ms")
			}
			c, err := s.client()
			if err != nil {
				return err
			}
			return s.top(cmd.Context(), c, interval)
		},
	}
	cmd.Flags().DurationVar(&interval, "interval", 2*time.Second, "time between refreshes")
	return cmd
}

func (s *settings) top(ctx context.Context, c *client.Client, interval time.Duration) error {
	if f, ok := s.env.Stdout.(*os.File); !ok || !term.IsTerminal(int(f.Fd())) {
		// Not a terminal: redrawing would only pile up escape sequences.
		rctx, cancel := context.WithTimeout(ctx, interval+5*time.Second)
		st, err := c.Stats(rctx)
		cancel()
		frame := renderBoard(s.queryURL, interval, 1, time.Now(), st, err, nil, 0)
		frame = strings.Replace(frame, "  (q quits)", "", 1)
		fmt.Fprint(s.env.Stdout, strings.ReplaceAll(frame, "\r\n", "\n"))
		return err
	}
	quit := make(chan struct{})
	if f, ok := s.env.Stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		// Raw mode: a key arrives without Enter, and Ctrl-C as a byte.
		old, err := term.MakeRaw(int(f.Fd()))
		if err == nil {
			defer term.Restore(int(f.Fd()), old)
		}
	}
	go readKeys(s.env.Stdin, quit)
	w := s.env.Stdout
	// The alternate screen, the cursor hidden while drawing; both undone
	// on exit, so that the shell's screen comes back as it was.
	fmt.Fprint(w, altScreenOn)
	defer fmt.Fprint(w, altScreenOff)

	var prev *client.Stats
	var prevAt time.Time
	for n := 1; ; n++ {
		rctx, cancel := context.WithTimeout(ctx, interval+5*time.Second)
		st, err := c.Stats(rctx)
		cancel()
		now := time.Now()
		frame := renderBoard(s.queryURL, interval, n, now, st, err, prev, now.Sub(prevAt))
		fmt.Fprint(w, "\x1b[H\x1b[2J"+frame)
		// A refused token is refused at every refresh: say so and stop,
		// rather than redraw the refusal for ever.
		var se *client.StatusError
		if errors.As(err, &se) && (se.Status == http.StatusUnauthorized || se.Status == http.StatusForbidden) {
			return fmt.Errorf("top: the query service refuses this token: %w", err)
		}
		if err == nil {
			prev, prevAt = st, now
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-quit:
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// readKeys closes quit on q, Q or Ctrl-C (a byte in raw mode); it returns
// at the end of the input.
func readKeys(r io.Reader, quit chan<- struct{}) {
	buf := make([]byte, 16)
	for {
		n, err := r.Read(buf)
		for _, b := range buf[:n] {
			if b == 'q' || b == 'Q' || b == 3 {
				close(quit)
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// renderBoard draws one frame, lines ended with \r\n (raw mode does not
// return the carriage by itself).
// Escape sequences of the alternate screen (xterm's 1049: saved cursor,
// cleared alternate buffer) with the cursor hidden, and back.
const (
	altScreenOn  = "\x1b[?1049h\x1b[?25l"
	altScreenOff = "\x1b[?25h\x1b[?1049l"
)

func renderBoard(queryURL string, interval time.Duration, n int, now time.Time, st *client.Stats, err error,
	prev *client.Stats, elapsed time.Duration) string {
	var b strings.Builder
	line := func(format string, a ...any) { fmt.Fprintf(&b, format+"\r\n", a...) }
	line("correx top  %s  every %s  refresh %d at %s  (q quits)", queryURL, interval, n, now.UTC().Format("15:04:05"))
	line("")
	if err != nil {
		line("error: %v", err)
		return b.String()
	}
	if st.Prefix != "" {
		line("sessions with prefix %s", st.Prefix)
	}
	var most int64 = 1
	for _, v := range st.Sessions.ByState {
		most = max(most, v)
	}
	line("%-18s %8s", "STATE", "SESSIONS")
	for _, name := range stateNames() {
		v := st.Sessions.ByState[name]
		line("%-18s %8d  %s", name, v, strings.Repeat("█", int((v*30+most-1)/most)))
	}
	line("%-18s %8d", "TOTAL", st.Sessions.Total)
	line("")
	if len(st.Partitions) == 0 {
		line("partitions: none to show (they need a token with the admin scope)")
		return b.String()
	}
	rate := "-"
	if prev != nil && elapsed > 0 {
		var moved int64
		before := map[int32]int64{}
		for _, p := range prev.Partitions {
			before[p.Partition] = p.Checkpoint
		}
		for _, p := range st.Partitions {
			if c, ok := before[p.Partition]; ok && p.Checkpoint > c {
				moved += p.Checkpoint - c
			}
		}
		rate = strconv.FormatFloat(float64(moved)/elapsed.Seconds(), 'f', 1, 64)
	}
	var lag int64
	for _, p := range st.Partitions {
		if p.Lag != nil {
			lag += *p.Lag
		}
	}
	line("events/s %s   total lag %d", rate, lag)
	line("")
	line("%-9s %12s %8s", "PARTITION", "CHECKPOINT", "LAG")
	for _, p := range st.Partitions {
		line("%-9d %12d %8s", p.Partition, p.Checkpoint, intOrDash(p.Lag))
	}
	return b.String()
}
