package client_test

import (
	"errors"
	"testing"
	"time"

	"github.com/correx/sessions/pkg/client"
)

// TestHistoryOfALongSession sends a session of 10,000 events through the
// pipeline (ingest, Kafka, the projector, Redis) and reads its history back
// page by page: every event appears exactly once, at the position ingest
// gave it, in order, with its outcome (rejections, a resent event counted
// as a duplicate, a timeout armed at an old version superseded), a version
// that counts the applied events, and the last page's next empty.
func TestHistoryOfALongSession(t *testing.T) {
	st := startStack(t, 2)
	c := newClient(t, st, nil)
	ctx := ctxFor(t, 3*time.Minute)
	const id, n = "hist:long", 10_000
	evs := make([]client.Event, 0, n)
	outcomes := make([]string, 0, n)
	for k := range n {
		var e client.Event
		outcome := "applied"
		switch {
		case k == 0:
			e = client.SessionCreated(id, client.Goal("a long one"))
		case k == 1:
			e = client.SessionStarted(id)
		case k%1000 == 500: // not paused
			e, outcome = client.SessionResumed(id), "rejected"
		case k == 777:
			e, outcome = evs[776], "duplicate"
		case k == 3333:
			e, outcome = client.TimeoutExpired(id, client.TimeoutInactivity, 1, time.Now()), "superseded"
		case k == 4444:
			e = client.Custom(id, "x.acme.Note", map[string]string{"note": "halfway"})
		default:
			e = client.ModelRequested(id)
		}
		evs, outcomes = append(evs, e), append(outcomes, outcome)
	}
	res, err := c.Send(ctx, evs...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, id, client.MinPosition(res.Accepted[n-1].Position())); err != nil {
		t.Fatal(err)
	}
	k, pages := 0, 0
	var version uint64
	for p, err := range c.HistoryPages(ctx, id, 999) {
		if err != nil {
			t.Fatalf("page %d: %v", pages+1, err)
		}
		pages++
		if len(p.History) == 0 || len(p.History) > 999 {
			t.Fatalf("page %d holds %d entries", pages, len(p.History))
		}
		if p.Next == "" && k+len(p.History) != n {
			t.Fatalf("page %d is the last, after %d of %d entries", pages, k+len(p.History), n)
		}
		for _, en := range p.History {
			if k >= n {
				t.Fatalf("more than %d entries", n)
			}
			if outcomes[k] == "applied" {
				version++
			}
			if en.EventID != evs[k].ID || en.Type != evs[k].Type || en.Position != res.Accepted[k].Position() ||
				en.Outcome != outcomes[k] || en.Version != version || !en.OccurredAt.Equal(evs[k].OccurredAt) {
				t.Fatalf("entry %d: %+v, want event %s (%s) at %v, %s, version %d", k, en, evs[k].ID, evs[k].Type,
					res.Accepted[k].Position(), outcomes[k], version)
			}
			wantTo := "ACTIVE"
			if k == 0 {
				wantTo = "CREATED"
			}
			if (en.Outcome == "rejected") != (en.Reason != "") || en.To != wantTo {
				t.Fatalf("entry %d: %+v", k, en)
			}
			k++
		}
	}
	if k != n || pages != (n+998)/999 {
		t.Fatalf("%d entries in %d pages, want %d in %d", k, pages, n, (n+998)/999)
	}
	// A cursor the service did not issue is refused, naming the parameter.
	_, err = c.History(ctx, id, "forged", 10)
	var se *client.StatusError
	if !errors.As(err, &se) || se.Status != 400 {
		t.Fatalf("a forged cursor: %v", err)
	}
	if _, err := c.History(ctx, "hist:none", "", 0); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("an unknown session: %v, want ErrNotFound", err)
	}
}
