package projector

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/correx/sessions/pkg/wire"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// verifyMetrics are the background verifier's instruments
// (docs/verification.md): correx.verify.checked, sessions compared with
// the fold of the log; correx.verify.mismatches, differences found, by
// kind (correx.kind: missing, stale, corrupt, extra);
// correx.verify.repaired, mismatches written over with the fold, by kind;
// correx.verify.unverifiable, sessions that began before the log's start;
// correx.verify.cycle.duration, a cycle over the owned partitions.
type verifyMetrics struct {
	checked, unverifiable atomic.Int64
	mismatches, repaired  [4]atomic.Int64 // by kind, in wire.VerifyKinds' order
	cycle                 metric.Float64Histogram
}

func (m *verifyMetrics) init(meter metric.Meter) error {
	checked, e1 := meter.Int64ObservableCounter("correx.verify.checked", metric.WithUnit("{session}"),
		metric.WithDescription("Sessions the background verifier compared with the fold of their events from the log."))
	mismatches, e2 := meter.Int64ObservableCounter("correx.verify.mismatches", metric.WithUnit("{session}"),
		metric.WithDescription("Stored snapshots that differed from the fold of the log, by kind (missing, stale, corrupt, extra)."))
	repaired, e3 := meter.Int64ObservableCounter("correx.verify.repaired", metric.WithUnit("{session}"),
		metric.WithDescription("Mismatches repaired by storing the fold of the log (fenced), by kind."))
	unverifiable, e4 := meter.Int64ObservableCounter("correx.verify.unverifiable", metric.WithUnit("{session}"),
		metric.WithDescription("Stored sessions the verifier could not fold: they began before the log's start."))
	var e5 error
	m.cycle, e5 = meter.Float64Histogram("correx.verify.cycle.duration", metric.WithUnit("s"),
		metric.WithDescription("Time of one verification cycle over the partitions a projector owns."),
		metric.WithExplicitBucketBoundaries(1, 5, 15, 60, 300, 900, 3600, 14400, 86400))
	if err := errors.Join(e1, e2, e3, e4, e5); err != nil {
		return err
	}
	kinds := make([]metric.ObserveOption, len(wire.VerifyKinds))
	for i, k := range wire.VerifyKinds {
		kinds[i] = metric.WithAttributeSet(attribute.NewSet(attribute.String("correx.kind", k)))
	}
	_, err := meter.RegisterCallback(func(_ context.Context, obs metric.Observer) error {
		obs.ObserveInt64(checked, m.checked.Load())
		obs.ObserveInt64(unverifiable, m.unverifiable.Load())
		for i := range wire.VerifyKinds {
			obs.ObserveInt64(mismatches, m.mismatches[i].Load(), kinds[i])
			obs.ObserveInt64(repaired, m.repaired[i].Load(), kinds[i])
		}
		return nil
	}, checked, mismatches, repaired, unverifiable)
	return err
}

func kindIndex(kind string) int {
	for i, k := range wire.VerifyKinds {
		if k == kind {
			return i
		}
	}
	return -1
}

// VerifyChecked implements the verifier's observer.
func (o *Telemetry) VerifyChecked(n int) { o.verify.checked.Add(int64(n)) }

// VerifyMismatch implements the verifier's observer.
func (o *Telemetry) VerifyMismatch(kind string) {
	if i := kindIndex(kind); i >= 0 {
		o.verify.mismatches[i].Add(1)
	}
}

// VerifyRepaired implements the verifier's observer.
func (o *Telemetry) VerifyRepaired(kind string) {
	if i := kindIndex(kind); i >= 0 {
		o.verify.repaired[i].Add(1)
	}
}

// VerifyUnverifiable implements the verifier's observer.
func (o *Telemetry) VerifyUnverifiable() { o.verify.unverifiable.Add(1) }

// VerifyCycle implements the verifier's observer.
func (o *Telemetry) VerifyCycle(d time.Duration) {
	if o.verify.cycle != nil {
		o.verify.cycle.Record(context.Background(), d.Seconds())
	}
}
