package wire

import "time"

// Outcomes of an event in a history entry, beside Applied and Rejected
// (which a change record has too).
const (
	Duplicate  = "duplicate"
	Superseded = "superseded"
)

// HistoryEntry is one event of a session's history (the query service's
// GET /v1/sessions/{id}/history): what the fold did with it. Version is the
// session's version after the event (unchanged by an event not applied, so
// several entries can share it); Position is where the event sits in the
// events topic, one entry per position. Outcome is Applied, Rejected,
// Duplicate or Superseded; Reason is a rejection's; From and To are the
// states before and after (equal unless a transition was applied; From is
// empty for the creation).
type HistoryEntry struct {
	Version    uint64    `json:"version"`
	Position   Position  `json:"position"`
	EventID    string    `json:"eventId"`
	Type       string    `json:"type"`
	OccurredAt time.Time `json:"occurredAt"`
	Outcome    string    `json:"outcome"`
	Reason     string    `json:"reason,omitempty"`
	From       string    `json:"from,omitempty"`
	To         string    `json:"to"`
	// RequestID is an approval event's requestId as written (set on
	// ApprovalRequested, ApprovalGranted and ApprovalDenied when the
	// payload has one).
	RequestID string `json:"requestId,omitempty"`
	// By is a decision's payload "by": who decided, as the producer wrote
	// it. SentBy is the name of the token that sent the decision through
	// ingest (absent when authentication is off or the record did not come
	// through ingest). A producer may decide on someone's behalf, so the
	// two may differ; both are kept.
	By     string `json:"by,omitempty"`
	SentBy string `json:"sentBy,omitempty"`
}

// HistoryPage is the body of GET /v1/sessions/{id}/history: entries in the
// log's order, and the opaque cursor to pass as "after" for the next page,
// null after the last.
type HistoryPage struct {
	History []HistoryEntry `json:"history"`
	Next    *string        `json:"next"`
}
