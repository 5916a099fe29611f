package snapshot

import (
	"errors"
	"fmt"
)

// ErrNotFound is returned when no snapshot is stored for a session. The store
// translates redis.Nil into it, so callers never see the client's sentinel.
var ErrNotFound = errors.New("snapshot not found")

// ErrCorrupt is wrapped by decoding errors: the bytes are not a snapshot this
// build can read.
var ErrCorrupt = errors.New("corrupt snapshot")

// ErrBadCursor is returned by the listings (List, ListPrefix,
// ListFiltered) for a cursor they did not issue, or one issued for another
// session-id prefix, and by the projector's ChildrenPages
// (internal/projector/projstore) for a cursor it did not issue.
var ErrBadCursor = errors.New("bad cursor")

// ErrNotReplicated is wrapped by PutBatch's error (a single server) or
// the projector's WaitReplicated's (Redis Cluster,
// internal/projector/projstore) when the store waits for replicas
// (WaitReplicas) and fewer acknowledged the writes in time: they are
// written on the primary but might not survive a failover, so the caller
// must not advance a checkpoint past them (waiting again, or running the
// batch again, is safe).
var ErrNotReplicated = errors.New("not acknowledged by enough replicas")

// ErrNotOwner is wrapped by the error of a write refused because its
// writer no longer owns the partition: a newer owner took it over (the
// projector's ownership epochs, internal/projector/projstore's epoch.go).
var ErrNotOwner = errors.New("the partition has a newer owner")

// StoreError is a store operation that failed, with the key it was about.
// Err is Redis's error, or wraps ErrCorrupt or ErrNotReplicated.
type StoreError struct {
	// Op is the operation: "ping", "get", "put", "list", "count",
	// "checkpoint", "reset" or "subscribe" (Progress); the projector's store
	// (internal/projector/projstore) adds "delete", "children", "outbox",
	// "arm deadlines", "due", "next deadline", "remove fired", "delete
	// deadlines" and "replication".
	Op  string
	Key string // the Redis key, or "" when the operation spans several
	Err error
}

func (e *StoreError) Error() string {
	if e.Key == "" {
		return fmt.Sprintf("snapshot store %s: %v", e.Op, e.Err)
	}
	return fmt.Sprintf("snapshot store %s %s: %v", e.Op, e.Key, e.Err)
}

func (e *StoreError) Unwrap() error { return e.Err }

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
}
