package apitest_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/api/apitest"
	"github.com/correx/sessions/internal/httpx"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/correx/sessions/pkg/wire"
)

// snapshotJSON folds a short session with the real fold and encodes it as
// the query service does.
func snapshotJSON(t *testing.T) []byte {
	t.Helper()
	at := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	var s snapshot.Snapshot
	var r fsm.Reducer
	for i, e := range []fsm.Event{
		fsm.NewEvent(fsm.EventID{1}, "acme:s-1", fsm.SessionCreated, at, fsm.Fields{Goal: "ship it"}),
		fsm.NewEvent(fsm.EventID{2}, "acme:s-1", fsm.SessionStarted, at.Add(time.Second), fsm.Fields{}),
		fsm.NewEvent(fsm.EventID{3}, "acme:s-1", fsm.SessionFailed, at.Add(2*time.Second), fsm.Fields{Reason: "boom"}),
	} {
		s.Fold(&r, &e, snapshot.Position{Partition: 3, Offset: 10 + int64(i)})
	}
	b, err := s.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func changeJSON() []byte {
	c := wire.Change{SessionID: "acme:s-1", Version: 2, Position: wire.Position{Partition: 3, Offset: 11},
		EventID: "01937f3c-0000-7000-8000-000000000002", Type: "SessionStarted",
		OccurredAt: time.Date(2026, 11, 29, 6, 0, 1, 0, time.UTC), Outcome: wire.Applied, From: "CREATED", To: "ACTIVE"}
	return c.AppendJSON(nil)
}

// serve starts a server with routes and returns a client through a fresh
// Validator.
func serve(t *testing.T, routes map[string]http.HandlerFunc) (*apitest.Validator, *http.Client, string) {
	t.Helper()
	mux := http.NewServeMux()
	for p, h := range routes {
		mux.HandleFunc(p, h)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeEndpointNotFound, Status: 404, Detail: "no such endpoint"})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	v, err := apitest.New()
	if err != nil {
		t.Fatal(err)
	}
	return v, v.Client(nil), srv.URL
}

func do(t *testing.T, c *http.Client, method, url, ct, body string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if method == http.MethodPost && ct == "application/json" && !json.Valid(b) {
		t.Fatalf("the caller got %q", b)
	}
}

func getSession(body []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"3.3"`)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}
}

// Answers as the services write them pass, and each is counted.
func TestDescribedExchangesPass(t *testing.T) {
	v, c, url := serve(t, map[string]http.HandlerFunc{
		"GET /v1/sessions/{id}": getSession(snapshotJSON(t)),
		"POST /v1/events": func(w http.ResponseWriter, r *http.Request) {
			httpx.WriteJSON(w, 202, map[string]any{"accepted": []map[string]any{{"eventId": "01937f3c-0000-7000-8000-000000000002", "partition": 3, "offset": 11}}, "position": "3:11"})
		},
		"GET /v1/stats": func(w http.ResponseWriter, r *http.Request) {
			httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeForbidden, Status: 403, Detail: "this token lacks the scope sessions:read"})
		},
		"/v1/stats": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", "GET, HEAD")
			httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeMethod, Status: 405})
		},
	})
	do(t, c, "GET", url+"/v1/sessions/acme:s-1", "", "")
	do(t, c, "POST", url+"/v1/events", "application/json", `{"sessionId":"acme:s-1","type":"SessionStarted"}`)
	do(t, c, "GET", url+"/v1/stats", "", "")
	do(t, c, "DELETE", url+"/v1/stats", "", "")
	do(t, c, "GET", url+"/v1/no-such-thing", "", "")
	if err := v.Err(); err != nil {
		t.Fatal(err)
	}
	if v.Checked() != 5 {
		t.Fatalf("checked %d exchanges, want 5", v.Checked())
	}
}

// Each kind of drift is a violation.
func TestDriftIsAViolation(t *testing.T) {
	snap := snapshotJSON(t)
	extra := append(append([]byte{}, snap[:len(snap)-1]...), `,"newMember":1}`...)
	cases := []struct {
		name, method, path, ct, body, want string
		h                                  http.HandlerFunc
	}{
		{"a snapshot member the schema does not list", "GET", "/v1/sessions/acme:s-1", "", "", "newMember", getSession(extra)},
		{"a required header missing", "GET", "/v1/sessions/acme:s-1", "", "", "ETag", func(w http.ResponseWriter, r *http.Request) {
			httpx.WriteJSON(w, 200, json.RawMessage(snap))
		}},
		{"a status not described", "GET", "/v1/stats", "", "", "418", func(w http.ResponseWriter, r *http.Request) {
			httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeInternal, Status: 418})
		}},
		{"a problem type not described for the status", "GET", "/v1/stats", "", "", "forbidden", func(w http.ResponseWriter, r *http.Request) {
			httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeNotFound, Status: 403})
		}},
		{"a problem type no service uses", "GET", "/v1/stats", "", "", "type", func(w http.ResponseWriter, r *http.Request) {
			httpx.WriteProblem(w, httpx.Problem{Type: "https://correx.dev/problems/new", Status: 403})
		}},
		{"a content type not described", "GET", "/v1/stats", "", "", "text/plain", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			_, _ = io.WriteString(w, "{}")
		}},
		{"an invalid request answered 200", "GET", "/v1/sessions?limit=5000", "", "", "not answered 4xx", func(w http.ResponseWriter, r *http.Request) {
			httpx.WriteJSON(w, 200, map[string]any{"sessions": []any{}, "next": nil})
		}},
		{"a body that is no envelope answered 202", "POST", "/v1/events", "application/json", `{"sessionId":"acme:s-1"}`, "not answered 4xx", func(w http.ResponseWriter, r *http.Request) {
			httpx.WriteJSON(w, 202, map[string]any{"accepted": []map[string]any{{"eventId": "01937f3c-0000-7000-8000-000000000002", "partition": 3, "offset": 11}}, "position": "3:11"})
		}},
		{"an undescribed path answered 200", "GET", "/v1/sessions/acme:s-1/secrets", "", "", "must be 404", func(w http.ResponseWriter, r *http.Request) {
			httpx.WriteJSON(w, 200, map[string]any{})
		}},
		{"an undescribed method answered 404", "PUT", "/v1/stats", "", "", "must be 405", func(w http.ResponseWriter, r *http.Request) {
			httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeNotFound, Status: 404})
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pattern := strings.SplitN(tc.path, "?", 2)[0]
			v, c, url := serve(t, map[string]http.HandlerFunc{pattern: tc.h})
			do(t, c, tc.method, url+tc.path, tc.ct, tc.body)
			err := v.Err()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want a violation naming %q", err, tc.want)
			}
		})
	}
}

// Each SSE event's data is checked against its schema as the caller reads
// the stream; id-only events and comments pass.
func TestWatchEventsAreChecked(t *testing.T) {
	good := changeJSON()
	bad := strings.Replace(string(good), `"outcome":"applied"`, `"outcome":"applied","newMember":true`, 1)
	v, c, url := serve(t, map[string]http.HandlerFunc{"GET /v1/sessions/{id}/watch": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = io.WriteString(w, ": watching\n\nid: AAAA\n\nevent: snapshot\nid: AAAB\ndata: "+string(snapshotJSON(t))+
			"\n\nevent: change\nid: AAAC\ndata: "+string(good)+"\n\n: ping\n\nevent: change\nid: AAAD\ndata: "+bad+"\n\n")
	}})
	resp, err := c.Get(url + "/v1/sessions/acme:s-1/watch")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	events := 0
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: ") {
			events++
		}
	}
	if events != 3 {
		t.Fatalf("the caller read %d events, want 3", events)
	}
	err = v.Err()
	if err == nil || !strings.Contains(err.Error(), "newMember") || strings.Count(err.Error(), "SSE event") != 1 {
		t.Fatalf("got %v, want one violation for the change with newMember", err)
	}
	if v.Checked() != 4 { // the stream's head and its three events
		t.Fatalf("checked %d, want 4", v.Checked())
	}
}

// Every field the services can write is described: a change record and a
// history entry with each of their fields set pass, as the query service
// writes them (a failed transition's change carries its category and code;
// a rejected decision's entry its reason, requestId, by and sentBy).
func TestEveryFieldIsDescribed(t *testing.T) {
	at := time.Date(2026, 11, 29, 6, 0, 1, 0, time.UTC)
	change := wire.Change{SessionID: "acme:s-1", Version: 3, Position: wire.Position{Partition: 3, Offset: 12},
		EventID: "01937f3c-0000-7000-8000-000000000003", Type: "SessionFailed", OccurredAt: at,
		Outcome: wire.Applied, From: "ACTIVE", To: "FAILED", Terminal: true,
		Labels: map[string]string{"team": "a"}, ParentSessionID: "acme:p-1", CorrelationID: "c-1",
		FailureCategory: fsm.FailureProvider.String(), FailureCode: "rate_limited"}
	rejected := wire.Change{SessionID: "acme:s-1", Version: 3, Position: wire.Position{Partition: 3, Offset: 13},
		EventID: "01937f3c-0000-7000-8000-000000000004", Type: "SessionStarted", OccurredAt: at,
		Outcome: wire.Rejected, Reason: fsm.ReasonAfterTerminal.String(), From: "FAILED", To: "FAILED", Terminal: true}
	history, err := json.Marshal(wire.HistoryPage{History: []wire.HistoryEntry{
		{Version: 2, Position: wire.Position{Partition: 3, Offset: 11}, EventID: "01937f3c-0000-7000-8000-000000000002",
			Type: "ApprovalGranted", OccurredAt: at, Outcome: wire.Rejected, Reason: fsm.ReasonApprovalMismatch.String(),
			From: "AWAITING_APPROVAL", To: "AWAITING_APPROVAL", RequestID: "r-1", By: "ana", SentBy: "ops"},
		{Version: 2, Position: wire.Position{Partition: 3, Offset: 12}, EventID: "01937f3c-0000-7000-8000-000000000002",
			Type: "ApprovalGranted", OccurredAt: at, Outcome: wire.Duplicate, From: "ACTIVE", To: "ACTIVE"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	v, c, url := serve(t, map[string]http.HandlerFunc{
		"GET /v1/sessions/{id}/watch": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set("Cache-Control", "no-cache")
			_, _ = io.WriteString(w, "event: change\nid: AAAC\ndata: "+string(change.AppendJSON(nil))+
				"\n\nevent: change\nid: AAAD\ndata: "+string(rejected.AppendJSON(nil))+"\n\n")
		},
		"GET /v1/sessions/{id}/history": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(history)
		},
	})
	for _, path := range []string{"/v1/sessions/acme:s-1/watch", "/v1/sessions/acme:s-1/history"} {
		resp, err := c.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if err := v.Err(); err != nil {
		t.Fatal(err)
	}
	if v.Checked() != 4 { // the watch's head, its two events, the history page
		t.Fatalf("checked %d, want 4", v.Checked())
	}
}
