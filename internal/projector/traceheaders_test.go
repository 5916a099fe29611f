package projector

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// traceCases are records' headers as ingest and other producers write
// them: canonical traceparents, and every way one can differ from that.
func traceCases() [][]kgo.RecordHeader {
	tid, sid := "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	tp := func(v string) kgo.RecordHeader { return kgo.RecordHeader{Key: "traceparent", Value: []byte(v)} }
	ts := func(v string) kgo.RecordHeader { return kgo.RecordHeader{Key: "tracestate", Value: []byte(v)} }
	other := kgo.RecordHeader{Key: "correx-event-type", Value: []byte("SessionStarted")}
	var cases [][]kgo.RecordHeader
	for _, v := range []string{
		"00-" + tid + "-" + sid + "-01", "00-" + tid + "-" + sid + "-00", "00-" + tid + "-" + sid + "-02",
		"00-" + tid + "-" + sid + "-03", "00-" + tid + "-" + sid + "-ff", "01-" + tid + "-" + sid + "-01",
		"ff-" + tid + "-" + sid + "-01", "00-" + strings.ToUpper(tid) + "-" + sid + "-01",
		"00-" + strings.Repeat("0", 32) + "-" + sid + "-01", "00-" + tid + "-" + strings.Repeat("0", 16) + "-01",
		"00-" + tid + "-" + sid + "-01-extra", "00-" + tid + "-" + sid, "00_" + tid + "-" + sid + "-01", "", "garbage",
		"00-" + tid[:31] + "g-" + sid + "-01",
	} {
		cases = append(cases, []kgo.RecordHeader{tp(v)}, []kgo.RecordHeader{other, tp(v)},
			[]kgo.RecordHeader{tp(v), ts("congo=t61rcWkgMzE")}, []kgo.RecordHeader{tp(v), ts("a=1 , b=2")},
			[]kgo.RecordHeader{tp(v), tp("00-" + tid + "-" + sid + "-00")})
	}
	return append(cases, nil, []kgo.RecordHeader{other}, []kgo.RecordHeader{ts("a=1")})
}

// TestTraceHeadersAsThePropagatorWrites: whatever the source record
// carries, the change record gets exactly the headers that extracting and
// injecting its trace context gives, fast path or not.
func TestTraceHeadersAsThePropagatorWrites(t *testing.T) {
	fast := 0
	for i, hs := range traceCases() {
		src := &kgo.Record{Headers: hs}
		got, want := traceHeaders(src), propagatedTraceHeaders(src)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("case %d %q:\n got %q\nwant %q", i, hs, got, want)
		}
		if _, ok := canonicalTraceparent(hs); ok {
			fast++
			if len(got) == 1 && len(hs) > 0 && &got[0].Value[0] == &hs[len(hs)-1].Value[0] {
				t.Errorf("case %d: the header aliases the source record's", i)
			}
		}
	}
	if fast == 0 {
		t.Fatal("no case took the copy")
	}
}

// BenchmarkTraceHeaders measures what a folded record's trace context costs
// the change feed, copied (a canonical traceparent, what ingest writes) and
// through the propagator (as before), in one run.
func BenchmarkTraceHeaders(b *testing.B) {
	src := &kgo.Record{Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")},
		{Key: "correx-event-type", Value: []byte("SessionStarted")}}}
	var copied, propagated time.Duration
	for b.Loop() {
		start := time.Now()
		a := traceHeaders(src)
		mid := time.Now()
		p := propagatedTraceHeaders(src)
		propagated += time.Since(mid)
		copied += mid.Sub(start)
		if !bytes.Equal(a[0].Value, p[0].Value) {
			b.Fatal("differ")
		}
	}
	b.ReportMetric(float64(copied.Nanoseconds())/float64(b.N), "copied-ns/record")
	b.ReportMetric(float64(propagated.Nanoseconds())/float64(b.N), "propagated-ns/record")
	b.ReportMetric(float64(propagated)/float64(copied), "propagated/copied")
}
