package projstore

import (
	"context"
	"fmt"
	"time"

	"github.com/correx/sessions/internal/redislayout"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/redis/go-redis/v9"
)

// Store is the projector's store in Redis: pkg/snapshot's Store (the read
// model, its public contract), and the projector's own keys beside it.
//
// Every method is safe for concurrent use, and every write is idempotent,
// as the snapshot store's are.
type Store struct {
	*snapshot.Store
	rdb  redis.UniversalClient
	keys *redislayout.Keys
	// waitReplicas and waitTimeout: see WaitReplicas.
	waitReplicas int
	waitTimeout  time.Duration
	// markers are WaitReplicated's keys, one per Redis Cluster master.
	markers *markerKeys
	// epochs are the partitions this Store claimed (epoch.go).
	epochs *epochs
}

// New returns the projector's store over rdb, with the read model under
// prefix (snapshot.NewStore(rdb, prefix)) and its own keys under the same
// prefix. rdb may be a *redis.Client or a *redis.ClusterClient.
func New(rdb redis.UniversalClient, prefix string) (*Store, error) {
	st, err := snapshot.NewStore(rdb, prefix)
	if err != nil {
		return nil, err
	}
	return &Store{Store: st, rdb: rdb, keys: redislayout.NewKeys(prefix), markers: &markerKeys{}, epochs: &epochs{}}, nil
}

// WaitReplicas makes the writes count only once n replicas acknowledged
// them, waiting at most timeout each time (snapshot.Store.WaitReplicas):
// on a single server the snapshot writes wait; on Redis Cluster
// MarkReplication and WaitReplicated do (replication.go). Call it before
// the store is used.
func (s *Store) WaitReplicas(n int, timeout time.Duration) error {
	if err := s.Store.WaitReplicas(n, timeout); err != nil {
		return err
	}
	s.waitReplicas, s.waitTimeout = n, timeout
	return nil
}

// run executes the commands build adds in one pipeline, loading the
// scripts again where Redis lost them (redislayout.Run).
func (s *Store) run(ctx context.Context, build func(redis.Pipeliner) []*redis.Cmd) ([]*redis.Cmd, error) {
	return redislayout.Run(ctx, s.rdb, build)
}

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{snapshot.ErrCorrupt}, args...)...)
}
