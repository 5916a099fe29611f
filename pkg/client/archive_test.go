package client_test

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/archive"
	"github.com/correx/sessions/internal/query"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/pkg/client"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
)

// TestArchive: Archive lists archived sessions page by page, and Get reads
// an archived session with Archived set.
func TestArchive(t *testing.T) {
	ctx := context.Background()
	r := redistest.Start(t)
	store, err := snapshot.NewStore(r.Client(t), "carch")
	if err != nil {
		t.Fatal(err)
	}
	arch, err := archive.Open(ctx, "file://"+filepath.ToSlash(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	defer arch.Close()
	at := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	for i, id := range []string{"arc:1", "arc:2", "arc:3", "other:1"} {
		var s snapshot.Snapshot
		var red fsm.Reducer
		for j, et := range []fsm.EventType{fsm.SessionCreated, fsm.SessionStarted, fsm.SessionCompleted} {
			e := fsm.NewEvent(fsm.EventID{byte(i + 1), byte(j + 1)}, id, et, at.Add(time.Duration(j)*time.Second), fsm.Fields{})
			s.Fold(&red, &e, snapshot.Position{Offset: int64(10*i + j)})
		}
		if err := arch.Put(ctx, &archive.Object{Snapshot: &s, ArchivedAt: at}); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(query.NewHandler(store, "events", nil, query.Options{Archive: arch}))
	defer srv.Close()
	c, err := client.New(client.QueryURL(srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	var pages []string
	for p, err := range c.Archive(ctx, client.IDPrefix("arc:"), client.Limit(2)) {
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, s := range p.Sessions {
			ids = append(ids, s.SessionID+"/"+s.State+"/"+s.EndedAt.Format(time.TimeOnly))
		}
		pages = append(pages, strings.Join(ids, ","))
	}
	if got := strings.Join(pages, ";"); got != "arc:1/COMPLETED/06:00:02,arc:2/COMPLETED/06:00:02;arc:3/COMPLETED/06:00:02" {
		t.Errorf("pages %s", got)
	}
	s, err := c.Get(ctx, "arc:2")
	if err != nil || !s.Archived || s.State != "COMPLETED" {
		t.Fatalf("get: %+v %v", s, err)
	}
}
