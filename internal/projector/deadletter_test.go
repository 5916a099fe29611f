package projector

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/projector/projstore"
	"github.com/correx/sessions/internal/testwait"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// dlqRecords reads the dead-letter topic until it holds n records (or 10 s
// pass) and returns what it read.
func (e *env) dlqRecords(n int) []*kgo.Record {
	e.t.Helper()
	cl := e.client(kgo.ConsumeTopics(kafka.DLQTopic(topic)), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxBytes(64<<20), kgo.FetchMaxPartitionBytes(64<<20))
	defer cl.Close()
	var got []*kgo.Record
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < n && time.Now().Before(deadline) {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		got = append(got, cl.PollFetches(pctx).Records()...)
		cancel()
	}
	return got
}

func header(r *kgo.Record, key string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// waitRunning waits until every checkpoint under prefix reached the end of
// the log, failing at once if the projector stopped on its own.
func (e *env) waitRunning(r *running, prefix string, timeout time.Duration) {
	e.t.Helper()
	ends := endOffsets(e.t, e.brokers)
	var cps map[int32]snapshot.Checkpoint
	if !testwait.Eventually(timeout, func() bool {
		select {
		case err := <-r.done:
			e.t.Fatalf("the projector stopped: %v", err)
		default:
		}
		var err error
		cps, err = e.store(prefix).Checkpoints(ctx, topic)
		return err == nil && caughtUp(cps, ends)
	}) {
		e.t.Fatalf("not caught up after %v: checkpoints %v, ends %v", timeout, cps, ends)
	}
}

// TestOversizedPoison writes a record of 1,020,000 bytes and one with a
// 300 KB key (both within the broker's limit) among valid events. The dead
// letters must be bounded excerpts that the broker takes, the events after
// them folded, and a projector rebuilding from the start (as after a
// restart without checkpoint) must not stop on them either.
func TestOversizedPoison(t *testing.T) {
	e := newEnv(t, 1)
	good := workloadEvents(11, 20)
	half := len(good) / 2
	e.produce(good[:half])
	big := e.client(kgo.ProducerBatchMaxBytes(2 << 20))
	defer big.Close()
	ev := fsm.NewEvent(fsm.EventID{0x42, 1}, "acme:wp1", fsm.SessionCreated, time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC), fsm.Fields{Goal: "g"})
	prefix := `{"eventId":"0190f2a4-5b6c-7d8e-9f00-112233445570","sessionId":"acme:wp1","type":"SessionCreated","occurredAt":"2026-11-29T06:00:00Z","payload":{"goal":"`
	hugeValue := append([]byte(prefix), bytes.Repeat([]byte("<"), 1_020_000-len(prefix)-3)...)
	hugeValue = append(hugeValue, `"}}`...)
	hugeKey := bytes.Repeat([]byte{0}, 300_000)
	manyHeaders := make([]kgo.RecordHeader, 200)
	for i := range manyHeaders {
		manyHeaders[i] = kgo.RecordHeader{Key: "h" + strconv.Itoa(i), Value: bytes.Repeat([]byte("v"), 1000)}
	}
	manyHeaders = append(manyHeaders, kgo.RecordHeader{Key: kafka.HeaderDLQReason, Value: []byte("forged")})
	poison := []*kgo.Record{
		{Key: []byte("acme:wp1"), Value: hugeValue},
		{Key: hugeKey, Value: fsm.AppendRecord(nil, &ev)},
		{Key: []byte("acme:wp1"), Value: []byte("\x00garbage"), Headers: manyHeaders},
	}
	if err := big.ProduceSync(ctx, poison...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	e.produce(good[half:])

	r := e.start(e.config("a"), "big", nil)
	e.waitRunning(r, "big", 30*time.Second)
	if err := r.halt(); err != nil {
		t.Fatal(err)
	}
	sessions := map[string]bool{}
	for i := range good {
		sessions[good[i].SessionID] = true
	}
	got := e.dump("big")
	if len(got) != len(sessions) {
		t.Fatalf("%d snapshots, want %d (every valid session, none from the poison)", len(got), len(sessions))
	}

	dlq := e.dlqRecords(len(poison))
	if len(dlq) != len(poison) {
		t.Fatalf("DLQ holds %d records, want %d", len(dlq), len(poison))
	}
	wantReasons := []string{ReasonInvalidEvent, ReasonKeyMismatch, ReasonUndecodable}
	for i, d := range dlq {
		size := len(d.Key) + len(d.Value)
		for _, h := range d.Headers {
			size += len(h.Key) + len(h.Value)
		}
		if len(d.Key) > dlqKeyBytes || len(d.Value) > dlqValueBytes || size > 64<<10 {
			t.Errorf("DLQ record %d: key %d, value %d, %d bytes in all: not bounded", i, len(d.Key), len(d.Value), size)
		}
		if reason, _ := header(d, kafka.HeaderDLQReason); reason != wantReasons[i] {
			t.Errorf("DLQ record %d: reason %q, want %q", i, reason, wantReasons[i])
		}
		for _, h := range d.Headers[:len(d.Headers)-1] {
			if h.Key == kafka.HeaderDLQReason && string(h.Value) == "forged" {
				t.Errorf("DLQ record %d: the original's forged reason header was kept", i)
			}
		}
		if tp, _ := header(d, HeaderDLQTopic); tp != topic {
			t.Errorf("DLQ record %d: source topic %q", i, tp)
		}
		if p, _ := header(d, HeaderDLQPartition); p != "0" {
			t.Errorf("DLQ record %d: source partition %q", i, p)
		}
		if o, _ := header(d, HeaderDLQOffset); o != strconv.Itoa(half+i) {
			t.Errorf("DLQ record %d: source offset %q, want %d", i, o, half+i)
		}
		if _, cut := header(d, HeaderDLQTruncated); !cut {
			t.Errorf("DLQ record %d: no %s header", i, HeaderDLQTruncated)
		}
	}
	if !bytes.Equal(dlq[0].Value, hugeValue[:dlqValueBytes]) || !bytes.Equal(dlq[1].Key, hugeKey[:dlqKeyBytes]) {
		t.Error("the excerpts are not the first bytes of the originals")
	}

	// A rebuild from the start (a fresh read model) meets the poison again.
	r = e.start(e.config("b"), "again", nil)
	e.waitRunning(r, "again", 30*time.Second)
	if err := r.halt(); err != nil {
		t.Fatal(err)
	}
	e.assertSame(got, e.dump("again"))
}

// refusals counts dead letters the broker refused.
type refusals struct {
	nopObserver
	mu      sync.Mutex
	reasons []string
}

func (o *refusals) DeadLetterFailed(_ *kgo.Record, reason string, _ error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.reasons = append(o.reasons, reason)
}

// TestDeadLetterRefused makes the broker refuse every dead letter
// (MESSAGE_TOO_LARGE: the DLQ topic takes at most 100 bytes): the projector
// logs and counts the refusal and goes on folding instead of exiting.
func TestDeadLetterRefused(t *testing.T) {
	e := newEnv(t, 1)
	cl := e.client()
	defer cl.Close()
	limit := "100"
	if _, err := kadm.NewClient(cl).AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "max.message.bytes", Value: &limit}}, kafka.DLQTopic(topic)); err != nil {
		t.Fatal(err)
	}
	good := workloadEvents(12, 10)
	e.produce(good[:5])
	if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte("s-x"), Value: []byte(strings.Repeat("garbage ", 50))}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	e.produce(good[5:])
	obs := &refusals{}
	p := New(e.config("a"), e.store("refused"), WithLogger(testLog()), WithObserver(obs))
	c, cancel := context.WithCancel(ctx)
	r := &running{p: p, stop: cancel, done: make(chan error, 1)}
	go func() { r.done <- p.Run(c) }()
	e.waitRunning(r, "refused", 30*time.Second)
	if err := r.halt(); err != nil {
		t.Fatal(err)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if len(obs.reasons) != 1 || obs.reasons[0] != ReasonUndecodable {
		t.Fatalf("refused dead letters observed: %v, want one %s", obs.reasons, ReasonUndecodable)
	}
}

// TestRecordWithoutTopicFails produces a record that names no topic through
// a client with the projector's producer options: the produce fails, and
// nothing is written to the dead-letter topic (or any other), so a record
// kind built without its topic is a loud error, not a silent dead letter.
func TestRecordWithoutTopicFails(t *testing.T) {
	e := newEnv(t, 1)
	cfg := e.config("a")
	cl, err := kgo.NewClient(append(cfg.Kafka.Opts(), producerOpts(cfg)...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	err = cl.ProduceSync(ctx, &kgo.Record{Key: []byte("s-1"), Value: []byte("{}")}).FirstErr()
	if err == nil || !strings.Contains(err.Error(), "no topic") {
		t.Errorf("producing a record without a topic: %v, want an error saying it has no topic", err)
	}
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic, kafka.DLQTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset != 0 {
			t.Errorf("%s/%d ends at %d after the failed produce, want nothing written", o.Topic, o.Partition, o.Offset)
		}
	})
}

// TestRecordConstructorsTakeTheirTopic builds a record of every kind the
// projector produces through its constructor, each given a topic of its
// own: every record names the topic it was given, so none depends on a
// client default (there is none, see TestRecordWithoutTopicFails).
func TestRecordConstructorsTakeTheirTopic(t *testing.T) {
	at := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	ch := &change{session: "s-1", id: fsm.EventID{1}, at: at}
	kinds := []struct {
		name string
		rec  func(topic string) *kgo.Record
	}{
		{"dead letter", func(topic string) *kgo.Record {
			return deadLetterRecord(topic, &kgo.Record{Topic: "events", Key: []byte("s-1"), Value: []byte("{")}, ReasonUndecodable, "bad")
		}},
		{"timeout", func(topic string) *kgo.Record {
			return timeoutRecord(topic, projstore.ArmedDeadline{SessionID: "s-1", Kind: fsm.TimeoutInactivity, At: at.UnixNano(), Version: 2})
		}},
		{"cancellation of a child", func(topic string) *kgo.Record {
			return cancelRecord(topic, "c-1", "s-1", fsm.EventID{2}, at, fsm.CancelGraceful, ReasonParentCancelled, nil)
		}},
		{"derived event", func(topic string) *kgo.Record {
			rec := reaction{kind: fsm.SessionReplaced, target: "p-1", fields: fsm.Fields{SuccessorSessionID: "s-1"}}.record(topic, ch)
			return &rec
		}},
		{"change feed", func(topic string) *kgo.Record {
			rec := feedRecord(topic, 3, ch, []byte("{}"))
			return &rec
		}},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			topic := "topic-of-" + strings.ReplaceAll(k.name, " ", "-")
			rec := k.rec(topic)
			if rec.Topic != topic || len(rec.Key) == 0 {
				t.Errorf("record on topic %q with key %q, want topic %q and a key", rec.Topic, rec.Key, topic)
			}
		})
	}
}
