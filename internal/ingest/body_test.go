package ingest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/pkg/fsm"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// sent is an event as a test wrote it into a request body.
type sent struct {
	id, session, typ, payload string
}

// readTopic reads every record of the topic, from the start to the end
// offsets it has now, per partition in offset order.
func (f *fixture) readTopic() map[int32][]*kgo.Record {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(f.cl).ListEndOffsets(ctx, topic)
	if err != nil {
		f.t.Fatal(err)
	}
	want := map[int32]int64{}
	parts := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
			parts[o.Partition] = kgo.NewOffset().AtStart()
		}
	})
	got := map[int32][]*kgo.Record{}
	if len(parts) == 0 {
		return got
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.cluster.ListenAddrs()...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: parts}))
	if err != nil {
		f.t.Fatal(err)
	}
	defer cl.Close()
	done := func() bool {
		for p, end := range want {
			if int64(len(got[p])) < end {
				return false
			}
		}
		return true
	}
	for !done() && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got[r.Partition] = append(got[r.Partition], r) })
	}
	if !done() {
		f.t.Fatalf("read %v records of the topic, want %v", got, want)
	}
	return got
}

// checkTopic asserts that the topic holds exactly the events of want, each
// once, and that every partition holds its events in the order of want.
func checkTopic(t *testing.T, got map[int32][]*kgo.Record, want []sent) {
	t.Helper()
	index := map[string]int{}
	for i, w := range want {
		index[w.id] = i
	}
	seen := map[string]bool{}
	n := 0
	for p, recs := range got {
		last := -1
		for _, r := range recs {
			var e fsm.Event
			if err := fsm.DecodeRecord(r.Value, &e); err != nil {
				t.Fatalf("partition %d offset %d: %v", p, r.Offset, err)
			}
			id := e.ID.String()
			i, ok := index[id]
			switch {
			case !ok:
				t.Fatalf("partition %d offset %d: event %s was never sent", p, r.Offset, id)
			case seen[id]:
				t.Fatalf("partition %d offset %d: event %s (line %d) written twice", p, r.Offset, id, i)
			case i < last:
				t.Fatalf("partition %d offset %d: event of line %d after line %d", p, r.Offset, i, last)
			case e.SessionID != want[i].session || e.Type.String() != want[i].typ || string(r.Key) != want[i].session ||
				string(e.Payload) != want[i].payload:
				t.Fatalf("event %d: got session %q key %q type %s payload %.40s, want %q %s %.40s",
					i, e.SessionID, r.Key, e.Type, e.Payload, want[i].session, want[i].typ, want[i].payload)
			}
			seen[id], last = true, i
			n++
		}
	}
	if n != len(want) {
		for i, w := range want {
			if !seen[w.id] {
				t.Fatalf("%d records for %d events; the event of line %d (%s) is missing", n, len(want), i, w.id)
			}
		}
	}
}

var bodyTypes = []string{"SessionCreated", "SessionStarted", "ModelRequested", "ToolRequested", "SessionPaused"}

// paddedLine is the JSON of event i (numbered in its payload), padded to
// exactly size bytes. Its id is assigned by ingest.
func paddedLine(t *testing.T, i int, size int) (string, sent) {
	t.Helper()
	s := sent{session: fmt.Sprintf("s-%d", i%7), typ: bodyTypes[i%len(bodyTypes)]}
	head := fmt.Sprintf(`{"sessionId":%q,"type":%q,"payload":`, s.session, s.typ)
	p := fmt.Sprintf(`{"n":%d,"x":""}`, i)
	pad := size - len(head) - len(p) - 1
	if pad < 0 {
		t.Fatalf("line of %d bytes cannot hold event %d", size, i)
	}
	s.payload = fmt.Sprintf(`{"n":%d,"x":"%s"}`, i, strings.Repeat("a", pad))
	return head + s.payload + "}", s
}

// acceptedIDs fills in the ids ingest answered for the events of want.
func acceptedIDs(t *testing.T, raw []byte, want []sent) {
	t.Helper()
	var ans struct {
		Accepted []struct {
			EventID string `json:"eventId"`
		} `json:"accepted"`
	}
	if err := json.Unmarshal(raw, &ans); err != nil || len(ans.Accepted) != len(want) {
		t.Fatalf("%d accepted, want %d (%v)", len(ans.Accepted), len(want), err)
	}
	for i, a := range ans.Accepted {
		want[i].id = a.EventID
	}
}

// TestLargeNDJSON sends NDJSON bodies well over 64 KiB, up to near the 1 MiB
// limit, through the handler and reads the topic back: every event exactly
// once, in order per partition, whatever the line lengths and line endings.
func TestLargeNDJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	cases := []struct {
		name  string
		lines int
		size  func(i int) int
		sep   func(i int) string
	}{
		{"700 lines of 100 bytes", 700, func(int) int { return 100 }, func(int) string { return "\n" }},
		{"uneven lines", 900, func(int) int { return 120 + rng.IntN(900) }, func(int) string { return "\n" }},
		{"CRLF, blank lines, no final newline", 1000, func(int) int { return 150 + rng.IntN(800) },
			func(i int) string { return []string{"\r\n", "\n\n", "\r\n \r\n", "\n\t\n"}[i%4] }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, 10*time.Second)
			var body strings.Builder
			want := make([]sent, c.lines)
			for i := range c.lines {
				line, s := paddedLine(t, i, c.size(i))
				want[i] = s
				body.WriteString(line)
				if i < c.lines-1 || c.name != "CRLF, blank lines, no final newline" {
					body.WriteString(c.sep(i))
				}
			}
			if body.Len() <= 64<<10 {
				t.Fatalf("body of %d bytes is not over 64 KiB", body.Len())
			}
			resp, raw := f.post("application/x-ndjson", []byte(body.String()))
			if resp.StatusCode != 202 {
				t.Fatalf("%d bytes: status %d: %.300s", body.Len(), resp.StatusCode, raw)
			}
			acceptedIDs(t, raw, want)
			checkTopic(t, f.readTopic(), want)
		})
	}
}
