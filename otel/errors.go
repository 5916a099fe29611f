package correxotel

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalidConfig is wrapped by every problem Config.Validate (and so Setup)
// reports about the Config or an OTEL_* variable, so that a binary can tell a
// configuration mistake, which no retry will fix, from an exporter that failed
// to build.
var ErrInvalidConfig = errors.New("invalid telemetry configuration")

// EnvError is an OTEL_* environment variable whose value this package cannot
// use. It wraps ErrInvalidConfig.
type EnvError struct {
	Var     string   // the variable, such as "OTEL_TRACES_EXPORTER"
	Value   string   // the value as read, untrimmed
	Reason  string   // what is wrong with it
	Allowed []string // the accepted values, or nil when the problem is syntax
}

func (e *EnvError) Error() string {
	msg := fmt.Sprintf("%s=%q: %s", e.Var, e.Value, e.Reason)
	if len(e.Allowed) > 0 {
		msg += " (allowed: " + strings.Join(e.Allowed, ", ") + ")"
	}
	return msg
}

// Unwrap lets errors.Is(err, ErrInvalidConfig) find environment problems.
func (e *EnvError) Unwrap() error { return ErrInvalidConfig }
