package fsm_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/pkg/fsm"
)

func TestDerivedEventIDsAreReserved(t *testing.T) {
	a := fsm.DeriveEventID("TimeoutExpired", "s-1", "inactivity", "3")
	if a != fsm.DeriveEventID("TimeoutExpired", "s-1", "inactivity", "3") {
		t.Fatal("the same parts give another id")
	}
	if !strings.HasPrefix(a.String(), "636f7272-6578-8") || !a.Reserved() {
		t.Fatalf("%s: want a reserved UUIDv8 starting 636f7272-6578-8", a)
	}
	if v := a[8] >> 6; v != 2 {
		t.Fatalf("%s: variant bits %b, want 10", a, v)
	}
	for _, other := range []fsm.EventID{
		fsm.DeriveEventID("TimeoutExpired", "s-1", "inactivity", "4"),
		fsm.DeriveEventID("TimeoutExpired", "s-1", "inactivit", "y3"), // parts are delimited
		fsm.DeriveEventID("TimeoutExpired", "s-1inactivity", "3"),
	} {
		if other == a || !other.Reserved() {
			t.Errorf("%s: collides with %s or is not reserved", other, a)
		}
	}
	v7, err := fsm.NewEventID(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	notReserved := []string{
		v7.String(),
		"0190f2a4-5b6c-4d8e-9f00-112233445566", // v4
		"636f7272-6578-7abc-9def-0123456789ab", // the prefix, but version 7
		"636f7272-6578-8abc-cdef-0123456789ab", // the prefix and version 8, another variant
		"636f7272-6579-8abc-9def-0123456789ab", // version 8, another prefix
		"4f4d41a1-ae21-5b5f-8e80-d2367fd75410", // name-based (version 5)
	}
	for _, s := range notReserved {
		id, ok := fsm.ParseEventID([]byte(s))
		if !ok || id.Reserved() {
			t.Errorf("%s: reserved %v (parsed %v), want not reserved", s, id.Reserved(), ok)
		}
	}
}

// TestIngestRefusesAReservedEventID: a client cannot send an id the system
// derives; a record (another producer, or the system's own) decodes, and
// the reader that sees its headers decides (internal/kafka.DecodeEvent).
func TestIngestRefusesAReservedEventID(t *testing.T) {
	id := fsm.DeriveEventID("TimeoutExpired", "s", "inactivity", "1")
	body := []byte(`{"eventId":"` + id.String() + `","sessionId":"s","type":"SessionPaused","occurredAt":"2026-11-29T06:00:00Z"}`)
	var e fsm.Event
	err := fsm.DecodeEnvelope(body, &e, fsm.DecodeOptions{Ingest: true})
	var ve *fsm.ValidationError
	if !errors.As(err, &ve) || len(ve.Errors) != 1 || ve.Errors[0].Field != "eventId" || !strings.Contains(ve.Errors[0].Message, "reserved") {
		t.Fatalf("ingest: got %v, want one error naming eventId as reserved", err)
	}
	if err := fsm.DecodeRecord(body, &e); err != nil || e.ID != id {
		t.Fatalf("record: got %v, id %s", err, e.ID)
	}
}
