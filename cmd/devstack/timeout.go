package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/correx/sessions/internal/devstack"
)

// quietTimeout is the inactivity timeout of the demo's quiet session.
const quietTimeout = "5s"

// quietSessionEvents are the events of a session that starts and goes
// quiet: its inactivity deadline fires quietTimeout after it started.
func quietSessionEvents(id string) string {
	return fmt.Sprintf(`{"events":[{"sessionId":%q,"type":"SessionCreated","payload":{"goal":"go quiet","labels":{"team":"demo"},"timeouts":{"inactivity":%q}}},`+
		`{"sessionId":%q,"type":"SessionStarted"}]}`, id, quietTimeout, id)
}

// demoTimeout shows a timeout firing: it creates a session with an
// inactivity timeout, lets it go quiet, and prints a line to w when the
// projector has timed it out (CANCELLING, by a TimeoutExpired it produced
// itself).
func demoTimeout(ctx context.Context, st *devstack.Stack, w io.Writer, log *slog.Logger) {
	id := fmt.Sprintf("demo:quiet-%d", time.Now().Unix())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, st.IngestURL+"/v1/events", bytes.NewBufferString(quietSessionEvents(id)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		log.Warn("demo timeout session", "err", err)
		return
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		log.Warn("demo timeout session", "status", resp.StatusCode)
		return
	}
	fmt.Fprintf(w, "demo: session %s went quiet; its inactivity timeout (%s) will fire\n", id, quietTimeout)
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, st.QueryURL+"/v1/sessions/"+id, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			continue
		}
		var s struct {
			State        string
			Cancellation *struct{ Reason, RequestedAt string }
			Deadline     *struct{ Kind, At string }
		}
		err = json.NewDecoder(resp.Body).Decode(&s)
		resp.Body.Close()
		if err == nil && s.Cancellation != nil {
			next := "none"
			if s.Deadline != nil {
				next = s.Deadline.Kind + " at " + s.Deadline.At
			}
			fmt.Fprintf(w, "demo: session %s timed out: %s, %s at %s (the deadline); next deadline: %s\n",
				id, s.State, s.Cancellation.Reason, s.Cancellation.RequestedAt, next)
			return
		}
	}
}

// lockedWriter serialises the lines of concurrent writers.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
