package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/correx/sessions/internal/devstack"
	"github.com/correx/sessions/internal/loadgen"
	"github.com/correx/sessions/internal/projector"
	"github.com/correx/sessions/internal/redisconn"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/internal/testwait"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// clusterRecoveryBound is how long after a master's replica took over the
// projector and the query service may take to work again. The figures
// measured are logged; the bound only catches a stack that does not
// recover (go-redis keeps the dead master's slots until its next periodic
// reload of the slot map, 60 s by default, unless told otherwise).
const clusterRecoveryBound = 30 * time.Second

// TestClusterMasterFailover runs the pipeline on a Redis Cluster of three
// masters with one replica each, under load, kills one master (SIGKILL)
// and promotes its replica (CLUSTER FAILOVER TAKEOVER). It measures how
// long after the promotion the projector folds again, how long until
// every checkpoint reaches the log's end as it was at the failover, and
// how long until the query service answers 200 for a session on the
// failed shard; then every snapshot must equal the fold of what ingest
// accepted. In "first seed died" the master that dies is the one named
// first in CORREX_REDIS_URL: the other seeds (addr=) must be enough.
func TestClusterMasterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster failover")
	}
	t.Parallel() // its own clusters and stacks; mostly waits out the failovers
	for _, tc := range []struct {
		name      string
		firstSeed bool // the master that dies is the URL's first seed
		wait      bool // CORREX_REDIS_WAIT_REPLICAS=1
	}{{"replica promoted", false, false}, {"first seed died", true, false}, {"waiting for replicas", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each case its own cluster: the node timeouts overlap
			clusterFailover(t, tc.firstSeed, tc.wait)
		})
	}
}

// clusterFailover is one case of TestClusterMasterFailover. With wait, the
// projector waits for one replica of every master before each checkpoint
// (CORREX_REDIS_WAIT_REPLICAS=1): the promoted replica has none, so the
// checkpoints wait until the dead master comes back (as its replica), and
// the batch written while the master died is written again.
func clusterFailover(t *testing.T, firstSeed, wait bool) {
	ctx := context.Background()
	c := redistest.StartClusterWithReplicas(t, 3)
	const v = 1 // the master that dies: it serves slots 5461-10921
	victim, heir := c.Nodes[v], c.Replicas[v]
	seeds := []*redistest.Server{c.Nodes[0], c.Nodes[2], victim}
	if firstSeed {
		seeds = []*redistest.Server{victim, c.Nodes[0], c.Nodes[2]}
	}
	url := redistest.ClusterURL(seeds...)
	st, err := devstack.Start(ctx, devstack.Options{Redis: redisconn.Config{URL: url, Cluster: true}, Partitions: 6, Log: quietLog(),
		Projector: func(c *projector.Config) {
			c.FlushInterval = 50 * time.Millisecond
			if wait {
				c.RedisWaitReplicas = 1
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Stop(); err != nil {
			t.Errorf("stack: %v", err)
		}
	})
	waitReady(t, st)
	live := []string{c.Nodes[0].Addr, c.Nodes[2].Addr, heir.Addr}
	probe := &clusterProbe{addrs: live, prefix: st.Prefix, topic: st.Topic}
	kc, err := kgo.NewClient(kgo.SeedBrokers(st.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	adm := kadm.NewClient(kc)

	const prefix, seed, sessions = "cf", 7, 500
	loadDone := make(chan loadResult, 1)
	var accepted atomic.Int64
	go func() {
		rep, err := loadgen.Run(ctx, loadgen.Config{IngestURL: st.IngestURL, QueryURL: st.QueryURL, Sessions: sessions,
			Concurrency: 4, Batch: 20, Rate: 1000, DuplicateShare: 0.03, InvalidShare: 0.03, Prefix: prefix, Seed: seed,
			Verify: true, KeepWritten: true, Progress: func(n int) { accepted.Add(int64(n)) }, Client: apiCheck.Client(nil)})
		loadDone <- loadResult{rep, err}
	}()

	// Under way: a few seconds of load accepted, and a session on the
	// failed shard that the query service already serves.
	testwait.Until(t, "load accepted", 30*time.Second, func() bool { return accepted.Load() >= 2000 })
	onShard := victimBuckets(t, c.Nodes[0].Client(t), 5461, 10921)
	var onVictim string
	testwait.Until(t, "a session of the victim's shard stored", 30*time.Second, func() bool {
		for i := range sessions {
			id := prefix + "-" + strconv.FormatUint(seed, 36) + "-" + strconv.Itoa(i)
			if onShard[snapshot.Bucket(id)] && getStatus(st.QueryURL+"/v1/sessions/"+id) == 200 {
				onVictim = id
				return true
			}
		}
		return false
	})
	listEnds := func() map[int32]int64 {
		t.Helper()
		lo, err := adm.ListEndOffsets(ctx, st.Topic)
		if err != nil {
			t.Fatal(err)
		}
		out := map[int32]int64{}
		lo.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
		return out
	}

	killed := time.Now()
	victim.Stop()
	// Every event past this end came after the kill: a checkpoint beyond
	// it is a batch written since.
	atKill := listEnds()
	c.Takeover(t, heir)
	promoted := time.Now()
	since := promoted // what recovery is measured from
	var queryOK time.Duration
	if wait {
		// The promoted master has no replica: seconds of load later,
		// no checkpoint has passed an event that came after the kill.
		n := accepted.Load()
		testwait.Until(t, "load after the promotion", 30*time.Second, func() bool {
			if queryOK == 0 && getStatus(st.QueryURL+"/v1/sessions/"+onVictim) == 200 {
				queryOK = time.Since(promoted)
			}
			return accepted.Load() >= n+2500
		})
		for p, off := range probe.checkpoints(t) {
			if off > atKill[p] {
				t.Fatalf("partition %d checkpointed at %d, past the log's end %d at the kill, while a master has no replica", p, off, atKill[p])
			}
		}
		victim.Restart(t) // with its nodes.conf: it rejoins as the replica of its heir
		testwait.Until(t, "the old master replicating its heir", 30*time.Second, func() bool {
			info, err := heir.Client(t).Info(ctx, "replication").Result()
			return err == nil && strings.Contains(info, "connected_slaves:1") && strings.Contains(info, "state=online")
		})
		since = time.Now()
	}
	// The log's end once an event came after the failover: the projector
	// must fold and checkpoint what came after it to reach this.
	var ends map[int32]int64
	acceptedThen := accepted.Load()

	var foldsAgain, caughtUp time.Duration
	testwait.UntilSeen(t, "the failover's recovery", clusterRecoveryBound, func() (bool, string) {
		if ends == nil && accepted.Load() > acceptedThen {
			ends = listEnds()
		}
		cps := probe.checkpoints(t)
		if foldsAgain == 0 {
			for p, off := range cps {
				if off > atKill[p] {
					foldsAgain = time.Since(since)
				}
			}
		}
		if caughtUp == 0 && ends != nil && len(cps) == len(ends) {
			all := true
			for p, end := range ends {
				all = all && cps[p] >= end
			}
			if all {
				caughtUp = time.Since(since)
			}
		}
		if queryOK == 0 && getStatus(st.QueryURL+"/v1/sessions/"+onVictim) == 200 {
			queryOK = time.Since(promoted)
		}
		return foldsAgain != 0 && caughtUp != 0 && queryOK != 0,
			fmt.Sprintf("folds again after %v, checkpoints at the log's end after %v, query 200 after %v (0: not yet); checkpoints %v, log end %v",
				foldsAgain, caughtUp, queryOK, cps, ends)
	})
	if wait {
		t.Logf("seeds %s, waiting for 1 replica: killed, promoted in %v, no checkpoint past the kill while the promoted master had no replica; once the old master replicated it (%v after the promotion) the projector checkpoints events after the kill in %v, every checkpoint reaches the log's end after the failover in %v; the query service answers 200 for %s %v after the promotion",
			url, promoted.Sub(killed).Round(time.Millisecond), since.Sub(promoted).Round(time.Millisecond), foldsAgain.Round(time.Millisecond),
			caughtUp.Round(time.Millisecond), onVictim, queryOK.Round(time.Millisecond))
	} else {
		t.Logf("seeds %s: killed, promoted in %v; after the promotion the projector checkpoints events after the kill in %v, every checkpoint reaches the log's end after the failover in %v, the query service answers 200 for %s in %v",
			url, promoted.Sub(killed).Round(time.Millisecond), foldsAgain.Round(time.Millisecond), caughtUp.Round(time.Millisecond),
			onVictim, queryOK.Round(time.Millisecond))
	}

	res := <-loadDone
	if res.err != nil {
		t.Fatal(res.err)
	}
	rep := res.rep
	t.Logf("load: %d events in %d requests (%.0f events/s), %d retries, verified %d sessions", rep.Events, rep.Requests,
		rep.EventsPerSecond(), rep.Retries, rep.Verified)
	if len(rep.Mismatches) > 0 {
		t.Fatalf("%d mismatches, first: %s", len(rep.Mismatches), rep.Mismatches[0])
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: live})
	t.Cleanup(func() { _ = cc.Close() })
	store, err := snapshot.NewStore(cc, st.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	assertExact(t, store, rep.Written)
}

type loadResult struct {
	rep loadgen.Report
	err error
}

// clusterProbe reads the checkpoints with a new cluster client each time,
// so that what it sees does not depend on a client's view of the slots.
type clusterProbe struct {
	addrs         []string
	prefix, topic string
}

func (p *clusterProbe) checkpoints(t *testing.T) map[int32]int64 {
	t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: p.addrs})
	defer cc.Close()
	store, err := snapshot.NewStore(cc, p.prefix)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	cps, err := store.Checkpoints(ctx, p.topic)
	out := map[int32]int64{}
	if err != nil {
		return out // the shard holding them may be the one failing over
	}
	for id, cp := range cps {
		out[id] = cp.Offset
	}
	return out
}

// victimBuckets returns the store's buckets whose keys live in slots lo to
// hi (CLUSTER KEYSLOT of their hash tag, "bNNN").
func victimBuckets(t *testing.T, node *redis.Client, lo, hi int64) map[int]bool {
	t.Helper()
	pipe := node.Pipeline()
	cmds := make([]*redis.IntCmd, snapshot.Buckets)
	for b := range cmds {
		cmds[b] = pipe.ClusterKeySlot(context.Background(), fmt.Sprintf("{b%03d}", b))
	}
	if _, err := pipe.Exec(context.Background()); err != nil {
		t.Fatal(err)
	}
	out := map[int]bool{}
	for b, cmd := range cmds {
		if s := cmd.Val(); s >= lo && s <= hi {
			out[b] = true
		}
	}
	return out
}

func getStatus(u string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}
