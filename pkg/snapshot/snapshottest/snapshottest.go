// Package snapshottest is the contract of a snapshot store, as a test suite
// that any implementation runs: Run exercises a Store and fails the test
// where it breaks a rule below. pkg/snapshot runs it against its Redis store
// on a single redis-server, on a Redis Cluster and on miniredis; another
// implementation (another database, an in-memory store for tests) runs it
// the same way from its own test:
//
//	func TestContract(t *testing.T) {
//		snapshottest.Run(t, func(t *testing.T) snapshottest.Store {
//			return mystore.New(...) // empty, and apart from every other store returned
//		})
//	}
//
// # What a store must guarantee
//
// The projector and the query service rely on these; each is one subtest
// of Run. They are the whole of the public store: what the projector keeps
// beside the snapshots (a parent's children, its outbox, armed deadlines,
// a lost partition's deletion and rebuild mark, the replication wait) is
// its own storage, internal/projector/projstore, with its own tests.
//
//   - Reads: Get of a session never stored is snapshot.ErrNotFound; GetMany
//     answers in the order asked, nil where none is stored. A stored
//     snapshot reads back with the same AppendBinary bytes.
//   - Fencing: PutBatch stores an entry only if its position (partition,
//     then offset; snapshot.Position.Less) is greater than the stored one's;
//     an equal or lower one loses and is counted Fenced. Two entries of one
//     session in a batch: the later position wins. Replace also wins over an
//     equal position, never over a later one.
//   - Idempotence: a batch written again (a retry, a zombie writer) leaves
//     every snapshot, listing and count as they were.
//   - Listings and counts follow exactly the writes that won: List,
//     ListPrefix and ListFiltered return every stored session of the state
//     (fsm.StateNone: any) once across the pages of a listing, never one in
//     another state; the id prefix is part of the scan, so every page but
//     the last is full; a filter may leave pages short, never wrong. A
//     cursor the store did not issue, or issued under another prefix, is
//     snapshot.ErrBadCursor. Count and CountPrefix are exact.
//   - Checkpoints are per topic and partition, and monotonic: a lower
//     offset never replaces a higher one; an equal one refreshes Time and
//     HighWatermark. A checkpoint marked Expected is not written where none
//     is stored, or where the stored one is lower than Known, and
//     SaveCheckpoints returns each prior checkpoint so that the writer sees
//     it (snapshot.PriorCheckpoint.Lost). DeleteCheckpoints removes a
//     topic's.
//   - Reset deletes everything of the store and nothing of another store.
//
// Concurrency and durability (what a failover keeps, docs/guarantees.md)
// are outside this suite: pkg/snapshot tests them against real servers.
package snapshottest

import (
	"context"
	"time"

	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
)

// Store is what the contract exercises: the methods of the public
// *snapshot.Store, each documented there, less its Redis setup (Ping,
// WaitReplicas, WithTimeoutDefaults). The services take smaller interfaces
// of their own (query.Store, projector.Store), over some of these methods
// and Ping.
type Store interface {
	// Snapshots.
	Get(ctx context.Context, sessionID string) (*snapshot.Snapshot, error)
	GetMany(ctx context.Context, ids []string) ([]*snapshot.Snapshot, error)
	PutBatch(ctx context.Context, entries []snapshot.Entry) (snapshot.PutResult, error)
	Replace(ctx context.Context, e snapshot.Entry) (bool, error)
	Reset(ctx context.Context) (int, error)

	// Listings and counts.
	List(ctx context.Context, state fsm.State, cursor string, limit int) (snapshot.Page, error)
	ListPrefix(ctx context.Context, state fsm.State, idPrefix, cursor string, limit int) (snapshot.Page, error)
	ListFiltered(ctx context.Context, state fsm.State, idPrefix string, f snapshot.Filter, cursor string, limit int) (snapshot.Page, error)
	Count(ctx context.Context) (snapshot.Counts, error)
	CountPrefix(ctx context.Context, idPrefix string) (snapshot.Counts, error)

	// Checkpoints.
	SaveCheckpoints(ctx context.Context, topic string, cps []snapshot.Checkpoint, now time.Time) ([]snapshot.PriorCheckpoint, error)
	Checkpoints(ctx context.Context, topic string) (map[int32]snapshot.Checkpoint, error)
	DeleteCheckpoints(ctx context.Context, topic string) error
}

var _ Store = (*snapshot.Store)(nil)
