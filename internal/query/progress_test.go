package query_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/correx/sessions/internal/query"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
)

// TestWaitingReadWokenByACheckpoint: a read waiting for a position is
// answered at the checkpoint write that covers it (SaveCheckpoints
// announces it, snapshot.Store.Progress delivers it), not at its next
// poll: the poll here is an hour, so only the announcement can answer it
// within its wait.
func TestWaitingReadWokenByACheckpoint(t *testing.T) {
	store, err := snapshot.NewStore(redistest.Start(t).Client(t), "q")
	if err != nil {
		t.Fatal(err)
	}
	progress, err := store.Progress(t.Context(), topic)
	if err != nil {
		t.Fatal(err)
	}
	h := query.NewHandler(store, topic, nil, query.Options{PollEvery: time.Hour, Progress: progress})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	f := &fixture{t: t, store: store, h: h, srv: srv}
	f.put("w-1", 0, 0, fsm.SessionCreated)
	var written atomic.Int64
	whenWaiting(h, 1, func() {
		written.Store(time.Now().UnixNano())
		f.put("w-1", 0, 0, fsm.SessionCreated, fsm.SessionInitializing, fsm.SessionStarted)
		if _, err := store.SaveCheckpoints(ctx, topic, []snapshot.Checkpoint{{Partition: 0, Offset: 3, HighWatermark: 3}}, time.Now()); err != nil {
			t.Error(err)
		}
	})
	resp, body := f.get("/v1/sessions/w-1?minPosition=0:2&wait=10s")
	// Without the announcement the read would check again only at the end
	// of its wait, 10 s in, and answer then: the answer must come well
	// before (5 s leaves room for a loaded machine).
	if after := time.Since(time.Unix(0, written.Load())); written.Load() == 0 || after > 5*time.Second {
		t.Fatalf("waiting read answered %v after the checkpoint write, want at it (the wait is 10 s, the poll an hour)", after)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("waiting read: %d %s, want 200 at the checkpoint write", resp.StatusCode, body)
	}
	var got struct{ Version uint64 }
	if err := json.Unmarshal(body, &got); err != nil || got.Version != 3 {
		t.Fatalf("waiting read: version %d (%v), want 3", got.Version, err)
	}
}
