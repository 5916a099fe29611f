package redistest

import (
	"context"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Deployment is one Redis deployment a store's contract runs against.
type Deployment struct {
	Name string
	// Open returns a client on a fresh, empty deployment and a function
	// that drops every client connection the server holds.
	Open func(t *testing.T) (redis.UniversalClient, func())
}

// Deployments are the deployments the stores' contracts run against: a
// redis-server, a Redis Cluster of three masters, and miniredis.
func Deployments() []Deployment {
	return []Deployment{
		{"redis-server", func(t *testing.T) (redis.UniversalClient, func()) {
			srv := Start(t)
			admin := srv.Client(t)
			return srv.Client(t), func() { killClients(t, admin) }
		}},
		{"redis-cluster", func(t *testing.T) (redis.UniversalClient, func()) {
			c := StartCluster(t, 3)
			return c.Client(t), func() {
				for _, n := range c.Nodes {
					killClients(t, n.Client(t))
				}
			}
		}},
		{"miniredis", func(t *testing.T) (redis.UniversalClient, func()) {
			m := miniredis.RunT(t)
			c := redis.NewClient(&redis.Options{Addr: m.Addr()})
			t.Cleanup(func() { _ = c.Close() })
			return c, func() {
				m.Close() // drops every connection; Restart keeps the data
				if err := m.Restart(); err != nil {
					t.Fatal(err)
				}
			}
		}},
	}
}

func killClients(t *testing.T, admin *redis.Client) {
	id, err := admin.ClientID(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(context.Background(), "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		t.Fatalf("client kill (admin %d): %v", id, err)
	}
}
