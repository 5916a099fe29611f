package query_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
)

// TestListLabelAndParent checks ?label=k=v (repeatable, all must hold) and
// ?parent=ID on GET /v1/sessions against a real redis-server: every match
// exactly once across pages, nothing else, and 400s that name the field.
func TestListLabelAndParent(t *testing.T) {
	f := newFixture(t)
	want := map[string][]string{}
	for i := range 30 {
		id := fmt.Sprintf("s-%02d", i)
		fl := fsm.Fields{Goal: "g", Labels: []fsm.Label{{Key: "team", Value: []string{"core", "edge"}[i%2]}}}
		if i%3 == 0 {
			fl.Labels = append(fl.Labels, fsm.Label{Key: "app/tier", Value: "a b=c"})
		}
		if i%5 == 0 {
			fl.ParentSessionID = "s-root"
		}
		var s snapshot.Snapshot
		var r fsm.Reducer
		e := fsm.NewEvent(fsm.EventID{byte(i + 1), 9}, id, fsm.SessionCreated, time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC), fl)
		s.Fold(&r, &e, snapshot.Position{Offset: int64(i)})
		if _, err := f.store.PutBatch(ctx, []snapshot.Entry{snapshot.NewEntry(&s)}); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			want["label=team=core"] = append(want["label=team=core"], id)
		}
		if i%6 == 0 {
			want["label=team=core&label="+url.QueryEscape("app/tier=a b=c")] = append(want["label=team=core&label="+url.QueryEscape("app/tier=a b=c")], id)
		}
		if i%5 == 0 {
			want["parent=s-root"] = append(want["parent=s-root"], id)
		}
		if i%10 == 0 {
			want["parent=s-root&label=team=core"] = append(want["parent=s-root&label=team=core"], id)
		}
	}
	want["label=team=nobody"] = nil
	want["parent=s-none&state=CREATED"] = nil
	for q, ids := range want {
		var got []string
		cursor := ""
		for page := 0; ; page++ {
			resp, body := f.get("/v1/sessions?limit=4&" + q + cursor)
			if resp.StatusCode != 200 {
				t.Fatalf("%s: %d %s", q, resp.StatusCode, body)
			}
			var l struct {
				Sessions []struct {
					ID string `json:"sessionId"`
				} `json:"sessions"`
				Next *string `json:"next"`
			}
			if err := json.Unmarshal(body, &l); err != nil {
				t.Fatal(err)
			}
			for _, s := range l.Sessions {
				got = append(got, s.ID)
			}
			if l.Next == nil || page > 20 {
				break
			}
			cursor = "&cursor=" + *l.Next
		}
		slices.Sort(got)
		if !slices.Equal(got, ids) {
			t.Errorf("%s: got %v, want %v", q, got, ids)
		}
	}
	for q, field := range map[string]string{
		"label=team":        "label",
		"label=Team=core":   "label",
		"label==v":          "label",
		"parent=bad%20id":   "parent",
		"parent=a&parent=b": "parent",
		"label=k=" + url.QueryEscape(string(slices.Repeat([]byte("v"), 257))): "label",
	} {
		resp, body := f.get("/v1/sessions?" + q)
		wantProblem(t, resp, body, 400, field)
	}
}
