package query_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
)

// putGoal stores a created session whose goal is goal as given: the fold
// cuts long goals, but a store may hold snapshots written before that rule.
func (f *fixture) putGoal(id string, p int32, offset int64, goal string) {
	f.t.Helper()
	var s snapshot.Snapshot
	var r fsm.Reducer
	e := fsm.NewEvent(fsm.EventID{1, 7}, id, fsm.SessionCreated, time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC), fsm.Fields{})
	s.Fold(&r, &e, snapshot.Position{Partition: p, Offset: offset})
	s.Goal = goal
	if _, err := f.store.PutBatch(ctx, []snapshot.Entry{snapshot.NewEntry(&s)}); err != nil {
		f.t.Fatal(err)
	}
}

func TestJSONIsNotHTMLEscaped(t *testing.T) {
	f := newFixture(t)
	const goal = `<script>alert("x")</script> & <b>`
	f.putGoal("h-1", 0, 10, goal)
	for _, path := range []string{"/v1/sessions/h-1", "/v1/sessions"} {
		resp, body := f.get(path)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, body)
		}
		if !strings.Contains(string(body), `"goal":"<script>alert(\"x\")</script> & <b>"`) {
			t.Errorf("%s: the goal is not given back as itself:\n%s", path, body)
		}
		if !json.Valid(body) {
			t.Errorf("%s: not JSON: %s", path, body)
		}
	}
}
