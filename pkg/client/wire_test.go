package client_test

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/correx/sessions/pkg/client"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
)

// TestSnapshotMatchesTheServersJSON keeps the client's Snapshot (pkg/wire's,
// which needs nothing but the standard library) in step with the JSON the
// query service writes (pkg/snapshot): the
// server's document decodes with no unknown field, and the client's type
// has no member the server does not write.
func TestSnapshotMatchesTheServersJSON(t *testing.T) {
	var s snapshot.Snapshot
	var r fsm.Reducer
	at := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	for i, typ := range []fsm.EventType{fsm.SessionCreated, fsm.SessionStarted, fsm.ApprovalRequested, fsm.SessionFailed} {
		e := fsm.NewEvent(fsm.EventID{byte(i + 1)}, "wire-1", typ, at.Add(time.Duration(i)*time.Second), fsm.Fields{Goal: "g", Reason: "r"})
		s.Fold(&r, &e, snapshot.Position{Partition: 1, Offset: int64(i)})
	}
	server, err := json.Marshal(&s)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(server))
	dec.DisallowUnknownFields()
	var got client.Snapshot
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("the server's snapshot does not decode into client.Snapshot: %v\n%s", err, server)
	}
	if got.SessionID != "wire-1" || got.State != "FAILED" || got.Version != 4 {
		t.Fatalf("decoded %+v", got)
	}
	clientJSON, err := json.Marshal(&got)
	if err != nil {
		t.Fatal(err)
	}
	var sk, ck map[string]json.RawMessage
	if err := json.Unmarshal(server, &sk); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(clientJSON, &ck); err != nil {
		t.Fatal(err)
	}
	for _, k := range slices.Sorted(maps.Keys(ck)) {
		if _, ok := sk[k]; !ok {
			t.Errorf("client.Snapshot has %q, which the server never writes", k)
		}
	}
}
