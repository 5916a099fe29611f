package projector

import (
	"bytes"
	"testing"
	"time"

	correxotel "github.com/correx/sessions/otel"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// failedSession folds a session to FAILED with the given failure.
func failedSession(t *testing.T, id string, f fsm.Fields) (*snapshot.Snapshot, *fsm.Event, fsm.Outcome) {
	t.Helper()
	at := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	s := &snapshot.Snapshot{}
	var r fsm.Reducer
	var out fsm.Outcome
	var last fsm.Event
	for i, typ := range []fsm.EventType{fsm.SessionCreated, fsm.SessionStarted, fsm.SessionFailed} {
		last = fsm.NewEvent(fsm.EventID{byte(i + 1), id[len(id)-1]}, id, typ, at.Add(time.Duration(i)*time.Second), f)
		out, _ = s.Fold(&r, &last, snapshot.Position{Partition: 1, Offset: int64(i)})
	}
	if s.State != fsm.StateFailed {
		t.Fatalf("%s: %s", id, s.State)
	}
	return s, &last, out
}

// TestFailureTelemetry: the transition to FAILED counts in
// correx.session.failures under its category, and its span carries the
// category and the code.
func TestFailureTelemetry(t *testing.T) {
	tel, rec, reader := correxotel.NewForTest()
	obs, err := NewTelemetry(tel, topic, "g")
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	for i, f := range []fsm.Fields{
		{Reason: "503", Category: "provider", Code: "http.503"},
		{Reason: "503", Category: "provider"},
		{Reason: "lost", Category: "infrastructure", Code: "node.lost"},
		{Reason: "?"},
	} {
		s, e, out := failedSession(t, "s-"+string(rune('a'+i)), f)
		obs.Folded(&kgo.Record{Partition: 1, Offset: int64(i)}, e, s, out)
	}
	obs.Drain()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if d, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "correx.session.failures" {
				for _, p := range d.DataPoints {
					c, _ := p.Attributes.Value("correx.failure.category")
					got[c.AsString()] += p.Value
				}
			}
		}
	}
	want := map[string]int64{"provider": 2, "infrastructure": 1, "unknown": 1}
	if len(got) != len(want) {
		t.Fatalf("correx.session.failures by category: %v, want %v", got, want)
	}
	for c, n := range want {
		if got[c] != n {
			t.Errorf("correx.session.failures{category=%s} = %d, want %d", c, got[c], n)
		}
	}
	spans := map[string]string{}
	for _, sp := range rec.Ended() {
		var cat, code string
		for _, kv := range sp.Attributes() {
			switch kv.Key {
			case correxotel.AttrFailureCategory:
				cat = kv.Value.AsString()
			case correxotel.AttrFailureCode:
				code = kv.Value.AsString()
			}
		}
		if cat != "" {
			spans[cat+"/"+code] = sp.Name()
		}
	}
	for _, k := range []string{"provider/http.503", "provider/", "infrastructure/node.lost", "unknown/"} {
		if spans[k] != correxotel.SpanTransition {
			t.Errorf("no transition span with failure %s: %v", k, spans)
		}
	}
}

// TestFailureInTheChangeRecord: the change record of a transition to
// FAILED carries the failure's category and code, also when it is
// produced again from the outbox after a crash.
func TestFailureInTheChangeRecord(t *testing.T) {
	s, e, o := failedSession(t, "s-1", fsm.Fields{Reason: "503", Category: "provider", Code: "http.503"})
	d := newDerived(Config{Topic: topic, ChangeFeed: true}, nil, nil)
	r := &kgo.Record{Partition: 1, Offset: 2}
	d.add(r, e, s, o)
	ch := d.pending[1][0]
	c := ch.feedChange(1)
	if c.FailureCategory != "provider" || c.FailureCode != "http.503" || c.To != "FAILED" {
		t.Fatalf("change %+v, want failure provider/http.503", c)
	}
	enc := appendOutcome(nil, 2, ch.out)
	var back outcome
	if err := decodeOutcomes(enc, func(_ int64, o outcome) { back = o }); err != nil {
		t.Fatal(err)
	}
	if back != ch.out {
		t.Fatalf("outbox round trip: %+v, want %+v", back, ch.out)
	}
	ch.out = back
	if got, want := ch.appendJSON(nil, 1), (&change{out: back, id: ch.id, typ: ch.typ, at: ch.at, session: ch.session,
		correlation: ch.correlation, source: ch.source}).appendJSON(nil, 1); !bytes.Equal(got, want) ||
		!bytes.Contains(got, []byte(`"failureCategory":"provider","failureCode":"http.503"`)) {
		t.Fatalf("change record %s", got)
	}
	s2, e2, o2 := failedSession(t, "s-2", fsm.Fields{Reason: "?"})
	d.add(r, e2, s2, o2)
	if c := d.pending[1][1].feedChange(1); c.FailureCategory != "unknown" || c.FailureCode != "" {
		t.Fatalf("change %+v, want failure unknown without code", c)
	}
}

// TestOutboxKeepsReplacementOutcomes: an outbox entry keeps what the
// successor's event needs (the refusal reason, the predecessor's goal), and
// an entry written before those existed still decodes.
func TestOutboxKeepsReplacementOutcomes(t *testing.T) {
	for _, o := range []outcome{
		{rejected: true, reason: fsm.ReasonInvalidReplacement, refusal: fsm.RefusalChain, from: fsm.StateFailed, to: fsm.StateFailed, version: 4},
		{hasDigest: true, digest: [32]byte{9}, goal: "fix the build", from: fsm.StateFailed, to: fsm.StateFailed, version: 5},
		{hasDigest: true, digest: [32]byte{9}, from: fsm.StateFailed, to: fsm.StateFailed, version: 5},
	} {
		var back outcome
		if err := decodeOutcomes(appendOutcome(nil, 7, o), func(_ int64, b outcome) { back = b }); err != nil || back != o {
			t.Fatalf("round trip: %+v %v, want %+v", back, err, o)
		}
	}
	// Before: flags, reason, from, to, version, digest; nothing after.
	old := []byte{7, obDigest, 0, byte(fsm.StateFailed), byte(fsm.StateFailed), 5}
	old = append(old, bytes.Repeat([]byte{9}, 32)...)
	old = append(old, 8, obRejected, byte(fsm.ReasonInvalidReplacement), byte(fsm.StateFailed), byte(fsm.StateFailed), 4)
	var got []outcome
	if err := decodeOutcomes(old, func(_ int64, o outcome) { got = append(got, o) }); err != nil || len(got) != 2 {
		t.Fatalf("old entries: %v %v", got, err)
	}
	// The reaction to an old rejection falls back to the rejection's reason.
	e := &fsm.Event{SessionID: "s-prev", Type: fsm.SessionReplaced, Fields: fsm.Fields{SuccessorSessionID: "s-next"}}
	if r := reactionOf(e, got[1]); r == nil || r.fields.Reason != "invalid_replacement" {
		t.Fatalf("reaction %+v", r)
	}
	got[1].refusal = fsm.RefusalNotInfrastructure
	if r := reactionOf(e, got[1]); r == nil || r.kind != fsm.ReplacementRefused || r.fields.Reason != fsm.RefusalNotInfrastructure {
		t.Fatalf("reaction %+v, want ReplacementRefused not_infrastructure", r)
	}
	linked := outcome{hasDigest: true, digest: [32]byte{1}, goal: "g"}
	if r := reactionOf(e, linked); r == nil || r.kind != fsm.ReplacementLinked || r.fields.Goal != "g" {
		t.Fatalf("reaction %+v, want ReplacementLinked with the goal", r)
	}
}
