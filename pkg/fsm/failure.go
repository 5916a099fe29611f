package fsm

import "fmt"

// FailureCategory is the category of a failure (SessionFailed.category,
// docs/lifecycle.md "Structured failures"). The zero value is
// FailureUnknown, so a failure stored before categories existed reads as
// unknown. The numeric values are part of the stored snapshot format.
type FailureCategory uint8

// Failure categories.
const (
	FailureUnknown FailureCategory = iota
	FailureInfrastructure
	FailureProvider
	FailureTool
	FailurePolicy
	FailureTimeout
	FailureInternal

	// NumFailureCategories is one more than the largest category.
	NumFailureCategories = int(FailureInternal) + 1
)

var failureCategoryNames = [NumFailureCategories]string{
	FailureUnknown:        "unknown",
	FailureInfrastructure: "infrastructure",
	FailureProvider:       "provider",
	FailureTool:           "tool",
	FailurePolicy:         "policy",
	FailureTimeout:        "timeout",
	FailureInternal:       "internal",
}

// FailureCategoryRule says in words which categories ingest accepts.
const FailureCategoryRule = "one of infrastructure, provider, tool, policy, timeout, internal or unknown"

// String returns the category as spelled in payloads, snapshots and metrics.
func (c FailureCategory) String() string {
	if int(c) < NumFailureCategories {
		return failureCategoryNames[c]
	}
	return fmt.Sprintf("FailureCategory(%d)", uint8(c))
}

// ParseFailureCategory returns the category spelled name.
func ParseFailureCategory(name string) (FailureCategory, bool) {
	for c := range FailureCategory(NumFailureCategories) {
		if failureCategoryNames[c] == name {
			return c, true
		}
	}
	return FailureUnknown, false
}

// Bounds of the structured failure and approval members (docs/lifecycle.md).
const (
	// MaxFailureCodeLen is the longest failure code.
	MaxFailureCodeLen = 64
	// MaxRequestIDLen is the longest approval requestId.
	MaxRequestIDLen = 128
	// MaxDeciderBytes bounds an approval decision's "by": ingest refuses
	// longer, the fold cuts.
	MaxDeciderBytes = 256
	// DecisionsKept is how many of the latest approval decisions a session
	// keeps.
	DecisionsKept = 16
)

// FailureCodeRule and RequestIDRule say in words what ValidFailureCode and
// ValidRequestID accept.
const (
	FailureCodeRule = "[a-z0-9][a-z0-9_.-]{0,63}"
	RequestIDRule   = "[A-Za-z0-9._:-]{1,128}"
)

// ValidFailureCode reports whether c matches FailureCodeRule.
func ValidFailureCode(c string) bool {
	if len(c) == 0 || len(c) > MaxFailureCodeLen {
		return false
	}
	for i := 0; i < len(c); i++ {
		b := c[i]
		if !(b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || i > 0 && (b == '_' || b == '.' || b == '-')) {
			return false
		}
	}
	return true
}

// ValidRequestID reports whether id matches RequestIDRule.
func ValidRequestID(id string) bool {
	if len(id) == 0 || len(id) > MaxRequestIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		b := id[i]
		if !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' ||
			b == '.' || b == '_' || b == ':' || b == '-') {
			return false
		}
	}
	return true
}

// DecisionKind is how an approval request ended. The numeric values are
// part of the stored snapshot format.
type DecisionKind uint8

// Decision kinds: granted and denied by ApprovalGranted and ApprovalDenied,
// expired by the approval timeout, cancelled when the session reached
// CANCELLING or FAILED otherwise while the request was pending.
const (
	DecisionGranted DecisionKind = iota + 1
	DecisionDenied
	DecisionExpired
	DecisionCancelled
)

var decisionNames = [...]string{"", "granted", "denied", "expired", "cancelled"}

// String returns "granted", "denied", "expired" or "cancelled".
func (d DecisionKind) String() string {
	if int(d) < len(decisionNames) {
		return decisionNames[d]
	}
	return fmt.Sprintf("DecisionKind(%d)", uint8(d))
}

// ParseDecisionKind returns the kind spelled name.
func ParseDecisionKind(name string) (DecisionKind, bool) {
	for d := DecisionGranted; int(d) < len(decisionNames); d++ {
		if decisionNames[d] == name {
			return d, true
		}
	}
	return 0, false
}

// Decision is how one approval request ended, as kept in the session's
// last DecisionsKept decisions. By, SentBy and Reason are set only on
// granted and denied decisions.
type Decision struct {
	RequestID string
	Kind      DecisionKind
	At        int64
	Waited    int64 // nanoseconds from the request to the decision
	By        string
	// SentBy is the name of the token that sent the decision through
	// ingest (Event.SentBy), "" for one written otherwise.
	SentBy string
	Reason string
}

// Refusal reasons a successor receives in ReplacementRefused
// (docs/lifecycle.md, "Replacements and children"), in the order the
// predecessor checks them; ReplacementRefusal returns them.
const (
	RefusalNotFailed          = "not_failed"
	RefusalNotInfrastructure  = "not_infrastructure"
	RefusalChain              = "chain"
	RefusalAlreadyReplaced    = "already_replaced"
	RefusalUnknownPredecessor = "unknown_predecessor"
)

// ReplacementRefusal returns why s, as a predecessor, cannot apply a
// SessionReplaced now ("" when it can): it must be FAILED, its failure
// infrastructure, not itself a successor, and not replaced yet, checked in
// that order.
func ReplacementRefusal(s *Session) string {
	switch {
	case s.State != StateFailed:
		return RefusalNotFailed
	case s.Failure.Category != FailureInfrastructure:
		return RefusalNotInfrastructure
	case s.PredecessorSessionID != "":
		return RefusalChain
	case s.SuccessorSessionID != "":
		return RefusalAlreadyReplaced
	}
	return ""
}

// CountsAsExecution reports whether time spent in st counts against the
// execution timeout (docs/timeouts.md): CREATED, INITIALIZING, ACTIVE and
// RECOVERING do; the suspended states PAUSED and AWAITING_APPROVAL do not,
// nor does CANCELLING, where the execution timeout is not armed.
func CountsAsExecution(st State) bool {
	return executionStates.Has(st)
}

var executionStates = SetOf(StateCreated, StateInitializing, StateActive, StateRecovering)

// ExecutionUsed returns the execution time s has used (nanoseconds): the
// closed intervals spent in the states that count as execution, without the
// open interval of the current state. The snapshot shows it as executionMs.
func (s *Session) ExecutionUsed() int64 {
	var u int64
	for st := range State(NumStates) {
		if CountsAsExecution(st) {
			u += s.Durations[st]
		}
	}
	return u
}

// NumDecisions returns how many approval decisions are kept (at most
// DecisionsKept).
func (s *Session) NumDecisions() int { return s.decisions.len() }

// DecisionAt returns the i-th kept approval decision, oldest first.
func (s *Session) DecisionAt(i int) Decision { return s.decisions.at(i) }
