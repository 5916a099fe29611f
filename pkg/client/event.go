package client

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/correx/sessions/pkg/fsm"
	"github.com/google/uuid"
)

// Event is one envelope (docs/lifecycle.md), ready to send. Build it with a
// constructor (SessionCreated, SessionStarted, ..., Custom): the id (a
// UUIDv7) and occurredAt are assigned when it is built, so every resend of
// the same Event carries the same id and the fold counts a resend as a
// duplicate rather than a second effect. Keep the Event, not its
// constructor call, for retries of your own.
//
// An Event is a value: the client never modifies one it is given.
type Event struct {
	ID            string    `json:"eventId"`
	SessionID     string    `json:"sessionId"`
	Type          string    `json:"type"`
	OccurredAt    time.Time `json:"occurredAt"`
	CorrelationID string    `json:"correlationId,omitempty"`
	// ExpectedVersion, when set, is the session version the event expects:
	// the fold rejects it version_conflict when the session's version
	// differs (docs/lifecycle.md).
	ExpectedVersion *uint64         `json:"expectedVersion,omitempty"`
	Payload         json.RawMessage `json:"payload,omitempty"`

	err      error  // why the event cannot be sent; see ErrInvalidEvent
	errField string // the envelope's field err is about ("" for the event)
}

// fail records why the event cannot be sent, keeping the first reason.
func (e *Event) fail(field string, err error) {
	if e.err == nil {
		e.err, e.errField = err, field
	}
}

// sessionIDError says why id is not a session id (fsm.ValidNewSessionID).
func sessionIDError(id string) error {
	if fsm.ValidSessionID(id) { // dots alone, which a URL path rewrites
		return fmt.Errorf("%w %q: want %s", ErrInvalidSessionID, id, fsm.NewSessionIDRule)
	}
	return fmt.Errorf("%w %q: want %s", ErrInvalidSessionID, id, fsm.SessionIDRule)
}

// Err reports why the event cannot be sent (it matches ErrInvalidEvent), or
// nil. Send and the Batcher refuse such an event before any I/O.
func (e *Event) Err() error { return e.err }

// Event types of the lifecycle (the README's table).
const (
	TypeSessionCreated        = "SessionCreated"
	TypeSessionInitializing   = "SessionInitializing"
	TypeSessionStarted        = "SessionStarted"
	TypeSessionPaused         = "SessionPaused"
	TypeSessionResumed        = "SessionResumed"
	TypeApprovalRequested     = "ApprovalRequested"
	TypeApprovalGranted       = "ApprovalGranted"
	TypeApprovalDenied        = "ApprovalDenied"
	TypeCancellationRequested = "CancellationRequested"
	TypeSessionCancelled      = "SessionCancelled"
	TypeSessionCompleted      = "SessionCompleted"
	TypeSessionFailed         = "SessionFailed"
	TypeRecoveryStarted       = "RecoveryStarted"
	TypeRecoveryCompleted     = "RecoveryCompleted"
	TypeTimeoutExpired        = "TimeoutExpired"
	TypeModelRequested        = "ModelRequested"
	TypeToolRequested         = "ToolRequested"
	TypeToolCompleted         = "ToolCompleted"
	TypeRepairStarted         = "RepairStarted"
)

// CancelMode is CancellationRequested's mode.
type CancelMode string

// Cancellation modes.
const (
	Graceful CancelMode = "graceful"
	Forced   CancelMode = "forced"
)

// ClosePolicy says what happens to a child session when its parent ends
// (docs/lifecycle.md).
type ClosePolicy string

// Parent close policies; the service's default is ParentCloseCancel.
const (
	ParentCloseCancel  ClosePolicy = "cancel"
	ParentCloseAbandon ClosePolicy = "abandon"
)

// TimeoutKind names a timeout (docs/timeouts.md).
type TimeoutKind string

// Timeout kinds.
const (
	TimeoutExecution    TimeoutKind = "execution"
	TimeoutInactivity   TimeoutKind = "inactivity"
	TimeoutApproval     TimeoutKind = "approval"
	TimeoutRecovery     TimeoutKind = "recovery"
	TimeoutCancellation TimeoutKind = "cancellation"
)

// Timeouts are a session's own timeouts; a zero field takes the service's
// default. Ingest accepts each from 1s to 720h.
type Timeouts struct {
	Execution, Inactivity, Approval, Recovery, Cancellation time.Duration
}

type builder struct {
	ev      Event
	payload map[string]any
}

func (b *builder) set(k string, v any) {
	if b.payload == nil {
		b.payload = map[string]any{}
	}
	b.payload[k] = v
}

// ExpectedVersion makes the event conditional: the fold rejects it
// version_conflict unless the session's version is v when it is folded.
func ExpectedVersion(v uint64) EventOpt {
	return eventOpt(func(b *builder) { b.ev.ExpectedVersion = &v })
}

// OccurredAt sets occurredAt (default: the time the event is built). The
// fold's durations come from it, never from a clock.
func OccurredAt(t time.Time) EventOpt {
	return eventOpt(func(b *builder) { b.ev.OccurredAt = t.UTC() })
}

// CorrelationID sets the correlation id (default: the service uses the
// session id). At most 128 characters.
func CorrelationID(id string) EventOpt { return eventOpt(func(b *builder) { b.ev.CorrelationID = id }) }

// EventID sets the event id (default: a fresh UUIDv7). Use it to rebuild an
// event whose id was stored elsewhere, so that a resend is a duplicate.
// Ingest refuses (400) an id in the space reserved for the ids the system
// derives: UUID version 8 starting 636f7272-6578-8.
func EventID(id string) EventOpt { return eventOpt(func(b *builder) { b.ev.ID = id }) }

// Goal sets the session's goal (at most 4 KiB).
func Goal(g string) CreateOpt { return createOpt(func(b *builder) { b.set("goal", g) }) }

// Labels sets the session's labels: at most 16, keys of
// [a-z0-9][a-z0-9._/-]{0,62}, values of at most 256 bytes (the payload
// fields of SessionCreated in README, "HTTP API"). The map is copied.
func Labels(l map[string]string) CreateOpt {
	c := make(map[string]string, len(l))
	for k, v := range l {
		c[k] = v
	}
	return createOpt(func(b *builder) { b.set("labels", c) })
}

// Metadata sets the session's metadata: any value that encodes as a JSON
// object of at most 4 KiB, kept verbatim in the snapshot.
func Metadata(m any) CreateOpt {
	return createOpt(func(b *builder) {
		raw, err := json.Marshal(m)
		if err != nil {
			b.ev.fail("payload", fmt.Errorf("%w: metadata: %v", ErrInvalidEvent, err))
			return
		}
		b.set("metadata", json.RawMessage(raw))
	})
}

// WithTimeouts sets the session's own timeouts.
func WithTimeouts(t Timeouts) CreateOpt {
	return createOpt(func(b *builder) {
		m := map[string]string{}
		for _, kv := range []struct {
			k TimeoutKind
			d time.Duration
		}{{TimeoutExecution, t.Execution}, {TimeoutInactivity, t.Inactivity}, {TimeoutApproval, t.Approval},
			{TimeoutRecovery, t.Recovery}, {TimeoutCancellation, t.Cancellation}} {
			if kv.d != 0 {
				m[string(kv.k)] = kv.d.String()
			}
		}
		if len(m) > 0 {
			b.set("timeouts", m)
		}
	})
}

// Parent names the session this one runs under; cancelling the parent
// cancels it (unless ParentClosePolicy(ParentCloseAbandon)).
func Parent(id string) CreateOpt {
	return createOpt(func(b *builder) { b.set("parentSessionId", id) })
}

// ParentClosePolicy sets what happens to this session when its parent ends
// (default ParentCloseCancel).
func ParentClosePolicy(p ClosePolicy) CreateOpt {
	return createOpt(func(b *builder) { b.set("parentClosePolicy", string(p)) })
}

// Predecessor names the FAILED session this one replaces.
func Predecessor(id string) CreateOpt {
	return createOpt(func(b *builder) { b.set("predecessorSessionId", id) })
}

func build(sessionID, typ string, payload map[string]any, opts []EventOpt) Event {
	b := builder{ev: Event{SessionID: sessionID, Type: typ}, payload: payload}
	for _, o := range opts {
		o.applyEvent(&b)
	}
	return b.finish()
}

func (b *builder) finish() Event {
	if !fsm.ValidNewSessionID(b.ev.SessionID) {
		b.ev.fail("sessionId", fmt.Errorf("%w: %w", ErrInvalidEvent, sessionIDError(b.ev.SessionID)))
	}
	if b.ev.ID == "" {
		id, err := uuid.NewV7()
		if err != nil {
			b.ev.fail("eventId", fmt.Errorf("%w: event id: %v", ErrInvalidEvent, err))
		}
		b.ev.ID = id.String()
	}
	if b.ev.OccurredAt.IsZero() {
		b.ev.OccurredAt = time.Now().UTC()
	}
	if len(b.payload) > 0 && b.ev.Payload == nil {
		raw, err := json.Marshal(b.payload)
		if err != nil {
			b.ev.fail("payload", fmt.Errorf("%w: payload: %v", ErrInvalidEvent, err))
		}
		b.ev.Payload = raw
	}
	return b.ev
}

// SessionCreated creates a session (it must be the session's first event).
func SessionCreated(sessionID string, opts ...CreateOpt) Event {
	b := builder{ev: Event{SessionID: sessionID, Type: TypeSessionCreated}}
	for _, o := range opts {
		o.applyCreate(&b)
	}
	return b.finish()
}

// SessionInitializing moves a CREATED session to INITIALIZING.
func SessionInitializing(sessionID string, opts ...EventOpt) Event {
	return build(sessionID, TypeSessionInitializing, nil, opts)
}

// SessionStarted moves a session to ACTIVE.
func SessionStarted(sessionID string, opts ...EventOpt) Event {
	return build(sessionID, TypeSessionStarted, nil, opts)
}

// SessionPaused pauses an ACTIVE session.
func SessionPaused(sessionID string, opts ...EventOpt) Event {
	return build(sessionID, TypeSessionPaused, nil, opts)
}

// SessionResumed resumes a PAUSED session.
func SessionResumed(sessionID string, opts ...EventOpt) Event {
	return build(sessionID, TypeSessionResumed, nil, opts)
}

// ApprovalRequested moves an ACTIVE session to AWAITING_APPROVAL.
func ApprovalRequested(sessionID string, opts ...EventOpt) Event {
	return build(sessionID, TypeApprovalRequested, nil, opts)
}

// ApprovalGranted records that the pending request was approved: the
// session returns from AWAITING_APPROVAL to ACTIVE and the snapshot's
// approval records the decision "granted" (with RequestID, DecidedBy and
// Reason). The agent goes
// on with the action it asked for.
func ApprovalGranted(sessionID string, opts ...EventOpt) Event {
	return build(sessionID, TypeApprovalGranted, nil, opts)
}

// ApprovalDenied records that the pending request was refused: the session
// returns from AWAITING_APPROVAL to ACTIVE as on a grant, since a refusal
// ends the wait and not the session, but the snapshot's approval records the
// decision "denied" (with RequestID, DecidedBy and Reason). The agent goes on
// without the action it asked for.
func ApprovalDenied(sessionID string, opts ...EventOpt) Event {
	return build(sessionID, TypeApprovalDenied, nil, opts)
}

// CancellationRequested moves a session to CANCELLING with a reason (at
// most 1 KiB) and a mode ("" leaves it to the service: graceful).
func CancellationRequested(sessionID, reason string, mode CancelMode, opts ...EventOpt) Event {
	p := map[string]any{}
	if reason != "" {
		p["reason"] = reason
	}
	if mode != "" {
		p["mode"] = string(mode)
	}
	return build(sessionID, TypeCancellationRequested, p, opts)
}

// SessionCancelled ends a CANCELLING session.
func SessionCancelled(sessionID string, opts ...EventOpt) Event {
	return build(sessionID, TypeSessionCancelled, nil, opts)
}

// SessionCompleted ends an ACTIVE session.
func SessionCompleted(sessionID string, opts ...EventOpt) Event {
	return build(sessionID, TypeSessionCompleted, nil, opts)
}

// SessionFailed ends a session as FAILED with a reason (at most 1 KiB).
func SessionFailed(sessionID, reason string, opts ...EventOpt) Event {
	var p map[string]any
	if reason != "" {
		p = map[string]any{"reason": reason}
	}
	return build(sessionID, TypeSessionFailed, p, opts)
}

// RecoveryStarted moves a session to RECOVERING.
func RecoveryStarted(sessionID string, opts ...EventOpt) Event {
	return build(sessionID, TypeRecoveryStarted, nil, opts)
}

// RecoveryCompleted returns a RECOVERING session to the state it came from.
func RecoveryCompleted(sessionID string, opts ...EventOpt) Event {
	return build(sessionID, TypeRecoveryCompleted, nil, opts)
}

// TimeoutExpired is a client's own timer firing, with the semantics of the
// system's (docs/timeouts.md): superseded, not applied, unless the session is
// still at armedVersion.
func TimeoutExpired(sessionID string, kind TimeoutKind, armedVersion uint64, deadline time.Time, opts ...EventOpt) Event {
	p := map[string]any{"timeout": string(kind), "armedVersion": armedVersion, "deadline": deadline.UTC().Format(time.RFC3339Nano)}
	return build(sessionID, TypeTimeoutExpired, p, opts)
}

// ModelRequested counts a model turn (ACTIVE only).
func ModelRequested(sessionID string, opts ...EventOpt) Event {
	return build(sessionID, TypeModelRequested, nil, opts)
}

// ToolRequested counts a tool call (ACTIVE only).
func ToolRequested(sessionID string, opts ...EventOpt) Event {
	return build(sessionID, TypeToolRequested, nil, opts)
}

// ToolCompleted reports a tool call's end; ok false counts a tool failure.
func ToolCompleted(sessionID string, ok bool, opts ...EventOpt) Event {
	return build(sessionID, TypeToolCompleted, map[string]any{"ok": ok}, opts)
}

// RepairStarted counts a repair cycle (ACTIVE only).
func RepairStarted(sessionID string, opts ...EventOpt) Event {
	return build(sessionID, TypeRepairStarted, nil, opts)
}

// Custom is a custom event x.<vendor>.<Name> (docs/lifecycle.md): applied in any
// non-terminal state without changing it. payload is encoded as JSON (nil
// for none); the snapshot's annotations keep it when at most 1 KiB.
//
// typ must be a custom type name, as pkg/fsm's ValidCustomType checks it.
// Anything else, a lifecycle type such as "SessionCompleted" included, makes
// an event whose Err matches ErrInvalidEvent and that Send refuses before
// any I/O: the lifecycle types have their own constructors.
func Custom(sessionID, typ string, payload any, opts ...EventOpt) Event {
	b := builder{ev: Event{SessionID: sessionID, Type: typ}}
	if !fsm.ValidCustomType([]byte(typ)) {
		b.ev.fail("type", fmt.Errorf("%w: type %q is not a custom type x.<vendor>.<Name> (docs/lifecycle.md); lifecycle types have their own constructors",
			ErrInvalidEvent, typ))
	}
	if payload != nil {
		raw, err := json.Marshal(payload)
		if err != nil {
			b.ev.fail("payload", fmt.Errorf("%w: payload: %v", ErrInvalidEvent, err))
		}
		b.ev.Payload = raw
	}
	for _, o := range opts {
		o.applyEvent(&b)
	}
	return b.finish()
}

// Options of the structured failure (SessionFailed) and of approvals
// (ApprovalRequested, ApprovalGranted, ApprovalDenied); docs/lifecycle.md,
// "Structured failures" and "Approvals that match their request". The
// service answers 400 naming the member for a value out of its rule.

// FailureCategory sets SessionFailed's category: infrastructure, provider,
// tool, policy, timeout, internal or unknown (the default). Only an
// infrastructure failure may be replaced.
func FailureCategory(c string) EventOpt { return eventOpt(func(b *builder) { b.set("category", c) }) }

// FailureCode sets SessionFailed's code, [a-z0-9][a-z0-9_.-]{0,63}, for
// example "http.503".
func FailureCode(code string) EventOpt { return eventOpt(func(b *builder) { b.set("code", code) }) }

// Retryable marks a SessionFailed as worth running again.
func Retryable() EventOpt { return eventOpt(func(b *builder) { b.set("retryable", true) }) }

// RequestID names the approval request ([A-Za-z0-9._:-]{1,128}): on
// ApprovalRequested its id (else its eventId), on a decision the request
// it decides (a decision for another request is rejected approval_mismatch).
func RequestID(id string) EventOpt { return eventOpt(func(b *builder) { b.set("requestId", id) }) }

// DecidedBy names who decided an ApprovalGranted or ApprovalDenied (at most
// 256 bytes).
func DecidedBy(who string) EventOpt { return eventOpt(func(b *builder) { b.set("by", who) }) }

// ApprovalReason sets why an approval is requested, granted or denied (at
// most 1 KiB).
func ApprovalReason(r string) EventOpt { return eventOpt(func(b *builder) { b.set("reason", r) }) }
