package fsm_test

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
)

type vectorFile struct {
	Vectors []struct {
		Name   string            `json:"name"`
		Events []json.RawMessage `json:"events"`
		Expect struct {
			Exists             *bool            `json:"exists"` // absent: true
			State              string           `json:"state"`
			Terminal           bool             `json:"terminal"`
			Version            uint64           `json:"version"`
			Counters           map[string]int   `json:"counters"`
			RejectionReasons   []string         `json:"rejectionReasons"`
			Transitions        [][3]string      `json:"transitions"`
			DurationsMs        map[string]int64 `json:"durationsMs"`
			ApprovalWaitedMs   *int64           `json:"approvalWaitedMs"`
			FailureReason      *string          `json:"failureReason"`
			CancellationForced *bool            `json:"cancellationForced"`
			// lifecycle-2.json (superseded timeouts, custom types, expected versions)
			CustomCounters  map[string]int `json:"customCounters"`
			AnnotationsKept *int           `json:"annotationsKept"`
			// lifecycle-local.json: the rules of the SessionCreated additions
			// and of replacements and children that the shared file does not
			// cover.
			Labels             map[string]string `json:"labels"`
			ParentSessionID    *string           `json:"parentSessionId"`
			ParentClosePolicy  *string           `json:"parentClosePolicy"`
			Metadata           *string           `json:"metadata"`
			Timeouts           map[string]string `json:"timeouts"`
			SuccessorSessionID *string           `json:"successorSessionId"`
			ReplacementStatus  *string           `json:"replacementStatus"`
			PredecessorDigest  *string           `json:"predecessorDigest"`
		} `json:"expect"`
	} `json:"vectors"`
}

// counterMap returns the non-zero counters by their JSON names.
func counterMap(c fsm.Counters) map[string]int {
	all := map[string]uint64{
		"events": c.Events, "modelTurns": c.ModelTurns, "toolCalls": c.ToolCalls,
		"toolFailures": c.ToolFailures, "repairCycles": c.RepairCycles, "pauses": c.Pauses,
		"approvalsRequested": c.ApprovalsRequested, "approvalsGranted": c.ApprovalsGranted,
		"approvalsDenied": c.ApprovalsDenied, "recoveries": c.Recoveries, "rejected": c.Rejected,
		"duplicates": c.Duplicates, "supersededTimeouts": c.SupersededTimeouts,
	}
	out := map[string]int{}
	for k, v := range all {
		if v != 0 {
			out[k] = int(v)
		}
	}
	return out
}

// decodeVectorEvent turns a vector event (which has no sessionId) into a
// record value for session id and decodes it, so the vectors exercise the
// record decoder as well as the reducer.
func decodeVectorEvent(t *testing.T, raw json.RawMessage, id string) fsm.Event {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	m["sessionId"] = id
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var e fsm.Event
	if err := fsm.DecodeRecord(b, &e); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return e
}

// TestConformanceVectors folds every vector of testdata/lifecycle.json and
// checks each snapshot field the vector fixes.
func TestConformanceVectors(t *testing.T) { foldVectors(t, "../../testdata/lifecycle.json", 39, false) }

// TestConformanceVectors2 folds the vectors of lifecycle-2.json (superseded
// timeouts, custom event types, expected versions).
func TestConformanceVectors2(t *testing.T) {
	foldVectors(t, "../../testdata/lifecycle-2.json", 14, false)
}

// TestConformanceVectors3 folds the vectors of lifecycle-3.json
// (structured failures, replacement eligibility, the execution budget,
// forced cancellation and escalation, approvals that match their request,
// work in flight).
func TestConformanceVectors3(t *testing.T) {
	foldVectors(t, "../../testdata/lifecycle-3.json", 32, true)
}

// TestLocalVectors folds this project's own vectors for the rules of
// docs/lifecycle.md the shared files leave out (labels and the other
// SessionCreated additions, the replacement events).
func TestLocalVectors(t *testing.T) { foldVectors(t, "../../testdata/lifecycle-local.json", -1, false) }

// foldVectors folds the vectors of path (count of them, unless -1). With
// partial, as lifecycle-3.json says of itself, only the members an expect
// names are compared; otherwise an absent member is compared as empty.
func foldVectors(t *testing.T, path string, count int, partial bool) {
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var vf vectorFile
	if err := json.Unmarshal(raw, &vf); err != nil {
		t.Fatal(err)
	}
	if count >= 0 && len(vf.Vectors) != count {
		t.Fatalf("got %d vectors, want %d", len(vf.Vectors), count)
	}
	if len(vf.Vectors) == 0 {
		t.Fatal("no vectors")
	}
	var members struct {
		Vectors []struct {
			Expect map[string]json.RawMessage `json:"expect"`
		} `json:"vectors"`
	}
	if err := json.Unmarshal(raw, &members); err != nil {
		t.Fatal(err)
	}
	for vi, v := range vf.Vectors {
		t.Run(v.Name, func(t *testing.T) {
			var s fsm.Session
			var r fsm.Reducer
			for _, ev := range v.Events {
				e := decodeVectorEvent(t, ev, "s-vector")
				r.Apply(&s, &e)
			}
			want := v.Expect
			named := func(name string) bool {
				_, ok := members.Vectors[vi].Expect[name]
				return !partial || ok
			}
			exists := want.Exists == nil || *want.Exists
			if got := s.Exists(); got != exists {
				t.Fatalf("exists: got %v, want %v", got, exists)
			}
			if exists && s.State.String() != want.State {
				t.Errorf("state: got %s, want %s", s.State, want.State)
			}
			if named("terminal") && s.Terminal() != want.Terminal {
				t.Errorf("terminal: got %v, want %v", s.Terminal(), want.Terminal)
			}
			if named("version") && s.Version != want.Version {
				t.Errorf("version: got %d, want %d", s.Version, want.Version)
			}
			if got := counterMap(s.Counters); named("counters") && !reflect.DeepEqual(got, want.Counters) {
				t.Errorf("counters: got %v, want %v", got, want.Counters)
			}
			var reasons []string
			for i := range s.NumRejections() {
				reasons = append(reasons, s.RejectionAt(i).Reason.String())
			}
			if named("rejectionReasons") && (len(reasons) != len(want.RejectionReasons) || (len(reasons) > 0 && !reflect.DeepEqual(reasons, want.RejectionReasons))) {
				t.Errorf("rejections: got %v, want %v", reasons, want.RejectionReasons)
			}
			var trs [][3]string
			for i := range s.NumTransitions() {
				tr := s.TransitionAt(i)
				trs = append(trs, [3]string{tr.From.String(), tr.To.String(), tr.Type.String()})
			}
			if named("transitions") && (len(trs) != len(want.Transitions) || (len(trs) > 0 && !reflect.DeepEqual(trs, want.Transitions))) {
				t.Errorf("transitions: got %v, want %v", trs, want.Transitions)
			}
			durs := map[string]int64{}
			for _, st := range fsm.States() {
				if d := s.Durations[st]; d != 0 {
					durs[st.String()] = d / int64(time.Millisecond)
				}
			}
			if named("durationsMs") && !reflect.DeepEqual(durs, want.DurationsMs) {
				t.Errorf("durationsMs: got %v, want %v", durs, want.DurationsMs)
			}
			if want.ApprovalWaitedMs != nil {
				if got := s.Approval.Waited / int64(time.Millisecond); got != *want.ApprovalWaitedMs {
					t.Errorf("approval waitedMs: got %d, want %d", got, *want.ApprovalWaitedMs)
				}
			}
			if want.FailureReason != nil && (!s.Failure.Failed || s.Failure.Reason != *want.FailureReason) {
				t.Errorf("failure: got %+v, want reason %q", s.Failure, *want.FailureReason)
			}
			if want.CancellationForced != nil && s.Cancellation.Forced != *want.CancellationForced {
				t.Errorf("cancellation forced: got %v, want %v", s.Cancellation.Forced, *want.CancellationForced)
			}
			if named("customCounters") || named("annotationsKept") {
				checkVector2(t, &s, want.CustomCounters, want.AnnotationsKept, partial)
			}
			checkLocal(t, &s, want.Labels, want.ParentSessionID, want.ParentClosePolicy, want.Metadata,
				want.Timeouts, want.SuccessorSessionID, want.ReplacementStatus, want.PredecessorDigest)
			if exists {
				checkAPIMembers(t, &s, members.Vectors[vi].Expect)
			}
		})
	}
}

// checkVector2 checks the fields of lifecycle-2.json: the custom counters
// (always; a vector without customCounters expects none) and the number of
// annotations kept.
func checkVector2(t *testing.T, s *fsm.Session, custom map[string]int, annotations *int, partial bool) {
	t.Helper()
	got := map[string]int{}
	for i := range s.NumCustomTypes() {
		c := s.CustomCountAt(i)
		got[c.Type] = int(c.Count)
	}
	if custom == nil {
		custom = map[string]int{}
	}
	if !reflect.DeepEqual(got, custom) {
		t.Errorf("customCounters: got %v, want %v", got, custom)
	}
	if partial && annotations == nil {
		return
	}
	n := 0
	if annotations != nil {
		n = *annotations
	}
	if s.NumAnnotations() != n {
		t.Errorf("annotationsKept: got %d, want %d", s.NumAnnotations(), n)
	}
}

// checkLocal checks the fields of lifecycle-local.json that a vector fixes.
func checkLocal(t *testing.T, s *fsm.Session, labels map[string]string, parent, policy, metadata *string,
	timeouts map[string]string, successor, status, digest *string) {
	t.Helper()
	if labels != nil {
		got := map[string]string{}
		var keys []string
		for _, l := range s.Labels {
			got[l.Key] = l.Value
			keys = append(keys, l.Key)
		}
		if !reflect.DeepEqual(got, labels) {
			t.Errorf("labels: got %v, want %v", got, labels)
		}
		if !slices.IsSorted(keys) {
			t.Errorf("labels not sorted by key: %v", keys)
		}
	}
	str := func(name, got string, want *string) {
		if want != nil && got != *want {
			t.Errorf("%s: got %q, want %q", name, got, *want)
		}
	}
	str("parentSessionId", s.ParentSessionID, parent)
	str("parentClosePolicy", s.ParentClosePolicy.String(), policy)
	str("metadata", s.Metadata, metadata)
	str("successorSessionId", s.SuccessorSessionID, successor)
	str("replacement.status", s.Replacement.Status.String(), status)
	str("replacement.predecessorDigest", hex.EncodeToString(s.Replacement.PredecessorDigest[:]), digest)
	if timeouts != nil {
		got := map[string]string{}
		for k, d := range s.Timeouts {
			if d != 0 {
				got[fsm.TimeoutKind(k).String()] = d.String()
			}
		}
		if !reflect.DeepEqual(got, timeouts) {
			t.Errorf("timeouts: got %v, want %v", got, timeouts)
		}
	}
}

// apiMembers are the members of an expect compared with the snapshot as
// the query API serves it (lifecycle-3.json).
// successorSessionId is among them where it is null; lifecycle-local.json
// spells "no successor" "" (checkLocal).
var apiMembers = []string{"goal", "successorSessionId", "replacement", "failure", "approval", "cancellation", "executionMs"}

// checkAPIMembers compares the API members an expect names with the
// snapshot's JSON form: an object compares only the members it names, an
// array its length and then each element, null matches null or absent,
// and times compare as instants.
func checkAPIMembers(t *testing.T, s *fsm.Session, expect map[string]json.RawMessage) {
	t.Helper()
	api, err := (&snapshot.Snapshot{Session: *s}).MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(api, &got); err != nil {
		t.Fatal(err)
	}
	for _, name := range apiMembers {
		raw, ok := expect[name]
		if !ok || name == "successorSessionId" && string(raw) != "null" {
			continue
		}
		var want any
		if err := json.Unmarshal(raw, &want); err != nil {
			t.Fatal(err)
		}
		if msg := compareMember(want, got[name]); msg != "" {
			t.Errorf("%s: %s\n  got %s", name, msg, jsonText(got[name]))
		}
	}
}

func compareMember(want, got any) string {
	switch w := want.(type) {
	case nil:
		if got != nil {
			return fmt.Sprintf("want null, got %v", jsonText(got))
		}
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Sprintf("want an object, got %v", jsonText(got))
		}
		keys := make([]string, 0, len(w))
		for k := range w {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if msg := compareMember(w[k], g[k]); msg != "" {
				return k + ": " + msg
			}
		}
	case []any:
		g, ok := got.([]any)
		if !ok && got != nil {
			return fmt.Sprintf("want an array, got %v", jsonText(got))
		}
		if len(g) != len(w) {
			return fmt.Sprintf("want %d elements, got %d", len(w), len(g))
		}
		for i := range w {
			if msg := compareMember(w[i], g[i]); msg != "" {
				return fmt.Sprintf("[%d]: %s", i, msg)
			}
		}
	case string:
		g, ok := got.(string)
		if ok && g == w {
			return ""
		}
		wt, err1 := time.Parse(time.RFC3339Nano, w)
		gt, err2 := time.Parse(time.RFC3339Nano, g)
		if !ok || err1 != nil || err2 != nil || !wt.Equal(gt) {
			return fmt.Sprintf("want %q, got %v", w, jsonText(got))
		}
	default:
		if !reflect.DeepEqual(want, got) {
			return fmt.Sprintf("want %v, got %v", jsonText(want), jsonText(got))
		}
	}
	return ""
}

func jsonText(v any) string { return string(mustJSON(v)) }
