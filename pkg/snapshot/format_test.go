package snapshot_test

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/correx/sessions/internal/workload"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
)

// TestFormatV1StillDecodes reads snapshots stored by the version 1 encoder
// (testdata/format-v1.hex: workload.New(11, 10% invalid, 10% duplicates),
// six sessions "old-N", folded at partition 2 from offset 500) and checks
// that each decodes to exactly the session today's fold gives for the same
// events, but for what the fold keeps since version 3 (withoutV3): same
// digest (the canonical bytes of those events did not change) and the same
// bytes.
func TestFormatV1StillDecodes(t *testing.T) {
	f, err := os.Open("testdata/format-v1.hex")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	g := workload.New(11, workload.Options{InvalidShare: 0.1, DuplicateShare: 0.1, ForcedCancellations: true})
	seqs := g.Sessions("old", 6, time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC))
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	n := 0
	for ; sc.Scan(); n++ {
		old, err := hex.DecodeString(sc.Text())
		if err != nil {
			t.Fatal(err)
		}
		if old[0] != snapshot.FormatBinaryV1 {
			t.Fatalf("fixture %d is format %d", n, old[0])
		}
		var got snapshot.Snapshot
		if err := snapshot.Decode(old, &got); err != nil {
			t.Fatalf("fixture %d: %v", n, err)
		}
		var want snapshot.Snapshot
		var r fsm.Reducer
		for i := range seqs[n] {
			want.Fold(&r, &seqs[n][i], snapshot.Position{Partition: 2, Offset: int64(500 + i)})
		}
		if got.Digest != want.Digest {
			t.Fatalf("fixture %d: digest %x, today's fold %x", n, got.Digest, want.Digest)
		}
		withoutV3(t, &want, got.Cancellation.Forced)
		if !bytes.Equal(got.AppendBinary(nil), want.AppendBinary(nil)) {
			t.Fatalf("fixture %d: decoded v1 snapshot differs from today's fold", n)
		}
		if !bytes.Equal(old[1:14], want.AppendBinary(nil)[1:14]) {
			t.Fatalf("fixture %d: header bytes 1-13 changed", n)
		}
	}
	if n != len(seqs) {
		t.Fatalf("%d fixtures, want %d", n, len(seqs))
	}
}

// withoutV3 clears what the fold keeps since format version 3 (the
// approval decisions, the request's id and reason, the structured failure,
// the escalation) and sets cancellation.forced as the fold of that time
// did (forced, which version 3's fold sets only when the cancellation
// timeout ended the session), so that a session folded today compares with
// one stored before.
func withoutV3(t *testing.T, s *snapshot.Snapshot, forced bool) {
	t.Helper()
	var h fsm.Histories
	for i := range s.NumTransitions() {
		h.Transitions = append(h.Transitions, s.TransitionAt(i))
	}
	for i := range s.NumRejections() {
		h.Rejections = append(h.Rejections, s.RejectionAt(i))
	}
	for i := range s.NumSeenIDs() {
		h.SeenIDs = append(h.SeenIDs, s.SeenIDAt(i))
	}
	for i := range s.NumCustomTypes() {
		h.CustomCounts = append(h.CustomCounts, s.CustomCountAt(i))
	}
	for i := range s.NumAnnotations() {
		h.Annotations = append(h.Annotations, s.AnnotationAt(i))
	}
	if err := s.RestoreHistories(h); err != nil {
		t.Fatal(err)
	}
	s.Approval.RequestID, s.Approval.PendingReason = "", ""
	s.Failure.Category, s.Failure.Code, s.Failure.Retryable = fsm.FailureUnknown, "", false
	s.Cancellation.EscalatedAt = 0
	s.Cancellation.Forced = forced
}

// TestFormatV2StillDecodes reads snapshots stored by the version 2 encoder
// (testdata/format-v2.hex: workload.New(12, 10% invalid, 10% duplicates),
// eight sessions "v2-N", folded at partition 3 from offset 700) and checks
// that each decodes to exactly what that encoder's stored JSON form of the
// same snapshot (testdata/format-v2.jsonl) decodes to: the fields version 3
// added read as absent (failure category unknown, no decisions), and
// re-encoded, it is version 3 and reads back the same. (Today's fold of
// those events differs where the rules of version 3 apply, for example a
// ToolCompleted while PAUSED, so the fixture is compared with its own JSON
// form rather than with a fold.)
func TestFormatV2StillDecodes(t *testing.T) {
	hexes, err := os.ReadFile("testdata/format-v2.hex")
	if err != nil {
		t.Fatal(err)
	}
	jsons, err := os.ReadFile("testdata/format-v2.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	hl := bytes.Split(bytes.TrimSpace(hexes), []byte("\n"))
	jl := bytes.Split(bytes.TrimSpace(jsons), []byte("\n"))
	g := workload.New(12, workload.Options{InvalidShare: 0.1, DuplicateShare: 0.1, ForcedCancellations: true})
	seqs := g.Sessions("v2", 8, time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC))
	if len(hl) != len(seqs) || len(jl) != len(seqs) {
		t.Fatalf("%d binary and %d JSON fixtures, want %d", len(hl), len(jl), len(seqs))
	}
	for n := range seqs {
		old, err := hex.DecodeString(string(hl[n]))
		if err != nil {
			t.Fatal(err)
		}
		if old[0] != snapshot.FormatBinaryV2 {
			t.Fatalf("fixture %d is format %d", n, old[0])
		}
		var got, fromJSON snapshot.Snapshot
		if err := snapshot.Decode(old, &got); err != nil {
			t.Fatalf("fixture %d: %v", n, err)
		}
		if err := snapshot.Decode(jl[n], &fromJSON); err != nil {
			t.Fatalf("fixture %d JSON: %v", n, err)
		}
		if !bytes.Equal(got.AppendBinary(nil), fromJSON.AppendBinary(nil)) {
			t.Fatalf("fixture %d: the binary and JSON forms of version 2 decode differently", n)
		}
		if got.NumDecisions() != 0 || got.Failure.Category != fsm.FailureUnknown {
			t.Fatalf("fixture %d: version 3 fields set from a version 2 snapshot", n)
		}
		if got.ID != seqs[n][0].SessionID || got.FirstOffset != 700 {
			t.Fatalf("fixture %d: %s first offset %d", n, &got, got.FirstOffset)
		}
		now := got.AppendBinary(nil)
		if now[0] != snapshot.FormatBinary || !bytes.Equal(old[1:14], now[1:14]) {
			t.Fatalf("fixture %d: re-encoded header % x, was % x", n, now[:14], old[:14])
		}
		var again snapshot.Snapshot
		if err := snapshot.Decode(now, &again); err != nil || !bytes.Equal(again.AppendBinary(nil), now) {
			t.Fatalf("fixture %d: round trip of today's format: %v", n, err)
		}
	}
}

// TestSecondStageFields checks that every field format version 2 added
// survives the binary and JSON forms and appears in the API form as
// documented.
func TestSecondStageFields(t *testing.T) {
	b := &builderEvents{}
	b.add(fsm.SessionCreated, fsm.Fields{Goal: "g", PredecessorSessionID: "s-0", ParentSessionID: "s-parent",
		ParentClosePolicy: fsm.ParentCloseAbandon, Labels: []fsm.Label{{Key: "team", Value: "core"}, {Key: "env", Value: "prod"}},
		Metadata: []byte(`{"ticket":"<T-1>","n":[1,2]}`), Timeouts: fsm.Timeouts{fsm.TimeoutExecution: 2 * time.Hour}})
	b.add(fsm.ReplacementLinked, fsm.Fields{PredecessorDigest: [32]byte{0xab}})
	b.add(fsm.SessionStarted, fsm.Fields{})
	b.events = append(b.events, fsm.NewCustomEvent(fsm.EventID{0x51}, "s-1", "x.acme.Note", b.at.Add(time.Second), []byte(`{"note":"n"}`)))
	b.add(fsm.TimeoutExpired, fsm.Fields{Timeout: fsm.TimeoutExecution, ArmedVersion: 1, HasArmedVersion: true})
	b.add(fsm.SessionFailed, fsm.Fields{Reason: "boom", Category: "infrastructure"})
	b.events = append(b.events, fsm.NewCustomEvent(fsm.EventID{0x52}, "s-1", "x.acme.Late", b.at.Add(time.Second), nil))
	s := fold(b.events, 10)
	// A successor is not replaced in turn (a SessionReplaced is refused
	// "chain"), so the successor is set by hand to show it in every form.
	s.SuccessorSessionID = "s-2"
	bin := s.AppendBinary(nil)
	if bin[0] != snapshot.FormatBinary {
		t.Fatalf("format %d", bin[0])
	}
	roundTrips(t, s)
	api, err := s.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Labels             map[string]string `json:"labels"`
		Metadata           json.RawMessage   `json:"metadata"`
		ParentSessionID    string            `json:"parentSessionId"`
		ParentClosePolicy  string            `json:"parentClosePolicy"`
		Timeouts           map[string]string `json:"timeouts"`
		SuccessorSessionID string            `json:"successorSessionId"`
		Replacement        map[string]string `json:"replacement"`
		Counters           struct {
			SupersededTimeouts int            `json:"supersededTimeouts"`
			Custom             map[string]int `json:"custom"`
		} `json:"counters"`
		Annotations []map[string]any `json:"annotations"`
		Rejections  []map[string]any `json:"rejections"`
	}
	if err := json.Unmarshal(api, &m); err != nil {
		t.Fatal(err)
	}
	switch {
	case m.Labels["team"] != "core" || m.Labels["env"] != "prod":
		t.Errorf("labels %v", m.Labels)
	case string(m.Metadata) != `{"ticket":"<T-1>","n":[1,2]}`:
		t.Errorf("metadata %s", m.Metadata)
	case m.ParentSessionID != "s-parent" || m.ParentClosePolicy != "abandon":
		t.Errorf("parent %q %q", m.ParentSessionID, m.ParentClosePolicy)
	case m.Timeouts["execution"] != "2h0m0s" || len(m.Timeouts) != 1:
		t.Errorf("timeouts %v", m.Timeouts)
	case m.SuccessorSessionID != "s-2":
		t.Errorf("successor %q", m.SuccessorSessionID)
	case m.Replacement["status"] != "linked" || m.Replacement["predecessorSessionId"] != "s-0" || m.Replacement["predecessorDigest"][:2] != "ab":
		t.Errorf("replacement %v", m.Replacement)
	case m.Counters.SupersededTimeouts != 1 || m.Counters.Custom["x.acme.Note"] != 1 || len(m.Counters.Custom) != 1:
		t.Errorf("counters %+v", m.Counters)
	case len(m.Annotations) != 1 || m.Annotations[0]["type"] != "x.acme.Note" || m.Annotations[0]["payload"].(map[string]any)["note"] != "n":
		t.Errorf("annotations %v", m.Annotations)
	case len(m.Rejections) != 1 || m.Rejections[0]["type"] != "x.acme.Late" || m.Rejections[0]["reason"] != "after_terminal":
		t.Errorf("rejections %v", m.Rejections)
	}
}

// TestFormatV3StillDecodes reads snapshots stored by the version 3 encoder
// (testdata/format-v3.hex: workload.New(13, 10% invalid, 10% duplicates,
// forced cancellations), eight sessions "v3-N", folded at partition 4 from
// offset 900) and checks that each decodes to exactly the session today's
// fold gives for the same events (those events carry no sender, which is
// all version 4 added), and that re-encoded, it is version 4 with the same
// header and reads back the same.
func TestFormatV3StillDecodes(t *testing.T) {
	hexes, err := os.ReadFile("testdata/format-v3.hex")
	if err != nil {
		t.Fatal(err)
	}
	hl := bytes.Split(bytes.TrimSpace(hexes), []byte("\n"))
	g := workload.New(13, workload.Options{InvalidShare: 0.1, DuplicateShare: 0.1, ForcedCancellations: true})
	seqs := g.Sessions("v3", 8, time.Date(2026, 12, 4, 6, 0, 0, 0, time.UTC))
	if len(hl) != len(seqs) {
		t.Fatalf("%d fixtures, want %d", len(hl), len(seqs))
	}
	decisions := 0
	for n := range seqs {
		old, err := hex.DecodeString(string(hl[n]))
		if err != nil {
			t.Fatal(err)
		}
		if old[0] != snapshot.FormatBinaryV3 {
			t.Fatalf("fixture %d is format %d", n, old[0])
		}
		var got snapshot.Snapshot
		if err := snapshot.Decode(old, &got); err != nil {
			t.Fatalf("fixture %d: %v", n, err)
		}
		var want snapshot.Snapshot
		var r fsm.Reducer
		for i := range seqs[n] {
			want.Fold(&r, &seqs[n][i], snapshot.Position{Partition: 4, Offset: int64(900 + i)})
		}
		now := got.AppendBinary(nil)
		if !bytes.Equal(now, want.AppendBinary(nil)) {
			t.Fatalf("fixture %d: decoded v3 snapshot differs from today's fold", n)
		}
		for i := range got.NumDecisions() {
			if d := got.DecisionAt(i); d.SentBy != "" {
				t.Fatalf("fixture %d: decision %d has a sender %q read from version 3", n, i, d.SentBy)
			}
			decisions++
		}
		if now[0] != snapshot.FormatBinaryV4 || !bytes.Equal(old[1:14], now[1:14]) {
			t.Fatalf("fixture %d: re-encoded header % x, was % x", n, now[:14], old[:14])
		}
		var again snapshot.Snapshot
		if err := snapshot.Decode(now, &again); err != nil || !bytes.Equal(again.AppendBinary(nil), now) {
			t.Fatalf("fixture %d: version 4 round trip: %v", n, err)
		}
	}
	if decisions == 0 {
		t.Fatal("no fixture holds a decision: the fixture does not exercise what version 4 changed")
	}
}

// TestDecisionSender checks that a decision's sender (the token that sent
// it through ingest) is kept beside its "by" in the binary and JSON forms
// and shown in the API form.
func TestDecisionSender(t *testing.T) {
	b := &builderEvents{}
	b.add(fsm.SessionCreated, fsm.Fields{Goal: "g"})
	b.add(fsm.SessionStarted, fsm.Fields{})
	b.add(fsm.ApprovalRequested, fsm.Fields{RequestID: "r-1", HasRequestID: true})
	b.add(fsm.ApprovalGranted, fsm.Fields{RequestID: "r-1", HasRequestID: true, By: "alice"})
	b.events[len(b.events)-1].SentBy = "ops-bot"
	b.add(fsm.ApprovalRequested, fsm.Fields{RequestID: "r-2", HasRequestID: true})
	b.add(fsm.ApprovalDenied, fsm.Fields{RequestID: "r-2", HasRequestID: true, By: "bob"})
	s := fold(b.events, 10)
	if s.NumDecisions() != 2 {
		t.Fatalf("%d decisions, want 2", s.NumDecisions())
	}
	if d := s.DecisionAt(0); d.By != "alice" || d.SentBy != "ops-bot" {
		t.Fatalf("first decision by %q sent by %q, want alice and ops-bot", d.By, d.SentBy)
	}
	if d := s.DecisionAt(1); d.By != "bob" || d.SentBy != "" {
		t.Fatalf("second decision by %q sent by %q, want bob and none", d.By, d.SentBy)
	}
	roundTrips(t, s)
	w, err := s.Wire()
	if err != nil {
		t.Fatal(err)
	}
	api, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(api, []byte(`"by":"alice","sentBy":"ops-bot"`)) || bytes.Count(api, []byte(`"sentBy"`)) != 1 {
		t.Fatalf("API form: %s", api)
	}
}

// roundTrips checks that s reads back the same from its binary and its
// stored JSON forms (the same binary bytes).
func roundTrips(t *testing.T, s *snapshot.Snapshot) {
	t.Helper()
	bin := s.AppendBinary(nil)
	js, err := snapshot.EncodeJSON(s)
	if err != nil {
		t.Fatal(err)
	}
	for name, enc := range map[string][]byte{"binary": bin, "json": js} {
		var got snapshot.Snapshot
		if err := snapshot.Decode(enc, &got); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(got.AppendBinary(nil), bin) {
			t.Fatalf("%s: round trip differs", name)
		}
	}
}
