package wire_test

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"github.com/correx/sessions/internal/godeps"
	"github.com/correx/sessions/pkg/wire"
)

func TestChangeEncodesDeterministically(t *testing.T) {
	at := time.Date(2026, 11, 29, 6, 0, 0, 250_000_000, time.FixedZone("x", 3600))
	c := wire.Change{SessionID: "acme:<1>", Version: 3, Position: wire.Position{Partition: 2, Offset: 40},
		EventID: "0193a000-0000-7000-8000-000000000001", Type: "SessionPaused", OccurredAt: at,
		Outcome: wire.Applied, From: "ACTIVE", To: "PAUSED",
		Labels: map[string]string{"team": "b", "env": "a", "owner": "c"}, CorrelationID: "c-1"}
	first := c.AppendJSON(nil)
	for range 20 { // map iteration order varies between runs of the loop
		if got := c.AppendJSON(nil); !bytes.Equal(got, first) {
			t.Fatalf("encodings differ:\n%s\n%s", first, got)
		}
	}
	want := `{"sessionId":"acme:<1>","version":3,"position":{"partition":2,"offset":40},"eventId":"0193a000-0000-7000-8000-000000000001",` +
		`"type":"SessionPaused","occurredAt":"2026-11-29T05:00:00.25Z","outcome":"applied","from":"ACTIVE","to":"PAUSED","terminal":false,` +
		`"labels":{"env":"a","owner":"c","team":"b"},"correlationId":"c-1"}`
	if string(first) != want {
		t.Fatalf("got  %s\nwant %s", first, want)
	}
	var back wire.Change
	if err := wire.Decode(first, &back); err != nil {
		t.Fatal(err)
	}
	c.OccurredAt = at.UTC()
	if !reflect.DeepEqual(back, c) {
		t.Fatalf("decoded %+v, want %+v", back, c)
	}
}

func TestDecodeRefusesWhatIsNotAChange(t *testing.T) {
	for _, v := range []string{``, `{}`, `[]`, `{"sessionId":"s","eventId":"e","outcome":"maybe"}`, `{"sessionId":"s","outcome":"applied"}`} {
		var c wire.Change
		if err := wire.Decode([]byte(v), &c); err == nil {
			t.Errorf("%q decoded", v)
		}
	}
}

// TestDependencies keeps the package a leaf: the standard library only.
func TestDependencies(t *testing.T) {
	godeps.Check(t, "github.com/correx/sessions/pkg/wire", godeps.Rules{Allow: []string{"github.com/correx/sessions/pkg/wire"}})
}
