package fsm_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/correx/sessions/pkg/fsm"
)

// TestFoldCutsText folds a goal and reasons far beyond the bounds another
// producer may write straight to the topic: the session keeps a prefix of at
// most MaxGoalBytes (MaxReasonBytes) bytes, cut on a UTF-8 boundary.
func TestFoldCutsText(t *testing.T) {
	texts := map[string]string{
		"ascii":      strings.Repeat("<", 64<<10),
		"two-byte":   strings.Repeat("é", 32<<10),
		"three-byte": strings.Repeat("€", 22<<10),
		"four-byte":  strings.Repeat("𝄞", 16<<10),
		"mixed":      "a" + strings.Repeat("€𝄞é<", 8<<10),
		"short":      "fix it",
	}
	check := func(t *testing.T, what, got, orig string, limit int) {
		t.Helper()
		if len(got) > limit {
			t.Errorf("%s: kept %d bytes, want at most %d", what, len(got), limit)
		}
		if !utf8.ValidString(got) {
			t.Errorf("%s: kept text is not valid UTF-8", what)
		}
		if !strings.HasPrefix(orig, got) {
			t.Errorf("%s: kept text is not a prefix of the original", what)
		}
		if len(orig) > limit && len(got) <= limit-utf8.UTFMax {
			t.Errorf("%s: kept %d bytes, cut further than the last whole rune before %d", what, len(got), limit)
		}
		if len(orig) <= limit && got != orig {
			t.Errorf("%s: a text within the bound was changed", what)
		}
	}
	for name, text := range texts {
		t.Run(name, func(t *testing.T) {
			b := newBuilder(t)
			b.apply(fsm.SessionCreated, fsm.Fields{Goal: text})
			check(t, "goal", b.s.Goal, text, fsm.MaxGoalBytes)
			b.apply(fsm.SessionStarted, fsm.Fields{})
			b.apply(fsm.CancellationRequested, fsm.Fields{Reason: text})
			check(t, "cancellation reason", b.s.Cancellation.Reason, text, fsm.MaxReasonBytes)

			f := reach(t, fsm.StateActive)
			f.apply(fsm.SessionFailed, fsm.Fields{Reason: text})
			check(t, "failure reason", f.s.Failure.Reason, text, fsm.MaxReasonBytes)
		})
	}
}

// TestDuplicateWindowBoundary pins which resends are recognised: a resent
// event is a duplicate exactly when fewer than IDWindow (128) events of the
// same session entered the window after the original. Rejected events enter
// the window like applied ones.
func TestDuplicateWindowBoundary(t *testing.T) {
	for _, tc := range []struct {
		after int
		want  fsm.Result
	}{
		{0, fsm.Duplicate},
		{fsm.IDWindow - 1, fsm.Duplicate},
		{fsm.IDWindow, fsm.Applied},
	} {
		for _, rejected := range []bool{false, true} {
			b := reach(t, fsm.StateActive)
			orig := fsm.NewEvent(b.id(), "s-1", fsm.ModelRequested, b.at, fsm.Fields{})
			if o := b.r.Apply(&b.s, &orig); o.Result != fsm.Applied {
				t.Fatal(o)
			}
			for i := range tc.after {
				if rejected && i%2 == 0 {
					if o := b.apply(fsm.SessionResumed, fsm.Fields{}); o.Result != fsm.Rejected {
						t.Fatalf("filler %d: %+v, want rejected", i, o)
					}
					continue
				}
				b.apply(fsm.ModelRequested, fsm.Fields{})
			}
			turns := b.s.Counters.ModelTurns
			if o := b.r.Apply(&b.s, &orig); o.Result != tc.want {
				t.Errorf("resent after %d later events (rejected among them: %v): %v, want %v", tc.after, rejected, o.Result, tc.want)
			}
			if tc.want == fsm.Duplicate && b.s.Counters.ModelTurns != turns {
				t.Errorf("resent after %d later events: counted twice", tc.after)
			}
		}
	}
}
