package query_test

import (
	"encoding/binary"
	"encoding/json"
	"net/http"
	"net/url"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/correx/sessions/internal/archive"
	"github.com/correx/sessions/internal/query"
	"github.com/correx/sessions/internal/s3test"
	"github.com/correx/sessions/internal/testwait"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/correx/sessions/pkg/wire"
)

// hugeSession folds a completed session of n events (n-3 model turns) at
// offsets first, first+1, ... of partition 0, and its history.
func hugeSession(id string, first int64, n int) (*snapshot.Snapshot, []wire.HistoryEntry) {
	var s snapshot.Snapshot
	var r fsm.Reducer
	hist := make([]wire.HistoryEntry, 0, n)
	at := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	for i := range n {
		et := fsm.ModelRequested
		switch i {
		case 0:
			et = fsm.SessionCreated
		case 1:
			et = fsm.SessionStarted
		case n - 1:
			et = fsm.SessionCompleted
		}
		var eid fsm.EventID
		binary.BigEndian.PutUint64(eid[:], uint64(first))
		binary.BigEndian.PutUint64(eid[8:], uint64(i+1))
		e := fsm.NewEvent(eid, id, et, at.Add(time.Duration(i)*time.Millisecond), fsm.Fields{Goal: "g"})
		pos := snapshot.Position{Offset: first + int64(i)}
		o, _ := s.Fold(&r, &e, pos)
		hist = append(hist, wire.HistoryEntry{Version: s.Version, Position: pos, EventID: e.ID.String(), Type: e.TypeName(),
			OccurredAt: e.OccurredAt, Outcome: o.Result.String(), To: o.To.String()})
	}
	return &s, hist
}

// putWhole writes an object as format 1 objects were written (one JSON
// document, archive.Encode) into the bucket at bucketURL.
func putWhole(t testing.TB, bucketURL string, o *archive.Object) {
	t.Helper()
	b, err := archive.OpenBucket(ctx, bucketURL)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	enc, err := archive.Encode(o)
	if err != nil {
		t.Fatal(err)
	}
	key := archive.Key(o.Snapshot.ID, o.Snapshot.State.String(), archive.EndedAt(o.Snapshot))
	w, err := b.NewWriter(ctx, key, "application/json")
	if err == nil {
		_, err = w.Write(enc)
		if cerr := w.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		t.Fatal(err)
	}
}

// pageAll reads an archived history through the API in pages of limit,
// and the bytes the archive read for each page.
func (f *archiveFixture) pageAll(role, id string, limit int) ([]wire.HistoryEntry, []int64) {
	f.t.Helper()
	var all []wire.HistoryEntry
	var read []int64
	q := "?limit=" + strconv.Itoa(limit)
	for pages := 0; ; pages++ {
		if pages > 1000 {
			f.t.Fatal("paging does not end")
		}
		before := f.arch.BytesRead()
		status, body := f.get(role, "/v1/sessions/"+id+"/history"+q)
		var p wire.HistoryPage
		if status != http.StatusOK || json.Unmarshal(body, &p) != nil {
			f.t.Fatalf("history page %d of %s: %d %.300s", pages, id, status, body)
		}
		read = append(read, f.arch.BytesRead()-before)
		all = append(all, p.History...)
		if p.Next == nil {
			return all, read
		}
		q = "?limit=" + strconv.Itoa(limit) + "&after=" + url.QueryEscape(*p.Next)
	}
}

// TestArchivedReadsByRange: GET of a huge archived session reads its head
// (the object's tail and first line), not its history; the pages of its
// history read about a chunk each, the head being kept after the first;
// and the same session archived in format 1 answers the same snapshot and
// the same history.
func TestArchivedReadsByRange(t *testing.T) {
	dir := "file://" + filepath.ToSlash(t.TempDir())
	f := newArchiveFixtureAt(t, true, dir)
	s2, hist := hugeSession("acme:v2", 1000, 30000)
	if err := f.arch.Put(ctx, &archive.Object{Snapshot: s2, History: hist, ArchivedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	s1, hist1 := hugeSession("acme:v1", 1000, 30000)
	putWhole(t, dir, &archive.Object{Snapshot: s1, History: hist1, ArchivedAt: time.Now()})
	h, err := f.arch.Head(ctx, "acme:v2")
	if err != nil {
		t.Fatal(err)
	}
	size := h.Size
	if size < 4*archive.ChunkBytes {
		t.Fatalf("the object is %d bytes: too small to tell a range read from a whole one", size)
	}

	before := f.arch.BytesRead()
	status, body := f.get("acme", "/v1/sessions/acme:v2")
	if status != http.StatusOK || !strings.HasSuffix(string(body), `,"archived":true}`+"\n") {
		t.Fatalf("archived read: %d %.300s", status, body)
	}
	if read := f.arch.BytesRead() - before; read > size/8 {
		t.Errorf("GET read %d bytes of a %d-byte object", read, size)
	}
	status, body1 := f.get("acme", "/v1/sessions/acme:v1")
	own1, err := s1.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if want := string(own1[:len(own1)-1]) + `,"archived":true}` + "\n"; status != http.StatusOK || string(body1) != want {
		t.Errorf("format 1 read: %d %.300s", status, body1)
	}

	got, read := f.pageAll("acme", "acme:v2", 1000)
	if !reflect.DeepEqual(got, hist) {
		t.Fatalf("paged %d entries of %d (or they differ)", len(got), len(hist))
	}
	for i, n := range read {
		// The first page may read the head again (the GET kept it, unless
		// evicted); every page reads the chunks of its 1,000 entries, one
		// or two (and one more to see that entries follow).
		if n > 3*archive.ChunkBytes+archive.TailBytes {
			t.Errorf("page %d read %d bytes (chunks of %d bytes)", i, n, archive.ChunkBytes)
		}
	}
	got1, _ := f.pageAll("acme", "acme:v1", 1000)
	if len(got1) != len(hist1) || !reflect.DeepEqual(got1, hist1) {
		t.Fatalf("format 1: paged %d entries of %d (or they differ)", len(got1), len(hist1))
	}
}

// TestArchivedReadsHaveTheirOwnSlots: while the archive hangs (the S3
// server stopped with SIGSTOP), one token's archived reads take its share
// of the archived reads' slots and no more: its next one answers 503 with
// Retry-After at once, while another token's still gets a slot. They take
// none of the replays' slots: three archived histories run at once with
// MaxReplays 1. Once the archive continues, each answers.
func TestArchivedReadsHaveTheirOwnSlots(t *testing.T) {
	srv := s3test.Start(t)
	f := newArchiveFixtureWith(t, true, srv.Bucket(t, "slots"), func(o *query.Options) {
		o.MaxReplays, o.MaxArchiveReads, o.MaxArchiveReadsPerPrincipal = 1, 3, 2
		o.ArchiveHeadCache = -1
	})
	f.archiveSession("acme:a1", 10)
	f.archiveSession("other:b1", 20)

	srv.Pause()
	paused := true
	defer func() {
		if paused {
			srv.Resume()
		}
	}()
	type answer struct {
		status int
		body   string
	}
	answers := make(chan answer, 3)
	var wg sync.WaitGroup
	start := func(role, path string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, body := f.get(role, path)
			answers <- answer{status, string(body)}
		}()
	}
	start("acme", "/v1/sessions/acme:a1/history")
	start("acme", "/v1/sessions/acme:a1")
	testwait.Until(t, "acme's two archived reads to hold their slots", 10*time.Second, func() bool { return f.handler.ArchiveReadsRunning() == 2 })

	req, _ := http.NewRequest(http.MethodGet, f.srv.URL+"/v1/sessions/acme:a1/history", nil)
	req.Header.Set("Authorization", "Bearer "+f.tokens["acme"])
	began := time.Now()
	resp, err := f.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("acme's third archived read: %d (Retry-After %q), want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if d := time.Since(began); d > 2*time.Second {
		t.Errorf("the refused read took %v: it waited", d)
	}
	start("reader", "/v1/sessions/other:b1/history")
	testwait.Until(t, "another token's archived read to get a slot", 10*time.Second, func() bool { return f.handler.ArchiveReadsRunning() == 3 })

	srv.Resume()
	paused = false
	wg.Wait()
	close(answers)
	for a := range answers {
		if a.status != http.StatusOK {
			t.Errorf("a held archived read, once the archive continued: %d %.300s", a.status, a.body)
		}
	}
	if n := f.handler.ArchiveReadsRunning(); n != 0 {
		t.Errorf("%d slots still held", n)
	}
}

// TestArchiveHeadCacheIsBoundedInBytes: archived heads are kept within
// ArchiveHeadCache bytes, the least recently used leaving first; a head
// kept is read again without the archive; one larger than a quarter of
// the bound (a format 1 object's, which holds its history) is not kept.
func TestArchiveHeadCacheIsBoundedInBytes(t *testing.T) {
	dir := "file://" + filepath.ToSlash(t.TempDir())
	first := newArchiveFixtureAt(t, true, dir)
	first.archiveSession("acme:c00", 0)
	if status, _ := first.get("acme", "/v1/sessions/acme:c00"); status != http.StatusOK {
		t.Fatalf("acme:c00: %d", status)
	}
	h, err := first.arch.Head(ctx, "acme:c00")
	if err != nil {
		t.Fatal(err)
	}
	one := h.Footprint() + int64(len("acme:c00"))
	bound := 4*one + one/2
	f := newArchiveFixtureWith(t, true, dir, func(o *query.Options) { o.ArchiveHeadCache = bound })
	for i := range 20 {
		id := "acme:c" + strconv.Itoa(100 + i)[1:]
		if i > 0 {
			f.archiveSession(id, int64(10*i))
		}
		if status, body := f.get("acme", "/v1/sessions/"+id); status != http.StatusOK {
			t.Fatalf("%s: %d %s", id, status, body)
		}
		if held, n := f.handler.ArchiveHeadsHeld(); held > bound || n > 4 {
			t.Fatalf("after %d reads: %d heads kept in %d bytes, bound %d", i+1, n, held, bound)
		}
	}
	if held, n := f.handler.ArchiveHeadsHeld(); n != 4 || held > bound {
		t.Fatalf("%d heads kept in %d bytes, want 4 within %d", n, held, bound)
	}
	before := f.arch.BytesRead()
	if status, _ := f.get("acme", "/v1/sessions/acme:c19"); status != http.StatusOK || f.arch.BytesRead() != before {
		t.Errorf("a kept head read again: %d, %d bytes read", status, f.arch.BytesRead()-before)
	}
	if status, _ := f.get("acme", "/v1/sessions/acme:c00"); status != http.StatusOK || f.arch.BytesRead() == before {
		t.Errorf("an evicted head: %d, %d bytes read", status, f.arch.BytesRead()-before)
	}
	s1, hist1 := hugeSession("acme:big", 1000, 2000)
	putWhole(t, dir, &archive.Object{Snapshot: s1, History: hist1, ArchivedAt: time.Now()})
	if status, _ := f.get("acme", "/v1/sessions/acme:big"); status != http.StatusOK {
		t.Fatalf("format 1 read: %d", status)
	}
	if held, n := f.handler.ArchiveHeadsHeld(); n != 4 || held > bound {
		t.Fatalf("after a large head: %d heads kept in %d bytes, want 4 within %d", n, held, bound)
	}
}
