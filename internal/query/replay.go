package query

import (
	"context"
	"errors"
	"fmt"

	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/twmb/franz-go/pkg/kgo"
)

// KafkaReplayer rebuilds sessions by reading their partition directly (no
// consumer group) from the session's first offset to its stored position,
// folding the session's records with snapshot.Fold, the projector's rule.
type KafkaReplayer struct {
	Kafka kafka.Config
	Topic string
	Opts  []kgo.Opt // extra client options (telemetry)
}

// Replay implements Replayer.
func (k *KafkaReplayer) Replay(ctx context.Context, stored *snapshot.Snapshot) (*snapshot.Snapshot, error) {
	p, end := stored.Position.Partition, stored.Position.Offset
	opts := append([]kgo.Opt{
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{k.Topic: {p: kgo.NewOffset().At(stored.FirstOffset)}})}, k.Opts...)
	cl, err := kafka.NewClient(k.Kafka, opts...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var s snapshot.Snapshot
	var r fsm.Reducer
	var e fsm.Event
	for {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("replay stopped before offset %d: %w", end, cl.Explain(err))
		}
		var ferr error
		fetches.EachError(func(_ string, _ int32, err error) { ferr = errors.Join(ferr, err) })
		if ferr != nil {
			return nil, cl.Explain(ferr)
		}
		done := false
		fetches.EachRecord(func(rec *kgo.Record) {
			if done || rec.Offset > end {
				done = true
				return
			}
			if string(rec.Key) != stored.ID || kafka.DecodeEvent(rec, &e) != nil || e.SessionID != stored.ID {
				return // another session's record, or one the projector set aside
			}
			s.Fold(&r, &e, snapshot.Position{Partition: rec.Partition, Offset: rec.Offset})
			if rec.Offset == end {
				done = true
			}
		})
		if done {
			return &s, nil
		}
	}
}
