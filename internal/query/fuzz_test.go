package query_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/auth"
	"github.com/correx/sessions/internal/query"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
)

// FuzzAPI sends arbitrary requests (method, path, query string, bearer
// token, If-None-Match) to the query API behind its guard, over a real
// redis-server started once per fuzzing process and seeded with sessions of
// two tenants.
//
// Invariants: no panic; the status is one the API documents; every 4xx and
// 5xx is a well-formed application/problem+json document whose status
// member equals the response status; a tenant's token never gets a body
// that names another tenant's session.
func FuzzAPI(f *testing.F) {
	r := redistest.Start(f)
	store, err := snapshot.NewStore(r.Client(f), "fz")
	if err != nil {
		f.Fatal(err)
	}
	var entries []snapshot.Entry
	at := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	for i, id := range []string{"acme:1", "acme:2", "globex:1", "globex:2"} {
		var s snapshot.Snapshot
		var red fsm.Reducer
		for j, et := range []fsm.EventType{fsm.SessionCreated, fsm.SessionStarted} {
			e := fsm.NewEvent(fsm.EventID{byte(i + 1), byte(j + 1)}, id, et, at, fsm.Fields{})
			s.Fold(&red, &e, snapshot.Position{Partition: int32(i % 2), Offset: int64(10*i + j)})
		}
		entries = append(entries, snapshot.NewEntry(&s))
	}
	if _, err := store.PutBatch(context.Background(), entries); err != nil {
		f.Fatal(err)
	}
	reader, _ := auth.NewToken()
	admin, _ := auth.NewToken()
	tenant, _ := auth.NewToken()
	tokens := filepath.Join(f.TempDir(), "tokens")
	file := auth.HashToken(reader) + " sessions:read\n" + auth.HashToken(admin) + " admin\n" +
		auth.HashToken(tenant) + " admin prefix=acme:\n"
	if err := os.WriteFile(tokens, []byte(file), 0o600); err != nil {
		f.Fatal(err)
	}
	guard, err := auth.New(auth.Config{TokensFile: tokens, RateLimit: 1e6, RateBurst: 1e6}, slog.New(slog.DiscardHandler))
	if err != nil {
		f.Fatal(err)
	}
	h := query.NewHandler(store, "events", nil, query.Options{Guard: guard, MaxWaiting: 4, PollEvery: time.Millisecond,
		Log: slog.New(slog.DiscardHandler)})
	bearers := []string{"", "Bearer " + reader, "Bearer " + admin, "Bearer " + tenant, "Bearer cxs_unknown"}

	for _, seed := range []struct {
		path, query string
		bearer      uint8
	}{
		{"/v1/sessions/acme:1", "", 1},
		{"/v1/sessions/globex:1", "", 3},
		{"/v1/sessions/acme:1", "minPosition=0:1&wait=5ms", 3},
		{"/v1/sessions/acme:1", "wait=1h", 1},
		{"/v1/sessions", "state=ACTIVE&limit=1", 3},
		{"/v1/sessions", "limit=1&cursor=MC9nbG9iZXg6MQ", 3},
		{"/v1/sessions", "cursor=%%%", 2},
		{"/v1/stats", "", 3},
		{"/v1/stats", "", 2},
		{"/v1/sessions/acme:1/replay", "", 2},
		{"/v1/sessions/../stats", "", 0},
		{"/v1/sessions/" + string([]byte{0xff, 0}), "", 1},
	} {
		f.Add(uint8(0), seed.path, seed.query, seed.bearer, `"2.2"`)
	}
	methods := []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodDelete}
	f.Fuzz(func(t *testing.T, method uint8, path, rawQuery string, bearer uint8, ifNoneMatch string) {
		req := &http.Request{Method: methods[int(method)%len(methods)], URL: &url.URL{Path: path, RawQuery: rawQuery},
			Header: http.Header{}, RemoteAddr: "192.0.2.1:1234", Body: http.NoBody}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		req = req.WithContext(ctx)
		if b := bearers[int(bearer)%len(bearers)]; b != "" {
			req.Header.Set("Authorization", b)
		}
		if ifNoneMatch != "" {
			req.Header.Set("If-None-Match", ifNoneMatch)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		status := rec.Code
		switch status {
		case 200, 301, 304, 307, 308, 400, 401, 403, 404, 405, 429, 503, 504:
		default:
			t.Fatalf("undocumented status %d: %s", status, rec.Body.Bytes())
		}
		if bearers[int(bearer)%len(bearers)] == "Bearer "+tenant && json.Valid(rec.Body.Bytes()) &&
			containsAny(rec.Body.String(), "globex:1", "globex:2") {
			t.Fatalf("a tenant sees another tenant's session: %s", rec.Body.Bytes())
		}
		if status < 400 {
			return
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
			t.Fatalf("%d with content type %q: %q", status, ct, rec.Body.Bytes())
		}
		var p struct {
			Type   string `json:"type"`
			Title  string `json:"title"`
			Status int    `json:"status"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || p.Status != status || p.Type == "" || p.Title == "" {
			t.Fatalf("%d: not a problem document: %q (%v)", status, rec.Body.Bytes(), err)
		}
	})
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
