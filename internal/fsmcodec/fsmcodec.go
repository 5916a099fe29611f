// Package fsmcodec gives the snapshot codecs (pkg/snapshot) write access to
// the histories an fsm.Session keeps: its transitions, rejections, duplicate
// window, annotations and custom counters. Everyone reads them through the
// Session's getters (TransitionAt, SeenIDAt, ...), but only the reducer
// changes them, and only a decoder rebuilding a stored session needs to
// write them directly; so the functions that do are not part of pkg/fsm's
// API, and nothing outside this module can call them.
//
// Package fsm sets the functions when it is initialised, through
// internal/fsmcodec/hooks (fsm cannot import this package, which imports
// fsm); this package gives them their types.
//
// Each function appends its argument as the newest entry of one history,
// dropping the oldest once the history holds its bound (fsm.TransitionsKept,
// fsm.RejectionsKept, fsm.IDWindow, fsm.AnnotationsKept): appending the
// entries of an encoded session oldest first restores exactly what was
// encoded. Not safe for concurrent use on one Session, like the Session.
package fsmcodec

import (
	"github.com/correx/sessions/internal/fsmcodec/hooks"
	"github.com/correx/sessions/pkg/fsm"
)

// The functions package fsm set; fsm is initialised before this package,
// and a wrong type fails here, at start-up.
var (
	pushTransition  = hooks.PushTransition.(func(*fsm.Session, fsm.Transition))
	pushRejection   = hooks.PushRejection.(func(*fsm.Session, fsm.Rejection))
	pushSeenID      = hooks.PushSeenID.(func(*fsm.Session, fsm.EventID))
	pushAnnotation  = hooks.PushAnnotation.(func(*fsm.Session, fsm.Annotation))
	pushCustomCount = hooks.PushCustomCount.(func(*fsm.Session, fsm.CustomCount))
)

// PushTransition appends t as the newest kept transition of s.
func PushTransition(s *fsm.Session, t fsm.Transition) { pushTransition(s, t) }

// PushRejection appends r as the newest kept rejection of s.
func PushRejection(s *fsm.Session, r fsm.Rejection) { pushRejection(s, r) }

// PushSeenID appends id as the newest id of s's duplicate window.
func PushSeenID(s *fsm.Session, id fsm.EventID) { pushSeenID(s, id) }

// PushAnnotation appends a as the newest annotation of s.
func PushAnnotation(s *fsm.Session, a fsm.Annotation) { pushAnnotation(s, a) }

// PushCustomCount appends c to s's custom counters. They are kept sorted by
// type, so a decoder appends them in the order they were encoded in, and
// checks that order itself.
func PushCustomCount(s *fsm.Session, c fsm.CustomCount) { pushCustomCount(s, c) }
