package firststage

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
}

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
		{Event: ToolCompleted, Counter: "toolFailures", Note: "only when payload.ok is false"},
		{Event: RepairStarted, Counter: "repairCycles"},
	}
}

// ruleIndex maps (event, timeout) to its row in table, or -1; built once from
// table so the reducer's lookup is an array index.
var ruleIndex = func() (idx [numEventTypes][numTimeoutKinds]int8) {
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
	if int(t) >= numEventTypes || int(k) >= numTimeoutKinds {
		return nil
	}
	if i := ruleIndex[t][k]; i >= 0 {
		return &table[i]
	}
	return nil
}

// describeFrom renders a From set the way DESIGN.md words it.
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
