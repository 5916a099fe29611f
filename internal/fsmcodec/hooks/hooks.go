// Package hooks holds the functions package fsm sets for internal/fsmcodec
// (see there). fsm imports this package to set them, so this package cannot
// name fsm's types: each variable holds a function of the type written
// beside it, and internal/fsmcodec asserts those types once. Nothing else
// should import it.
package hooks

// Set by package fsm when it is initialised (pkg/fsm/restore.go).
var (
	PushTransition  any // func(*fsm.Session, fsm.Transition)
	PushRejection   any // func(*fsm.Session, fsm.Rejection)
	PushSeenID      any // func(*fsm.Session, fsm.EventID)
	PushAnnotation  any // func(*fsm.Session, fsm.Annotation)
	PushCustomCount any // func(*fsm.Session, fsm.CustomCount)
)
