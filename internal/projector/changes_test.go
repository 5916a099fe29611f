package projector

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/correx/sessions/internal/testwait"
	"github.com/correx/sessions/pkg/feed"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// waitSettled waits until every partition's checkpoint under prefix has
// reached the end of the log, and the log has not grown meanwhile: the
// derived events produced by the flushes are folded too. It fails once
// neither has moved for a minute.
func (e *env) waitSettled(prefix string) {
	e.t.Helper()
	testwait.WhileProgressing(e.t, "the checkpoints at the log's end, and the log's end still", 60*time.Second, func() (bool, string) {
		ends := endOffsets(e.t, e.brokers)
		cps, err := e.store(prefix).Checkpoints(ctx, topic)
		if err != nil {
			return false, err.Error()
		}
		return caughtUp(cps, ends) && fmt.Sprint(endOffsets(e.t, e.brokers)) == fmt.Sprint(ends),
			fmt.Sprintf("checkpoints %v, ends %v", checkpointOffsets(cps), ends)
	})
}

// feedConfig is the test configuration with the change feed on.
func (e *env) feedConfig(instance string) Config {
	cfg := e.config(instance)
	cfg.ChangeFeed = true
	return cfg
}

// traceparentOf returns a deterministic W3C traceparent for event i.
func traceparentOf(i int) string {
	return fmt.Sprintf("00-%032x-%016x-01", uint64(i)+1, uint64(i)+7)
}

// produceTraced writes events as ingest would, every other one with a trace
// context in its headers.
func (e *env) produceTraced(events []fsm.Event, first int) {
	e.t.Helper()
	cl := e.client()
	defer cl.Close()
	recs := make([]*kgo.Record, len(events))
	for i := range events {
		recs[i] = &kgo.Record{Key: []byte(events[i].SessionID), Value: fsm.AppendRecord(nil, &events[i])}
		if (first+i)%2 == 0 {
			recs[i].Headers = []kgo.RecordHeader{
				{Key: "traceparent", Value: []byte(traceparentOf(first + i))},
				{Key: "tracestate", Value: []byte("vendor=x")},
				{Key: "correx-event-type", Value: []byte(events[i].TypeName())},
			}
		}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		e.t.Fatal(err)
	}
}

// readAll returns every record of a topic, in order per partition.
func (e *env) readAll(name string) []*kgo.Record {
	e.t.Helper()
	cl := e.client()
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, name)
	if err != nil {
		e.t.Fatal(err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	rd := e.client(kgo.ConsumeTopics(name), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	defer rd.Close()
	var out []*kgo.Record
	deadline := time.Now().Add(30 * time.Second)
	for len(want) > 0 {
		if time.Now().After(deadline) {
			e.t.Fatalf("reading %s: partitions not read to the end: %v", name, want)
		}
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := rd.PollFetches(pctx)
		cancel()
		for _, r := range fs.Records() {
			out = append(out, r)
			if r.Offset+1 >= want[r.Partition] {
				delete(want, r.Partition)
			}
		}
	}
	return out
}

// expectedChange is what the feed must say of one event, restated from a
// direct fold of the log.
type expectedChange struct {
	pos                 feed.Position
	eventID, typ        string
	outcome, reason     string
	from, to            string
	version             uint64
	terminal            bool
	traceparent, tstate string
}

// expectedFeed folds the events topic directly, session by session, and
// returns per session the changes the feed must hold, in order.
func (e *env) expectedFeed() map[string][]expectedChange {
	e.t.Helper()
	var r fsm.Reducer
	snaps := map[string]*snapshot.Snapshot{}
	out := map[string][]expectedChange{}
	for _, rec := range e.readAll(topic) {
		var ev fsm.Event
		if fsm.DecodeRecord(rec.Value, &ev) != nil || string(rec.Key) != ev.SessionID {
			continue
		}
		s := snaps[ev.SessionID]
		if s == nil {
			s = &snapshot.Snapshot{}
			snaps[ev.SessionID] = s
		}
		from := s.State
		o, folded := s.Fold(&r, &ev, snapshot.Position{Partition: rec.Partition, Offset: rec.Offset})
		if !folded {
			e.t.Fatalf("direct fold skipped %s at %d:%d", ev.SessionID, rec.Partition, rec.Offset)
		}
		x := expectedChange{pos: feed.Position{Partition: rec.Partition, Offset: rec.Offset}, eventID: ev.ID.String(),
			typ: ev.TypeName(), to: s.State.String(), version: s.Version, terminal: s.State.Terminal()}
		if from != fsm.StateNone {
			x.from = from.String()
		}
		switch {
		case o.Result == fsm.Rejected:
			x.outcome, x.reason = feed.Rejected, o.Reason.String()
		case o.Transitioned() || (o.Result == fsm.Applied && ev.Type == fsm.EventCustom):
			x.outcome = feed.Applied
		default:
			continue
		}
		for _, h := range rec.Headers {
			switch h.Key {
			case "traceparent":
				x.traceparent = string(h.Value)
			case "tracestate":
				x.tstate = string(h.Value)
			}
		}
		out[ev.SessionID] = append(out[ev.SessionID], x)
	}
	return out
}

// checkFeed reads the change feed and requires, per session, exactly the
// expected changes in order once records written twice are dropped, and
// every record written twice byte-identical (key, value, headers). It
// returns how many records were written more than once.
func (e *env) checkFeed(want map[string][]expectedChange) (dups int) {
	e.t.Helper()
	type seenRec struct {
		key, value []byte
		headers    []kgo.RecordHeader
	}
	seen := map[feed.Key]seenRec{}
	got := map[string][]feed.Change{}
	heads := map[feed.Key][]kgo.RecordHeader{}
	for _, rec := range e.readAll(feed.Topic(topic)) {
		var c feed.Change
		if err := feed.Decode(rec.Value, &c); err != nil {
			e.t.Fatalf("change at %d:%d: %v", rec.Partition, rec.Offset, err)
		}
		if string(rec.Key) != c.SessionID || rec.Partition != c.Position.Partition {
			e.t.Fatalf("change of %s at %v is keyed %q on partition %d", c.SessionID, c.Position, rec.Key, rec.Partition)
		}
		if prev, ok := seen[c.Key()]; ok {
			dups++
			if !bytes.Equal(prev.key, rec.Key) || !bytes.Equal(prev.value, rec.Value) || fmt.Sprint(prev.headers) != fmt.Sprint(rec.Headers) {
				e.t.Fatalf("change %v written twice with different bytes:\n%s %q\n%s %q", c.Key(), prev.value, prev.headers, rec.Value, rec.Headers)
			}
			continue
		}
		seen[c.Key()] = seenRec{rec.Key, rec.Value, rec.Headers}
		heads[c.Key()] = rec.Headers
		got[c.SessionID] = append(got[c.SessionID], c)
	}
	if len(got) != len(want) {
		e.t.Fatalf("the feed has changes of %d sessions, the direct fold %d", len(got), len(want))
	}
	for id, ws := range want {
		gs := got[id]
		for i, w := range ws {
			if i >= len(gs) {
				e.t.Fatalf("%s: the feed ends after %d of %d changes; missing %+v", id, len(gs), len(ws), w)
			}
			g := gs[i]
			if g.Position != w.pos || g.EventID != w.eventID || g.Type != w.typ || g.Outcome != w.outcome ||
				g.Reason != w.reason || g.From != w.from || g.To != w.to || g.Version != w.version || g.Terminal != w.terminal {
				e.t.Fatalf("%s change %d:\n got %+v\nwant %+v", id, i, g, w)
			}
			var tp, ts string
			for _, h := range heads[g.Key()] {
				switch h.Key {
				case "traceparent":
					tp = string(h.Value)
				case "tracestate":
					ts = string(h.Value)
				default:
					e.t.Fatalf("%s change %d: header %q is not trace context", id, i, h.Key)
				}
			}
			if tp != w.traceparent || ts != w.tstate {
				e.t.Fatalf("%s change %d: trace headers %q %q, want %q %q", id, i, tp, ts, w.traceparent, w.tstate)
			}
		}
		if len(gs) > len(ws) {
			e.t.Fatalf("%s: the feed has %d changes, the direct fold %d", id, len(gs), len(ws))
		}
	}
	return dups
}

// TestChangeFeedAcrossCrashes kills projectors with the change feed on at
// the crash points TestCrashAnywhere uses, restarts them, and requires the
// feed to hold, for every session, every applied transition, rejection and
// applied custom event of a direct fold, in order and without a gap, with
// every record written twice byte-identical.
func TestChangeFeedAcrossCrashes(t *testing.T) {
	e := newEnv(t, 4)
	// The replacement sessions make derived events, which must survive the
	// crashes too (checked at the end).
	events := append(append(replacementEvents(), familyEvents()...), workloadEvents(3, 300)...)
	points := []struct {
		point crashPoint
		n     int64
	}{
		{crashFold, 1}, {crashFold, 300}, {crashBeforePut, 1}, {crashAfterPut, 1}, {crashAfterPut, 3},
		{crashBeforeCheckpoint, 2}, {crashAfterCheckpoint, 1}, {crashFold, 700}, {crashAfterPut, 5}, {crashBeforePut, 4},
	}
	chunk := len(events) / len(points)
	crashes := 0
	for i, pt := range points {
		e.produceTraced(events[i*chunk:min((i+1)*chunk, len(events))], i*chunk)
		r := e.start(e.feedConfig("a"), "feed", crashAt(pt.point, pt.n))
		if e.crashedOrCaughtUp(r, "feed") {
			crashes++
		} else {
			t.Logf("crash point %s #%d not reached before the projector caught up", pt.point, pt.n)
		}
	}
	if crashes < len(points) {
		t.Fatalf("only %d of %d crash points were reached", crashes, len(points))
	}
	e.produceTraced(events[len(points)*chunk:], len(points)*chunk)
	r := e.start(e.feedConfig("a"), "feed", nil)
	e.waitSettled("feed")
	if err := r.halt(); err != nil {
		t.Fatal(err)
	}
	want := e.expectedFeed()
	dups := e.checkFeed(want)
	st := e.store("feed")
	for id, status := range map[string]fsm.ReplacementStatus{"s-ok": fsm.ReplacementStatusLinked,
		"s-notfailed": fsm.ReplacementStatusRefused, "s-orphan": fsm.ReplacementStatusRefused} {
		if s, err := st.Get(ctx, id); err != nil || s.Replacement.Status != status {
			t.Errorf("%s: replacement %+v (%v), want %v", id, s, err, status)
		}
	}
	for _, id := range []string{"f-kid", "f-grandkid"} {
		if s, err := st.Get(ctx, id); err != nil || s.State != fsm.StateCancelling || s.Cancellation.Reason != ReasonParentCancelled {
			t.Errorf("%s: %+v (%v), want CANCELLING for %s", id, s, err, ReasonParentCancelled)
		}
	}
	n := 0
	for _, ws := range want {
		n += len(ws)
	}
	t.Logf("%d crashes; %d sessions, %d changes in order, %d written twice (byte-identical)", crashes, len(want), n, dups)
}

// TestChangeFeedOff: with CORREX_CHANGE_FEED=false no change topic is
// created and nothing is produced to one.
func TestChangeFeedOff(t *testing.T) {
	e := newEnv(t, 2)
	e.produce(workloadEvents(4, 10))
	r := e.start(e.config("a"), "off", nil)
	e.waitCaughtUp("off", 30*time.Second)
	if err := r.halt(); err != nil {
		t.Fatal(err)
	}
	cl := e.client()
	defer cl.Close()
	topics, err := kadm.NewClient(cl).ListTopics(ctx, feed.Topic(topic))
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := topics[feed.Topic(topic)]; ok && d.Err == nil {
		t.Fatalf("the change topic exists with the feed off: %+v", d)
	}
}

// TestChangeFeedAcrossRedisLoss empties Redis under a running projector
// whose cache holds a few of the sessions, then sends the events of the
// sessions again (every one a duplicate) and the rest of them. Read from
// the emptied Redis, a session the cache had dropped looks new: its
// resent SessionCreated would be applied again as version 1 and its later
// events rejected, and those changes would reach the feed before a
// checkpoint write noticed the loss. The feed must hold exactly the
// changes of a direct fold of the log, in order.
func TestChangeFeedAcrossRedisLoss(t *testing.T) {
	e := newEnv(t, 4)
	events := workloadEvents(81, 400)
	half := len(events) / 2
	e.produceTraced(events[:half], 0)
	cfg := e.feedConfig("a")
	cfg.CacheSize = 40
	// The idle check (checkCheckpoints) waits this long between two
	// looks: the reads of the resent sessions come first.
	cfg.MaxFlushInterval = time.Minute
	r := e.start(cfg, "feed", nil)
	e.waitSettled("feed")
	if err := e.rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	e.produceTraced(events[:half], 0)
	e.produceTraced(events[half:], half)
	e.waitSettled("feed")
	if err := r.halt(); err != nil {
		t.Fatal(err)
	}
	want := e.expectedFeed()
	dups := e.checkFeed(want)
	t.Logf("%d sessions' changes in order after the loss, %d written twice (byte-identical)", len(want), dups)
}
