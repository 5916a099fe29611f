package snapshot_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
)

// TestJSONDeadline checks the API form's effective timeouts and deadline,
// and that the internal form keeps only the session's own timeouts.
func TestJSONDeadline(t *testing.T) {
	b := &builderEvents{}
	var own fsm.Timeouts
	own[fsm.TimeoutInactivity] = 5 * time.Second
	b.add(fsm.SessionCreated, fsm.Fields{Timeouts: own})
	b.add(fsm.SessionStarted, fsm.Fields{})
	s := fold(b.events, 0)
	s.TimeoutDefaults = fsm.DefaultTimeouts()
	s.TimeoutDefaults[fsm.TimeoutExecution] = time.Hour
	raw, err := s.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Timeouts map[string]string
		Deadline *struct{ Kind, At string }
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"inactivity": "5s", "execution": "1h0m0s", "approval": "24h0m0s", "cancellation": "5m0s"}
	if !reflect.DeepEqual(v.Timeouts, want) {
		t.Errorf("timeouts: got %v, want %v", v.Timeouts, want)
	}
	at := time.Unix(0, s.UpdatedAt+int64(5*time.Second)).UTC().Format(time.RFC3339Nano)
	if v.Deadline == nil || v.Deadline.Kind != "inactivity" || v.Deadline.At != at {
		t.Errorf("deadline: got %+v, want inactivity at %s", v.Deadline, at)
	}
	full, err := snapshot.EncodeJSON(s)
	if err != nil {
		t.Fatal(err)
	}
	var back snapshot.Snapshot
	if err := back.UnmarshalJSON(full); err != nil {
		t.Fatal(err)
	}
	if back.Timeouts != own {
		t.Errorf("internal form: timeouts %v, want the session's own %v", back.Timeouts, own)
	}
	s.Session.State = fsm.StateCompleted
	if raw, _ := s.MarshalJSON(); !strings.Contains(string(raw), `"deadline":null`) {
		t.Errorf("terminal: want deadline null in %s", raw)
	}
}

// TestStoreGivesTimeoutDefaults: what a store made WithTimeoutDefaults reads
// (Get, GetMany, listings) carries the defaults, so its JSON shows them.
func TestStoreGivesTimeoutDefaults(t *testing.T) {
	rdb, _ := targets()[0].Open(t)
	plain, err := snapshot.NewStore(rdb, "td")
	if err != nil {
		t.Fatal(err)
	}
	b := &builderEvents{}
	b.add(fsm.SessionCreated, fsm.Fields{})
	s := fold(b.events, 0)
	if _, err := plain.PutBatch(context.Background(), []snapshot.Entry{snapshot.NewEntry(s)}); err != nil {
		t.Fatal(err)
	}
	defaults := fsm.DefaultTimeouts()
	defaults[fsm.TimeoutInactivity] = time.Minute
	st := plain.WithTimeoutDefaults(defaults)
	got, err := st.Get(context.Background(), s.ID)
	if err != nil {
		t.Fatal(err)
	}
	many, err := st.GetMany(context.Background(), []string{s.ID})
	if err != nil {
		t.Fatal(err)
	}
	page, err := st.List(context.Background(), fsm.StateNone, "", 10)
	if err != nil || len(page.Snapshots) != 1 {
		t.Fatalf("list: %v %v", page, err)
	}
	for name, snap := range map[string]*snapshot.Snapshot{"get": got, "getMany": many[0], "list": page.Snapshots[0]} {
		if snap.TimeoutDefaults != defaults {
			t.Errorf("%s: defaults %v, want %v", name, snap.TimeoutDefaults, defaults)
		}
	}
	if p, _ := plain.Get(context.Background(), s.ID); p.TimeoutDefaults != (fsm.Timeouts{}) {
		t.Errorf("the plain store's snapshot has defaults %v", p.TimeoutDefaults)
	}
}
