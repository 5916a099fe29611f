package query_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/api/apitest"
	"github.com/correx/sessions/internal/archive"
	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/query"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// asOfWant folds the first n events of session id of the fixture, as the
// test restates it: snapshot.Fold of each event at its position in the
// log, nothing else.
func (f *historyFixture) asOfWant(id string, n int) *snapshot.Snapshot {
	var s snapshot.Snapshot
	var red fsm.Reducer
	for i := range n {
		e := f.events[id][i]
		s.Fold(&red, &e, f.want[id][i].Position)
	}
	return &s
}

// wantAsOfBody is the answer as of text: the snapshot's JSON with "asOf"
// (and "archived") last.
func wantAsOfBody(t *testing.T, s *snapshot.Snapshot, text string, archived bool) string {
	t.Helper()
	b, err := s.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	tail := `,"asOf":"` + text + `"`
	if archived {
		tail += `,"archived":true`
	}
	return string(b[:len(b)-1]) + tail + "}\n"
}

func (f *historyFixture) asOf(srv *httptest.Server, role, id, v string) (int, string) {
	f.t.Helper()
	status, body := f.request(http.MethodGet, srv, role, "/v1/sessions/"+id+"?asOf="+url.QueryEscape(v))
	return status, string(body)
}

// problemField is the field a 400's first error names.
func problemField(body string) string {
	var p struct {
		Errors []struct {
			Field string `json:"field"`
		} `json:"errors"`
	}
	if json.Unmarshal([]byte(body), &p) != nil || len(p.Errors) == 0 {
		return ""
	}
	return p.Errors[0].Field
}

// TestAsOf: a session as of each of its versions is the fold of its events
// up to the one that made the version (rejected, duplicate and superseded
// events before it included, none after it); as of a time, the fold up to
// the last applied event at or before it; the tenant rules of a read; a
// version beyond the session's or a malformed value is a 400 naming asOf;
// a time before the session is a 404; an archived session folds from the
// log too; a session whose first events left the log is a 409.
func TestAsOf(t *testing.T) {
	f := newHistoryFixture(t)
	v, err := apitest.New()
	if err != nil {
		t.Fatal(err)
	}
	f.client = v.Client(&http.Client{})
	defer func() {
		if err := v.Err(); err != nil || v.Checked() == 0 {
			t.Errorf("against the OpenAPI description (%d answers checked): %v", v.Checked(), err)
		}
	}()
	srv, _ := f.server(query.Options{})
	const id = "acme:h-1"
	events := f.events[id]

	// Every version, with the number of events that made it.
	versions := 0
	for n := 1; n <= len(events); n++ {
		if f.want[id][n-1].Outcome != "applied" {
			continue
		}
		versions++
		want := f.asOfWant(id, n)
		if want.Version != uint64(versions) {
			t.Fatalf("the fixture's event %d makes version %d, want %d", n, want.Version, versions)
		}
		text := strconv.Itoa(versions)
		status, body := f.asOf(srv, "reader", id, text)
		if status != http.StatusOK || body != wantAsOfBody(t, want, text, false) {
			t.Fatalf("as of version %d (the first %d events): %d\n%s\nwant\n%s", versions, n, status, body, wantAsOfBody(t, want, text, false))
		}
	}
	final := f.asOfWant(id, len(events))
	if uint64(versions) != final.Version || versions < 10 {
		t.Fatalf("%d versions seen, the session is at %d", versions, final.Version)
	}

	// As of a time: event i of the fixture occurred at 06:00:00 + i s.
	at := events[0].OccurredAt
	for _, c := range []struct {
		at time.Time
		n  int // events folded
	}{
		{at, 1},
		{at.Add(10*time.Second + 500*time.Millisecond), 11},
		{at.Add(3 * time.Second), 3}, // event 3 is rejected: the state after event 2
		{at.Add(time.Hour), len(events)},
	} {
		text := c.at.Format(time.RFC3339Nano)
		status, body := f.asOf(srv, "reader", id, text)
		if want := wantAsOfBody(t, f.asOfWant(id, c.n), text, false); status != http.StatusOK || body != want {
			t.Errorf("as of %s: %d\n%s\nwant (the first %d events)\n%s", text, status, body, c.n, want)
		}
	}
	// Another zone names the same instant, answered in UTC.
	in := at.Add(5 * time.Second).In(time.FixedZone("", 2*3600)).Format(time.RFC3339)
	if status, body := f.asOf(srv, "reader", id, in); status != http.StatusOK || !strings.HasSuffix(body, `"asOf":"2026-11-29T06:00:05Z"}`+"\n") {
		t.Errorf("as of %s: %d %s", in, status, body)
	}
	if status, body := f.asOf(srv, "reader", id, at.Add(-time.Second).Format(time.RFC3339)); status != http.StatusNotFound {
		t.Errorf("as of a time before the session: %d %s, want 404", status, body)
	}

	// Tenant rules: another tenant's session is a 404, as for a read.
	if status, body := f.asOf(srv, "other", id, "1"); status != http.StatusNotFound {
		t.Errorf("another tenant's session: %d %s, want 404", status, body)
	}
	if status, _ := f.asOf(srv, "other", "other:h-3", "2"); status != http.StatusOK {
		t.Errorf("the tenant's own session: %d", status)
	}
	if status, body := f.asOf(srv, "reader", "acme:never", "1"); status != http.StatusNotFound {
		t.Errorf("an unknown session: %d %s", status, body)
	}

	// Bad values.
	for _, q := range []string{"0", "-1", "x", "2026-11-29", "2026-11-29T06:00:00", "", strconv.FormatUint(final.Version+1, 10), "99999999999999999999999"} {
		if status, body := f.asOf(srv, "reader", id, q); status != http.StatusBadRequest || problemField(body) != "asOf" {
			t.Errorf("asOf=%q: %d %s, want 400 naming asOf", q, status, body)
		}
	}
	if status, body := f.request(http.MethodGet, srv, "reader", "/v1/sessions/"+id+"?asOf=1&minPosition=0:1"); status != http.StatusBadRequest || problemField(string(body)) != "asOf" {
		t.Errorf("asOf with minPosition: %d %s", status, body)
	}

	// Archived: the read model no longer holds acme:h-2, the archive does.
	stored, err := f.store.Get(ctx, "acme:h-2")
	if err != nil || !stored.Terminal() {
		t.Fatalf("acme:h-2: %v %v", stored, err)
	}
	arch, err := archive.Open(ctx, "file://"+filepath.ToSlash(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	defer arch.Close()
	if err := arch.Put(ctx, &archive.Object{Snapshot: stored, History: f.want["acme:h-2"], ArchivedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	empty, err := snapshot.NewStore(redistest.Start(t).Client(t), "asof-empty")
	if err != nil {
		t.Fatal(err)
	}
	replayer := &query.KafkaReplayer{Kafka: kafka.Config{Brokers: f.brokers, ClientID: "asof-test"}, Topic: topic}
	asrv := httptest.NewServer(query.NewHandler(empty, topic, replayer, query.Options{Guard: f.guard, Log: f.quiet, Archive: arch}))
	defer asrv.Close()
	for _, n := range []int{1, 7, len(f.events["acme:h-2"])} {
		want := f.asOfWant("acme:h-2", n)
		text := strconv.FormatUint(want.Version, 10)
		if status, body := f.asOf(asrv, "reader", "acme:h-2", text); status != http.StatusOK || body != wantAsOfBody(t, want, text, true) {
			t.Errorf("archived, as of version %s: %d\n%s\nwant\n%s", text, status, body, wantAsOfBody(t, want, text, true))
		}
	}
	if status, body := f.asOf(asrv, "other", "acme:h-2", "1"); status != http.StatusNotFound {
		t.Errorf("another tenant's archived session: %d %s", status, body)
	}

	// Truncated: the log's first record (acme:h-1's SessionCreated) is
	// deleted, as retention deletes it.
	parts, err := query.NewKafkaPartitions(kafka.Config{Brokers: f.brokers}, topic)
	if err != nil {
		t.Fatal(err)
	}
	defer parts.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var offs kadm.Offsets
	offs.Add(kadm.Offset{Topic: topic, Partition: 0, At: 1})
	if resp, err := kadm.NewClient(cl).DeleteRecords(ctx, offs); err != nil || resp.Error() != nil {
		t.Fatalf("delete records: %v %v", err, resp.Error())
	}
	tsrv, _ := f.server(query.Options{LogStarts: parts})
	status, body := f.asOf(tsrv, "reader", id, "3")
	var p struct {
		Type           string `json:"type"`
		EarliestOffset *int64 `json:"earliestOffset"`
	}
	if status != http.StatusConflict || json.Unmarshal([]byte(body), &p) != nil || p.Type != query.TypeHistoryTruncated || p.EarliestOffset == nil || *p.EarliestOffset != 1 {
		t.Errorf("as of, a truncated session: %d %s, want 409 history-truncated", status, body)
	}
	if status, _ := f.asOf(tsrv, "reader", "acme:h-2", "3"); status != http.StatusOK {
		t.Errorf("as of, a session the log holds whole: %d", status)
	}
}
