package query_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/correx/sessions/pkg/fsm"
)

// TestListPrefix checks the prefix filter of GET /v1/sessions: only ids
// that start with it, with paging, and validation of the parameter.
func TestListPrefix(t *testing.T) {
	f := newFixture(t)
	for i := range 5 {
		f.put(fmt.Sprintf("acme:%d", i), 0, int64(i*10), fsm.SessionCreated)
		f.put(fmt.Sprintf("beta:%d", i), 1, int64(i*10), fsm.SessionCreated, fsm.SessionStarted)
	}
	for _, c := range []struct {
		q    string
		want int
	}{
		{"prefix=acme:", 5}, {"prefix=beta:", 5}, {"prefix=beta:3", 1}, {"prefix=", 10},
		{"prefix=gamma:", 0}, {"prefix=acme:&state=ACTIVE", 0}, {"prefix=beta:&state=ACTIVE", 5},
	} {
		var ids []string
		cursor := ""
		for page := 0; ; page++ {
			resp, body := f.get("/v1/sessions?limit=2&" + c.q + cursor)
			if resp.StatusCode != 200 {
				t.Fatalf("%s: %d %s", c.q, resp.StatusCode, body)
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
				ids = append(ids, s.ID)
			}
			if l.Next == nil || page > 10 {
				break
			}
			cursor = "&cursor=" + *l.Next
		}
		if len(ids) != c.want {
			t.Errorf("%s: got %d sessions %v, want %d", c.q, len(ids), ids, c.want)
		}
		for _, id := range ids {
			if p := c.q[len("prefix="):]; len(p) > 0 && p[0] != '&' && !startsWith(id, p[:min(len(p), 5)]) {
				t.Errorf("%s: listed %s", c.q, id)
			}
		}
	}
	resp, body := f.get("/v1/sessions?prefix=bad%20prefix")
	wantProblem(t, resp, body, 400, "prefix")
}

func startsWith(s, p string) bool { return len(s) >= len(p) && s[:len(p)] == p }
