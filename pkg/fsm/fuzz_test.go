package fsm_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/correx/sessions/pkg/fsm"
)

// FuzzDecodeRecord feeds arbitrary bytes to the record decoder.
// Invariants: it never panics; it accepts only valid JSON (encoding/json
// agrees); an accepted event re-encodes with AppendRecord to bytes that decode
// to the same event; a rejected input always carries at least one field error.
func FuzzDecodeRecord(f *testing.F) {
	f.Add([]byte(`{"v":1,"eventId":"` + validID + `","sessionId":"s-1","type":"SessionCreated","occurredAt":"2026-11-29T06:00:00.25Z","payload":{"goal":"g"}}`))
	f.Add([]byte(`{"eventId":"` + validID + `","sessionId":"s","type":"TimeoutExpired","occurredAt":"2026-11-29T06:00:00+02:00","payload":{"timeout":"approval"}}`))
	f.Add([]byte(`{"eventId":"` + validID + `","sessionId":"s","type":"ToolCompleted","occurredAt":"2026-11-29T06:00:00Z","correlationId":"c\u00e9","payload":{"ok":false,"x":[1,2.5e3,"\ud83d\ude00"]}}`))
	f.Add([]byte(`{"sessionId":"s","type":"SessionStarted"}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var e fsm.Event
		err := fsm.DecodeRecord(b, &e)
		if err != nil {
			ve, ok := err.(*fsm.ValidationError)
			if !ok || len(ve.Errors) == 0 {
				t.Fatalf("error %v is not a non-empty *ValidationError", err)
			}
			return
		}
		if !json.Valid(b) {
			t.Fatalf("accepted invalid JSON %q", b)
		}
		rec := fsm.AppendRecord(nil, &e)
		var again fsm.Event
		if err := fsm.DecodeRecord(rec, &again); err != nil {
			t.Fatalf("re-encoded record rejected: %v\n%s", err, rec)
		}
		if !reflect.DeepEqual(again, e) {
			t.Fatalf("round trip differs\n got %+v\nwant %+v", again, e)
		}
	})
}

// FuzzParseRFC3339 checks the hand-written timestamp parser against the
// standard library: whatever it accepts, time.Parse accepts as the same
// instant.
func FuzzParseRFC3339(f *testing.F) {
	for _, s := range []string{"2026-11-29T06:00:00Z", "2026-02-29T06:00:00Z", "2024-02-29T23:59:59.999999999-23:59",
		"2026-11-29T06:00:00.5+01:00", "2026-13-01T00:00:00Z", "2026-11-29t06:00:00z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var e fsm.Event
		in := `{"sessionId":"s","type":"SessionStarted","occurredAt":` + string(mustJSON(s)) + `}`
		if fsm.DecodeEnvelope([]byte(in), &e, fsm.DecodeOptions{Ingest: true}) != nil || e.OccurredAt.IsZero() {
			return
		}
		std, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatalf("accepted %q, which time.Parse refuses: %v", s, err)
		}
		if !std.Equal(e.OccurredAt) {
			t.Fatalf("%q: got %v, time.Parse %v", s, e.OccurredAt, std)
		}
	})
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// FuzzReducer folds a sequence of events derived from the input bytes (every
// type, timeout kind and flag; ids reused to make duplicates).
// Invariants: no panic; exactly one state, valid once created; a terminal
// state never changes; version <= counters.events; rejected + duplicates +
// version == counters.events; bounded history.
func FuzzReducer(f *testing.F) {
	f.Add([]byte{1, 3, 4, 5, 11})
	f.Add([]byte{1, 3, 6, 13, 14, 7, 15, 3})
	f.Add([]byte{2, 1, 1, 9, 10, 10, 200, 255})
	f.Fuzz(func(t *testing.T, b []byte) {
		var s fsm.Session
		var r fsm.Reducer
		types := append(fsm.EventTypes(), fsm.SystemEventTypes()...)
		types = append(types, fsm.EventCustom)
		at := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
		for i, c := range b {
			et := types[int(c)%len(types)]
			id := fsm.EventID{byte(i % 7), byte(c >> 5)} // collisions make duplicates
			at = at.Add(time.Duration(c) * time.Millisecond)
			e := fsm.NewEvent(id, "s", et, at, fsm.Fields{Timeout: fsm.TimeoutKind(1 + int(c>>4)%5),
				ToolFailed: c&1 == 1, Mode: fsm.CancelMode(c >> 7), PredecessorSessionID: "p",
				SuccessorSessionID: "n", ArmedVersion: uint64(c % 8), HasArmedVersion: c&2 != 0})
			if et == fsm.EventCustom {
				e = fsm.NewCustomEvent(id, "s", fmt.Sprintf("x.v.T%d", c%70), at, nil)
			}
			if i%5 == 4 {
				e.ExpectedVersion, e.HasExpectedVersion = uint64(c%8), true
			}
			before := s.State
			o := r.Apply(&s, &e)
			switch {
			case before == fsm.StateNone && o.Result != fsm.Orphan && o.Result != fsm.Applied:
				t.Fatalf("event on no session: %+v", o)
			case before.Terminal() && s.State != before:
				t.Fatalf("terminal %s changed to %s", before, s.State)
			case s.Exists() && !s.State.Valid():
				t.Fatalf("invalid state %d", s.State)
			}
			if s.Exists() {
				c := s.Counters
				if s.Version > c.Events || s.Version+c.Rejected+c.Duplicates+c.SupersededTimeouts != c.Events {
					t.Fatalf("version %d rejected %d duplicates %d superseded %d events %d", s.Version, c.Rejected,
						c.Duplicates, c.SupersededTimeouts, c.Events)
				}
			}
			if s.NumTransitions() > fsm.TransitionsKept || s.NumRejections() > fsm.RejectionsKept || s.NumSeenIDs() > fsm.IDWindow ||
				s.NumAnnotations() > fsm.AnnotationsKept || s.NumCustomTypes() > fsm.MaxCustomTypes {
				t.Fatal("history over its bounds")
			}
		}
	})
}
