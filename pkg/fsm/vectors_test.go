package fsm_test

import (
	"encoding/json"
	"os"
	"reflect"
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
		"duplicates": c.Duplicates,
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
func TestConformanceVectors(t *testing.T) {
	raw, err := os.ReadFile("../../testdata/lifecycle.json")
	if err != nil {
		t.Fatal(err)
	}
	var vf vectorFile
	if err := json.Unmarshal(raw, &vf); err != nil {
		t.Fatal(err)
	}
	if len(vf.Vectors) != 39 {
		t.Fatalf("got %d vectors, want 39", len(vf.Vectors))
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
		})
	}
}
