package feed

import (
	"errors"
	"fmt"
)

var (
	// ErrNoRedis is returned by NewConsumer without the Redis option: the
	// checkpoint lives in Redis.
	ErrNoRedis = errors.New("feed: a Redis client is required (Redis option)")
	// ErrNoGroup is returned by NewConsumer without the Group option: each
	// consumer names its own group, never the projector's.
	ErrNoGroup = errors.New("feed: a consumer group is required (Group option)")
	// ErrInvalidOption is returned by NewConsumer for an option with a value
	// it cannot use (an empty topic, an unknown start position).
	ErrInvalidOption = errors.New("feed: invalid option")
	// ErrRunning is returned by Run while another Run of the same Consumer
	// is in progress.
	ErrRunning = errors.New("feed: the consumer is already running")
	// ErrCheckpointAhead is returned by Run when a stored checkpoint is
	// beyond the end of its partition: the changes topic was recreated or
	// truncated, and reading from there would skip changes silently. It is
	// wrapped in a *CheckpointError.
	ErrCheckpointAhead = errors.New("feed: the checkpoint is beyond the end of the partition")
)

// HandlerError is returned by Run when the handler returns an error: the
// change it was given (not checkpointed; the next Run starts with it) and
// the handler's error.
type HandlerError struct {
	Change Change
	Err    error
}

func (e *HandlerError) Error() string {
	return fmt.Sprintf("feed: handling the change of session %q at %s: %v", e.Change.SessionID, e.Change.Position, e.Err)
}

func (e *HandlerError) Unwrap() error { return e.Err }

// CheckpointError is an error reading or writing the checkpoint of one
// partition of the changes topic, or a checkpoint that cannot be used.
type CheckpointError struct {
	Op        string // "read", "write" or "seek"
	Key       string // the Redis key
	Partition int32
	Err       error
}

func (e *CheckpointError) Error() string {
	return fmt.Sprintf("feed: %s checkpoint %s partition %d: %v", e.Op, e.Key, e.Partition, e.Err)
}

func (e *CheckpointError) Unwrap() error { return e.Err }
