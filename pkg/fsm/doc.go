// Package fsm owns the session lifecycle: the ten states, the event types, the
// transition table (held as data in one place, see Table), the event envelope
// with its validation and record codec, and the pure reducer that folds events
// into a Session.
//
// # Purity
//
// Reducer.Apply depends only on the session and the event: no clock (times
// come from occurredAt), no randomness, no I/O, no map iteration. The same
// events folded in the same order give the same Session, and the same bytes
// once encoded by pkg/snapshot, whether folded at once, resumed from a stored
// snapshot after every event, or rebuilt from the log.
//
// # Choices this package makes where DESIGN.md is open
//
//   - The duplicate window holds the ids of every event the session has seen
//     and not discarded as a duplicate, applied or rejected: a client resending
//     a rejected event sees it rejected once and counted as a duplicate after
//     that, rather than rejected twice.
//   - Reason precedence: duplicate, then after_terminal (so a SessionCreated
//     after a terminal state is after_terminal), then duplicate_create, then
//     the execution reasons, then invalid_transition.
//   - updatedAt is the occurredAt of the last applied event; rejected and
//     duplicate events change counters but not updatedAt or version.
//   - An interval whose end is stamped before its start counts as zero.
//   - The approval wait runs from ApprovalRequested to the first transition to
//     a state other than AWAITING_APPROVAL or RECOVERING: a recovery during a
//     pending approval does not end the wait.
//   - A cancellation is forced when the cancellation timeout completes it, or
//     when it was requested with mode "forced".
//   - Timeouts that lead to CANCELLING record the cancellation reason as
//     "timeout:<kind>".
//   - occurredAt is normalized to UTC; the instant is kept, the offset is not.
//   - Record values carry "v": 1. A record without "v" is read as version 1,
//     so that hand-written records (kcat) work; any other version is refused
//     with ErrUnsupportedVersion.
//
// # Wire format
//
// DecodeRecord and AppendRecord read and write the Kafka record value;
// DecodeEnvelope with DecodeOptions.Ingest reads what clients send, where
// eventId and occurredAt may be absent. AppendCanonical gives the bytes the
// digest chain hashes.
package fsm

//go:generate go run ./internal/gendoc -readme ../../README.md
