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
// # Choices this package makes where docs/lifecycle.md leaves room
//
//   - The duplicate window holds the ids of every event the session has seen
//     and not discarded as a duplicate, applied or rejected: a client resending
//     a rejected event sees it rejected once and counted as a duplicate after
//     that, rather than rejected twice.
//   - The window is bounded (IDWindow, 128 ids), so which resends are safe is
//     exact: a resent event is recognised as a duplicate exactly when fewer
//     than 128 events of the same session entered the window after the
//     original (every event the session saw and did not discard as a
//     duplicate, applied or rejected, enters it). A resend after 128 or
//     more later events of that session is folded again like a new event.
//     Events of other sessions do not count. A producer that retries a
//     request until it gets an answer, with the same eventIds, before it
//     sends the session's next 128 events is safe; so is ingest's own
//     retrying. The window is not made exact on purpose: an exact record of
//     every applied id would grow each snapshot without bound, and a
//     probabilistic filter could drop a real event.
//   - Text the session keeps is bounded (docs/lifecycle.md): the goal is cut to
//     MaxGoalBytes (4096) and each reason (failure, cancellation) to
//     MaxReasonBytes (1024), at the last UTF-8 sequence boundary at or
//     below that size, so the kept text is a prefix of the original.
//     Ingest refuses longer text; the cut protects against other producers
//     writing to the topic. The cut is part of the pure fold (the digest
//     still hashes the whole event), so a rebuild keeps the same prefix.
//   - Reason precedence: duplicate, then after_terminal (so a SessionCreated
//     after a terminal state is after_terminal), then duplicate_create, then
//     the execution reasons, then invalid_transition.
//   - updatedAt is the occurredAt of the last applied event; rejected and
//     duplicate events change counters but not updatedAt or version.
//   - An interval whose end is stamped before its start counts as zero.
//   - The approval wait runs from ApprovalRequested to the first transition to
//     a state other than AWAITING_APPROVAL or RECOVERING: a recovery during a
//     pending approval does not end the wait.
//   - A cancellation is forced (Cancellation.Forced) only when the
//     cancellation deadline completes it (TimeoutExpired cancellation),
//     whatever its mode: a forced request, or an escalation, only arms that
//     deadline at the request plus the forced grace, and a session that
//     ends itself with SessionCancelled first has mode forced and Forced
//     false.
//   - Timeouts that lead to CANCELLING record the cancellation reason as
//     "timeout:<kind>".
//   - occurredAt is normalized to UTC; the instant is kept, the offset is not.
//   - A TimeoutExpired whose payload.armedVersion differs from the session's
//     version is superseded (docs/timeouts.md): not applied (version, updatedAt
//     and digest unchanged), not a rejection, counted in
//     counters.supersededTimeouts; its id enters the duplicate window, so
//     the same timeout fired again is a duplicate. version + rejected +
//     duplicates + supersededTimeouts == counters.events.
//   - A custom event (x.<vendor>.<Name>) that is allowed is applied, as the
//     vectors of lifecycle-2.json fix: it bumps version, updatedAt and the
//     digest, but not stateEnteredAt (the state did not change). The custom
//     counters are kept sorted by type, so their order never depends on
//     arrival order. An annotation keeps the payload only when it is at
//     most 1 KiB of compact JSON.
//   - expectedVersion is checked after the terminal check (a stale event
//     after the end is after_terminal, not version_conflict) and applies to
//     every type, the replacement events included.
//   - The replacement events have their own rule, checked in terminal states
//     too: SessionReplaced applies to a FAILED session without a successor;
//     ReplacementLinked and ReplacementRefused apply in any state, terminal
//     included (a successor may end before the link arrives), while the
//     successor's replacement is pending, and only once.
//   - The SessionCreated additions are bounded for records from other
//     producers as ingest bounds them for clients, by cutting or dropping
//     (see boundLabels): a label with an invalid or repeated key is
//     dropped, a longer value is cut to 256 bytes on a UTF-8 boundary, pairs
//     after the first 16 in document order are dropped, and the kept labels
//     are sorted by key; metadata over 4 KiB is dropped; a timeout outside
//     1s..720h is dropped. A wrong JSON type (labels not an object, a
//     timeout that is not a duration) makes the record undecodable, as for
//     the other payload fields.
//   - Session.Timeouts holds the durations the SessionCreated named, not
//     the effective ones: service defaults (CORREX_TIMEOUT_<KIND>) are
//     applied by the component that arms deadlines.
//   - The ids of the events the system produces itself (a TimeoutExpired,
//     a cascaded CancellationRequested, the replacement events) are
//     derived from what they come from (DeriveEventID), so producing one
//     again is a duplicate; and they lie in a reserved part of the UUID
//     space (EventID.Reserved: version 8, starting 636f7272-6578), because
//     the duplicate check comes first and the inputs of a derivation are
//     public: anywhere else, a client could send an event with the id of a
//     timeout before it fires and make the session see the timeout as a
//     duplicate. Ingest refuses a reserved eventId (DecodeOptions.Ingest),
//     and a record from another producer that carries one without the
//     system's header is set aside before the fold (ErrReservedEventID;
//     the header is read where records are, internal/kafka.DecodeEvent).
//     The reducer itself does not look at ids beyond the window, so it
//     stays pure, the vectors and stored snapshots are unchanged, and a
//     derived event folded again is still a duplicate of itself. The
//     choice against a secret key or a window that tells system ids apart
//     is argued in docs/lifecycle.md ("Event ids").
//   - Record values carry "v": 1. A record without "v" is read as version 1,
//     so that hand-written records (kcat) work; any other version is refused
//     with ErrUnsupportedVersion. The fields added since (expectedVersion,
//     custom type names, the new payload members, sentBy) are optional additions to
//     version 1: a record without them is byte for byte what it was, and
//     so are its canonical bytes and digest.
//
// # Wire format
//
// DecodeRecord and AppendRecord read and write the Kafka record value;
// DecodeEnvelope with DecodeOptions.Ingest reads what clients send, where
// eventId and occurredAt may be absent. AppendCanonical gives the bytes the
// digest chain hashes.
package fsm

//go:generate go run ./internal/gendoc -readme ../../README.md
