//go:build integration

package integration

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// redisCluster is a Redis Cluster in containers: masters[i] serves the
// i-th third of the slots and replicas[i] replicates it (until a failover
// swaps them).
type redisCluster struct {
	s                 *stack
	masters, replicas []*node
}

// clusterSeeds is CORREX_REDIS_URL for the cluster: its three masters as
// seeds (with CORREX_REDIS_CLUSTER=true).
const clusterSeeds = "redis://redis-0:6379?addr=redis-1:6379&addr=redis-2:6379"

// startRedisCluster starts three masters (redis-0..2) and three replicas
// (redis-3..5) of the project's Redis image in cluster mode, without
// persistence, and joins them from the test process: distinct config
// epochs, CLUSTER ADDSLOTSRANGE on the masters, CLUSTER MEET on the
// network, CLUSTER REPLICATE. A master unreachable for 2 s
// (cluster-node-timeout) is replaced by its replica.
func (s *stack) startRedisCluster() *redisCluster {
	s.t.Helper()
	rc := &redisCluster{s: s}
	var all []*node
	for i := range 6 {
		n := s.run(fmt.Sprintf("redis-%d", i), redisPort, theImages.redis,
			testcontainers.WithCmd("--bind", "0.0.0.0", "--protected-mode", "no", "--dir", "/data",
				"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000",
				"--appendonly", "no", "--save", "", "--repl-diskless-sync-delay", "0", "--repl-ping-replica-period", "1"),
			testcontainers.WithWaitStrategyAndDeadline(startupWait, redisReady{port: redisPort}))
		all = append(all, n)
	}
	rc.masters, rc.replicas = all[:3], all[3:]
	ctx := s.ctx
	ip := make([]string, len(all))
	for i, n := range all {
		c := rc.client(n)
		if err := c.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			s.t.Fatalf("%s: CLUSTER SET-CONFIG-EPOCH: %v", n.alias, err)
		}
		if i < 3 {
			if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", i*16384/3, (i+1)*16384/3-1).Err(); err != nil {
				s.t.Fatalf("%s: CLUSTER ADDSLOTSRANGE: %v", n.alias, err)
			}
		}
		var err error
		if ip[i], err = n.c.ContainerIP(ctx); err != nil {
			s.t.Fatalf("%s: %v", n.alias, err)
		}
	}
	for _, n := range all[1:] {
		if err := rc.client(n).ClusterMeet(ctx, ip[0], "6379").Err(); err != nil {
			s.t.Fatalf("%s: CLUSTER MEET: %v", n.alias, err)
		}
	}
	s.waitFor("every Redis node knowing the others", 30*time.Second, 100*time.Millisecond, func() error {
		for _, n := range all {
			if info, err := rc.client(n).ClusterInfo(ctx).Result(); err != nil || !strings.Contains(info, "cluster_known_nodes:6") {
				return fmt.Errorf("%s: %v %s", n.alias, err, info)
			}
		}
		return nil
	})
	for i, r := range rc.replicas {
		id, err := rc.client(rc.masters[i]).ClusterMyID(ctx).Result()
		if err != nil {
			s.t.Fatalf("%s: CLUSTER MYID: %v", rc.masters[i].alias, err)
		}
		s.waitFor(r.alias+" replicating "+rc.masters[i].alias, 30*time.Second, 100*time.Millisecond, func() error {
			return rc.client(r).Do(ctx, "CLUSTER", "REPLICATE", id).Err()
		})
	}
	s.waitFor("the Redis Cluster with a replica per master", 60*time.Second, 200*time.Millisecond, func() error {
		for _, n := range all {
			if err := rc.healthy(n); err != nil {
				return err
			}
		}
		return nil
	})
	return rc
}

// client is a client of one node through its mapped port (closed at the
// end of the test).
func (rc *redisCluster) client(n *node) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: rc.s.addr(n), MaxRetries: -1, DialTimeout: 2 * time.Second})
	rc.s.t.Cleanup(func() { _ = c.Close() })
	return c
}

// healthy reports why n does not see a healthy cluster (state ok, two
// online nodes in every shard with slots), or nil.
func (rc *redisCluster) healthy(n *node) error {
	c := redis.NewClient(&redis.Options{Addr: rc.s.addr(n), MaxRetries: -1, DialTimeout: 2 * time.Second})
	defer c.Close()
	info, err := c.ClusterInfo(rc.s.ctx).Result()
	if err != nil || !strings.Contains(info, "cluster_state:ok") {
		return fmt.Errorf("%s: %v %s", n.alias, err, info)
	}
	shards, err := c.ClusterShards(rc.s.ctx).Result()
	if err != nil {
		return fmt.Errorf("%s: %v", n.alias, err)
	}
	for _, sh := range shards {
		online := 0
		for _, m := range sh.Nodes {
			if m.Health == "online" {
				online++
			}
		}
		if len(sh.Slots) > 0 && online < 2 {
			return fmt.Errorf("%s: shard %+v", n.alias, sh)
		}
	}
	return nil
}

// masterOf returns the address (IP:port on the network) of the master of
// slot as from sees it, or "".
func (rc *redisCluster) masterOf(from *node, slot int64) string {
	c := redis.NewClient(&redis.Options{Addr: rc.s.addr(from), MaxRetries: -1, DialTimeout: 2 * time.Second})
	defer c.Close()
	shards, err := c.ClusterShards(rc.s.ctx).Result()
	if err != nil {
		return ""
	}
	for _, sh := range shards {
		for _, r := range sh.Slots {
			if r.Start <= slot && slot <= r.End {
				for _, m := range sh.Nodes {
					if m.Role == "master" && m.Health == "online" {
						return fmt.Sprintf("%s:%d", m.IP, m.Port)
					}
				}
			}
		}
	}
	return ""
}

// clusterEnv is what a service needs on top of serviceEnv to use the
// cluster.
func clusterEnv(extra map[string]string) map[string]string {
	env := map[string]string{"CORREX_REDIS_URL": clusterSeeds, "CORREX_REDIS_CLUSTER": "true"}
	maps.Copy(env, extra)
	return env
}

// TestClusterFailover runs the pipeline on a Redis Cluster of three
// masters with one replica each, with CORREX_REDIS_WAIT_REPLICAS=1, and
// under load SIGKILLs a master while the projector flushes. The cluster
// promotes its replica by itself (cluster-node-timeout 2 s); the promoted
// master has no replica, so no checkpoint moves until the old master is
// started again and rejoins as its replica. Then every partition is
// checkpointed again, and every snapshot equals the reference fold of what
// ingest accepted. The times are logged.
func TestClusterFailover(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.startKafka(s.volume("kafka"))
	rc := s.startRedisCluster()
	s.startIngest()
	s.query = s.run("query", queryPort, theImages.query,
		testcontainers.WithEnv(serviceEnv(clusterEnv(map[string]string{"CORREX_HTTP_ADDR": ":8082"}))),
		testcontainers.WithWaitStrategyAndDeadline(startupWait, wait.ForHTTP("/readyz").WithPort(queryPort)))
	penv := projectorEnv("projector-0")
	maps.Copy(penv, clusterEnv(map[string]string{"CORREX_REDIS_WAIT_REPLICAS": "1"}))
	s.projectors["projector-0"] = s.run("projector-0", projPort, theImages.projector,
		testcontainers.WithEnv(penv),
		testcontainers.WithWaitStrategyAndDeadline(startupWait, wait.ForHTTP("/healthz").WithPort(projPort)))
	q := s.url(s.query)

	l := startLoad(context.Background(), s.url(s.ingest), workload("cluster", seed(t), 1000, 1000))
	s.waitFor("the projector folding the load", 30*time.Second, 100*time.Millisecond, func() error {
		st, err := getStats(context.Background(), q)
		if err != nil {
			return err
		}
		if st.Sessions.Total < 300 {
			return fmt.Errorf("%d sessions stored", st.Sessions.Total)
		}
		return nil
	})
	before, err := getStats(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	victim, heir := rc.masters[1], rc.replicas[1]
	heirIP, err := heir.c.ContainerIP(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	s.kill(victim)
	s.waitFor(heir.alias+" promoted by the cluster", 30*time.Second, 100*time.Millisecond, func() error {
		if m := rc.masterOf(rc.masters[0], 6000); m != heirIP+":6379" {
			return fmt.Errorf("slot 6000 served by %q", m)
		}
		return nil
	})
	promoted := time.Since(killed)
	s.start(victim) // its nodes.conf is in the container: it rejoins as its heir's replica
	s.waitFor(victim.alias+" back as a replica", 60*time.Second, 100*time.Millisecond, func() error {
		return rc.healthy(rc.masters[0])
	})
	rejoined := time.Since(killed)
	s.waitFor("every partition checkpointed again", 60*time.Second, 100*time.Millisecond, func() error {
		st, err := getStats(context.Background(), q)
		if err != nil {
			return err
		}
		for part := int32(0); part < partitions; part++ {
			if st.checkpoint(part) <= before.checkpoint(part) {
				return fmt.Errorf("partition %d still at checkpoint %d", part, st.checkpoint(part))
			}
		}
		return nil
	})
	t.Logf("killed %s (a master) under load: %s promoted by the cluster %v after the kill, %s back as its replica after %v, every partition checkpointed again after %v",
		victim.alias, heir.alias, promoted.Round(time.Millisecond), victim.alias, rejoined.Round(time.Millisecond),
		time.Since(killed).Round(time.Millisecond))
	rep := l.wait(t)
	exp := expectOf(rep)
	verifySnapshots(t, q, exp, verifyOpts{})
	verifyStats(t, q, exp)
}
