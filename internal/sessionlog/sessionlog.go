package sessionlog

import (
	"context"
	"errors"
	"fmt"

	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/correx/sessions/pkg/wire"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Reader reads the events topic's partitions directly (no consumer group).
type Reader struct {
	Kafka kafka.Config
	Topic string
	Opts  []kgo.Opt // extra client options (telemetry)
	// Decode decodes a record as the projector folds it; nil is
	// kafka.DecodeEvent. The projector sets it to its system key's
	// (systemkey.Keys.DecodeEvent), which also skips forged system
	// records. Set it before the first read.
	Decode func(*kgo.Record, *fsm.Event) error
}

// Scan calls fn with each record of session id in partition p from offset
// from to offset end (both included), in order, decoded as the projector
// decodes them: another session's records, and those the projector sets
// aside, are skipped. fn returns false to stop early.
func (r *Reader) Scan(ctx context.Context, id string, p int32, from, end int64, fn func(e *fsm.Event, pos snapshot.Position) bool) error {
	return r.Read(ctx, p, from, end, func(e *fsm.Event, pos snapshot.Position) bool {
		if e.SessionID != id {
			return true
		}
		return fn(e, pos)
	})
}

// ErrBeyondLog is returned by Read for a range that ends at or past the
// partition's high watermark: records that are not in the log (a position
// from elsewhere), which a read would otherwise wait for for ever.
var ErrBeyondLog = errors.New("sessionlog: the range ends past the log's end")

// Bounds returns where partition p of the topic starts (its log start
// offset: records before it left the log) and its high watermark (the
// offset the next record will take).
func (r *Reader) Bounds(ctx context.Context, p int32) (start, hw int64, err error) {
	cl, err := kafka.NewClient(r.Kafka, r.Opts...)
	if err != nil {
		return 0, 0, err
	}
	defer cl.Close()
	return bounds(ctx, cl.Client, r.Topic, p)
}

func bounds(ctx context.Context, cl *kgo.Client, topic string, p int32) (start, hw int64, err error) {
	starts, err := kadm.NewClient(cl).ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return 0, 0, fmt.Errorf("the log's start offsets: %w", err)
	}
	s, ok := starts.Lookup(topic, p)
	if !ok {
		return 0, 0, fmt.Errorf("partition %d of %s does not exist", p, topic)
	}
	hw, err = highWatermark(ctx, cl, topic, p)
	return s.Offset, hw, err
}

// highWatermark is partition p's end offset: what Read needs of the log's
// bounds, one request.
func highWatermark(ctx context.Context, cl *kgo.Client, topic string, p int32) (int64, error) {
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return 0, fmt.Errorf("the log's end offsets: %w", err)
	}
	e, ok := ends.Lookup(topic, p)
	if !ok {
		return 0, fmt.Errorf("partition %d of %s does not exist", p, topic)
	}
	return e.Offset, nil
}

// FetchBytes bounds each fetch of a read (Read, and so Scan and
// Histories): a read holds one fetch being folded and at most one fetched
// ahead, each about this many bytes (as the broker stores them; a single
// larger record batch still comes whole). Without it a read took the
// client's defaults, up to 50 MiB a fetch, which a broker that returns all
// it has (kfake) filled with a whole partition.
const FetchBytes = 256 << 10

// Read calls fn with every record of partition p from offset from to
// offset end (both included), in order, decoded as the projector decodes
// them: a record whose key is not its event's sessionId, or that does not
// decode, is skipped. fn returns false to stop early. A range that ends at
// or past the partition's high watermark is ErrBeyondLog, read as far as
// the log goes: the read never waits for records that are not there.
func (r *Reader) Read(ctx context.Context, p int32, from, end int64, fn func(e *fsm.Event, pos snapshot.Position) bool) error {
	if from > end {
		return nil
	}
	c, err := r.Cursor(p, from)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.ReadTo(ctx, end, fn)
}

// Entry is what the fold did with e at pos, s being the session after it.
func Entry(s *snapshot.Snapshot, e *fsm.Event, pos snapshot.Position, o fsm.Outcome) wire.HistoryEntry {
	en := wire.HistoryEntry{Version: s.Version, Position: pos, EventID: e.ID.String(), Type: e.TypeName(),
		OccurredAt: e.OccurredAt, Outcome: o.Result.String(), To: o.To.String()}
	if o.From != fsm.StateNone {
		en.From = o.From.String()
	}
	if o.Reason != fsm.ReasonNone {
		en.Reason = o.Reason.String()
	}
	switch e.Type {
	case fsm.ApprovalRequested, fsm.ApprovalGranted, fsm.ApprovalDenied:
		if e.Fields.HasRequestID {
			en.RequestID = e.Fields.RequestID
		}
		en.By, en.SentBy = e.Fields.By, e.SentBy
	}
	return en
}
