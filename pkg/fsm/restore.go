package fsm

import "github.com/correx/sessions/internal/fsmcodec/hooks"

// init hands pkg/snapshot's decoders, through internal/fsmcodec, the only
// way besides the reducer to write a Session's kept histories. It sets
// five variables and does nothing else.
func init() {
	hooks.PushTransition = func(s *Session, t Transition) { s.transitions.push(t, TransitionsKept) }
	hooks.PushRejection = func(s *Session, r Rejection) { s.rejections.push(r, RejectionsKept) }
	hooks.PushSeenID = func(s *Session, id EventID) { s.window.push(id, IDWindow) }
	hooks.PushAnnotation = func(s *Session, a Annotation) { s.annotations.push(a, AnnotationsKept) }
	hooks.PushCustomCount = func(s *Session, c CustomCount) { s.custom = append(s.custom, c) }
}
