package query_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/query"
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

// A listing page stops at query.MaxListBytes of JSON, whatever the limit,
// and its cursor continues exactly after the last session it holds.
func TestListingPagesAreBoundedInBytes(t *testing.T) {
	f := newFixture(t)
	const n = 100
	goal := strings.Repeat("g", 64<<10)
	for i := range n {
		f.putGoal(fmt.Sprintf("big-%03d", i), 0, int64(i), goal)
	}
	seen := map[string]int{}
	next, pages := "", 0
	for {
		path := "/v1/sessions?limit=1000"
		if next != "" {
			path += "&cursor=" + next
		}
		resp, body := f.get(path)
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		if len(body) > query.MaxListBytes {
			t.Errorf("page %d is %d bytes, more than %d", pages, len(body), query.MaxListBytes)
		}
		var page struct {
			Sessions []struct {
				SessionID string `json:"sessionId"`
			} `json:"sessions"`
			Next *string `json:"next"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			t.Fatal(err)
		}
		pages++
		if pages == 1 && (len(page.Sessions) == n || page.Next == nil) {
			t.Fatalf("the first page holds %d sessions (%d bytes) and next %v: no byte cap", len(page.Sessions), len(body), page.Next)
		}
		for _, s := range page.Sessions {
			seen[s.SessionID]++
		}
		if page.Next == nil || pages > n {
			break
		}
		next = *page.Next
	}
	if len(seen) != n {
		t.Errorf("listed %d distinct sessions over %d pages, want %d", len(seen), pages, n)
	}
	for id, c := range seen {
		if c != 1 {
			t.Errorf("%s listed %d times", id, c)
		}
	}
}
