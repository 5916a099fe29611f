package query_test

import (
	"encoding/base64"
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
	"github.com/correx/sessions/internal/archive"
	"github.com/correx/sessions/internal/auth"
	"github.com/correx/sessions/internal/query"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/internal/s3test"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/correx/sessions/pkg/wire"
)

// archiveFixture serves the query API over a Redis store and a file://
// archive, with three tokens: admin, reader (every session) and acme
// (sessions:read, prefix acme:); its client checks every answer against
// the OpenAPI description.
type archiveFixture struct {
	t       *testing.T
	store   *snapshot.Store
	arch    *archive.Store
	srv     *httptest.Server
	handler *query.Handler
	client  *http.Client
	tokens  map[string]string
}

func newArchiveFixture(t *testing.T, withArchive bool) *archiveFixture {
	t.Helper()
	return newArchiveFixtureAt(t, withArchive, "file://"+filepath.ToSlash(t.TempDir()))
}

func newArchiveFixtureAt(t *testing.T, withArchive bool, bucketURL string) *archiveFixture {
	t.Helper()
	return newArchiveFixtureWith(t, withArchive, bucketURL, nil)
}

// newArchiveFixtureWith is newArchiveFixtureAt with options of the
// handler's set by opts.
func newArchiveFixtureWith(t *testing.T, withArchive bool, bucketURL string, opts func(*query.Options)) *archiveFixture {
	t.Helper()
	r := redistest.Start(t)
	store, err := snapshot.NewStore(r.Client(t), "arch")
	if err != nil {
		t.Fatal(err)
	}
	f := &archiveFixture{t: t, store: store, tokens: map[string]string{}}
	arch, err := archive.Open(ctx, bucketURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = arch.Close() })
	f.arch = arch
	var lines []string
	for role, line := range map[string]string{"admin": "admin", "reader": "sessions:read", "acme": "sessions:read prefix=acme:"} {
		tok, err := auth.NewToken()
		if err != nil {
			t.Fatal(err)
		}
		f.tokens[role] = tok
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
	o := query.Options{Guard: guard, Log: quiet}
	if withArchive {
		o.Archive = arch
	}
	if opts != nil {
		opts(&o)
	}
	f.handler = query.NewHandler(store, topic, nil, o)
	f.srv = httptest.NewServer(f.handler)
	t.Cleanup(f.srv.Close)
	v, err := apitest.New()
	if err != nil {
		t.Fatal(err)
	}
	f.client = v.Client(&http.Client{})
	t.Cleanup(func() {
		if err := v.Err(); err != nil || v.Checked() == 0 {
			t.Errorf("against the OpenAPI description (%d answers checked): %v", v.Checked(), err)
		}
	})
	return f
}

// fold folds a session from the event types at offsets first, first+1, ...
// of partition 0, and its history.
func fold(id string, first int64, types ...fsm.EventType) (*snapshot.Snapshot, []wire.HistoryEntry) {
	var s snapshot.Snapshot
	var r fsm.Reducer
	var hist []wire.HistoryEntry
	at := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	for i, et := range types {
		e := fsm.NewEvent(fsm.EventID{byte(i + 1), 9, byte(first)}, id, et, at.Add(time.Duration(i)*time.Second), fsm.Fields{Goal: "g"})
		pos := snapshot.Position{Offset: first + int64(i)}
		o, _ := s.Fold(&r, &e, pos)
		hist = append(hist, wire.HistoryEntry{Version: s.Version, Position: pos, EventID: e.ID.String(), Type: e.TypeName(),
			OccurredAt: e.OccurredAt, Outcome: o.Result.String(), To: o.To.String()})
	}
	return &s, hist
}

// archiveSession folds a completed session and archives it.
func (f *archiveFixture) archiveSession(id string, first int64) *snapshot.Snapshot {
	f.t.Helper()
	s, hist := fold(id, first, fsm.SessionCreated, fsm.SessionStarted, fsm.ModelRequested, fsm.SessionCompleted)
	if err := f.arch.Put(ctx, &archive.Object{Snapshot: s, History: hist, ArchivedAt: time.Now()}); err != nil {
		f.t.Fatal(err)
	}
	return s
}

func (f *archiveFixture) get(role, path string) (int, []byte) {
	f.t.Helper()
	req, err := http.NewRequest(http.MethodGet, f.srv.URL+path, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+f.tokens[role])
	resp, err := f.client.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

// TestArchivedReads: a session Redis does not hold but the archive does is
// answered from the archive with "archived": true, its history in pages;
// tenant rules hold; a live session's answer is unchanged.
func TestArchivedReads(t *testing.T) {
	f := newArchiveFixture(t, true)
	a1 := f.archiveSession("acme:a1", 10)
	f.archiveSession("other:b1", 20)
	live, _ := fold("acme:live", 0, fsm.SessionCreated, fsm.SessionStarted)
	if _, err := f.store.PutBatch(ctx, []snapshot.Entry{snapshot.NewEntry(live)}); err != nil {
		t.Fatal(err)
	}

	status, body := f.get("acme", "/v1/sessions/acme:a1")
	if status != http.StatusOK {
		t.Fatalf("archived read: %d %s", status, body)
	}
	own, err := a1.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if want := string(own[:len(own)-1]) + `,"archived":true}` + "\n"; string(body) != want {
		t.Errorf("archived read:\n%s\nwant\n%s", body, want)
	}
	var ws wire.Snapshot
	if err := json.Unmarshal(body, &ws); err != nil || !ws.Archived || ws.State != "COMPLETED" {
		t.Errorf("decoded: %+v %v", ws, err)
	}
	if status, body := f.get("acme", "/v1/sessions/other:b1"); status != http.StatusNotFound {
		t.Errorf("another tenant's archived session: %d %s", status, body)
	}
	if status, body := f.get("reader", "/v1/sessions/other:b1"); status != http.StatusOK || !strings.Contains(string(body), `"archived":true`) {
		t.Errorf("archived read with an unprefixed token: %d %s", status, body)
	}
	if status, body := f.get("acme", "/v1/sessions/acme:nowhere"); status != http.StatusNotFound {
		t.Errorf("a session in neither: %d %s", status, body)
	}
	if status, body := f.get("acme", "/v1/sessions/acme:live"); status != http.StatusOK || strings.Contains(string(body), "archived") {
		t.Errorf("a live session: %d %s", status, body)
	}

	// The history, in pages of 3 then 1.
	status, body = f.get("acme", "/v1/sessions/acme:a1/history?limit=3")
	var p1 wire.HistoryPage
	if status != http.StatusOK || json.Unmarshal(body, &p1) != nil || len(p1.History) != 3 || p1.Next == nil {
		t.Fatalf("first history page: %d %s", status, body)
	}
	status, body = f.get("acme", "/v1/sessions/acme:a1/history?limit=3&after="+*p1.Next)
	var p2 wire.HistoryPage
	if status != http.StatusOK || json.Unmarshal(body, &p2) != nil || len(p2.History) != 1 || p2.Next != nil {
		t.Fatalf("second history page: %d %s", status, body)
	}
	if p2.History[0].Type != "SessionCompleted" || p2.History[0].Position.Offset != 13 {
		t.Errorf("last entry: %+v", p2.History[0])
	}
	if status, body := f.get("acme", "/v1/sessions/other:b1/history"); status != http.StatusNotFound {
		t.Errorf("another tenant's archived history: %d %s", status, body)
	}
}

// TestArchiveListing: GET /v1/archive lists archived sessions by id prefix
// within the token's own prefix, in pages; a prefix outside it is an empty
// page; bad limits and cursors are 400 naming the field; without an
// archive, 503.
func TestArchiveListing(t *testing.T) {
	f := newArchiveFixture(t, true)
	for i, id := range []string{"acme:a1", "acme:a2", "acme:b1", "other:c1"} {
		f.archiveSession(id, int64(10*i))
	}
	list := func(role, q string) query.ArchiveList {
		t.Helper()
		status, body := f.get(role, "/v1/archive"+q)
		var l query.ArchiveList
		if status != http.StatusOK || json.Unmarshal(body, &l) != nil {
			t.Fatalf("%s %s: %d %s", role, q, status, body)
		}
		return l
	}
	ids := func(l query.ArchiveList) string {
		var out []string
		for _, e := range l.Sessions {
			out = append(out, e.SessionID+"/"+e.State)
		}
		return strings.Join(out, ",")
	}
	if got := ids(list("acme", "")); got != "acme:a1/COMPLETED,acme:a2/COMPLETED,acme:b1/COMPLETED" {
		t.Errorf("acme's archive: %s", got)
	}
	if got := ids(list("reader", "")); !strings.Contains(got, "other:c1") {
		t.Errorf("every session: %s", got)
	}
	if got := ids(list("acme", "?prefix=acme:a")); got != "acme:a1/COMPLETED,acme:a2/COMPLETED" {
		t.Errorf("prefix acme:a: %s", got)
	}
	if l := list("acme", "?prefix=other:"); len(l.Sessions) != 0 || l.Next != nil {
		t.Errorf("a prefix outside the token's: %+v", l)
	}
	// Pages of 2.
	var seen []string
	q := "?limit=2"
	for range 5 {
		l := list("acme", q)
		seen = append(seen, ids(l))
		if l.Next == nil {
			break
		}
		q = "?limit=2&cursor=" + *l.Next
	}
	if got := strings.Join(seen, ";"); got != "acme:a1/COMPLETED,acme:a2/COMPLETED;acme:b1/COMPLETED" {
		t.Errorf("pages: %s", got)
	}
	// A cursor this service did not issue is refused, never taken as a
	// place in the bucket: one that names a key (the bucket's own token
	// form), and a cursor of one prefix's listing passed to another's.
	first := list("acme", "?limit=1&prefix=acme:a")
	if first.Next == nil {
		t.Fatal("prefix acme:a in pages of 1: no next")
	}
	forged := base64.RawURLEncoding.EncodeToString([]byte("sessions/acme:a1/COMPLETED/0.json"))
	for q, field := range map[string]string{"?limit=0": "limit", "?limit=1001": "limit", "?limit=x": "limit", "?cursor=%21%21": "cursor", "?prefix=a%2Fb": "prefix",
		"?cursor=" + forged: "cursor", "?cursor=" + base64.RawURLEncoding.EncodeToString([]byte("zzz")): "cursor",
		"?prefix=acme:b&cursor=" + *first.Next: "cursor"} {
		status, body := f.get("acme", "/v1/archive"+q)
		var p struct {
			Errors []struct {
				Field string `json:"field"`
			} `json:"errors"`
		}
		if status != http.StatusBadRequest || json.Unmarshal(body, &p) != nil || len(p.Errors) == 0 || p.Errors[0].Field != field {
			t.Errorf("%s: %d %s, want 400 naming %s", q, status, body, field)
		}
	}

	none := newArchiveFixture(t, false)
	if status, body := none.get("acme", "/v1/archive"); status != http.StatusServiceUnavailable {
		t.Errorf("without an archive: %d %s", status, body)
	}
	if status, body := none.get("acme", "/v1/sessions/acme:a1"); status != http.StatusNotFound {
		t.Errorf("without an archive, an archived session: %d %s", status, body)
	}
}

// TestArchivedReadsS3: an archived read and the archive's listing against a
// bucket of a real S3-compatible server (internal/s3test).
func TestArchivedReadsS3(t *testing.T) {
	f := newArchiveFixtureAt(t, true, s3test.StartBucket(t))
	f.archiveSession("acme:s3-1", 10)
	f.archiveSession("acme:s3-2", 20)
	f.archiveSession("other:s3-3", 30)
	if status, body := f.get("acme", "/v1/sessions/acme:s3-2"); status != http.StatusOK || !strings.HasSuffix(string(body), `,"archived":true}`+"\n") {
		t.Errorf("archived read: %d %s", status, body)
	}
	if status, body := f.get("acme", "/v1/sessions/other:s3-3"); status != http.StatusNotFound {
		t.Errorf("another tenant's: %d %s", status, body)
	}
	var ids []string
	q := "?limit=1"
	for range 4 {
		status, body := f.get("acme", "/v1/archive"+q)
		var l query.ArchiveList
		if status != http.StatusOK || json.Unmarshal(body, &l) != nil {
			t.Fatalf("list: %d %s", status, body)
		}
		for _, e := range l.Sessions {
			ids = append(ids, e.SessionID)
		}
		if l.Next == nil {
			break
		}
		q = "?limit=1&cursor=" + *l.Next
	}
	if got := strings.Join(ids, ","); got != "acme:s3-1,acme:s3-2" {
		t.Errorf("listed %s", got)
	}
}

// TestArchivedIncompleteHistory (docs/retention.md, "The object"): the history of a session
// archived when the log no longer held its first events answers 409
// history-truncated, as the live history of a trimmed log does, with
// historyComplete false, the first version the archive holds and where the
// log started; never an empty page that looks whole. Its snapshot is
// still read.
func TestArchivedIncompleteHistory(t *testing.T) {
	f := newArchiveFixture(t, true)
	s, _ := fold("acme:trimmed", 20, fsm.SessionCreated, fsm.SessionStarted, fsm.SessionCompleted)
	if err := f.arch.Put(ctx, &archive.Object{Snapshot: s, History: []wire.HistoryEntry{}, ArchivedAt: time.Now(),
		Truncated: &archive.Truncation{EarliestOffset: 30}}); err != nil {
		t.Fatal(err)
	}
	status, body := f.get("acme", "/v1/sessions/acme:trimmed/history")
	var p struct {
		Type            string `json:"type"`
		Partition       *int32 `json:"partition"`
		FirstOffset     *int64 `json:"firstOffset"`
		EarliestOffset  *int64 `json:"earliestOffset"`
		HistoryComplete *bool  `json:"historyComplete"`
		FirstVersion    uint64 `json:"firstVersion"`
	}
	if status != http.StatusConflict || json.Unmarshal(body, &p) != nil || p.Type != query.TypeHistoryTruncated ||
		p.Partition == nil || *p.Partition != 0 || p.FirstOffset == nil || *p.FirstOffset != 20 ||
		p.EarliestOffset == nil || *p.EarliestOffset != 30 || p.HistoryComplete == nil || *p.HistoryComplete ||
		p.FirstVersion != s.Version {
		t.Fatalf("history of an incompletely archived session: %d %s; want 409 %s, firstOffset 20, earliestOffset 30, historyComplete false, firstVersion %d",
			status, body, query.TypeHistoryTruncated, s.Version)
	}
	if status, body := f.get("acme", "/v1/sessions/acme:trimmed"); status != http.StatusOK || !strings.Contains(string(body), `"archived":true`) {
		t.Fatalf("its snapshot: %d %s", status, body)
	}
}
