package projector

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/correx/sessions/internal/archive"
	correxotel "github.com/correx/sessions/otel"
	"go.opentelemetry.io/otel/metric"
)

// archiveMetrics are the archive sweep's instruments (docs/retention.md):
// correx.projector.archive.archived, sessions archived and removed from
// Redis; correx.projector.archive.failures, sweeps that failed (the
// sessions stay in Redis); correx.projector.archive.due, per partition,
// the sessions due to leave Redis when its last sweep started;
// correx.projector.archive.reachable, 1 while the archive answers, 0
// while it does not (or is not opened yet): archiving waits meanwhile,
// and /readyz reports it degraded, still ready.
type archiveMetrics struct {
	remote   atomic.Pointer[archive.Remote]
	archived atomic.Int64
	failures atomic.Int64
	mu       sync.Mutex
	due      map[int32]int64
}

func (m *archiveMetrics) init(meter metric.Meter) error {
	m.due = map[int32]int64{}
	archived, e1 := meter.Int64ObservableCounter("correx.projector.archive.archived", metric.WithUnit("{session}"),
		metric.WithDescription("Closed sessions written to the archive and removed from Redis."))
	failures, e2 := meter.Int64ObservableCounter("correx.projector.archive.failures", metric.WithUnit("{sweep}"),
		metric.WithDescription("Sweeps of a partition that failed (the archive, the log, Redis or the changelog): their sessions stay in Redis until a sweep succeeds."))
	due, e3 := meter.Int64ObservableGauge("correx.projector.archive.due", metric.WithUnit("{session}"),
		metric.WithDescription("Sessions past their retention, not yet archived, per partition, when its last sweep started."))
	reachable, e4 := meter.Int64ObservableGauge("correx.projector.archive.reachable", metric.WithUnit("1"),
		metric.WithDescription("1 while the archive answers, 0 while it is unreachable (archiving waits; the projector folds on)."))
	if err := errors.Join(e1, e2, e3, e4); err != nil {
		return err
	}
	_, err := meter.RegisterCallback(func(_ context.Context, obs metric.Observer) error {
		obs.ObserveInt64(archived, m.archived.Load())
		obs.ObserveInt64(failures, m.failures.Load())
		if r := m.remote.Load(); r != nil {
			v := int64(0)
			if r.Reachable() {
				v = 1
			}
			obs.ObserveInt64(reachable, v)
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		for p, n := range m.due {
			obs.ObserveInt64(due, n, metric.WithAttributes(correxotel.AttrPartition.Int(int(p))))
		}
		return nil
	}, archived, failures, due, reachable)
	return err
}

// archiveOpened gives the reachable gauge its archive.
func (o *Telemetry) archiveOpened(r *archive.Remote) { o.archive.remote.Store(r) }

// ArchiveDue implements the sweeper's observer: the due gauge is set when a
// sweep starts, so that a sweep that hangs or fails still shows them.
func (o *Telemetry) ArchiveDue(partition int32, due int64) {
	m := &o.archive
	m.mu.Lock()
	m.due[partition] = due
	m.mu.Unlock()
}

// ArchiveSwept implements the sweeper's observer.
func (o *Telemetry) ArchiveSwept(partition int32, archived int, due int64, err error) {
	m := &o.archive
	m.archived.Add(int64(archived))
	if err != nil {
		m.failures.Add(1)
	}
	m.mu.Lock()
	m.due[partition] = max(due-int64(archived), 0)
	m.mu.Unlock()
}
