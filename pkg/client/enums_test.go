package client_test

import (
	"slices"
	"testing"

	"github.com/correx/sessions/pkg/client"
	"github.com/correx/sessions/pkg/fsm"
)

// TestSpellingsMatchFSM: the client's constants spell the event types,
// timeout kinds, cancellation modes and close policies exactly as pkg/fsm
// names them, every one of them and in the same order, so a type or kind
// added to the fold without its constant here fails.
func TestSpellingsMatchFSM(t *testing.T) {
	types := []string{client.TypeSessionCreated, client.TypeSessionInitializing, client.TypeSessionStarted,
		client.TypeSessionPaused, client.TypeSessionResumed, client.TypeApprovalRequested, client.TypeApprovalGranted,
		client.TypeApprovalDenied, client.TypeCancellationRequested, client.TypeSessionCancelled,
		client.TypeSessionCompleted, client.TypeSessionFailed, client.TypeRecoveryStarted, client.TypeRecoveryCompleted,
		client.TypeTimeoutExpired, client.TypeModelRequested, client.TypeToolRequested, client.TypeToolCompleted,
		client.TypeRepairStarted}
	if want := names(fsm.EventTypes()); !slices.Equal(types, want) {
		t.Errorf("client event types %v, fsm.EventTypes %v", types, want)
	}
	kinds := []string{string(client.TimeoutExecution), string(client.TimeoutInactivity), string(client.TimeoutApproval),
		string(client.TimeoutRecovery), string(client.TimeoutCancellation)}
	if want := names(fsm.TimeoutKinds()); !slices.Equal(kinds, want) {
		t.Errorf("client timeout kinds %v, fsm.TimeoutKinds %v", kinds, want)
	}
	if got, want := []string{string(client.Graceful), string(client.Forced)},
		names([]fsm.CancelMode{fsm.CancelGraceful, fsm.CancelForced}); !slices.Equal(got, want) {
		t.Errorf("client cancel modes %v, fsm %v", got, want)
	}
	if got, want := []string{string(client.ParentCloseCancel), string(client.ParentCloseAbandon)},
		names([]fsm.ParentClosePolicy{fsm.ParentCloseCancel, fsm.ParentCloseAbandon}); !slices.Equal(got, want) {
		t.Errorf("client close policies %v, fsm %v", got, want)
	}
}

func names[T interface{ String() string }](vs []T) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.String()
	}
	return out
}
