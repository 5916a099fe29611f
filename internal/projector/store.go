package projector

import (
	"context"
	"time"

	"github.com/correx/sessions/internal/projector/projstore"
	"github.com/correx/sessions/pkg/snapshot"
)

// Store is what the projector keeps: the read model (a subset of
// pkg/snapshot's public contract, pkg/snapshot/snapshottest) and its own
// keys beside it. *projstore.Store is the Redis one; the projector takes
// any Store, so that another store can run it.
type Store interface {
	readModel
	rebuildStore
	childrenStore
	outboxStore
	deadlineStore
	closedStore
	replicationStore
	ownershipStore
}

// ownershipStore fences the writes of a partition this projector no
// longer owns, and keeps the archived sessions' tombstones
// (projstore's epoch.go and tombstones.go).
type ownershipStore interface {
	Claim(ctx context.Context, topic string, partition int32, generation int32) (uint64, error)
	Tombstones(ctx context.Context, ids []string) ([]*projstore.Tombstone, error)
	PutTombstones(ctx context.Context, partition int32, ts []projstore.Tombstone) error
	ExpireTombstones(ctx context.Context, partition int32, before time.Time) ([]projstore.Tombstone, error)
}

// closedStore keeps the sessions that ended, and removes them once
// archived (sweeper.go).
type closedStore interface {
	DueClosed(ctx context.Context, topic string, partition int32, before time.Time, limit int) ([]projstore.ClosedSession, int64, error)
	Forget(ctx context.Context, topic string, partition int32, archived []projstore.Archived) ([]int, error)
}

var _ Store = (*projstore.Store)(nil)

// readModel is the projector's write path to the read model, and what it
// reads back: snapshots, fenced, and checkpoints (snapshot.Store).
type readModel interface {
	Ping(ctx context.Context) error
	GetMany(ctx context.Context, ids []string) ([]*snapshot.Snapshot, error)
	PutBatch(ctx context.Context, entries []snapshot.Entry) (snapshot.PutResult, error)
	SaveCheckpoints(ctx context.Context, topic string, cps []snapshot.Checkpoint, now time.Time) ([]snapshot.PriorCheckpoint, error)
	Checkpoints(ctx context.Context, topic string) (map[int32]snapshot.Checkpoint, error)
}

// rebuildStore starts a lost partition's rebuild (recovery.go).
type rebuildStore interface {
	ResetCheckpoint(ctx context.Context, topic string, partition int32, until int64, now time.Time) error
	DeletePartition(ctx context.Context, partitions ...int32) (int, error)
	DeleteDeadlines(ctx context.Context, topic string, partition int32) error
}

// childrenStore is the children index a parent's end reaches its children
// through (cascade.go).
type childrenStore interface {
	AddChildren(ctx context.Context, links []projstore.ChildLink) error
	RemoveChildren(ctx context.Context, links []projstore.ChildLink) error
	ChildrenPages(ctx context.Context, from []projstore.ChildrenCursor, count int) ([][]string, []string, error)
}

// outboxStore keeps the change-feed records of a flush until they are
// produced (changes.go).
type outboxStore interface {
	PutOutbox(ctx context.Context, topic string, batches []projstore.OutboxBatch) error
	Outbox(ctx context.Context, topic string) ([]projstore.OutboxBatch, error)
}

// deadlineStore keeps the armed deadlines (deadlines.go, firer.go).
type deadlineStore interface {
	ArmDeadlines(ctx context.Context, topic string, byPartition map[int32][]projstore.ArmedDeadline) (map[int32]time.Time, error)
	DueDeadlines(ctx context.Context, topic string, partition int32, now time.Time, limit int) ([]projstore.ArmedDeadline, time.Time, error)
	NextDeadline(ctx context.Context, topic string, partition int32) (time.Time, error)
	RemoveFired(ctx context.Context, topic string, partition int32, fired []projstore.ArmedDeadline) (int, error)
}

// replicationStore waits for Redis Cluster replicas before a checkpoint
// (flush.go).
type replicationStore interface {
	MarkReplication(ctx context.Context) (*projstore.ReplicationMark, error)
	WaitReplicated(ctx context.Context, since *projstore.ReplicationMark) (*projstore.ReplicationMark, error)
}
