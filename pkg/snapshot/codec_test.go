package snapshot_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/workload"
	"github.com/correx/sessions/pkg/feed"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/correx/sessions/pkg/wire"
)

var t0 = time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)

// fold folds events in order, giving the i-th event position (0, first+i).
func fold(events []fsm.Event, first int64) *snapshot.Snapshot {
	var s snapshot.Snapshot
	var r fsm.Reducer
	for i := range events {
		s.Fold(&r, &events[i], snapshot.Position{Partition: 0, Offset: first + int64(i)})
	}
	return &s
}

// randomEvents is a sequence of arbitrary events (any type, any timeout,
// custom and system types, armed and expected versions), after a
// SessionCreated that uses every creation field or none, with reused ids to
// produce duplicates.
func randomEvents(rng *rand.Rand, id string, n int) []fsm.Event {
	types := append(fsm.EventTypes(), fsm.SystemEventTypes()...)
	types = append(types, fsm.EventCustom, fsm.EventCustom)
	at := t0
	created := fsm.Fields{Goal: "g"}
	if rng.IntN(2) == 0 {
		created = fsm.Fields{Goal: "g", PredecessorSessionID: "p-" + id, ParentSessionID: "parent",
			ParentClosePolicy: fsm.ParentClosePolicy(rng.IntN(2)),
			Labels:            []fsm.Label{{Key: "team", Value: "core"}, {Key: "a/b", Value: "<&>"}},
			Metadata:          []byte(`{"k":[1,"<x>"]}`),
			Timeouts:          fsm.Timeouts{fsm.TimeoutApproval: 90 * time.Second, fsm.TimeoutCancellation: 5 * time.Minute}}
	}
	out := []fsm.Event{fsm.NewEvent(fsm.EventID{0xee}, id, fsm.SessionCreated, at, created)}
	for i := range n {
		at = at.Add(time.Duration(rng.IntN(5000)-500) * time.Millisecond)
		et := types[rng.IntN(len(types))]
		eid := fsm.EventID{byte(rng.IntN(40)), byte(rng.IntN(4))}
		var digest [32]byte
		digest[0] = byte(i)
		e := fsm.NewEvent(eid, id, et, at, fsm.Fields{Timeout: fsm.TimeoutKind(1 + rng.IntN(5)),
			Reason: "r", Mode: fsm.CancelMode(rng.IntN(2)), ToolFailed: rng.IntN(2) == 0,
			ArmedVersion: uint64(rng.IntN(i + 2)), HasArmedVersion: rng.IntN(3) == 0,
			SuccessorSessionID: "next", PredecessorDigest: digest})
		if et == fsm.EventCustom {
			var payload []byte
			if rng.IntN(2) == 0 {
				payload = []byte(`{"n":"` + strings.Repeat("x", rng.IntN(1100)) + `"}`)
			}
			e = fsm.NewCustomEvent(eid, id, fmt.Sprintf("x.acme.T%d", rng.IntN(70)), at, payload)
		}
		if rng.IntN(8) == 0 {
			e.ExpectedVersion, e.HasExpectedVersion = uint64(rng.IntN(i+2)), true
		}
		out = append(out, e)
	}
	return out
}

// corpus returns thousands of sequences: realistic lifecycles with invalid
// and duplicate events mixed in, and arbitrary sequences.
func corpus(t testing.TB) [][]fsm.Event {
	g := workload.New(7, workload.Options{InvalidShare: 0.1, DuplicateShare: 0.1, ForcedCancellations: true})
	seqs := g.Sessions("w", 2000, t0)
	rng := rand.New(rand.NewPCG(7, 7))
	for i := range 1000 {
		seqs = append(seqs, randomEvents(rng, "r-"+string(rune('a'+i%26)), 1+rng.IntN(300)))
	}
	return seqs
}

// TestDeterminism folds every sequence three ways: at once; resuming from a
// decoded snapshot after every event (binary, and JSON for every tenth
// sequence); and again from scratch. All three must give identical bytes and
// the same digest.
func TestDeterminism(t *testing.T) {
	for n, events := range corpus(t) {
		once := fold(events, 100)
		want := once.AppendBinary(nil)

		var resumed snapshot.Snapshot
		var r fsm.Reducer
		for i := range events {
			if _, folded := resumed.Fold(&r, &events[i], snapshot.Position{Offset: int64(100 + i)}); !folded {
				t.Fatalf("sequence %d event %d not folded", n, i)
			}
			var next snapshot.Snapshot
			var b []byte
			if n%10 == 0 {
				var err error
				if b, err = snapshot.EncodeJSON(&resumed); err != nil {
					t.Fatal(err)
				}
			} else {
				b = resumed.AppendBinary(nil)
			}
			if err := snapshot.Decode(b, &next); err != nil {
				t.Fatalf("sequence %d event %d: decode: %v", n, i, err)
			}
			resumed = next
			r = fsm.Reducer{} // a fresh reducer, as after a restart
		}
		again := fold(events, 100)
		if got := resumed.AppendBinary(nil); !bytes.Equal(got, want) {
			t.Fatalf("sequence %d (%s): resumed fold differs from the fold at once\n got %x\nwant %x", n, events[0].SessionID, got, want)
		}
		if got := again.AppendBinary(nil); !bytes.Equal(got, want) {
			t.Fatalf("sequence %d: second fold differs", n)
		}
		if resumed.Digest != once.Digest || again.Digest != once.Digest {
			t.Fatalf("sequence %d: digests differ", n)
		}
		j1, _ := once.MarshalJSON()
		j2, _ := resumed.MarshalJSON()
		if !bytes.Equal(j1, j2) {
			t.Fatalf("sequence %d: JSON differs", n)
		}
	}
}

func TestCodecRoundTrip(t *testing.T) {
	for n, events := range corpus(t)[:500] {
		s := fold(events, int64(n)*1000)
		s.Position.Partition = int32(n % 12)
		bin := s.AppendBinary(nil)
		js, err := snapshot.EncodeJSON(s)
		if err != nil {
			t.Fatal(err)
		}
		for name, b := range map[string][]byte{"binary": bin, "json": js} {
			var got snapshot.Snapshot
			if err := snapshot.Decode(b, &got); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if !bytes.Equal(got.AppendBinary(nil), bin) {
				t.Fatalf("%s: round trip of sequence %d differs", name, n)
			}
		}
	}
}

// TestAPIShape checks the JSON served by the query API against the field
// list of docs/lifecycle.md ("The snapshot").
func TestAPIShape(t *testing.T) {
	b := &builderEvents{}
	b.add(fsm.SessionCreated, fsm.Fields{Goal: "fix it", PredecessorSessionID: "s-0"})
	b.add(fsm.ReplacementLinked, fsm.Fields{PredecessorDigest: [32]byte{1}})
	b.add(fsm.SessionStarted, fsm.Fields{})
	b.add(fsm.ApprovalRequested, fsm.Fields{RequestID: "deploy-1", Reason: "deploy"})
	b.add(fsm.RecoveryStarted, fsm.Fields{})
	b.add(fsm.SessionResumed, fsm.Fields{}) // rejected
	b.add(fsm.SessionFailed, fsm.Fields{Reason: "boom", Category: "provider", Code: "http.503", Retryable: true})
	s := fold(b.events, 1100)
	s.Position.Partition = 3
	raw, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	want := []string{"annotations", "approval", "cancellation", "correlationId", "counters", "createdAt", "deadline", "digest", "durationsMs", "executionMs",
		"failure", "firstOffset", "goal", "labels", "lastEventId", "metadata", "parentClosePolicy", "parentSessionId",
		"position", "predecessorSessionId", "recovery", "rejections", "replacement", "sessionId", "state",
		"stateEnteredAt", "successorSessionId", "terminal", "timeouts", "transitions", "updatedAt", "version"}
	if got := keysOf(m); !reflect.DeepEqual(got, want) {
		t.Fatalf("top-level fields\n got %v\nwant %v", got, want)
	}
	wantCounters := []string{"approvalsDenied", "approvalsGranted", "approvalsRequested", "custom", "duplicates", "events",
		"modelTurns", "pauses", "recoveries", "rejected", "repairCycles", "supersededTimeouts", "toolCalls", "toolFailures"}
	if got := keysOf(m["counters"].(map[string]any)); !reflect.DeepEqual(got, wantCounters) {
		t.Fatalf("counters\n got %v\nwant %v", got, wantCounters)
	}
	checks := map[string]any{
		"state": "FAILED", "terminal": true, "goal": "fix it", "predecessorSessionId": "s-0", "version": 6.0,
		"firstOffset": 1100.0, "executionMs": 1250.0, // CREATED 500, ACTIVE 250, RECOVERING 500 "correlationId": "s-1",
	}
	for k, v := range checks {
		if m[k] != v {
			t.Errorf("%s: got %v, want %v", k, m[k], v)
		}
	}
	if pos := m["position"].(map[string]any); pos["partition"] != 3.0 || pos["offset"] != 1106.0 {
		t.Errorf("position %v", pos)
	}
	if f := m["failure"].(map[string]any); f["reason"] != "boom" || f["from"] != "RECOVERING" || f["category"] != "provider" ||
		f["code"] != "http.503" || f["retryable"] != true {
		t.Errorf("failure %v", f)
	}
	if r := m["rejections"].([]any)[0].(map[string]any); r["reason"] != "invalid_transition" || r["state"] != "RECOVERING" {
		t.Errorf("rejection %v", r)
	}
	if a := m["approval"].(map[string]any); a["pendingSince"] != nil || a["pending"] != nil || a["waitedMs"] != 750.0 {
		t.Errorf("approval %v (want the wait closed by the failure after 750ms)", a)
	}
	ds := m["approval"].(map[string]any)["decisions"].([]any)
	if d := ds[0].(map[string]any); len(ds) != 1 || d["requestId"] != "deploy-1" || d["decision"] != "cancelled" || d["waitedMs"] != 750.0 {
		t.Errorf("decisions %v, want deploy-1 cancelled after 750ms", ds)
	}
	if _, ok := ds[0].(map[string]any)["by"]; ok {
		t.Errorf("a cancelled decision has by: %v", ds[0])
	}
	if _, ok := m["internal"]; ok {
		t.Error("the API form exposes internal state")
	}
	if m["createdAt"] != "2026-11-29T06:00:00.25Z" {
		t.Errorf("createdAt %v", m["createdAt"])
	}
}

type builderEvents struct {
	events []fsm.Event
	at     time.Time
}

func (b *builderEvents) add(t fsm.EventType, f fsm.Fields) {
	if b.at.IsZero() {
		b.at = t0
	}
	b.at = b.at.Add(250 * time.Millisecond)
	b.events = append(b.events, fsm.NewEvent(fsm.EventID{byte(len(b.events) + 1)}, "s-1", t, b.at, f))
}

func keysOf(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestDecodeCorrupt(t *testing.T) {
	good := fold(corpus(t)[3], 0).AppendBinary(nil)
	cases := map[string][]byte{
		"empty":          nil,
		"short":          good[:5],
		"future version": append([]byte{9}, good[1:]...),
		"bad state":      append(append(append([]byte{}, good[:13]...), 77), good[14:]...),
		"truncated body": good[:len(good)-3],
		"trailing bytes": append(append([]byte{}, good...), 0),
		"bad json":       []byte(`{"state":"ACTIVE","nope":1}`),
	}
	for name, b := range cases {
		var s snapshot.Snapshot
		if err := snapshot.Decode(b, &s); !errors.Is(err, snapshot.ErrCorrupt) {
			t.Errorf("%s: got %v, want ErrCorrupt", name, err)
		}
	}
}

// FuzzDecode feeds arbitrary bytes to the snapshot decoder. Invariants: no
// panic; an error always wraps ErrCorrupt; whatever decodes re-encodes to
// bytes that decode to the same snapshot; DecodeHead never panics, its
// errors wrap ErrCorrupt, and it reads the id and position Decode reads.
func FuzzDecode(f *testing.F) {
	for _, events := range corpus(f)[:20] {
		f.Add(fold(events, 5).AppendBinary(nil))
	}
	js, _ := snapshot.EncodeJSON(fold(corpus(f)[1], 0))
	f.Add(js)
	f.Fuzz(func(t *testing.T, b []byte) {
		id, pos, herr := snapshot.DecodeHead(b)
		if herr != nil && !errors.Is(herr, snapshot.ErrCorrupt) {
			t.Fatalf("DecodeHead: error %v does not wrap ErrCorrupt", herr)
		}
		var s snapshot.Snapshot
		if err := snapshot.Decode(b, &s); err != nil {
			if !errors.Is(err, snapshot.ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		if herr != nil || id != s.ID || pos != s.Position {
			t.Fatalf("DecodeHead read %q at %v (%v), Decode %q at %v", id, pos, herr, s.ID, s.Position)
		}
		enc := s.AppendBinary(nil)
		var again snapshot.Snapshot
		if err := snapshot.Decode(enc, &again); err != nil {
			t.Fatalf("re-encoded snapshot does not decode: %v", err)
		}
		if !bytes.Equal(again.AppendBinary(nil), enc) {
			t.Fatal("re-encoding is not stable")
		}
	})
}

func TestParsePosition(t *testing.T) {
	if p, err := snapshot.ParsePosition("3:1234"); err != nil || p != (snapshot.Position{Partition: 3, Offset: 1234}) {
		t.Fatalf("got %v %v", p, err)
	}
	for _, bad := range []string{"", "3", "3:", ":4", "-1:2", "1:-2", "a:b", "1:2:3", "99999999999:1"} {
		if _, err := snapshot.ParsePosition(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestOnePosition: the store's, the feed's and the client's positions are
// one type with one parser, pkg/wire's.
func TestOnePosition(t *testing.T) {
	var p wire.Position = snapshot.Position{Partition: 1, Offset: 2}
	var _ feed.Position = p
	if _, err := snapshot.ParsePosition("1:x"); !errors.Is(err, wire.ErrBadPosition) {
		t.Fatalf("ParsePosition(%q): %v, want wire.ErrBadPosition", "1:x", err)
	}
}

func TestFoldSkipsWhatIsReflected(t *testing.T) {
	events := corpus(t)[0]
	s := fold(events, 10)
	before := s.AppendBinary(nil)
	var r fsm.Reducer
	for i := range events { // a replay of the same records
		if _, folded := s.Fold(&r, &events[i], snapshot.Position{Offset: 10 + int64(i)}); folded {
			t.Fatalf("record %d folded twice", i)
		}
	}
	if !bytes.Equal(s.AppendBinary(nil), before) {
		t.Fatal("a replay changed the snapshot")
	}
	// An orphan neither creates a snapshot nor moves a position.
	var empty snapshot.Snapshot
	e := fsm.NewEvent(fsm.EventID{9}, "nobody", fsm.SessionPaused, t0, fsm.Fields{})
	if o, folded := empty.Fold(&r, &e, snapshot.Position{Offset: 5}); !folded || o.Result != fsm.Orphan || empty.Exists() || empty.Position.Offset != 0 {
		t.Fatalf("orphan: %+v %v %+v", o, folded, empty.Position)
	}
	if s.FirstOffset != 10 {
		t.Fatalf("firstOffset %d, want 10", s.FirstOffset)
	}
}
