package e2e_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/correx/sessions/internal/devstack"
	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/kafkatest"
	"github.com/correx/sessions/internal/loadgen"
	"github.com/correx/sessions/internal/projector"
	"github.com/correx/sessions/internal/redisconn"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
)

// TestBrokerLeaderMoves runs the pipeline on a three-broker Kafka cluster
// (kfake) whose partition leaders move every 150 ms while ingest produces
// and the projector folds: one partition of the events topic, of the
// change feed or of the dead-letter topic moved to another broker, and
// every fourth time every partition of every topic at once, with the group
// coordinators moved too. Producers and consumers must follow the leaders
// (NOT_LEADER_OR_FOLLOWER, then new metadata) without losing or repeating
// an effect: every snapshot must equal the fold of what ingest accepted.
func TestBrokerLeaderMoves(t *testing.T) {
	if testing.Short() {
		t.Skip("leader moves")
	}
	t.Parallel() // its own broker, redis-server and stack; mostly waits on leader moves
	const partitions = 6
	broker := kafkatest.Start(t, kfake.NumBrokers(3), kfake.DefaultNumPartitions(partitions))
	srv := redistest.Start(t)
	st, err := devstack.Start(context.Background(), devstack.Options{Brokers: broker.ListenAddrs(), Redis: redisconn.Config{URL: srv.URL()},
		Partitions: partitions, Log: quietLog(),
		Projector: func(c *projector.Config) { c.FlushInterval = 50 * time.Millisecond }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Stop(); err != nil {
			t.Errorf("stack: %v", err)
		}
	})
	waitReady(t, st)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var moves, shuffles int
	wg.Add(1)
	go func() {
		defer wg.Done()
		topics := []string{st.Topic, st.Topic + ".changes", kafka.DLQTopic(st.Topic)}
		rng := rand.New(rand.NewPCG(1, 2))
		tick := time.NewTicker(150 * time.Millisecond)
		defer tick.Stop()
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if i%4 == 0 {
				broker.ShufflePartitionLeaders()
				broker.RehashCoordinators()
				shuffles++
				continue
			}
			topic, p := topics[rng.IntN(len(topics))], int32(rng.IntN(partitions))
			to := (broker.LeaderFor(topic, p) + 1 + int32(rng.IntN(2))) % 3
			if broker.LeaderFor(topic, p) >= 0 && broker.MoveTopicPartition(topic, p, to) == nil {
				moves++
			}
		}
	}()

	began := time.Now()
	rep, err := loadgen.Run(context.Background(), loadgen.Config{IngestURL: st.IngestURL, QueryURL: st.QueryURL,
		Sessions: 800, Concurrency: 6, Batch: 20, Rate: 2000, InvalidShare: 0.03, DuplicateShare: 0.03, Seed: 11,
		Prefix: "lm", Verify: true, KeepWritten: true, Client: apiCheck.Client(nil)})
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d events in %d requests (%.0f events/s), %d resent by the client; %d single partition moves and %d moves of every leader with the coordinators, over %v; verified %d sessions through the query service",
		rep.Events, rep.Requests, rep.EventsPerSecond(), rep.Retries, moves, shuffles, time.Since(began).Round(time.Millisecond), rep.Verified)
	if len(rep.Mismatches) > 0 {
		t.Fatalf("%d mismatches, first: %s", len(rep.Mismatches), rep.Mismatches[0])
	}
	if rep.Rejected != 0 || rep.Verified == 0 {
		t.Fatalf("rejected requests %d, verified %d", rep.Rejected, rep.Verified)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	store, err := snapshot.NewStore(rdb, st.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	// A resent request may have left a copy of an event in Kafka that
	// ingest could not confirm (a duplicate to the fold): those sessions
	// are compared by loadgen's verification, the others byte for byte.
	written := rep.Written
	for id := range rep.Resent {
		delete(written, id)
	}
	assertExact(t, store, written)
}
