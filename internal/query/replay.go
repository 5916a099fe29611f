package query

import (
	"context"

	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/sessionlog"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/twmb/franz-go/pkg/kgo"
)

// KafkaReplayer rebuilds sessions by reading their partition directly (no
// consumer group) from the session's first offset to its stored position,
// folding the session's records with snapshot.Fold, the projector's rule.
// It reads a session's history the same way (LogReader).
type KafkaReplayer struct {
	Kafka kafka.Config
	Topic string
	Opts  []kgo.Opt // extra client options (telemetry)
}

// LogReader reads one session's records from the log. A Replayer that is
// also a LogReader (KafkaReplayer) serves the history; the handler answers
// it 503 otherwise.
type LogReader interface {
	// Scan calls fn with each record of session id in partition p from
	// offset from to offset end (both included), in order, decoded as the
	// projector decodes them: another session's records, and those the
	// projector sets aside, are skipped. fn returns false to stop early.
	Scan(ctx context.Context, id string, p int32, from, end int64, fn func(e *fsm.Event, pos snapshot.Position) bool) error
}

// Replay implements Replayer.
func (k *KafkaReplayer) Replay(ctx context.Context, stored *snapshot.Snapshot) (*snapshot.Snapshot, error) {
	var s snapshot.Snapshot
	var r fsm.Reducer
	err := k.Scan(ctx, stored.ID, stored.Position.Partition, stored.FirstOffset, stored.Position.Offset,
		func(e *fsm.Event, pos snapshot.Position) bool {
			s.Fold(&r, e, pos)
			return true
		})
	if err != nil {
		return nil, err
	}
	return &s, nil
}

// Scan implements LogReader (sessionlog.Reader.Scan).
func (k *KafkaReplayer) Scan(ctx context.Context, id string, p int32, from, end int64, fn func(e *fsm.Event, pos snapshot.Position) bool) error {
	r := sessionlog.Reader{Kafka: k.Kafka, Topic: k.Topic, Opts: k.Opts}
	return r.Scan(ctx, id, p, from, end, fn)
}
