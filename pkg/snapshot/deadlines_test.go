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

// TestDeadlineStore runs the deadline store's contract on a single server
// and on a cluster: arming is fenced by version, due entries come back
// earliest first, and a fired entry is removed only if it was not re-armed.
func TestDeadlineStore(t *testing.T) {
	for _, tg := range targets()[:2] {
		t.Run(tg.name, func(t *testing.T) {
			ctx := context.Background()
			rdb, _ := tg.open(t)
			st, err := snapshot.NewStore(rdb, "dl")
			if err != nil {
				t.Fatal(err)
			}
			base := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC).UnixNano()
			ms := int64(time.Millisecond)
			arm := func(p int32, ds ...snapshot.ArmedDeadline) time.Time {
				t.Helper()
				next, err := st.ArmDeadlines(ctx, "ev", map[int32][]snapshot.ArmedDeadline{p: ds})
				if err != nil {
					t.Fatal(err)
				}
				return next[p]
			}
			a := snapshot.ArmedDeadline{SessionID: "a", Kind: fsm.TimeoutInactivity, At: base + 5*ms + 1, Version: 3}
			b := snapshot.ArmedDeadline{SessionID: "b", Kind: fsm.TimeoutExecution, At: base + 2*ms, Version: 1}
			if next := arm(1, a, b); !next.Equal(time.Unix(0, base+2*ms)) {
				t.Fatalf("next: got %v, want b's deadline", next)
			}
			// An older version never replaces a newer one; the same or a newer does.
			stale := a
			stale.Version, stale.At = 2, base
			arm(1, stale)
			if next := arm(1); !next.Equal(time.Unix(0, base+2*ms)) {
				t.Fatalf("stale version re-armed: next %v", next)
			}
			disarmStale := snapshot.ArmedDeadline{SessionID: "a", Version: 2}
			arm(1, disarmStale)
			// Due: nothing before b's time; at a's time (rounded up to the ms) both, earliest first.
			due, next, err := st.DueDeadlines(ctx, "ev", 1, time.Unix(0, base+ms), 10)
			if err != nil || len(due) != 0 || !next.Equal(time.Unix(0, base+2*ms)) {
				t.Fatalf("due early: got %v %v %v", due, next, err)
			}
			due, next, err = st.DueDeadlines(ctx, "ev", 1, time.Unix(0, base+6*ms), 10)
			if err != nil || len(due) != 2 || due[0] != b || due[1] != a || !next.IsZero() {
				t.Fatalf("due: got %+v %v %v, want b then a", due, next, err)
			}
			// a is re-armed by a newer version after it was read: removing the fired one keeps it.
			a2 := a
			a2.Version, a2.Kind, a2.At = 4, fsm.TimeoutCancellation, base+9*ms
			arm(1, a2)
			if n, err := st.RemoveFired(ctx, "ev", 1, due); err != nil || n != 1 {
				t.Fatalf("remove fired: got %d %v, want 1 (b only)", n, err)
			}
			due, _, err = st.DueDeadlines(ctx, "ev", 1, time.Unix(0, base+time.Hour.Nanoseconds()), 10)
			if err != nil || len(due) != 1 || due[0] != a2 {
				t.Fatalf("after remove: got %+v %v, want a re-armed", due, err)
			}
			// Disarm by the same version; other partitions are apart.
			arm(2, b)
			if next := arm(1, snapshot.ArmedDeadline{SessionID: "a", Version: 4}); !next.IsZero() {
				t.Fatalf("disarmed: next %v", next)
			}
			if next, err := st.NextDeadline(ctx, "ev", 2); err != nil || !next.Equal(time.Unix(0, base+2*ms)) {
				t.Fatalf("partition 2: %v %v", next, err)
			}
			if err := st.DeleteDeadlines(ctx, "ev", 2); err != nil {
				t.Fatal(err)
			}
			if next, err := st.NextDeadline(ctx, "ev", 2); err != nil || !next.IsZero() {
				t.Fatalf("deleted: %v %v", next, err)
			}
		})
	}
}

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
	want := map[string]string{"inactivity": "5s", "execution": "1h0m0s", "cancellation": "5m0s"}
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
	rdb, _ := targets()[0].open(t)
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
