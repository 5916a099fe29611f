package fsm

import (
	"fmt"
	"strings"
)

// Rule is one row of the transition table: an event (and, for TimeoutExpired,
// its timeout kind) moves a session from any state of From to To.
type Rule struct {
	Event   EventType
	Timeout TimeoutKind // set only on TimeoutExpired rows
	From    StateSet    // StateNone in the set means "no session yet"
	To      State       // ignored when Resume is set
	// Resume sends the session back to the state its recovery started from
	// (recovery.resumeTo) instead of a fixed state.
	Resume bool
	// Forced marks the cancellation as forced when the rule completes it.
	Forced bool
}

// Table is the transition table of the lifecycle, held as data in one place:
// the reducer, the README (through `go generate`), the Mermaid diagram and the
// tests all read it. Execution events are not in it; see ExecutionEvents.
//
// It is a function so that no caller can mutate the table the reducer uses.
func Table() []Rule { return append([]Rule(nil), table[:]...) }

var table = [...]Rule{
	{Event: SessionCreated, From: SetOf(StateNone), To: StateCreated},
	{Event: SessionInitializing, From: SetOf(StateCreated), To: StateInitializing},
	{Event: SessionStarted, From: SetOf(StateCreated, StateInitializing), To: StateActive},
	{Event: SessionPaused, From: SetOf(StateActive), To: StatePaused},
	{Event: SessionResumed, From: SetOf(StatePaused), To: StateActive},
	{Event: ApprovalRequested, From: SetOf(StateActive), To: StateAwaitingApproval},
	{Event: ApprovalGranted, From: SetOf(StateAwaitingApproval), To: StateActive},
	{Event: ApprovalDenied, From: SetOf(StateAwaitingApproval), To: StateActive},
	{Event: CancellationRequested, From: nonTerminal &^ SetOf(StateCancelling), To: StateCancelling},
	{Event: SessionCancelled, From: SetOf(StateCancelling), To: StateCancelled},
	{Event: SessionCompleted, From: SetOf(StateActive), To: StateCompleted},
	{Event: SessionFailed, From: nonTerminal, To: StateFailed},
	{Event: RecoveryStarted, From: SetOf(StateInitializing, StateActive, StatePaused, StateAwaitingApproval), To: StateRecovering},
	{Event: RecoveryCompleted, From: SetOf(StateRecovering), Resume: true},
	{Event: TimeoutExpired, Timeout: TimeoutExecution, From: nonTerminal &^ SetOf(StateCancelling), To: StateCancelling},
	{Event: TimeoutExpired, Timeout: TimeoutInactivity, From: nonTerminal &^ SetOf(StateCancelling), To: StateCancelling},
	{Event: TimeoutExpired, Timeout: TimeoutApproval, From: SetOf(StateAwaitingApproval), To: StateCancelling},
	{Event: TimeoutExpired, Timeout: TimeoutRecovery, From: SetOf(StateRecovering), To: StateCancelling},
	{Event: TimeoutExpired, Timeout: TimeoutCancellation, From: SetOf(StateCancelling), To: StateCancelled, Forced: true},
	{Event: ReplacementRefused, From: nonTerminal, To: StateFailed},
}

// escalation is the rule of a forced CancellationRequested in a graceful
// CANCELLING: the state stays CANCELLING, the mode becomes forced
// (docs/lifecycle.md, "Forced cancellation"). It is not a row of table,
// which holds one rule per event, and is listed with StateKeepingEvents.
var escalation = Rule{Event: CancellationRequested, From: SetOf(StateCancelling), To: StateCancelling}

// Escalation returns the rule of the escalation, the one transition not
// in Table: a forced CancellationRequested in a graceful CANCELLING,
// recorded as a transition CANCELLING -> CANCELLING (Outcome.Escalated).
// Table and Escalation together are every transition a session can make.
func Escalation() Rule { return escalation }

// inFlightStates are the states besides ACTIVE where ToolCompleted is
// applied: a tool that was running when the session was suspended or asked
// to stop is recorded.
var inFlightStates = SetOf(StatePaused, StateAwaitingApproval, StateCancelling)

// RefusalCode is the failure code of a successor that ReplacementRefused
// fails (category policy).
const RefusalCode = "replacement_refused"

// ExecutionRule describes an execution event: accepted only in ACTIVE, it
// increments a counter and never changes the state.
type ExecutionRule struct {
	Event   EventType
	Counter string // the counter it increments, as named in JSON
	Note    string // a condition on the increment, if any
}

// ExecutionEvents lists the execution events and the counter each increments.
func ExecutionEvents() []ExecutionRule {
	return []ExecutionRule{
		{Event: ModelRequested, Counter: "modelTurns"},
		{Event: ToolRequested, Counter: "toolCalls"},
		{Event: ToolCompleted, Counter: "toolFailures", Note: "only when payload.ok is false; also accepted in `PAUSED`, `AWAITING_APPROVAL` and `CANCELLING` (work in flight)"},
		{Event: RepairStarted, Counter: "repairCycles"},
	}
}

// StateKeepingRule describes an event that is not an execution event and
// never changes the state: the custom types and the replacement events,
// produced by the system only (docs/lifecycle.md).
type StateKeepingRule struct {
	Event  string // the type, or its pattern for custom types
	From   string // where it applies
	Effect string // what it changes
	Reason Reason // its rejection reason where it does not apply
}

// StateKeepingEvents lists the events that never change a state, besides
// the execution events. Reducer.Apply implements them (see check and
// replacementAllowed); TestStateKeepingRules restates them.
func StateKeepingEvents() []StateKeepingRule {
	return []StateKeepingRule{
		{Event: "x.<vendor>.<Name>", From: "any non-terminal", Reason: ReasonTooManyCustomTypes,
			Effect: "`counters.custom[type]` + 1 (at most 64 types); kept in `annotations` (the last 16)"},
		{Event: SessionReplaced.String(), From: "`FAILED` with `failure.category` `infrastructure`, not itself a successor, once (system only)", Reason: ReasonInvalidReplacement,
			Effect: "sets `successorSessionId`"},
		{Event: ReplacementLinked.String(), From: "any state, while `replacement.status` is `pending` (system only)",
			Reason: ReasonInvalidReplacement, Effect: "`replacement.status` = `linked`, sets `replacement.predecessorDigest`"},
		{Event: ReplacementRefused.String(), From: "a terminal state, while `replacement.status` is `pending` (system only; in a non-terminal state see the table)",
			Reason: ReasonInvalidReplacement, Effect: "`replacement.status` = `refused`"},
		{Event: CancellationRequested.String() + "` (`mode` `forced`)", From: "`CANCELLING` with `cancellation.mode` `graceful`",
			Reason: ReasonInvalidTransition, Effect: "`cancellation.mode` = `forced`, the cancellation deadline re-armed from its `occurredAt`; recorded as a transition `CANCELLING` -> `CANCELLING`"},
	}
}

// Check is one step of the order in which Reducer.Apply decides an event's
// outcome; the first step that matches decides.
type Check struct {
	When    string
	Outcome string
}

// Checks lists the steps of Reducer.Apply in order.
func Checks() []Check {
	return []Check{
		{"no session yet and the event is not `SessionCreated`", "orphan (`unknown_session`, dead-letter topic)"},
		{"the `eventId` is in the duplicate window", "duplicate: `counters.duplicates` + 1"},
		{"`TimeoutExpired` with `payload.armedVersion` other than `version`", "superseded: `counters.supersededTimeouts` + 1, not a rejection"},
		{"a replacement event (system only)", "rejected `version_conflict` on an `expectedVersion` other than `version`, else the rule in the table above, terminal states included"},
		{"the session is terminal", "rejected `after_terminal`"},
		{"`expectedVersion` other than `version`", "rejected `version_conflict`"},
		{"a second `SessionCreated`", "rejected `duplicate_create`"},
		{"`SessionInitializing` or `SessionStarted` while `replacement.status` is `pending`", "rejected `replacement_pending`"},
		{"`ApprovalGranted` or `ApprovalDenied` in `AWAITING_APPROVAL` with a `requestId` other than the pending request's", "rejected `approval_mismatch`"},
		{"a custom type beyond the 64 counted", "rejected `too_many_custom_types`"},
		{"an execution event outside `ACTIVE` (but `ToolCompleted` in `PAUSED`, `AWAITING_APPROVAL`, `CANCELLING`)", "rejected `execution_while_suspended` (`PAUSED`, `AWAITING_APPROVAL`) or `execution_outside_active`"},
		{"the table allows no transition", "rejected `invalid_transition`"},
	}
}

// ruleIndex maps (event, timeout) to its row in table, or -1; built once from
// table so the reducer's lookup is an array index.
var ruleIndex = func() (idx [numEventTypes][NumTimeoutKinds]int8) {
	for e := range idx {
		for k := range idx[e] {
			idx[e][k] = -1
		}
	}
	for i, r := range table {
		if idx[r.Event][r.Timeout] != -1 {
			panic(fmt.Sprintf("fsm: two rules for %v/%v", r.Event, r.Timeout))
		}
		idx[r.Event][r.Timeout] = int8(i)
	}
	return idx
}()

// ruleFor returns the rule for the event, or nil when the table has none.
func ruleFor(t EventType, k TimeoutKind) *Rule {
	if int(t) >= numEventTypes || int(k) >= NumTimeoutKinds {
		return nil
	}
	if i := ruleIndex[t][k]; i >= 0 {
		return &table[i]
	}
	return nil
}

// describeFrom renders a From set in the words of the README's table.
func describeFrom(set StateSet) string {
	switch {
	case set == SetOf(StateNone):
		return "no session yet"
	case set == nonTerminal:
		return "any non-terminal"
	case set == nonTerminal&^SetOf(StateCancelling):
		return "any non-terminal except `CANCELLING`"
	}
	var parts []string
	for _, s := range set.States() {
		parts = append(parts, "`"+s.String()+"`")
	}
	return strings.Join(parts, ", ")
}

// MarkdownTable renders the transition table and the execution events as
// Markdown. The README embeds this text between markers, and a test keeps the
// two identical (`go generate ./pkg/fsm` rewrites it).
func MarkdownTable() string {
	var b strings.Builder
	b.WriteString("| event type | allowed from | to |\n|---|---|---|\n")
	for _, r := range table {
		name := "`" + r.Event.String() + "`"
		if r.Event == TimeoutExpired {
			name += " (`" + r.Timeout.String() + "`)"
		}
		to := "`" + r.To.String() + "`"
		switch {
		case r.Resume:
			to = "the state recovery started from"
		case r.Event == RecoveryStarted:
			to += " (remembers the state it came from)"
		case r.Forced:
			to += ", marked forced"
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", name, describeFrom(r.From), to)
	}
	b.WriteString("\nExecution events change counters, never the state, and are accepted only in `ACTIVE`:\n\n")
	b.WriteString("| event type | counter |\n|---|---|\n")
	for _, x := range ExecutionEvents() {
		c := "`" + x.Counter + "` + 1"
		if x.Note != "" {
			c += ", " + x.Note
		}
		fmt.Fprintf(&b, "| `%s` | %s |\n", x.Event, c)
	}
	b.WriteString("\nOther events that never change the state (applied ones count in `version`):\n\n")
	b.WriteString("| event type | applies in | effect | else rejected |\n|---|---|---|---|\n")
	for _, x := range StateKeepingEvents() {
		fmt.Fprintf(&b, "| `%s` | %s | %s | `%s` |\n", x.Event, x.From, x.Effect, x.Reason)
	}
	b.WriteString("\nThe fold decides each event by the first of these that holds:\n\n")
	b.WriteString("| # | when | outcome |\n|---|---|---|\n")
	for i, c := range Checks() {
		fmt.Fprintf(&b, "| %d | %s | %s |\n", i+1, c.When, c.Outcome)
	}
	return b.String()
}

// Mermaid renders the lifecycle as a Mermaid state diagram. Edges are listed
// in table order; one edge carries every event that drives it.
func Mermaid() string {
	type edge struct{ from, to string }
	var order []edge
	labels := map[edge][]string{}
	add := func(from, to, label string) {
		e := edge{from, to}
		if _, ok := labels[e]; !ok {
			order = append(order, e)
		}
		for _, l := range labels[e] {
			if l == label {
				return
			}
		}
		labels[e] = append(labels[e], label)
	}
	recoverable := table[ruleIndex[RecoveryStarted][TimeoutNone]].From
	for _, r := range table {
		label := r.Event.String()
		if r.Event == TimeoutExpired {
			label += " " + r.Timeout.String()
		}
		for _, from := range r.From.States() {
			src := from.String()
			if from == StateNone {
				src = "[*]"
			}
			if r.Resume {
				for _, back := range recoverable.States() {
					add(src, back.String(), label)
				}
				continue
			}
			add(src, r.To.String(), label)
		}
	}
	var b strings.Builder
	b.WriteString("stateDiagram-v2\n")
	for _, e := range order {
		fmt.Fprintf(&b, "    %s --> %s: %s\n", e.from, e.to, strings.Join(labels[e], ", "))
	}
	for _, s := range terminalStates.States() {
		fmt.Fprintf(&b, "    %s --> [*]\n", s)
	}
	return b.String()
}
