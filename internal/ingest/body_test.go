package ingest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/ingest"
	correxotel "github.com/correx/sessions/otel"
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

// TestRecordHeadersBounded sends a request with a trace context and an
// 8 KB baggage header: every record carries the trace, and its headers stay
// small, since a record would otherwise repeat the client's baggage for
// each of its events.
func TestRecordHeadersBounded(t *testing.T) {
	tel, _, _ := correxotel.NewForTest()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	f := newTracedFixture(t, 10*time.Second, tel)

	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	members := []string{"a.tenant=acme"}
	for i := 0; len(strings.Join(members, ",")) < 8000; i++ {
		members = append(members, fmt.Sprintf("k%02d=%s", i, strings.Repeat("v", 380)))
	}
	header := http.Header{
		"Traceparent": {"00-" + traceID + "-00f067aa0ba902b7-01"},
		"Tracestate":  {"vendor=" + strings.Repeat("t", 200)},
		"Baggage":     {strings.Join(members, ",")},
	}
	var body strings.Builder
	const n = 200
	for i := range n {
		body.WriteString(event(fmt.Sprintf("s-%d", i%5), "SessionCreated") + "\n")
	}
	resp, raw := f.postWith("application/x-ndjson", []byte(body.String()), header)
	if resp.StatusCode != 202 {
		t.Fatalf("status %d: %.300s", resp.StatusCode, raw)
	}
	sentMembers := map[string]bool{}
	for _, m := range members {
		sentMembers[m] = true
	}
	total := 0
	for _, recs := range f.readTopic() {
		for _, r := range recs {
			size := 0
			var parent, bag string
			for _, h := range r.Headers {
				size += len(h.Key) + len(h.Value)
				switch h.Key {
				case "traceparent":
					parent = string(h.Value)
				case "baggage":
					bag = string(h.Value)
				}
			}
			if size > maxRecordHeaderBytes {
				t.Fatalf("offset %d: headers of %d bytes, want at most %d (baggage %d bytes)", r.Offset, size, maxRecordHeaderBytes, len(bag))
			}
			if len(bag) > correxotel.MaxRecordBaggageBytes {
				t.Fatalf("offset %d: baggage of %d bytes, want at most %d", r.Offset, len(bag), correxotel.MaxRecordBaggageBytes)
			}
			if !strings.Contains(parent, traceID) {
				t.Fatalf("offset %d: traceparent %q does not continue trace %s", r.Offset, parent, traceID)
			}
			kept := strings.Split(bag, ",")
			for _, m := range kept {
				if !sentMembers[m] {
					t.Fatalf("offset %d: baggage member %.40q was not sent whole", r.Offset, m)
				}
			}
			if !slices.Contains(kept, "a.tenant=acme") {
				t.Fatalf("offset %d: baggage %.60q lost the small member", r.Offset, bag)
			}
			total++
		}
	}
	if total != n {
		t.Fatalf("%d records, want %d", total, n)
	}
}

// maxRecordHeaderBytes bounds what any record's headers may hold: the
// bounded baggage and tracestate, a traceparent and the event type.
const maxRecordHeaderBytes = correxotel.MaxRecordBaggageBytes + correxotel.MaxRecordTraceStateBytes + 256

// TestLargeRandomBodies sends batches of up to 1000 varied events (the
// generator of FuzzBodyForms), as {"events": [...]}, as NDJSON with padded
// lines, CRLF and blank lines, and as one envelope, through the handler to
// Kafka, and reads the topic back: exactly the events encoding/json reads
// from each body, in order per partition.
func TestLargeRandomBodies(t *testing.T) {
	for _, c := range []struct {
		seed uint64
		n    int
	}{{1, ingest.MaxEvents}, {2, ingest.MaxEvents}, {3, 300}, {4, 1}} {
		forms := ingest.GenerateForms(c.seed, c.n)
		for _, form := range []struct {
			name, mt string
			body     []byte
		}{{"batch", "application/json", forms.Batch}, {"ndjson", "application/x-ndjson", forms.NDJSON}, {"single", "application/json", forms.Single}} {
			if form.body == nil {
				continue
			}
			t.Run(fmt.Sprintf("seed %d %s %d bytes", c.seed, form.name, len(form.body)), func(t *testing.T) {
				wire, err := ingest.ReferenceDecode(form.mt, form.body)
				if err != nil || len(wire) != forms.Events {
					t.Fatalf("encoding/json reads %d events (%v), %d were generated", len(wire), err, forms.Events)
				}
				f := newFixture(t, 10*time.Second)
				resp, raw := f.post(form.mt, form.body)
				if resp.StatusCode != 202 {
					t.Fatalf("status %d: %.300s", resp.StatusCode, raw)
				}
				want := make([]sent, len(wire))
				acceptedIDs(t, raw, want)
				for i, w := range wire {
					if w.EventID != nil && !strings.EqualFold(*w.EventID, want[i].id) {
						t.Fatalf("event %d: accepted as %s, sent as %s", i, want[i].id, *w.EventID)
					}
					var p bytes.Buffer
					if len(w.Payload) > 0 {
						if err := json.Compact(&p, w.Payload); err != nil {
							t.Fatal(err)
						}
					}
					if p.String() == "{}" {
						p.Reset()
					}
					want[i].session, want[i].typ, want[i].payload = w.SessionID, w.Type, p.String()
				}
				checkTopic(t, f.readTopic(), want)
			})
		}
	}
}
