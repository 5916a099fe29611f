package config

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/correx/sessions/pkg/fsm"
)

// BindTimeouts registers the service defaults of the session timeouts
// (docs/timeouts.md), CORREX_TIMEOUT_EXECUTION, _INACTIVITY, _APPROVAL,
// _RECOVERY and _CANCELLATION (flags -timeout-<kind>), with
// fsm.DefaultTimeouts' values as their defaults: inactivity and approval
// 24h, cancellation 5m, execution and recovery unset. The projector arms
// deadlines with them and the query service shows effective timeouts with
// them, so both take the same ones; each warns at start when inactivity,
// approval or cancellation is 0 (WarnUnbounded).
func (b *Binder) Timeouts(t *fsm.Timeouts) {
	d := fsm.DefaultTimeouts()
	for _, k := range fsm.TimeoutKinds() {
		name := k.String()
		b.Duration(&t[k], "timeout-"+name, "CORREX_TIMEOUT_"+strings.ToUpper(name), d[k],
			"default "+name+" timeout of a session that names none (Go duration, 1s to 720h; 0 for none)")
	}
}

// ForcedGrace registers CORREX_FORCED_GRACE (flag -forced-grace), the
// grace a forced cancellation gets before its cancellation deadline
// (docs/timeouts.md), with fsm.DefaultForcedGrace, 0s, as its default: the
// deadline is the forced request's occurredAt plus the grace, instead of
// the cancellation timeout.
func (b *Binder) ForcedGrace(d *time.Duration) {
	b.Duration(d, "forced-grace", "CORREX_FORCED_GRACE", fsm.DefaultForcedGrace,
		"grace of a forced cancellation before its deadline fires (Go duration, 0 to 720h)")
}

// AddForcedGrace reports a forced grace outside 0..720h.
func (p *Problems) AddForcedGrace(d time.Duration) {
	if d < 0 || d > fsm.MaxTimeout {
		p.Addf("CORREX_FORCED_GRACE: %v, must be from 0s to %v", d, fsm.MaxTimeout)
	}
}

// AddTimeouts reports each default timeout outside 1s..720h (0 is none).
func (p *Problems) AddTimeouts(t fsm.Timeouts) {
	for _, k := range fsm.TimeoutKinds() {
		if d := t[k]; d != 0 && (d < fsm.MinTimeout || d > fsm.MaxTimeout) {
			p.Addf("CORREX_TIMEOUT_%s: %v, must be 0 (none) or from %v to %v", strings.ToUpper(k.String()), d, fsm.MinTimeout, fsm.MaxTimeout)
		}
	}
}

// WarnUnbounded logs a warning for each default that t disables among
// the ones that bound a state no other default bounds: inactivity
// (CREATED, INITIALIZING, ACTIVE, PAUSED, RECOVERING), approval
// (AWAITING_APPROVAL) and cancellation (CANCELLING). A session that names
// none of its own and is left alone in such a state then stays open for
// ever, and so does its read model.
func WarnUnbounded(log *slog.Logger, t fsm.Timeouts) {
	for _, w := range []struct {
		kind   fsm.TimeoutKind
		states string
	}{
		{fsm.TimeoutInactivity, "CREATED, INITIALIZING, ACTIVE, PAUSED or RECOVERING"},
		{fsm.TimeoutApproval, "AWAITING_APPROVAL"},
		{fsm.TimeoutCancellation, "CANCELLING"},
	} {
		if t[w.kind] == 0 {
			log.Warn(fmt.Sprintf("CORREX_TIMEOUT_%s is 0 (no %s timeout): sessions that name none may run for ever in %s",
				strings.ToUpper(w.kind.String()), w.kind, w.states))
		}
	}
}
