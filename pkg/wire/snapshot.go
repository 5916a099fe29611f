package wire

import (
	"encoding/json"
	"time"
)

// Snapshot is a session's read model as the query service serves it
// (GET /v1/sessions/{id}, the sessions of a listing; docs/lifecycle.md, "The
// snapshot"): the JSON members, typed, in the order the service writes them.
// Times are in UTC with nanoseconds; states, event types and event ids are
// their JSON spellings. pkg/snapshot builds one from its snapshot to encode
// it (and reads one back), pkg/client decodes the service's answers into
// one; a reader ignores members a newer service adds.
type Snapshot struct {
	SessionID            string            `json:"sessionId"`
	State                string            `json:"state"`
	Terminal             bool              `json:"terminal"`
	CorrelationID        string            `json:"correlationId"`
	Goal                 string            `json:"goal"`
	PredecessorSessionID *string           `json:"predecessorSessionId"`
	Labels               map[string]string `json:"labels"`
	Metadata             json.RawMessage   `json:"metadata"`
	ParentSessionID      *string           `json:"parentSessionId"`
	ParentClosePolicy    string            `json:"parentClosePolicy"`
	Timeouts             map[string]string `json:"timeouts"`
	Deadline             *Deadline         `json:"deadline"`
	SuccessorSessionID   *string           `json:"successorSessionId"`
	Replacement          *Replacement      `json:"replacement"`
	CreatedAt            time.Time         `json:"createdAt"`
	UpdatedAt            time.Time         `json:"updatedAt"`
	StateEnteredAt       time.Time         `json:"stateEnteredAt"`
	// Version counts applied events; Counters.Events counts every event
	// seen, rejected and duplicate ones included.
	Version     uint64           `json:"version"`
	LastEventID string           `json:"lastEventId"`
	Position    Position         `json:"position"`
	FirstOffset int64            `json:"firstOffset"`
	Counters    Counters         `json:"counters"`
	DurationsMs map[string]int64 `json:"durationsMs"`
	// ExecutionMs is the execution time used: the closed intervals in
	// CREATED, INITIALIZING, ACTIVE and RECOVERING (docs/timeouts.md).
	ExecutionMs int64        `json:"executionMs"`
	Transitions []Transition `json:"transitions"`
	// Rejections holds the last 16 rejected events.
	Rejections   []Rejection   `json:"rejections"`
	Approval     Approval      `json:"approval"`
	Failure      *Failure      `json:"failure"`
	Cancellation *Cancellation `json:"cancellation"`
	Recovery     *Recovery     `json:"recovery"`
	Annotations  []Annotation  `json:"annotations"`
	// Digest is a SHA-256 chain over the applied events: equal digests mean
	// the same applied events in the same order.
	Digest string `json:"digest"`
	// Archived is true for a closed session read back from the archive
	// after it left the read model (GET /v1/sessions/{id},
	// docs/retention.md, "Reading archived sessions");
	// absent otherwise, so stored snapshots are unchanged.
	Archived bool `json:"archived,omitempty"`
	// AsOf is the version or time (RFC 3339, UTC) a read as of one asked
	// for (GET /v1/sessions/{id}?asOf=, README, "HTTP API"); absent
	// otherwise.
	AsOf string `json:"asOf,omitempty"`
}

// Counters are a snapshot's counters; Custom counts applied custom events
// by type.
type Counters struct {
	Events             uint64            `json:"events"`
	ModelTurns         uint64            `json:"modelTurns"`
	ToolCalls          uint64            `json:"toolCalls"`
	ToolFailures       uint64            `json:"toolFailures"`
	RepairCycles       uint64            `json:"repairCycles"`
	Pauses             uint64            `json:"pauses"`
	ApprovalsRequested uint64            `json:"approvalsRequested"`
	ApprovalsGranted   uint64            `json:"approvalsGranted"`
	ApprovalsDenied    uint64            `json:"approvalsDenied"`
	Recoveries         uint64            `json:"recoveries"`
	Rejected           uint64            `json:"rejected"`
	Duplicates         uint64            `json:"duplicates"`
	SupersededTimeouts uint64            `json:"supersededTimeouts"`
	Custom             map[string]uint64 `json:"custom"`
}

// Replacement is the link of a successor to its predecessor.
type Replacement struct {
	PredecessorSessionID string `json:"predecessorSessionId"`
	Status               string `json:"status"`
	PredecessorDigest    string `json:"predecessorDigest,omitempty"`
	Reason               string `json:"reason,omitempty"`
}

// Annotation is one applied custom event.
type Annotation struct {
	EventID string          `json:"eventId"`
	Type    string          `json:"type"`
	At      time.Time       `json:"at"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// Transition is one applied state change.
type Transition struct {
	From    string    `json:"from"`
	To      string    `json:"to"`
	Type    string    `json:"type"`
	EventID string    `json:"eventId"`
	At      time.Time `json:"at"`
}

// Rejection is one rejected event and why.
type Rejection struct {
	EventID string    `json:"eventId"`
	Type    string    `json:"type"`
	State   string    `json:"state"`
	Reason  string    `json:"reason"`
	At      time.Time `json:"at"`
}

// Deadline is the earliest armed deadline (docs/timeouts.md).
type Deadline struct {
	Kind string    `json:"kind"`
	At   time.Time `json:"at"`
}

// Approval is the snapshot's approval member.
type Approval struct {
	// Pending is the request waiting for a decision, nil when none is.
	Pending      *PendingApproval `json:"pending"`
	PendingSince *time.Time       `json:"pendingSince"`
	WaitedMs     int64            `json:"waitedMs"`
	// Decisions are the last 16 decisions, oldest first.
	Decisions []ApprovalDecision `json:"decisions"`
}

// PendingApproval is an approval request waiting for a decision.
type PendingApproval struct {
	RequestID string    `json:"requestId"`
	Since     time.Time `json:"since"`
	Reason    string    `json:"reason"`
}

// ApprovalDecision is how one approval request ended: Decision is
// "granted", "denied", "expired" (the approval timeout) or "cancelled"
// (the session reached CANCELLING or FAILED). By and Reason are empty on
// expired and cancelled decisions.
type ApprovalDecision struct {
	RequestID string    `json:"requestId"`
	Decision  string    `json:"decision"`
	At        time.Time `json:"at"`
	WaitedMs  int64     `json:"waitedMs"`
	By        string    `json:"by,omitempty"`
	// SentBy is the name of the token that sent a granted or denied
	// decision through ingest, beside By (who decided, as the producer
	// wrote it); absent for a decision written otherwise.
	SentBy string `json:"sentBy,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// Failure is why and when a session failed. Category is one of
// infrastructure, provider, tool, policy, timeout, internal or unknown;
// Code is nil when the failure named none.
type Failure struct {
	Reason    string    `json:"reason"`
	Category  string    `json:"category"`
	Code      *string   `json:"code"`
	Retryable bool      `json:"retryable"`
	At        time.Time `json:"at"`
	From      string    `json:"from"`
}

// Cancellation is a session's cancellation.
type Cancellation struct {
	RequestedAt time.Time  `json:"requestedAt"`
	Reason      string     `json:"reason"`
	Mode        string     `json:"mode"`
	Timeout     string     `json:"timeout,omitempty"`
	Forced      bool       `json:"forced"`
	CompletedAt *time.Time `json:"completedAt"`
	// EscalatedAt is when a forced request escalated a graceful
	// cancellation; nil when none did.
	EscalatedAt *time.Time `json:"escalatedAt,omitempty"`
}

// Recovery is a session's last recovery.
type Recovery struct {
	Active      bool       `json:"active"`
	ResumeTo    string     `json:"resumeTo"`
	StartedAt   time.Time  `json:"startedAt"`
	CompletedAt *time.Time `json:"completedAt"`
}
