package projector

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/correx/sessions/pkg/backoff"
	"github.com/correx/sessions/pkg/snapshot"
)

// retry calls op until it succeeds or ctx ends, waiting retryWait
// between attempts and logging each failure at Warn as what, with err,
// attempt and args. It returns ctx's error when ctx ends first. An error
// op wraps in final ends the retries at once, unlogged: op returns one
// for what retrying cannot cure (a corrupt snapshot) or must not outlive
// (a simulated crash); a write refused because a newer owner has its
// partition (snapshot.ErrNotOwner) ends them too. Every Redis and Kafka retry of the projector goes
// through it; ensureTopics, which waits for Kafka a second at a time, is
// the one loop of its own.
func retry(ctx context.Context, log *slog.Logger, what string, op func(context.Context) error, args ...any) error {
	for attempt := 0; ; attempt++ {
		err := op(ctx)
		if err == nil {
			return nil
		}
		var fe finalError
		if errors.As(err, &fe) {
			return fe.err
		}
		if errors.Is(err, snapshot.ErrNotOwner) {
			return err // a newer owner has the partition: retrying cannot cure it
		}
		log.Warn(what, append([]any{"err", err, "attempt", attempt}, args...)...)
		if err := backoff.Sleep(ctx, retryWait.Wait(attempt)); err != nil {
			return err
		}
	}
}

// final marks err as the end of a retry: retry returns err itself, at once.
func final(err error) error { return finalError{err} }

type finalError struct{ err error }

func (e finalError) Error() string { return e.err.Error() }
func (e finalError) Unwrap() error { return e.err }

// retryWait is the wait after a failed attempt: 100 ms, doubling, at most
// 2 s.
var retryWait = backoff.Exponential{Min: 100 * time.Millisecond, Max: 2 * time.Second}
