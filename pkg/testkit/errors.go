package testkit

import "github.com/correx/sessions/pkg/client"

// ErrBadPosition is the error of a position that is not "partition:offset"
// (client.ParsePosition's).
var ErrBadPosition = client.ErrBadPosition

// StatusError is a service's answer other than the one expected, the
// client's type: its status and the problem document's members (a body that
// is not one is in Detail). Op names the Stack's request: "send" (Send,
// SendAs), "stats" (WaitFolded), "readyz" and "watch" (Start, Run).
type StatusError = client.StatusError
