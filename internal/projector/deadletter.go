package projector

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/systemkey"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// DLQ reasons, the value of the correx-dlq-reason header.
const (
	ReasonUndecodable        = "undecodable"
	ReasonUnsupportedVersion = "unsupported_version"
	ReasonUnknownEventType   = "unknown_event_type"
	ReasonInvalidEvent       = "invalid_event"
	ReasonKeyMismatch        = "key_mismatch"
	ReasonUnknownSession     = "unknown_session"
	// ReasonWrongPartition: the record is not on its key's partition (see
	// the package doc).
	ReasonWrongPartition = "wrong_partition"
	// ReasonReservedEventID: the record's eventId lies in the space
	// reserved for the ids the system derives, and the record does not
	// carry the system's header (kafka.DecodeEvent).
	ReasonReservedEventID = "reserved_event_id"
	// ReasonForgedSystemEvent: the record claims to be the system's (an
	// eventId in the reserved space, or the system's origin header) at or
	// above the line without a correx-mac that verifies under the system
	// key (systemkey.Keys.DecodeEvent, docs/security.md, "System records").
	ReasonForgedSystemEvent = "forged_system_event"
)

// Bounds of a dead-letter record. Any record another producer writes to the
// events topic (up to the broker's limit, 1 MiB by default) must be set
// aside without stopping the partition, so a dead letter carries an excerpt
// of the original, never all of it: at most about 27 KiB in all, far under
// any broker's message limit.
const (
	dlqKeyBytes    = 1 << 10  // the first 1 KiB of the key
	dlqValueBytes  = 16 << 10 // the first 16 KiB of the value
	dlqDetailBytes = 1 << 10  // the reason's detail
	// The original headers are copied in order while they fit: at most
	// dlqHeaders of them, each with a key of at most dlqHeaderKeyBytes and a
	// value of at most dlqHeaderValueBytes, dlqHeaderBytes in all. Headers
	// named like the dead-letter headers (correx-dlq-*) are never copied,
	// so a record cannot forge its own reason.
	dlqHeaders          = 32
	dlqHeaderKeyBytes   = 256
	dlqHeaderValueBytes = 1 << 10
	dlqHeaderBytes      = 8 << 10
)

// Dead-letter headers added beside kafka.HeaderDLQReason, HeaderDLQDetail and
// HeaderDLQSource.
const (
	HeaderDLQTopic     = "correx-dlq-topic"     // the original's topic
	HeaderDLQPartition = "correx-dlq-partition" // the original's partition, decimal
	HeaderDLQOffset    = "correx-dlq-offset"    // the original's offset, decimal
	// HeaderDLQTruncated is present when the dead letter holds less than
	// the original: its value lists what was cut with the original sizes,
	// e.g. "key=300000,value=1020000,headers=201" (headers: how many the
	// original had).
	HeaderDLQTruncated = "correx-dlq-truncated"
)

// deadLetterRecord builds the bounded dead letter of r, to be produced to
// topic (the dead-letter topic).
func deadLetterRecord(topic string, r *kgo.Record, reason, detail string) *kgo.Record {
	var cut []string
	key, value := r.Key, r.Value
	if len(key) > dlqKeyBytes {
		key = key[:dlqKeyBytes]
		cut = append(cut, "key="+strconv.Itoa(len(r.Key)))
	}
	if len(value) > dlqValueBytes {
		value = value[:dlqValueBytes]
		cut = append(cut, "value="+strconv.Itoa(len(r.Value)))
	}
	headers := make([]kgo.RecordHeader, 0, min(len(r.Headers), dlqHeaders)+7)
	budget, dropped := dlqHeaderBytes, false
	for _, h := range r.Headers {
		if strings.HasPrefix(h.Key, "correx-dlq-") {
			dropped = true
			continue
		}
		n := len(h.Key) + len(h.Value)
		if len(headers) == dlqHeaders || len(h.Key) > dlqHeaderKeyBytes || len(h.Value) > dlqHeaderValueBytes || n > budget {
			dropped = true
			continue
		}
		budget -= n
		headers = append(headers, h)
	}
	if dropped {
		cut = append(cut, "headers="+strconv.Itoa(len(r.Headers)))
	}
	headers = append(headers,
		kgo.RecordHeader{Key: kafka.HeaderDLQReason, Value: []byte(reason)},
		kgo.RecordHeader{Key: kafka.HeaderDLQDetail, Value: []byte(cutString(detail, dlqDetailBytes))},
		kgo.RecordHeader{Key: kafka.HeaderDLQSource, Value: []byte(kafka.Source(r))},
		kgo.RecordHeader{Key: HeaderDLQTopic, Value: []byte(r.Topic)},
		kgo.RecordHeader{Key: HeaderDLQPartition, Value: strconv.AppendInt(nil, int64(r.Partition), 10)},
		kgo.RecordHeader{Key: HeaderDLQOffset, Value: strconv.AppendInt(nil, r.Offset, 10)})
	if len(cut) > 0 {
		headers = append(headers, kgo.RecordHeader{Key: HeaderDLQTruncated, Value: []byte(strings.Join(cut, ","))})
	}
	return &kgo.Record{Topic: topic, Key: key, Value: value, Headers: headers}
}

// cutString returns the longest prefix of s of at most limit bytes that does
// not split a UTF-8 sequence.
func cutString(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	n := limit
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// refused reports whether the broker (or the client, before sending)
// refused a dead letter for what the record is, so that producing it again
// would fail the same way. Such a dead letter is counted and given up;
// failing the batch for it would stop the partition on every restart.
// Every other error (authorization, a missing topic, a broker gone past the
// retries) fails the batch, so the checkpoint does not pass the record and a
// restart produces it again.
func refused(err error) bool {
	for _, e := range []error{kerr.MessageTooLarge, kerr.RecordListTooLarge, kerr.InvalidRecord, kerr.InvalidTimestamp} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// classify maps a decoding error to a DLQ reason.
func classify(err error) string {
	if errors.Is(err, systemkey.ErrForged) {
		return ReasonForgedSystemEvent
	}
	if errors.Is(err, fsm.ErrReservedEventID) {
		return ReasonReservedEventID
	}
	if errors.Is(err, fsm.ErrUnsupportedVersion) {
		return ReasonUnsupportedVersion
	}
	var ve *fsm.ValidationError
	if !errors.As(err, &ve) {
		return ReasonUndecodable
	}
	for _, fe := range ve.Errors {
		if fe.Field == "" {
			return ReasonUndecodable
		}
	}
	if len(ve.Errors) == 1 && ve.Errors[0].Field == "type" && strings.HasPrefix(ve.Errors[0].Message, "unknown event type") {
		return ReasonUnknownEventType
	}
	return ReasonInvalidEvent
}

// deadLetters sets records aside: it produces them, bounded, to the
// dead-letter topic through the projector's client, under the flush
// context. Built by Run with the client (connect).
type deadLetters struct {
	topic string // the dead-letter topic
	cl    *kgo.Client
	ctx   context.Context // the flush context
	obs   Observer
	log   *slog.Logger
	crash *crashPoints
	// failed is the flusher's dlqErr: the first error retrying cannot
	// cure fails the next write before its checkpoints.
	failed *atomic.Pointer[error]
}

func newDeadLetters(cfg Config, cl *kgo.Client, ctx context.Context, obs Observer, log *slog.Logger, crash *crashPoints, failed *atomic.Pointer[error]) *deadLetters {
	return &deadLetters{topic: kafka.DLQTopic(cfg.Topic), cl: cl, ctx: ctx, obs: obs, log: log, crash: crash, failed: failed}
}

// send sets r aside: it produces a bounded excerpt of r (see
// deadLetterRecord) to the dead-letter topic. The flush that checkpoints
// past r waits for the produce first (flusher.write), so a dead letter is written
// at least once; one the broker refuses for what it is (refused) is logged,
// counted and given up, so that no record can stop the partition.
func (d *deadLetters) send(r *kgo.Record, reason, detail string) {
	d.obs.DeadLettered(r, reason)
	d.cl.Produce(d.ctx, deadLetterRecord(d.topic, r, reason, detail), func(_ *kgo.Record, err error) {
		switch {
		case err == nil || d.crash.crashed.Load():
		case refused(err):
			d.log.Error("the dead-letter topic refused a record; it is skipped", "source", kafka.Source(r),
				"reason", reason, "err", err)
			d.obs.DeadLetterFailed(r, reason, err)
		default:
			d.failed.CompareAndSwap(nil, &err)
		}
	})
}
