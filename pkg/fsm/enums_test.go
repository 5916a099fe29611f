package fsm_test

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/correx/sessions/pkg/fsm"
)

// TestEnumerationsListEveryValue: over the whole numeric range of each
// enumeration, a value's name parses back to it exactly when the value is
// one the package names, and the lists other packages range over
// (States, EventTypes with SystemEventTypes, Rejections, TimeoutKinds)
// hold exactly those values, in numeric order, within the counts arrays
// are sized by. A value added to an enumeration without its name, or left
// out of its list, fails here.
func TestEnumerationsListEveryValue(t *testing.T) {
	var states []fsm.State
	for i := range 256 {
		s := fsm.State(i)
		p, ok := fsm.ParseState(s.String())
		if ok != s.Valid() || ok && p != s {
			t.Errorf("ParseState(%q) = %v, %v for %d (valid %v)", s, p, ok, i, s.Valid())
		}
		if ok {
			states = append(states, s)
			if i >= fsm.NumStates {
				t.Errorf("state %d is not below NumStates %d", i, fsm.NumStates)
			}
		}
	}
	if !slices.Equal(fsm.States(), states) || len(states) != fsm.NumStates-1 {
		t.Errorf("States() = %v, want %v (NumStates %d)", fsm.States(), states, fsm.NumStates)
	}

	var named, system []fsm.EventType
	for i := range 256 {
		et := fsm.EventType(i)
		p, ok := fsm.ParseEventType([]byte(et.String()))
		if want := et.Valid() && et != fsm.EventCustom; ok != want || ok && p != et {
			t.Errorf("ParseEventType(%q) = %v, %v for %d, want ok %v", et, p, ok, i, want)
		}
		if ok && et.System() {
			system = append(system, et)
		} else if ok {
			named = append(named, et)
		}
	}
	if !slices.Equal(fsm.EventTypes(), named) || !slices.Equal(fsm.SystemEventTypes(), system) {
		t.Errorf("EventTypes() = %v, SystemEventTypes() = %v, want %v and %v", fsm.EventTypes(), fsm.SystemEventTypes(), named, system)
	}

	var rejections []fsm.Reason
	for i := range 256 {
		r := fsm.Reason(i)
		p, ok := fsm.ParseReason(r.String())
		if want := r != fsm.ReasonNone && i < fsm.NumReasons; ok != want || ok && p != r {
			t.Errorf("ParseReason(%q) = %v, %v for %d, want ok %v", r, p, ok, i, want)
		}
		if ok != (r.Rejection() || r == fsm.ReasonUnknownSession) {
			t.Errorf("reason %q: parses %v, Rejection %v", r, ok, r.Rejection())
		}
		if r.Rejection() {
			rejections = append(rejections, r)
		}
	}
	if got := slices.Collect(fsm.Rejections()); !slices.Equal(got, rejections) || len(got) != fsm.NumReasons-2 {
		t.Errorf("Rejections() = %v, want %v", got, rejections)
	}

	var kinds []fsm.TimeoutKind
	for i := range 256 {
		k := fsm.TimeoutKind(i)
		p, ok := fsm.ParseTimeoutKind([]byte(k.String()))
		if want := k != fsm.TimeoutNone && i < fsm.NumTimeoutKinds; ok != want || ok && p != k {
			t.Errorf("ParseTimeoutKind(%q) = %v, %v for %d, want ok %v", k, p, ok, i, want)
		}
		if ok {
			kinds = append(kinds, k)
		}
	}
	if !slices.Equal(fsm.TimeoutKinds(), kinds) || len(kinds) != fsm.NumTimeoutKinds-1 {
		t.Errorf("TimeoutKinds() = %v, want %v", fsm.TimeoutKinds(), kinds)
	}

	for _, m := range []fsm.CancelMode{fsm.CancelGraceful, fsm.CancelForced} {
		if p, ok := fsm.ParseCancelMode(m.String()); !ok || p != m {
			t.Errorf("ParseCancelMode(%q) = %v, %v", m, p, ok)
		}
	}
	for _, pol := range []fsm.ParentClosePolicy{fsm.ParentCloseCancel, fsm.ParentCloseAbandon} {
		if p, ok := fsm.ParseParentClosePolicy(pol.String()); !ok || p != pol {
			t.Errorf("ParseParentClosePolicy(%q) = %v, %v", pol, p, ok)
		}
	}
	if _, ok := fsm.ParseCancelMode("Forced"); ok {
		t.Error("ParseCancelMode accepts another spelling")
	}
	if _, ok := fsm.ParseParentClosePolicy(""); ok {
		t.Error("ParseParentClosePolicy accepts the empty name")
	}
}

// TestRulesSayWhatIsValid: the words the messages use for a session id and
// a label key, read as a regular expression, accept exactly what
// ValidSessionID and ValidLabelKey accept.
func TestRulesSayWhatIsValid(t *testing.T) {
	class, ok := strings.CutPrefix(fsm.SessionIDRule, fmt.Sprintf("1-%d characters of ", fsm.MaxSessionIDLen))
	if !ok {
		t.Fatalf("SessionIDRule %q does not start with the length bound %d", fsm.SessionIDRule, fsm.MaxSessionIDLen)
	}
	sessionRE := regexp.MustCompile(fmt.Sprintf("^%s{1,%d}$", class, fsm.MaxSessionIDLen))
	labelRE := regexp.MustCompile("^" + fsm.LabelKeyRule + "$")
	var cases []string
	for c := range 256 {
		b := string(rune(c))
		if c >= 0x80 {
			b = string([]byte{byte(c)})
		}
		cases = append(cases, b, "a"+b, b+"a")
	}
	cases = append(cases, "", strings.Repeat("a", fsm.MaxSessionIDLen), strings.Repeat("a", fsm.MaxSessionIDLen+1),
		strings.Repeat("a", fsm.MaxLabelKeyLen), strings.Repeat("a", fsm.MaxLabelKeyLen+1))
	for _, s := range cases {
		if got, want := fsm.ValidSessionID(s), sessionRE.MatchString(s); got != want {
			t.Errorf("ValidSessionID(%q) = %v, SessionIDRule says %v", s, got, want)
		}
		if got, want := fsm.ValidLabelKey(s), labelRE.MatchString(s); got != want {
			t.Errorf("ValidLabelKey(%q) = %v, LabelKeyRule says %v", s, got, want)
		}
	}
}
