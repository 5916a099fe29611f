// Package workload generates realistic session event streams: sessions that
// walk random lifecycle paths (initialization, execution, pauses, approvals
// with request ids and who decided, recoveries, and an ending by completion,
// structured failure, graceful cancellation or timeout),
// with a chosen share of invalid and duplicate events mixed in. Everything is
// derived from a seed, so a failing test names the seed that reproduces it.
//
// Tests, benchmarks and cmd/loadgen share it so that they all exercise the
// same kind of traffic.
package workload

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/correx/sessions/pkg/fsm"
)

// Options shape the generated sessions.
type Options struct {
	// InvalidShare is the probability, per step, of also emitting an event
	// of a random type (which the lifecycle will usually reject).
	InvalidShare float64
	// DuplicateShare is the probability, per step, of resending an event
	// already sent (same eventId), as a retrying client would.
	DuplicateShare float64
	// Steps is the mean number of steps between start and end (default 12).
	Steps int
	// MaxGap is the largest time between two events (default 2s).
	MaxGap time.Duration
	// ExecutionWeight adds that many more chances, per step, of an
	// execution event (a model turn or a tool call): 0 gives the default mix,
	// where about 60% of events are transitions; 40 gives an agent-like run
	// with about 15% transitions.
	ExecutionWeight int
	// Structured gives approvals a request id, who decided and why, and
	// failures a category and a code (docs/lifecycle.md, "Structured
	// failures" and "Approvals that match their request"), as cmd/loadgen
	// and the demo send them. Off, those payloads stay as they were before
	// those rules, so that stored fixtures keep their digests.
	Structured bool
	// ForcedCancellations makes half the cancellations forced, as the
	// stored-format fixtures were written. Off (the default), every
	// cancellation is graceful: see Generator. Either way the same random
	// draws are made, so the rest of the stream does not change.
	ForcedCancellations bool
	// Settled makes every session end: one that never starts is always
	// cancelled (off, half of them stay in CREATED), and none is left
	// running (off, one in twenty is). A workload that runs for hours (the
	// devstack demo) then reaches a steady state instead of piling up
	// sessions that only their 24-hour inactivity timeout would end. The
	// same random draws are made either way.
	Settled bool
	// Timeouts are the sessions' own timeouts, named in each
	// SessionCreated (default none: the service's defaults, 24 hours of
	// inactivity or awaiting approval). Short ones let the projector end
	// what the stream leaves open (a session an invalid event moved off its
	// path): the demo's steady state.
	Timeouts fsm.Timeouts
}

// Generator makes sessions from a seeded random source. It is not safe for
// concurrent use.
//
// Its cancellations are graceful unless Options.ForcedCancellations: a
// forced one ends the session by the
// projector's own timeout at once (CORREX_FORCED_GRACE, default 0s), which a
// fold of the events a client sent cannot foresee, and the workloads are
// verified that way. Forced cancellation has its own tests (the conformance
// vectors, internal/projector's section 11 tests).
type Generator struct {
	rng  *rand.Rand
	opts Options
}

// New returns a generator seeded with seed.
func New(seed uint64, opts Options) *Generator {
	if opts.Steps <= 0 {
		opts.Steps = 12
	}
	if opts.MaxGap <= 0 {
		opts.MaxGap = 2 * time.Second
	}
	return &Generator{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), opts: opts}
}

// ID returns a random-looking but reproducible UUIDv4.
func (g *Generator) ID() fsm.EventID {
	var id fsm.EventID
	a, b := g.rng.Uint64(), g.rng.Uint64()
	for i := range 8 {
		id[i], id[8+i] = byte(a>>(8*i)), byte(b>>(8*i))
	}
	id[6] = 0x40 | id[6]&0x0f
	id[8] = 0x80 | id[8]&0x3f
	return id
}

type builder struct {
	g      *Generator
	id     string
	at     time.Time
	events []fsm.Event
}

func (b *builder) emit(t fsm.EventType, f fsm.Fields) {
	g := b.g
	b.at = b.at.Add(time.Duration(1+g.rng.Int64N(int64(g.opts.MaxGap)/int64(time.Millisecond))) * time.Millisecond)
	b.events = append(b.events, fsm.NewEvent(g.ID(), b.id, t, b.at, f))
	if g.rng.Float64() < g.opts.DuplicateShare {
		b.events = append(b.events, b.events[g.rng.IntN(len(b.events))])
	}
	if g.rng.Float64() < g.opts.InvalidShare {
		types := fsm.EventTypes()
		rt := types[g.rng.IntN(len(types))]
		b.at = b.at.Add(time.Millisecond)
		b.events = append(b.events, fsm.NewEvent(g.ID(), b.id, rt, b.at, g.randomFields(rt)))
	}
}

func (g *Generator) randomFields(t fsm.EventType) fsm.Fields {
	switch t {
	case fsm.TimeoutExpired:
		return fsm.Fields{Timeout: fsm.TimeoutKind(1 + g.rng.IntN(5))}
	case fsm.ToolCompleted:
		return fsm.Fields{ToolFailed: g.rng.IntN(4) == 0}
	case fsm.SessionFailed:
		return fsm.Fields{Reason: "provider_failure"}
	case fsm.CancellationRequested:
		return fsm.Fields{Reason: "user", Mode: g.cancelMode(g.rng.IntN(2))}
	case fsm.SessionCreated:
		return fsm.Fields{Goal: "again"}
	}
	return fsm.Fields{}
}

// Session returns the events of one session with the given id, starting at
// start, in the order a producer would send them.
func (g *Generator) Session(id string, start time.Time) []fsm.Event {
	b := &builder{g: g, id: id, at: start}
	r := g.rng
	b.emit(fsm.SessionCreated, fsm.Fields{Goal: "goal of " + id, Timeouts: g.opts.Timeouts})
	if r.IntN(10) == 0 { // some sessions never start
		if r.IntN(2) == 0 || g.opts.Settled {
			b.emit(fsm.CancellationRequested, fsm.Fields{Reason: "user"})
			b.emit(fsm.SessionCancelled, fsm.Fields{})
		}
		return b.events
	}
	if r.IntN(2) == 0 {
		b.emit(fsm.SessionInitializing, fsm.Fields{})
		if r.IntN(12) == 0 {
			b.emit(fsm.RecoveryStarted, fsm.Fields{})
			b.emit(fsm.RecoveryCompleted, fsm.Fields{})
		}
	}
	b.emit(fsm.SessionStarted, fsm.Fields{})
	steps := 1 + r.IntN(2*g.opts.Steps)
	for range steps {
		switch k := r.IntN(20 + g.opts.ExecutionWeight); {
		case k >= 20:
			if r.IntN(2) == 0 {
				b.emit(fsm.ModelRequested, fsm.Fields{})
			} else {
				b.emit(fsm.ToolRequested, fsm.Fields{})
				b.emit(fsm.ToolCompleted, fsm.Fields{ToolFailed: r.IntN(10) == 0})
			}
		case k < 5:
			b.emit(fsm.ModelRequested, fsm.Fields{})
		case k < 9:
			b.emit(fsm.ToolRequested, fsm.Fields{})
			b.emit(fsm.ToolCompleted, fsm.Fields{ToolFailed: r.IntN(5) == 0})
		case k < 10:
			b.emit(fsm.RepairStarted, fsm.Fields{})
		case k < 13:
			b.emit(fsm.SessionPaused, fsm.Fields{})
			if r.IntN(6) == 0 {
				b.emit(fsm.RecoveryStarted, fsm.Fields{})
				b.emit(fsm.RecoveryCompleted, fsm.Fields{})
			}
			b.emit(fsm.SessionResumed, fsm.Fields{})
		case k < 17:
			var asked, granted, denied fsm.Fields
			if g.opts.Structured {
				req := fmt.Sprintf("req-%d", len(b.events))
				asked = fsm.Fields{RequestID: req, HasRequestID: true, Reason: "tool call needs a human"}
				granted = fsm.Fields{RequestID: req, HasRequestID: true, By: "reviewer"}
				denied = fsm.Fields{RequestID: req, HasRequestID: true, By: "reviewer", Reason: "too risky"}
			}
			b.emit(fsm.ApprovalRequested, asked)
			if r.IntN(8) == 0 {
				b.emit(fsm.RecoveryStarted, fsm.Fields{})
				b.emit(fsm.RecoveryCompleted, fsm.Fields{})
			}
			switch r.IntN(10) {
			case 0:
				b.emit(fsm.TimeoutExpired, fsm.Fields{Timeout: fsm.TimeoutApproval})
				b.end(true)
				return b.events
			case 1, 2:
				b.emit(fsm.ApprovalDenied, denied)
			default:
				b.emit(fsm.ApprovalGranted, granted)
			}
		default:
			b.emit(fsm.RecoveryStarted, fsm.Fields{})
			if r.IntN(10) == 0 {
				b.emit(fsm.TimeoutExpired, fsm.Fields{Timeout: fsm.TimeoutRecovery})
				b.end(true)
				return b.events
			}
			b.emit(fsm.RecoveryCompleted, fsm.Fields{})
		}
	}
	switch k := r.IntN(20); {
	case k < 12:
		b.emit(fsm.SessionCompleted, fsm.Fields{})
	case k < 14:
		failed := fsm.Fields{Reason: "provider_failure"}
		if g.opts.Structured {
			failed = failures[len(b.events)%len(failures)]
		}
		b.emit(fsm.SessionFailed, failed)
	case k < 17:
		b.emit(fsm.CancellationRequested, fsm.Fields{Reason: "user", Mode: g.cancelMode(r.IntN(2))})
		b.end(false)
	case k < 19:
		b.emit(fsm.TimeoutExpired, fsm.Fields{Timeout: []fsm.TimeoutKind{fsm.TimeoutExecution, fsm.TimeoutInactivity}[r.IntN(2)]})
		b.end(false)
	default:
		if g.opts.Settled {
			b.emit(fsm.SessionCompleted, fsm.Fields{})
		}
		// else left running: no ending
	}
	return b.events
}

// cancelMode is the mode of a cancellation whose random draw is n (0 or 1):
// graceful unless Options.ForcedCancellations.
func (g *Generator) cancelMode(n int) fsm.CancelMode {
	if !g.opts.ForcedCancellations {
		return fsm.CancelGraceful
	}
	return fsm.CancelMode(n)
}

// failures are the structured failures sessions end with (Options.Structured).
var failures = []fsm.Fields{
	{Reason: "provider_failure", Category: "provider", Code: "rate_limited", Retryable: true},
	{Reason: "tool crashed", Category: "tool", Code: "tool.exit_1"},
	{Reason: "policy forbids the action", Category: "policy", Code: "forbidden"},
}

// end completes a cancellation that is in progress, gracefully or by the
// cancellation timeout.
func (b *builder) end(timeout bool) {
	if timeout || b.g.rng.IntN(4) == 0 {
		b.emit(fsm.TimeoutExpired, fsm.Fields{Timeout: fsm.TimeoutCancellation})
		return
	}
	b.emit(fsm.SessionCancelled, fsm.Fields{})
}

// Sessions returns n sessions named prefix-0 ... prefix-(n-1).
func (g *Generator) Sessions(prefix string, n int, start time.Time) [][]fsm.Event {
	out := make([][]fsm.Event, n)
	for i := range out {
		out[i] = g.Session(fmt.Sprintf("%s-%d", prefix, i), start.Add(time.Duration(i)*time.Millisecond))
	}
	return out
}

// Interleave merges sessions into one stream, keeping each session's own
// order, as concurrent producers would.
func (g *Generator) Interleave(sessions [][]fsm.Event) []fsm.Event {
	total := 0
	for _, s := range sessions {
		total += len(s)
	}
	out := make([]fsm.Event, 0, total)
	next := make([]int, len(sessions))
	live := make([]int, 0, len(sessions))
	for i, s := range sessions {
		if len(s) > 0 {
			live = append(live, i)
		}
	}
	for len(live) > 0 {
		j := g.rng.IntN(len(live))
		i := live[j]
		out = append(out, sessions[i][next[i]])
		next[i]++
		if next[i] == len(sessions[i]) {
			live[j] = live[len(live)-1]
			live = live[:len(live)-1]
		}
	}
	return out
}
