package query

import (
	"context"

	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
)

// Store is what the handler reads, and the one write a rebuild makes
// (rebuild.go): a subset of pkg/snapshot's public contract
// (pkg/snapshot/snapshottest.Store), so that any store that passes the
// contract can serve the API. *snapshot.Store is the Redis one.
type Store interface {
	Get(ctx context.Context, sessionID string) (*snapshot.Snapshot, error)
	ListFiltered(ctx context.Context, state fsm.State, idPrefix string, f snapshot.Filter, cursor string, limit int) (snapshot.Page, error)
	CountPrefix(ctx context.Context, idPrefix string) (snapshot.Counts, error)
	Checkpoints(ctx context.Context, topic string) (map[int32]snapshot.Checkpoint, error)
	Replace(ctx context.Context, e snapshot.Entry) (bool, error)
}

var _ Store = (*snapshot.Store)(nil)
