package archive

import (
	"bufio"
	"context"
	"errors"
	"github.com/correx/sessions/internal/s3test"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/pkg/snapshot"
	"github.com/correx/sessions/pkg/wire"
)

// terminal returns the corpus's terminal snapshots in their stored JSON
// form (pkg/snapshot/testdata), decoded.
func terminal(t testing.TB) []*snapshot.Snapshot {
	t.Helper()
	f, err := os.Open("../../pkg/snapshot/testdata/json-v3.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []*snapshot.Snapshot
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var s snapshot.Snapshot
		if err := s.UnmarshalJSON(sc.Bytes()); err != nil {
			continue // the API form of a line is not the stored one
		}
		if s.Terminal() {
			out = append(out, &s)
		}
	}
	if len(out) == 0 {
		t.Fatal("no terminal snapshot in the corpus")
	}
	return out
}

func TestPutGetList(t *testing.T) {
	for _, c := range []struct {
		scheme string
		bucket func(t *testing.T) string
	}{
		{"mem", func(*testing.T) string { return "mem://" }},
		{"file", func(t *testing.T) string { return "file://" + filepath.ToSlash(t.TempDir()) }},
		{"s3", func(t *testing.T) string { return s3test.StartBucket(t) }}, // a real S3-compatible server
	} {
		t.Run(c.scheme, func(t *testing.T) {
			u := c.bucket(t)
			ctx := context.Background()
			s, err := Open(ctx, u)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			snaps := terminal(t)
			hist := []wire.HistoryEntry{{Version: 1, EventID: "e", Type: "SessionCreated", Outcome: "applied", To: "CREATED"}}
			ids := map[string]bool{}
			for _, sn := range snaps {
				if ids[sn.ID] {
					continue
				}
				ids[sn.ID] = true
				if err := s.Put(ctx, &Object{Snapshot: sn, History: hist, ArchivedAt: time.Unix(5, 0)}); err != nil {
					t.Fatal(err)
				}
			}
			put := map[string]*snapshot.Snapshot{}
			for _, sn := range snaps {
				if put[sn.ID] == nil {
					put[sn.ID] = sn
				}
			}
			for id, sn := range put {
				o, err := s.Get(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if o.Snapshot.ID != id || o.Snapshot.Digest != sn.Digest || o.Snapshot.State != sn.State {
					t.Fatalf("%s: got %s", sn.ID, o.Snapshot.ID)
				}
				if len(o.History) != 1 || o.History[0].EventID != "e" || !o.ArchivedAt.Equal(time.Unix(5, 0)) {
					t.Fatalf("%s: history %+v archivedAt %v", sn.ID, o.History, o.ArchivedAt)
				}
			}
			if _, err := s.Get(ctx, "never-archived"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("missing session: %v", err)
			}
			// Paged listing sees every session once.
			seen := map[string]bool{}
			cursor := ""
			for pages := 0; ; pages++ {
				if pages > len(ids)+1 {
					t.Fatal("listing does not end")
				}
				page, next, err := s.List(ctx, "", cursor, 1)
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range page {
					if seen[e.SessionID] || !ids[e.SessionID] || e.State == "" || e.EndedAt.IsZero() {
						t.Fatalf("listing entry %+v", e)
					}
					seen[e.SessionID] = true
				}
				if next == "" {
					break
				}
				cursor = next
			}
			if len(seen) != len(ids) {
				t.Fatalf("listed %d of %d", len(seen), len(ids))
			}
			if _, _, err := s.List(ctx, "", "!!", 10); !errors.Is(err, ErrBadCursor) {
				t.Fatalf("bad cursor: %v", err)
			}
		})
	}
}

func TestPutRefusesLiveSession(t *testing.T) {
	s, err := Open(context.Background(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	var live snapshot.Snapshot
	live.ID = "live"
	if err := s.Put(context.Background(), &Object{Snapshot: &live}); err == nil {
		t.Fatal("a live session was archived")
	}
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ url, want string }{
		{"ftp://x/y", `unknown scheme "ftp"`},
		{"file:///nonexistent/dir/for/archive", "no such file"},
		{"::", "archive URL"},
		{"file://otherhost/dir", `not one on host "otherhost"`},
		{"file://", "names no directory"},
	} {
		_, err := Open(ctx, tc.url)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%q) = %v, want %q", tc.url, err, tc.want)
		}
	}
}
