package query_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/api/apitest"
	"github.com/correx/sessions/internal/auth"
	"github.com/correx/sessions/internal/query"
	"github.com/correx/sessions/internal/redislayout"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/correx/sessions/pkg/wire"
)

// TestVerifyReport: GET /v1/verify answers what the projectors published
// in Redis, their counters summed, the last 20 mismatches newest first and
// the last cycle, in the form the API description gives; only an admin
// token without a prefix reads it.
func TestVerifyReport(t *testing.T) {
	r := redistest.Start(t)
	rdb := r.Client(t)
	store, err := snapshot.NewStore(rdb, "vr")
	if err != nil {
		t.Fatal(err)
	}
	tokens := map[string]string{}
	var lines []string
	for role, line := range map[string]string{"admin": "admin", "tenant": "admin prefix=acme:", "reader": "sessions:read"} {
		tok, err := auth.NewToken()
		if err != nil {
			t.Fatal(err)
		}
		tokens[role] = tok
		lines = append(lines, auth.HashToken(tok)+" "+line)
	}
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	guard, err := auth.New(auth.Config{TokensFile: path}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(query.NewHandler(store, topic, nil, query.Options{Guard: guard, Log: quiet}))
	t.Cleanup(srv.Close)
	v, err := apitest.New()
	if err != nil {
		t.Fatal(err)
	}
	client := v.Client(&http.Client{})
	get := func(role string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/verify", nil)
		req.Header.Set("Authorization", "Bearer "+tokens[role])
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}

	resp, body := get("admin")
	var rep wire.Verify
	if resp.StatusCode != 200 || json.Unmarshal(body, &rep) != nil {
		t.Fatalf("before any report: %d %s", resp.StatusCode, body)
	}
	if rep.Checked != 0 || len(rep.Mismatches) != 4 || rep.LastCycle != nil || len(rep.Recent) != 0 {
		t.Fatalf("before any report: %s, want zero counts for the four kinds, no cycle, no mismatch", body)
	}

	keys := redislayout.NewKeys("vr")
	ver := uint64(3)
	var first []wire.VerifyMismatch
	for i := range 15 {
		first = append(first, wire.VerifyMismatch{SessionID: "s-" + string(rune('a'+i)), Kind: "stale", StoredVersion: &ver,
			FoldedVersion: &ver, StoredDigest: "aa", FoldedDigest: "bb", Repaired: true, At: time.Unix(int64(i), 0).UTC()})
	}
	if err := redislayout.PublishVerify(ctx, rdb, keys, topic, redislayout.VerifyDelta{Checked: 100,
		Mismatches: map[string]int64{"stale": 15}, Repaired: 15, Recent: first}); err != nil {
		t.Fatal(err)
	}
	cycle := &wire.VerifyCycle{EndedAt: time.Unix(1_800_000_000, 0).UTC(), DurationMs: 5000, Sessions: 100, Partitions: []int32{0, 2}}
	second := []wire.VerifyMismatch{}
	for i := range 10 {
		second = append(second, wire.VerifyMismatch{SessionID: "m-" + string(rune('a'+i)), Kind: "missing", FoldedVersion: &ver,
			FoldedDigest: "bb", At: time.Unix(int64(100+i), 0).UTC()})
	}
	if err := redislayout.PublishVerify(ctx, rdb, keys, topic, redislayout.VerifyDelta{Checked: 50, Unverifiable: 2,
		Mismatches: map[string]int64{"missing": 10}, Recent: second, Cycle: cycle}); err != nil {
		t.Fatal(err)
	}
	resp, body = get("admin")
	rep = wire.Verify{}
	if resp.StatusCode != 200 || json.Unmarshal(body, &rep) != nil {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if rep.Checked != 150 || rep.Repaired != 15 || rep.Unverifiable != 2 || rep.Mismatches["stale"] != 15 ||
		rep.Mismatches["missing"] != 10 || rep.Mismatches["corrupt"] != 0 || rep.Mismatches["extra"] != 0 {
		t.Errorf("counts %s", body)
	}
	if rep.LastCycle == nil || rep.LastCycle.DurationMs != 5000 || !rep.LastCycle.EndedAt.Equal(cycle.EndedAt) {
		t.Errorf("last cycle %+v, want %+v", rep.LastCycle, cycle)
	}
	if len(rep.Recent) != 20 || rep.Recent[0].SessionID != "m-j" || rep.Recent[9].SessionID != "m-a" ||
		rep.Recent[10].SessionID != "s-o" || rep.Recent[19].SessionID != "s-f" || rep.Recent[19].StoredVersion == nil {
		t.Errorf("recent: %d, want the last 20 newest first: %s", len(rep.Recent), body)
	}
	for _, role := range []string{"reader", "tenant"} {
		resp, body := get(role)
		wantProblem(t, resp, body, http.StatusForbidden, "")
	}
	if err := v.Err(); err != nil {
		t.Error(err)
	}
}

// TestVerifyWithoutReport: a store that keeps no verification report
// answers 503 with a Retry-After, as the other features this service is
// not configured for do.
func TestVerifyWithoutReport(t *testing.T) {
	store, err := snapshot.NewStore(redistest.Start(t).Client(t), "vn")
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := httptest.NewServer(query.NewHandler(struct{ query.Store }{store}, topic, nil, query.Options{Log: quiet}))
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL + "/v1/verify")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "30" {
		t.Errorf("/v1/verify of a store without a report: %d Retry-After %q %s, want 503 and Retry-After 30",
			resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
}
