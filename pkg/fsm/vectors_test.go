package fsm_test

import (
	"encoding/hex"
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/correx/sessions/pkg/fsm"
)

type vectorFile struct {
	Vectors []struct {
		Name   string            `json:"name"`
		Events []json.RawMessage `json:"events"`
		Expect struct {
			Exists             bool             `json:"exists"`
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
func TestConformanceVectors(t *testing.T) { foldVectors(t, "../../testdata/lifecycle.json", 39) }

// TestConformanceVectors2 folds the vectors of lifecycle-2.json (superseded
// timeouts, custom event types, expected versions).
func TestConformanceVectors2(t *testing.T) { foldVectors(t, "../../testdata/lifecycle-2.json", 14) }

// TestLocalVectors folds this project's own vectors for the rules of
// docs/lifecycle.md the shared files leave out (labels and the other
// SessionCreated additions, the replacement events).
func TestLocalVectors(t *testing.T) { foldVectors(t, "../../testdata/lifecycle-local.json", -1) }

func foldVectors(t *testing.T, path string, count int) {
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
	for _, v := range vf.Vectors {
		t.Run(v.Name, func(t *testing.T) {
			var s fsm.Session
			var r fsm.Reducer
			for _, ev := range v.Events {
				e := decodeVectorEvent(t, ev, "s-vector")
				r.Apply(&s, &e)
			}
			want := v.Expect
			if got := s.Exists(); got != want.Exists {
				t.Fatalf("exists: got %v, want %v", got, want.Exists)
			}
			if want.Exists && s.State.String() != want.State {
				t.Errorf("state: got %s, want %s", s.State, want.State)
			}
			if s.Terminal() != want.Terminal {
				t.Errorf("terminal: got %v, want %v", s.Terminal(), want.Terminal)
			}
			if s.Version != want.Version {
				t.Errorf("version: got %d, want %d", s.Version, want.Version)
			}
			if got := counterMap(s.Counters); !reflect.DeepEqual(got, want.Counters) {
				t.Errorf("counters: got %v, want %v", got, want.Counters)
			}
			var reasons []string
			for i := range s.NumRejections() {
				reasons = append(reasons, s.RejectionAt(i).Reason.String())
			}
			if len(reasons) != len(want.RejectionReasons) || (len(reasons) > 0 && !reflect.DeepEqual(reasons, want.RejectionReasons)) {
				t.Errorf("rejections: got %v, want %v", reasons, want.RejectionReasons)
			}
			var trs [][3]string
			for i := range s.NumTransitions() {
				tr := s.TransitionAt(i)
				trs = append(trs, [3]string{tr.From.String(), tr.To.String(), tr.Type.String()})
			}
			if len(trs) != len(want.Transitions) || (len(trs) > 0 && !reflect.DeepEqual(trs, want.Transitions)) {
				t.Errorf("transitions: got %v, want %v", trs, want.Transitions)
			}
			durs := map[string]int64{}
			for _, st := range fsm.States() {
				if d := s.Durations[st]; d != 0 {
					durs[st.String()] = d / int64(time.Millisecond)
				}
			}
			if !reflect.DeepEqual(durs, want.DurationsMs) {
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
			checkVector2(t, &s, want.CustomCounters, want.AnnotationsKept)
			checkLocal(t, &s, want.Labels, want.ParentSessionID, want.ParentClosePolicy, want.Metadata,
				want.Timeouts, want.SuccessorSessionID, want.ReplacementStatus, want.PredecessorDigest)
		})
	}
}

// checkVector2 checks the fields of lifecycle-2.json: the custom counters
// (always; a vector without customCounters expects none) and the number of
// annotations kept.
func checkVector2(t *testing.T, s *fsm.Session, custom map[string]int, annotations *int) {
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
