package ingest

import (
	"fmt"
	"testing"

	"github.com/correx/sessions/pkg/fsm"
)

// TestNamespaceCoversParent checks that a tenant's token cannot name
// another tenant's session as parentSessionId, as for predecessorSessionId.
func TestNamespaceCoversParent(t *testing.T) {
	events := []fsm.Event{
		{SessionID: "acme:1", Fields: fsm.Fields{ParentSessionID: "acme:0"}},
		{SessionID: "acme:2", Fields: fsm.Fields{ParentSessionID: "globex:1"}},
		{SessionID: "acme:3", Fields: fsm.Fields{PredecessorSessionID: "globex:2", ParentSessionID: "globex:3"}},
	}
	p := checkNamespace("acme:", events)
	if p == nil {
		t.Fatal("no problem for parents outside the namespace")
	}
	var got []string
	for _, e := range p.Errors {
		got = append(got, fmt.Sprintf("%d %s", e.Index, e.Field))
	}
	if fmt.Sprint(got) != "[1 payload.parentSessionId 2 payload.predecessorSessionId 2 payload.parentSessionId]" {
		t.Fatalf("errors %v", got)
	}
	if p := checkNamespace("acme:", events[:1]); p != nil {
		t.Fatalf("a parent inside the namespace refused: %v", p.Errors)
	}
}
