package fsm

import (
	"fmt"
	"slices"
	"strings"
)

// Histories are the bounded histories a Session keeps, each oldest first:
// what its getters (TransitionAt, RejectionAt, SeenIDAt, CustomCountAt,
// AnnotationAt) read. Only the reducer adds to them; a decoder rebuilding a
// stored session sets them whole with RestoreHistories.
type Histories struct {
	Transitions []Transition // at most TransitionsKept
	Rejections  []Rejection  // at most RejectionsKept
	SeenIDs     []EventID    // the duplicate window, at most IDWindow
	// CustomCounts are at most MaxCustomTypes, sorted by type, each type
	// once.
	CustomCounts []CustomCount
	// Annotations are at most AnnotationsKept, each of a type among
	// CustomCounts.
	Annotations []Annotation
	// Decisions are the approval decisions kept, at most DecisionsKept.
	Decisions []Decision
}

// RestoreHistories replaces the histories of s with h, as a decoder of a
// stored session does (pkg/snapshot): restoring the histories a session's
// getters read gives back that session. s keeps h's slices, so the caller
// must not change them afterwards. It returns an error, and leaves s
// unchanged, when h breaks a rule written in Histories. Not safe for
// concurrent use on one Session, like the Session.
func (s *Session) RestoreHistories(h Histories) error {
	switch {
	case len(h.Transitions) > TransitionsKept:
		return fmt.Errorf("fsm: %d transitions, more than %d", len(h.Transitions), TransitionsKept)
	case len(h.Rejections) > RejectionsKept:
		return fmt.Errorf("fsm: %d rejections, more than %d", len(h.Rejections), RejectionsKept)
	case len(h.SeenIDs) > IDWindow:
		return fmt.Errorf("fsm: %d event ids, more than %d", len(h.SeenIDs), IDWindow)
	case len(h.CustomCounts) > MaxCustomTypes:
		return fmt.Errorf("fsm: %d custom types, more than %d", len(h.CustomCounts), MaxCustomTypes)
	case len(h.Annotations) > AnnotationsKept:
		return fmt.Errorf("fsm: %d annotations, more than %d", len(h.Annotations), AnnotationsKept)
	case len(h.Decisions) > DecisionsKept:
		return fmt.Errorf("fsm: %d approval decisions, more than %d", len(h.Decisions), DecisionsKept)
	}
	for i := 1; i < len(h.CustomCounts); i++ {
		if h.CustomCounts[i].Type <= h.CustomCounts[i-1].Type {
			return fmt.Errorf("fsm: custom counters out of order at %q", h.CustomCounts[i].Type)
		}
	}
	for _, a := range h.Annotations {
		if _, ok := slices.BinarySearchFunc(h.CustomCounts, a.Type, func(c CustomCount, t string) int {
			return strings.Compare(c.Type, t)
		}); !ok {
			return fmt.Errorf("fsm: annotation of uncounted type %q", a.Type)
		}
	}
	s.transitions = ringOf(h.Transitions)
	s.rejections = ringOf(h.Rejections)
	s.window = ringOf(h.SeenIDs)
	s.annotations = ringOf(h.Annotations)
	s.custom = nilIfEmpty(h.CustomCounts)
	s.decisions = ringOf(h.Decisions)
	return nil
}

// ringOf returns a ring holding vs, oldest first.
func ringOf[T any](vs []T) ring[T] { return ring[T]{buf: nilIfEmpty(vs)} }

// nilIfEmpty keeps a restored empty history like one never written: nil.
func nilIfEmpty[T any](vs []T) []T {
	if len(vs) == 0 {
		return nil
	}
	return vs
}
