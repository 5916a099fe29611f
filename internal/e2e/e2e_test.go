// Package e2e_test runs the whole pipeline in one process (ingest, projector,
// query, a Kafka-protocol broker over TCP and a real redis-server) and checks
// the read model against folds done directly with pkg/fsm.
package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/correx/sessions/internal/loadgen"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/correx/sessions/pkg/testkit"
	"github.com/redis/go-redis/v9"
)

func quietLog() *slog.Logger {
	if os.Getenv("E2E_VERBOSE") != "" {
		return slog.Default()
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
}

// startStack starts the pipeline on a real redis-server, with the harness
// that services using correx start it with (pkg/testkit), and returns the
// store over it and a client of that server.
func startStack(t *testing.T, partitions int) (*testkit.Stack, *snapshot.Store, *redis.Client) {
	t.Helper()
	srv := redistest.Start(t)
	st := testkit.Start(t, testkit.WithRedisURL(srv.URL()), testkit.WithPartitions(partitions),
		testkit.WithLogger(quietLog()), testkit.WithFlushInterval(50*time.Millisecond))
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	store, err := snapshot.NewStore(rdb, st.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	return st, store, rdb
}

// assertExact compares every stored snapshot with the reference fold of the
// events Kafka accepted for it, byte for byte (positions come from the store,
// since the reference has no log).
func assertExact(t *testing.T, store *snapshot.Store, written map[string][]fsm.Event) {
	t.Helper()
	ids := make([]string, 0, len(written))
	for id := range written {
		ids = append(ids, id)
	}
	stored, err := store.GetMany(context.Background(), ids)
	if err != nil {
		t.Fatal(err)
	}
	bad := 0
	for i, id := range ids {
		ref := loadgen.Expected(written[id])
		if !ref.Exists() {
			if stored[i] != nil {
				t.Errorf("%s: stored, but the reference has no session", id)
			}
			continue
		}
		if stored[i] == nil {
			t.Errorf("%s: not stored", id)
			bad++
			continue
		}
		want := snapshot.Snapshot{Session: ref, Position: stored[i].Position, FirstOffset: stored[i].FirstOffset}
		if !bytes.Equal(stored[i].AppendBinary(nil), want.AppendBinary(nil)) {
			bad++
			if bad <= 5 {
				got, _ := stored[i].MarshalJSON()
				exp, _ := want.MarshalJSON()
				t.Errorf("%s differs from the reference fold\n got %s\nwant %s", id, got, exp)
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d sessions differ", bad, len(ids))
	}
}

func TestEndToEnd(t *testing.T) {
	st, store, rdb := startStack(t, 6)
	rep, err := loadgen.Run(context.Background(), loadgen.Config{
		IngestURL: st.IngestURL, QueryURL: st.QueryURL, Sessions: 2000, Concurrency: 8, Batch: 40,
		InvalidShare: 0.05, DuplicateShare: 0.05, Seed: 42, Verify: true, KeepWritten: true,
		Client: apiCheck.Client(nil),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sent %d events in %d requests (%.0f events/s), verified %d sessions", rep.Events, rep.Requests, rep.EventsPerSecond(), rep.Verified)
	if len(rep.Mismatches) > 0 {
		t.Fatalf("%d mismatches, first: %s", len(rep.Mismatches), rep.Mismatches[0])
	}
	if rep.Verified != 2000 || rep.Rejected != 0 {
		t.Fatalf("verified %d of 2000, rejected requests %d", rep.Verified, rep.Rejected)
	}
	assertExact(t, store, rep.Written)
	assertLastPositions(t, store, rep)

	// Replays from the log match what is stored; a tampered snapshot does not.
	ids := []string{}
	for id := range rep.Written {
		if len(ids) < 5 {
			ids = append(ids, id)
		}
	}
	for _, id := range ids {
		if got := replay(t, st.QueryURL, id); !got.MatchesStored {
			t.Errorf("%s: replay does not match the stored snapshot", id)
		}
	}
	tampered, err := store.Get(context.Background(), ids[0])
	if err != nil {
		t.Fatal(err)
	}
	tampered.Counters.ModelTurns += 100
	key := fmt.Sprintf("%s:{b%03d}:s:%s", st.Prefix, snapshot.Bucket(ids[0]), ids[0])
	if err := rdb.Set(context.Background(), key, tampered.AppendBinary(nil), 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got := replay(t, st.QueryURL, ids[0]); got.MatchesStored {
		t.Error("replay matches a tampered snapshot")
	} else if got.Snapshot.Counters.ModelTurns+100 != tampered.Counters.ModelTurns {
		t.Errorf("replayed modelTurns %d, stored %d", got.Snapshot.Counters.ModelTurns, tampered.Counters.ModelTurns)
	}
}

func replay(t *testing.T, queryURL, id string) (out struct {
	Snapshot      *snapshot.Snapshot `json:"snapshot"`
	MatchesStored bool               `json:"matchesStored"`
}) {
	t.Helper()
	resp, err := http.Get(queryURL + "/v1/sessions/" + id + "/replay")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("replay %s: %d %s", id, resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatalf("replay %s: %v: %s", id, err, body)
	}
	return out
}

// assertLastPositions checks the report's last accepted positions: with
// nothing resent, every stored snapshot sits exactly at the position ingest
// returned for its session's last event.
func assertLastPositions(t *testing.T, store *snapshot.Store, rep loadgen.Report) {
	t.Helper()
	if len(rep.Resent) != 0 || rep.Retries != 0 {
		t.Fatalf("%d sessions resent (%d retries) against a healthy stack", len(rep.Resent), rep.Retries)
	}
	if len(rep.Last) != len(rep.Written) {
		t.Fatalf("last positions for %d sessions, %d sessions written", len(rep.Last), len(rep.Written))
	}
	for id, pos := range rep.Last {
		s, err := store.Get(context.Background(), id)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if s.Position != pos {
			t.Fatalf("%s stored at %s, ingest's last position %s", id, s.Position, pos)
		}
	}
}
