package testkit

import (
	"errors"
	"fmt"
)

// ErrBadPosition is returned for a position that is not "partition:offset".
var ErrBadPosition = errors.New("testkit: position must be partition:offset")

// StatusError is a service's answer other than the one expected: the request
// (Op, URL), the status and the body (a problem+json document for the
// correx services).
type StatusError struct {
	Op     string
	URL    string
	Status int
	Body   []byte
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("testkit: %s %s: status %d: %s", e.Op, e.URL, e.Status, e.Body)
}
