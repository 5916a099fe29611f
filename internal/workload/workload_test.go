package workload

import (
	"testing"
	"time"

	"github.com/correx/sessions/pkg/fsm"
)

// TestSessionsShowTheStructuredRules checks that generated sessions, folded,
// include approvals decided on their own request id and structured
// failures, so that the demo and the loads exercise them; and that their
// cancellations are graceful (see Generator: a forced one would end by the
// projector's clock, which the verifying fold cannot foresee).
func TestSessionsShowTheStructuredRules(t *testing.T) {
	g := New(1, Options{Structured: true})
	var matched, categorised, forced int
	for _, evs := range g.Sessions("w", 400, time.Unix(0, 0)) {
		var s fsm.Session
		var r fsm.Reducer
		for i := range evs {
			o := r.Apply(&s, &evs[i])
			if evs[i].Type == fsm.ApprovalGranted && o.Result == fsm.Applied && evs[i].Fields.HasRequestID {
				matched++
			}
		}
		if s.Failure.Failed && s.Failure.Category != fsm.FailureUnknown && s.Failure.Code != "" {
			categorised++
		}
		if s.Cancellation.Mode == fsm.CancelForced {
			forced++
		}
	}
	if matched == 0 || categorised == 0 || forced != 0 {
		t.Fatalf("granted on a request id %d, failures with category and code %d: want each > 0; forced cancellations %d: want 0",
			matched, categorised, forced)
	}
}
