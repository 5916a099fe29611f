package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/correx/sessions/pkg/client"
)

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// waitAll reads every session once the projector has folded its last
// accepted event.
func waitAll(t testing.TB, c *client.Client, last map[string]client.Position) map[string]*client.Snapshot {
	t.Helper()
	ctx := ctxFor(t, 60*time.Second)
	out := make(map[string]*client.Snapshot, len(last))
	for id, p := range last {
		s, err := c.Get(ctx, id, client.MinPosition(p))
		if err != nil {
			t.Fatalf("get %s: %v", id, err)
		}
		out[id] = s
	}
	return out
}

// TestRetriesNeverDoubleAnEffect sends sessions through an injector that
// refuses requests, drops connections after ingest wrote them, and confirms
// only half of what was written; every snapshot must equal the reference
// fold of the session's events, each counted once.
func TestRetriesNeverDoubleAnEffect(t *testing.T) {
	st := startStack(t, 4)
	in := newInjector(func(n int64) fault { return fault(n % 4) }) // pass, refuse, drop, partial, ...
	c := newClient(t, st, in)
	ctx := ctxFor(t, 60*time.Second)

	const sessions = 24
	all := map[string][]client.Event{}
	for i := range sessions {
		id := fmt.Sprintf("retry:%d", i)
		all[id] = lifecycle(id)
	}
	var mu sync.Mutex
	last := map[string]client.Position{}
	resent := 0
	var wg sync.WaitGroup
	for i := range 4 { // four senders, each with its own sessions, three events per call
		wg.Go(func() {
			for j := i; j < sessions; j += 4 {
				id := fmt.Sprintf("retry:%d", j)
				evs := all[id]
				for k := 0; k < len(evs); k += 3 {
					res, err := c.Send(ctx, evs[k:min(k+3, len(evs))]...)
					if err != nil {
						t.Errorf("send %s: %v", id, err)
						return
					}
					a := res.Accepted[len(res.Accepted)-1]
					mu.Lock()
					resent += res.Resent
					last[id] = a.Position()
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	in.mu.Lock()
	t.Logf("requests: %d passed, %d refused, %d dropped after writing, %d half confirmed", in.counts[pass], in.counts[refuse], in.counts[drop], in.counts[partial])
	in.mu.Unlock()
	var dups uint64
	for id, s := range waitAll(t, c, last) {
		sameEffect(t, s, reference(t, all[id]))
		dups += s.Counters.Duplicates
	}
	if dups == 0 || resent == 0 {
		t.Errorf("%d duplicates folded, %d requests reported resent: the faults did not make the client resend written events", dups, resent)
	}
}

// TestPartial503ResendsOnlyUnconfirmed checks that after a 503 that
// confirms some events, the next request carries exactly the others.
func TestPartial503ResendsOnlyUnconfirmed(t *testing.T) {
	st := startStack(t, 2)
	in := newInjector(func(n int64) fault {
		if n == 1 {
			return partial
		}
		return pass
	})
	c := newClient(t, st, in)
	evs := lifecycle("partial:1")[:6]
	res, err := c.Send(ctxFor(t, 30*time.Second), evs...)
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range res.Accepted {
		if a.EventID != evs[i].ID {
			t.Errorf("accepted[%d] = %q, want %q", i, a.EventID, evs[i].ID)
		}
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.bodies) != 2 {
		t.Fatalf("%d requests, want 2", len(in.bodies))
	}
	var got, want []string
	for line := range bytes.Lines(in.bodies[1]) {
		var e client.Event
		if err := json.Unmarshal(line, &e); err != nil {
			t.Fatal(err)
		}
		got = append(got, e.ID)
	}
	for _, e := range evs[3:] {
		want = append(want, e.ID)
	}
	if !slices.Equal(got, want) {
		t.Errorf("resent %v, want the unconfirmed %v", got, want)
	}
}

// TestSendAndWaitOutcomes checks each outcome against the snapshot and
// against the fold rules restated here.
func TestSendAndWaitOutcomes(t *testing.T) {
	st := startStack(t, 2)
	c := newClient(t, st, nil)
	ctx := ctxFor(t, 60*time.Second)
	id := "rw:1"
	evs := []client.Event{
		client.SessionCreated(id, client.Goal("g")),
		client.SessionStarted(id),
		client.SessionPaused(id),
		client.ToolRequested(id),  // execution_while_suspended
		client.SessionStarted(id), // invalid_transition
		client.SessionResumed(id),
		client.Custom(id, "x.acme.Note", nil, client.ExpectedVersion(4)), // version 4: applied
		client.SessionCompleted(id, client.ExpectedVersion(1)),           // version_conflict
		client.SessionFailed(id, "boom"),                                 // applied
		client.ModelRequested("rw:orphan"),                               // no session
	}
	out, err := c.SendAndWait(ctx, evs...)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		status client.Status
		reason string
	}{
		{client.Applied, ""}, {client.Applied, ""}, {client.Applied, ""},
		{client.Rejected, "execution_while_suspended"}, {client.Rejected, "invalid_transition"},
		{client.Applied, ""}, {client.Applied, ""}, {client.Rejected, "version_conflict"},
		{client.Applied, ""}, {client.UnknownSession, ""},
	}
	for i, o := range out {
		if o.EventID != evs[i].ID || o.Status != want[i].status || o.Reason != want[i].reason {
			t.Errorf("event %d (%s): %s %q, want %s %q", i, evs[i].Type, o.Status, o.Reason, want[i].status, want[i].reason)
		}
	}
	s := out[0].Snapshot
	if s == nil || s.State != "FAILED" || s.Version != 6 || s.Counters.Rejected != 3 {
		t.Fatalf("snapshot: %+v", s)
	}
	sameEffect(t, s, reference(t, evs[:9]))

	// A resend of the same events: the rejected stay rejected (their
	// rejections stand), the applied are duplicates reported applied.
	again, err := c.SendAndWait(ctx, evs[:9]...)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range again {
		if o.Status != out[i].Status || o.Reason != out[i].Reason {
			t.Errorf("resent event %d: %s %q, first time %s %q", i, o.Status, o.Reason, out[i].Status, out[i].Reason)
		}
	}
	if d := again[0].Snapshot.Counters.Duplicates; d != 9 {
		t.Errorf("duplicates after the resend: %d, want 9", d)
	}
}

// TestValidationErrorNamesEvents sends bad events among good ones: the
// error names each by its index in the call, whether the client refused it
// (before any I/O) or ingest did, and nothing of the request is written.
func TestValidationErrorNamesEvents(t *testing.T) {
	st := startStack(t, 2)
	c := newClient(t, st, nil)
	ctx := ctxFor(t, 30*time.Second)
	evs := []client.Event{
		client.SessionCreated("val:1"),
		client.SessionStarted("val:1"),
		client.SessionStarted("bad id with spaces"),
		client.Custom("val:1", "x.Acme.bad name", nil),
	}
	_, err := c.Send(ctx, evs...)
	var ve *client.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("err = %v, want a *ValidationError", err)
	}
	idx := map[int]string{}
	for _, p := range ve.Problems {
		idx[p.Index] = p.Field
	}
	if len(idx) != 2 || idx[2] != "sessionId" || idx[3] != "type" {
		t.Errorf("refused by the client: problems %+v, want events 2 (sessionId) and 3 (type)", ve.Problems)
	}

	// What only ingest checks: a label key and a goal over 4 KiB.
	evs = []client.Event{
		client.SessionCreated("val:1"),
		client.SessionStarted("val:1"),
		client.SessionCreated("val:2", client.Labels(map[string]string{"Bad Key": "v"})),
		client.SessionCreated("val:3", client.Goal(strings.Repeat("g", 5000))),
	}
	_, err = c.Send(ctx, evs...)
	if !errors.As(err, &ve) {
		t.Fatalf("err = %v, want a *ValidationError", err)
	}
	idx = map[int]string{}
	for _, p := range ve.Problems {
		idx[p.Index] = p.Field
		if p.EventID != evs[p.Index].ID {
			t.Errorf("problem %+v names the wrong event id", p)
		}
	}
	if len(idx) != 2 || !strings.HasPrefix(idx[2], "payload.labels") || idx[3] != "payload.goal" {
		t.Errorf("refused by ingest: problems %+v, want events 2 (payload.labels...) and 3 (payload.goal)", ve.Problems)
	}
	if _, err := c.Get(ctx, "val:1"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("get after a refused request: %v, want ErrNotFound", err)
	}
}

// TestBatcherOrderPerSession adds single events from 64 goroutines, each
// with its own sessions, through small batches and injected faults; every
// session must be folded in the order its events were added, which the
// digest (a chain over the applied events) shows.
func TestBatcherOrderPerSession(t *testing.T) {
	st := startStack(t, 4)
	in := newInjector(func(n int64) fault {
		if n%7 == 0 {
			return fault(1 + n/7%3)
		}
		return pass
	})
	c := newClient(t, st, in)
	var mu sync.Mutex
	offsets := map[string][]int64{} // per session, offsets in the order results arrive
	partitions := map[string]int32{}
	var failures []error
	b, err := c.NewBatcher(client.Lanes(4), client.BatchEvents(50), client.Linger(time.Millisecond),
		client.BufferBytes(64<<10), // small: Add must block and wait for room
		client.OnResult(func(ev client.Event, a client.Accepted, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failures = append(failures, err)
				return
			}
			offsets[ev.SessionID] = append(offsets[ev.SessionID], a.Offset)
			partitions[ev.SessionID] = a.Partition
		}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, 90*time.Second)
	all := map[string][]client.Event{}
	for g := range 64 {
		for k := range 3 {
			id := fmt.Sprintf("order:%d:%d", g, k)
			all[id] = lifecycle(id)
		}
	}
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			// interleave the goroutine's three sessions, one event per Add
			for i := range len(lifecycle("x")) {
				for k := range 3 {
					if err := b.Add(ctx, all[fmt.Sprintf("order:%d:%d", g, k)][i]); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if len(failures) > 0 {
		t.Fatalf("%d events failed: %v", len(failures), failures[0])
	}
	last := map[string]client.Position{}
	for id, offs := range offsets {
		if len(offs) != len(all[id]) {
			t.Errorf("%s: %d results, want %d", id, len(offs), len(all[id]))
		}
		if !slices.IsSorted(offs) {
			t.Errorf("%s: offsets out of order: %v", id, offs)
		}
		last[id] = client.Position{Partition: partitions[id], Offset: offs[len(offs)-1]}
	}
	in.mu.Lock()
	t.Logf("requests %d: %d passed, %d refused, %d dropped, %d half confirmed", len(in.bodies), in.counts[pass], in.counts[refuse], in.counts[drop], in.counts[partial])
	in.mu.Unlock()
	for id, s := range waitAll(t, c, last) {
		sameEffect(t, s, reference(t, all[id]))
	}
}
