package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/correx/sessions/internal/kafkatest"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/internal/testwait"
	"github.com/correx/sessions/pkg/feed"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

const topic = "wh.events"

// receiver is an endpoint that verifies signatures, fails when told to,
// and notes each change it accepted.
type receiver struct {
	t      *testing.T
	secret []byte

	mu       sync.Mutex
	failNext int           // answer 503 to this many requests
	dropNext int           // then close the connection of this many
	failAt   int           // on the failAt-th accepted change, answer 503 and signal stopNow
	stopNow  chan struct{} // closed at failAt
	accepted map[string]int
	order    []feed.Change
	requests int
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	if err := Verify(r.secret, req.Header.Get(SignatureHeader), body, time.Now(), 5*time.Minute); err != nil {
		r.t.Errorf("signature of %s: %v", body, err)
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	var c feed.Change
	if err := feed.Decode(body, &c); err != nil {
		r.t.Errorf("body: %v", err)
	}
	if got, want := req.Header.Get(DeliveryHeader), c.SessionID+"/"+c.Position.String(); got != want {
		r.t.Errorf("%s = %q, want %q", DeliveryHeader, got, want)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests++
	switch {
	case r.failNext > 0:
		r.failNext--
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	case r.dropNext > 0:
		r.dropNext--
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.Close()
		}
		return
	case r.failAt > 0 && len(r.order)+1 == r.failAt:
		r.failAt = 0
		close(r.stopNow)
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	r.accepted[req.Header.Get(DeliveryHeader)]++
	r.order = append(r.order, c)
}

func (r *receiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.order)
}

// changes returns a session's lifecycle on partition p: transitions, a
// rejection and a custom event (the last two are not posted).
func changes(id string, p int32, base int64) (all, transitions []feed.Change) {
	at := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	steps := []struct{ typ, from, to, outcome string }{
		{"SessionCreated", "", "CREATED", feed.Applied},
		{"SessionStarted", "CREATED", "ACTIVE", feed.Applied},
		{"x.acme.Note", "ACTIVE", "ACTIVE", feed.Applied},
		{"SessionResumed", "", "ACTIVE", feed.Rejected},
		{"ApprovalRequested", "ACTIVE", "AWAITING_APPROVAL", feed.Applied},
		{"ApprovalGranted", "AWAITING_APPROVAL", "ACTIVE", feed.Applied},
		{"SessionCompleted", "ACTIVE", "COMPLETED", feed.Applied},
	}
	v := uint64(0)
	for i, s := range steps {
		if s.outcome == feed.Applied {
			v++
		}
		c := feed.Change{SessionID: id, Version: v, Position: feed.Position{Partition: p, Offset: base + int64(i)},
			EventID: fmt.Sprintf("%s-%d", id, i), Type: s.typ, OccurredAt: at.Add(time.Duration(i) * time.Minute),
			Outcome: s.outcome, From: s.from, To: s.to, Terminal: s.to == "COMPLETED"}
		if s.outcome == feed.Rejected {
			c.Reason = "invalid_transition"
		}
		all = append(all, c)
		if isTransition(&c) {
			transitions = append(transitions, c)
		}
	}
	return all, transitions
}

func produce(t *testing.T, cl *kgo.Client, cs ...feed.Change) {
	t.Helper()
	for _, c := range cs {
		r := &kgo.Record{Topic: feed.Topic(topic), Partition: c.Position.Partition, Key: []byte(c.SessionID), Value: c.AppendJSON(nil)}
		if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// The endpoint fails the first attempts (503s, a dropped connection), and
// the program is stopped while a change is being retried, then started
// again; the projector writes part of the feed twice. Every transition is
// accepted once, signed, in order per session; nothing else is posted.
func TestWebhookDeliversEveryTransitionThroughFailuresAndRestart(t *testing.T) {
	k := kafkatest.Start(t, kfake.SeedTopics(2, feed.Topic(topic)))
	prod, err := kgo.NewClient(kgo.SeedBrokers(k.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	red := redistest.Start(t)
	rcv := &receiver{t: t, secret: []byte("s3cret"), failNext: 3, dropNext: 1, failAt: 6, stopNow: make(chan struct{}),
		accepted: map[string]int{}}
	srv := httptest.NewServer(rcv)
	defer srv.Close()

	var all, want []feed.Change
	for i := range 4 {
		a, tr := changes(fmt.Sprintf("s%d", i), int32(i%2), int64(100*i))
		all, want = append(all, a...), append(want, tr...)
	}
	half := len(all) / 2
	produce(t, prod, all[:half]...)

	cfg, err := parseConfig([]string{"-brokers", k.ListenAddrs()[0], "-topic", topic, "-redis", red.URL(), "-url", srv.URL,
		"-min-backoff", "5ms", "-max-backoff", "50ms"}, func(k string) string {
		if k == "WEBHOOK_SECRET" {
			return "s3cret"
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	start := func() (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- run(ctx, cfg, slog.New(slog.DiscardHandler)) }()
		return func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("run: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("run did not return after its context ended")
			}
		}
	}

	stop := start()
	<-rcv.stopNow // the 6th change is being retried
	stop()
	if n := rcv.count(); n != 5 {
		t.Fatalf("accepted %d changes before the stop, want 5", n)
	}
	produce(t, prod, all[half:]...)
	produce(t, prod, all[:half]...) // written again after a projector crash
	stop = start()
	testwait.Until(t, "every transition", 30*time.Second, func() bool { return rcv.count() >= len(want) })
	stop()

	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	for _, c := range want {
		if n := rcv.accepted[c.SessionID+"/"+c.Position.String()]; n != 1 {
			t.Errorf("%s at %s accepted %d times, want 1", c.SessionID, c.Position, n)
		}
	}
	if len(rcv.order) != len(want) {
		t.Errorf("accepted %d changes, want the %d transitions", len(rcv.order), len(want))
	}
	last := map[string]int64{}
	for _, c := range rcv.order {
		if p, ok := last[c.SessionID]; ok && c.Position.Offset <= p {
			t.Errorf("%s: %d after %d", c.SessionID, c.Position.Offset, p)
		}
		last[c.SessionID] = c.Position.Offset
	}
	if rcv.requests < len(want)+5 {
		t.Errorf("%d requests: the failures were not retried", rcv.requests)
	}
}

func TestVerifyRefusesTamperingAndOldTimestamps(t *testing.T) {
	secret, body := []byte("k"), []byte(`{"sessionId":"s"}`)
	now := time.Unix(1_800_000_000, 0)
	h := Sign(secret, now, body)
	if err := Verify(secret, h, body, now.Add(time.Minute), 5*time.Minute); err != nil {
		t.Fatalf("a good signature: %v", err)
	}
	for name, tc := range map[string]struct {
		secret []byte
		header string
		body   []byte
		at     time.Time
	}{
		"other body":   {secret, h, []byte(`{"sessionId":"t"}`), now},
		"other secret": {[]byte("x"), h, body, now},
		"too old":      {secret, h, body, now.Add(10 * time.Minute)},
		"no signature": {secret, "t=1800000000", body, now},
		"garbage":      {secret, "v1=zz,t=x", body, now},
	} {
		if err := Verify(tc.secret, tc.header, tc.body, tc.at, 5*time.Minute); err == nil {
			t.Errorf("%s: verified", name)
		}
	}
}

func TestParseConfigReportsEveryProblem(t *testing.T) {
	_, err := parseConfig([]string{"-min-backoff", "0s"}, func(string) string { return "" })
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"-url", "WEBHOOK_SECRET", "backoffs"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not mention %s", err, want)
		}
	}
}
