package projector_test

import (
	"testing"

	"github.com/correx/sessions/internal/config"
	"github.com/correx/sessions/internal/projector"
)

// TestEveryConfigFieldIsBound: every exported field of Config is read from
// a flag and its variable, or is a fixed value Bind sets (not a setting).
func TestEveryConfigFieldIsBound(t *testing.T) {
	if unbound := config.Unbound((*projector.Config).Bind,
		"Kafka.Log",   // the service's logger
		"Timeouts[0]", // fsm.TimeoutNone, a kind with no timeout
	); len(unbound) > 0 {
		t.Fatalf("fields of projector.Config no flag or variable reaches: %v", unbound)
	}
}
