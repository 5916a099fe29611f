package query

import (
	"context"
	"errors"
	"log/slog"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// metrics are the query service's counters (README, "Telemetry"): correx.query.replays by outcome, match when the replay
// equals the stored snapshot and mismatch otherwise, and
// correx.query.rebuilds by outcome, match when the stored snapshot equalled
// the log, replaced when it did not and the rebuilt one was stored, kept
// when it did not and the projector had stored a later one meanwhile.
type metrics struct {
	replays  metric.Int64Counter
	rebuilds metric.Int64Counter
	outcome  map[string]metric.AddOption
}

func newMetrics(mp metric.MeterProvider, log *slog.Logger) *metrics {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	m := mp.Meter("github.com/correx/sessions/query")
	replays, e1 := m.Int64Counter("correx.query.replays", metric.WithUnit("{replay}"),
		metric.WithDescription("Replays of a session from the log, by outcome: match or mismatch with the stored snapshot."))
	rebuilds, e2 := m.Int64Counter("correx.query.rebuilds", metric.WithUnit("{rebuild}"),
		metric.WithDescription("Rebuilds of a session from the log, by outcome: match (nothing to repair), replaced, kept (the projector had stored a later snapshot)."))
	if err := errors.Join(e1, e2); err != nil {
		// The SDK returns a working instrument with its error (a name it
		// warns about); the counters still count.
		log.Warn("query metrics", "err", err)
	}
	o := &metrics{replays: replays, rebuilds: rebuilds, outcome: map[string]metric.AddOption{}}
	for _, v := range []string{"match", "mismatch", "replaced", "kept"} {
		o.outcome[v] = metric.WithAttributeSet(attribute.NewSet(attribute.String("correx.outcome", v)))
	}
	return o
}

// watchArchive registers correx.query.archive.reachable: 1 while the
// archive answers, 0 while it does not (archived reads answer 503).
func watchArchive(mp metric.MeterProvider, a Archive, log *slog.Logger) {
	r, ok := a.(interface{ Reachable() bool })
	if mp == nil || !ok {
		return
	}
	m := mp.Meter("github.com/correx/sessions/query")
	g, err := m.Int64ObservableGauge("correx.query.archive.reachable", metric.WithUnit("1"),
		metric.WithDescription("1 while the archive answers, 0 while it is unreachable (archived reads answer 503; live reads are unaffected)."))
	if err == nil {
		_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
			v := int64(0)
			if r.Reachable() {
				v = 1
			}
			o.ObserveInt64(g, v)
			return nil
		}, g)
	}
	if err != nil {
		log.Warn("query metrics", "err", err)
	}
}

// watchWatches registers correx.query.watches, the open watch streams, and
// correx.query.watches.cut, the watches cut because their queue of changes
// was full (each resumes from its last id).
func watchWatches(mp metric.MeterProvider, w *Watcher, log *slog.Logger) {
	if mp == nil || w == nil {
		return
	}
	m := mp.Meter("github.com/correx/sessions/query")
	open, e1 := m.Int64ObservableGauge("correx.query.watches", metric.WithUnit("{watch}"),
		metric.WithDescription("Open watch streams (GET /v1/watch, GET /v1/sessions/{id}/watch), those waiting for their catch-up included."))
	cut, e2 := m.Int64ObservableCounter("correx.query.watches.cut", metric.WithUnit("{watch}"),
		metric.WithDescription("Watches cut because their queue of changes was full (a client that does not keep up); each resumes from its last id."))
	err := errors.Join(e1, e2)
	if err == nil {
		_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
			o.ObserveInt64(open, int64(w.slots.inUse()))
			w.mu.Lock()
			cuts := w.cuts
			w.mu.Unlock()
			o.ObserveInt64(cut, cuts)
			return nil
		}, open, cut)
	}
	if err != nil {
		log.Warn("query metrics", "err", err)
	}
}

func (m *metrics) replayed(ctx context.Context, match bool) {
	v := "mismatch"
	if match {
		v = "match"
	}
	m.replays.Add(ctx, 1, m.outcome[v])
}

func (m *metrics) rebuilt(ctx context.Context, r RebuildResponse) {
	v := "match"
	switch {
	case r.Differed && r.Replaced:
		v = "replaced"
	case r.Differed:
		v = "kept"
	}
	m.rebuilds.Add(ctx, 1, m.outcome[v])
}
