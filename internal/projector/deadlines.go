package projector

import (
	"context"
	"errors"
	"time"

	"github.com/correx/sessions/internal/archive"
	"github.com/correx/sessions/internal/projector/projstore"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
)

// deadlinesOf returns, by partition, the deadline entry of every snapshot
// of a batch: its earliest armed deadline (fsm.NextDeadlineWith the
// service defaults and forced grace) at its version, or a disarm when it is terminal or has
// nothing armed, with the end of a terminal one. Called by the fold goroutine when the batch is built, so
// it reads each snapshot as the batch stores it.
func deadlinesOf(refs []*entry, defaults fsm.Timeouts, forcedGrace time.Duration) map[int32][]projstore.ArmedDeadline {
	if len(refs) == 0 {
		return nil
	}
	out := map[int32][]projstore.ArmedDeadline{}
	for _, en := range refs {
		s := &en.snap
		out[s.Position.Partition] = append(out[s.Position.Partition], armedOf(s, defaults, forcedGrace))
	}
	return out
}

// armedOf is the deadline entry of a snapshot (deadlinesOf); a restore
// arms the restored snapshots' with it.
func armedOf(s *snapshot.Snapshot, defaults fsm.Timeouts, forcedGrace time.Duration) projstore.ArmedDeadline {
	d := projstore.ArmedDeadline{SessionID: s.ID, Version: s.Version}
	if s.Terminal() {
		d.Ended = archive.EndedAt(s).UnixNano() // the closed sessions the archive sweep reads
	}
	if next, ok := fsm.NextDeadlineWith(&s.Session, defaults, forcedGrace); ok {
		d.Kind, d.At = next.Kind, next.At
	}
	return d
}

// armDeadlines stores the batch's deadlines, the deadlines step of
// flusher.write (writeSteps): after the snapshots, before the checkpoints,
// so a crash between the two replays the range and arms them again (a
// replayed record that its snapshot already reflects still marks the
// snapshot for the next batch, see folder.fold). Redis errors are retried until ctx ends; the
// write is idempotent and fenced by version. The partitions' earliest
// deadlines afterwards wake the firer.
func (f *flusher) armDeadlines(ctx context.Context, job *flushJob) error {
	if len(job.deadlines) == 0 {
		return nil
	}
	return retry(ctx, f.log, "writing deadlines", func(ctx context.Context) error {
		next, err := f.store.ArmDeadlines(ctx, f.topic, job.deadlines)
		var no *projstore.NotOwnerError
		if errors.As(err, &no) {
			f.log.Warn("a newer owner took partitions over: their deadlines were not written", "partitions", no.Partitions)
			job.notOwned(no.Partitions)
			err = nil
		}
		if err == nil {
			for p, at := range next {
				f.fire.hint(p, at)
			}
		}
		return err
	})
}

// Clock is the wall clock of the firer, the one place the projector reads
// it for what a session does (docs/timeouts.md: deadlines fire when the wall
// clock passes them). Tests inject a clock they move by hand.
type Clock interface {
	Now() time.Time
	// NewTimer returns a timer that fires once d has passed on this clock.
	NewTimer(d time.Duration) Timer
}

// Timer is a Clock's timer.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
}

type wallClock struct{}

func (wallClock) Now() time.Time                 { return time.Now() }
func (wallClock) NewTimer(d time.Duration) Timer { return wallTimer{time.NewTimer(d)} }

type wallTimer struct{ t *time.Timer }

func (w wallTimer) C() <-chan time.Time { return w.t.C }
func (w wallTimer) Stop() bool          { return w.t.Stop() }

// WithClock sets the clock deadlines fire by (default the wall clock).
func WithClock(c Clock) Option { return func(p *Projector) { p.clock = c } }
