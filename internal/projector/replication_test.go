package projector

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/kafkatest"
	"github.com/correx/sessions/internal/projector/projstore"
	"github.com/correx/sessions/internal/redisconn"
	"github.com/correx/sessions/internal/redisconn/redisclient"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/internal/testwait"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/twmb/franz-go/pkg/kadm"
)

// TestWaitReplicasOnCluster runs a projector with RedisWaitReplicas=1 on a
// Redis Cluster of three masters with one replica each. With one replica
// hung (SIGSTOP), the projector still writes a batch (every master takes
// it) but its wait for the replicas fails and no checkpoint moves; once
// the replica is back (SIGCONT) every checkpoint reaches the log's end, and
// the read model equals what a projector that does not wait folds from the
// same log.
func TestWaitReplicasOnCluster(t *testing.T) {
	t.Parallel() // its own cluster and broker; mostly waits on replication
	c := redistest.StartClusterWithReplicas(t, 3)
	broker := kafkatest.Start(t)
	// The env's redis-server is only named in the configurations: the
	// projectors get their stores, on the cluster.
	e := &env{t: t, brokers: broker.ListenAddrs(), srv: c.Nodes[0]}
	cl := e.client()
	if _, err := kafka.EnsureTopic(ctx, kadm.NewClient(cl), topic, 4); err != nil {
		t.Fatal(err)
	}
	if _, err := kafka.EnsureTopic(ctx, kadm.NewClient(cl), kafka.DLQTopic(topic), 4); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	rdb, err := redisclient.Open(redisconn.Config{URL: redistest.ClusterURL(c.Nodes...), Cluster: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	store := func(prefix string, wait int) *projstore.Store {
		st, err := projstore.New(rdb, prefix)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.WaitReplicas(wait, 200*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		return st
	}
	var logs lockedBuffer
	run := func(cfg Config, st *projstore.Store) *running {
		p := New(cfg, st, WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		c, cancel := context.WithCancel(ctx)
		r := &running{p: p, stop: cancel, done: make(chan error, 1)}
		go func() { r.done <- p.Run(c) }()
		return r
	}
	waitCaughtUp := func(st *projstore.Store) {
		t.Helper()
		ends := endOffsets(t, e.brokers)
		testwait.UntilSeen(t, "caught up", 60*time.Second, func() (bool, string) {
			cps, err := st.Checkpoints(ctx, topic)
			return err == nil && caughtUp(cps, ends), fmt.Sprintf("checkpoints %v, ends %v", cps, ends)
		})
	}

	waiting := store("w", 1)
	cfg := e.config("w")
	cfg.RedisWaitReplicas, cfg.RedisWaitTimeout = 1, 200*time.Millisecond
	r := run(cfg, waiting)
	e.produce(workloadEvents(1, 100))
	waitCaughtUp(waiting)

	before, err := waiting.Checkpoints(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Replicas[1].Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	hung := true
	t.Cleanup(func() {
		if hung {
			_ = c.Replicas[1].Signal(syscall.SIGCONT)
		}
	})
	more := workloadEvents(2, 100)
	e.produce(more)
	// The batch with the new events is written, and its wait for the
	// replicas failed: its checkpoints would be written by now.
	testwait.Until(t, "a wait for the replicas that failed", 30*time.Second, func() bool {
		return strings.Contains(logs.String(), snapshot.ErrNotReplicated.Error())
	})
	var ids []string
	for i := range more {
		ids = append(ids, more[i].SessionID)
	}
	snaps, err := waiting.GetMany(ctx, ids)
	stored := 0
	for _, s := range snaps {
		if s != nil {
			stored++
		}
	}
	if err != nil || stored == 0 {
		t.Fatalf("none of the new sessions is stored: %v", err)
	}
	after, err := waiting.Checkpoints(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	for p, cp := range after {
		if cp.Offset != before[p].Offset {
			t.Fatalf("partition %d's checkpoint moved from %d to %d with a replica hung", p, before[p].Offset, cp.Offset)
		}
	}
	if err := c.Replicas[1].Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	hung = false
	waitCaughtUp(waiting)
	if err := r.halt(); err != nil {
		t.Fatal(err)
	}

	plain := store("p", 0)
	pcfg := e.config("p")
	pcfg.Group = "plain"
	ref := run(pcfg, plain)
	waitCaughtUp(plain)
	if err := ref.halt(); err != nil {
		t.Fatal(err)
	}
	e.assertSame(dumpStore(t, plain), dumpStore(t, waiting))
}

// lockedBuffer is a log's output, read while it is written.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// dumpStore returns every snapshot of st, encoded, by session id.
func dumpStore(t *testing.T, st *projstore.Store) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	cursor := ""
	for {
		page, err := st.List(ctx, fsm.StateNone, cursor, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range page.Snapshots {
			out[s.ID] = s.AppendBinary(nil)
		}
		if page.Next == "" {
			return out
		}
		cursor = page.Next
	}
}
