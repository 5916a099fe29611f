package cli

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/correx/sessions/internal/archive"
	"github.com/correx/sessions/internal/query"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
)

// TestArchiveCommands: correx archive lists the archived sessions, and
// correx get marks an archived session's state.
func TestArchiveCommands(t *testing.T) {
	ctx := context.Background()
	r := redistest.Start(t)
	store, err := snapshot.NewStore(r.Client(t), "cliarch")
	if err != nil {
		t.Fatal(err)
	}
	arch, err := archive.Open(ctx, "file://"+filepath.ToSlash(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	defer arch.Close()
	at := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	end := map[string]fsm.EventType{"acme:old-1": fsm.SessionCompleted, "acme:old-2": fsm.SessionCancelled, "beta:old-3": fsm.SessionCompleted}
	for i, id := range []string{"acme:old-1", "acme:old-2", "beta:old-3"} {
		var s snapshot.Snapshot
		var red fsm.Reducer
		types := []fsm.EventType{fsm.SessionCreated, fsm.SessionStarted, end[id]}
		if end[id] == fsm.SessionCancelled {
			types = []fsm.EventType{fsm.SessionCreated, fsm.SessionStarted, fsm.CancellationRequested, fsm.SessionCancelled}
		}
		for j, et := range types {
			e := fsm.NewEvent(fsm.EventID{byte(i + 1), byte(j + 1)}, id, et, at.Add(time.Duration(j)*time.Second), fsm.Fields{Goal: "old work"})
			s.Fold(&red, &e, snapshot.Position{Offset: int64(10*i + j)})
		}
		if !s.Terminal() {
			t.Fatalf("%s is %s, not closed", id, s.State)
		}
		if err := arch.Put(ctx, &archive.Object{Snapshot: &s, ArchivedAt: at}); err != nil {
			t.Fatal(err)
		}
	}
	// A live session, in the read model: not archived.
	var live snapshot.Snapshot
	var red fsm.Reducer
	for j, et := range []fsm.EventType{fsm.SessionCreated, fsm.SessionStarted} {
		e := fsm.NewEvent(fsm.EventID{9, byte(j + 1)}, "acme:live", et, at.Add(time.Duration(j)*time.Second), fsm.Fields{Goal: "live work"})
		live.Fold(&red, &e, snapshot.Position{Offset: int64(100 + j)})
	}
	if _, err := store.PutBatch(ctx, []snapshot.Entry{snapshot.NewEntry(&live)}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(query.NewHandler(store, "events", nil, query.Options{Archive: arch}))
	defer srv.Close()
	env := map[string]string{"CORREX_QUERY_URL": srv.URL}
	golden(t, "archive", runCLI(t, env, "", "archive"))
	golden(t, "archive_prefix_json", runCLI(t, env, "", "archive", "--prefix", "acme:old-2", "-o", "json"))
	golden(t, "archive_bad_prefix", runCLI(t, env, "", "archive", "--prefix", "a b"))
	golden(t, "get_archived", runCLI(t, env, "", "get", "acme:old-1"))
	golden(t, "archive_ls_prefix", runCLI(t, env, "", "archive", "ls", "--prefix", "beta:"))
	golden(t, "archive_get", runCLI(t, env, "", "archive", "get", "acme:old-2", "-o", "wide"))
	golden(t, "archive_get_live", runCLI(t, env, "", "archive", "get", "acme:live"))
}
