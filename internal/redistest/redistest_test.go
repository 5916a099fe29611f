package redistest_test

import (
	"context"
	"testing"

	"github.com/correx/sessions/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestClusterWithReplicasTakeover: a write acknowledged by a master's
// replica is there after the master is killed and the replica takes over.
func TestClusterWithReplicasTakeover(t *testing.T) {
	ctx := context.Background()
	c := redistest.StartClusterWithReplicas(t, 3)
	key := "k" // slot 7629: the second of three ranges
	slot, err := c.Client(t).ClusterKeySlot(ctx, key).Result()
	if err != nil || slot != 7629 {
		t.Fatalf("slot of %q: %d %v", key, slot, err)
	}
	m := c.Nodes[1].Client(t)
	if err := m.Set(ctx, key, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := m.Wait(ctx, 1, 0).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT: %d %v", n, err)
	}
	c.Nodes[1].Stop()
	c.Takeover(t, c.Replicas[1])
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{c.Nodes[0].Addr}})
	t.Cleanup(func() { _ = cl.Close() })
	if v, err := cl.Get(ctx, key).Result(); err != nil || v != "v" {
		t.Fatalf("after the takeover: %q %v", v, err)
	}
}
