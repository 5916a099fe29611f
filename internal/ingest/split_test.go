package ingest

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/workload"
	"github.com/correx/sessions/pkg/fsm"
)

// splitWithEncodingJSON is how splitJSON split a body before it skimmed
// it: encoding/json read the whole body, then the array of events again,
// before each event was decoded. Kept as the reference the tests and the
// benchmark compare with.
func splitWithEncodingJSON(body []byte) ([][]byte, bool) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, false
	}
	raw, batch := top["events"]
	if !batch {
		return [][]byte{body}, true
	}
	if len(top) != 1 {
		return nil, false
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, false
	}
	out := make([][]byte, len(items))
	for i, it := range items {
		out[i] = it
	}
	return out, true
}

// decodeAll decodes every event of split, as decodeBody does, and reports
// whether all were valid.
func decodeAll(split [][]byte) ([]fsm.Event, bool) {
	out := make([]fsm.Event, len(split))
	for i, raw := range split {
		if fsm.DecodeEnvelope(raw, &out[i], fsm.DecodeOptions{Ingest: true}) != nil {
			return nil, false
		}
	}
	return out, true
}

// TestSplitJSONAgreesWithEncodingJSON: for well-formed and malformed
// bodies alike, the skimming split accepts a body, with the same events,
// exactly when encoding/json's split followed by the decoder did (a batch
// of no events is refused either way, by decodeBody).
func TestSplitJSONAgreesWithEncodingJSON(t *testing.T) {
	ev := `{"sessionId":"s-1","type":"SessionStarted","payload":{"a":[1,{"b":"]}\""}]}}`
	ev2 := `{"sessionId":"s-2","type":"SessionPaused"}`
	deep := `{"sessionId":"s-3","type":"SessionStarted","payload":{"a":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}}`
	bodies := []string{
		ev, " \n" + ev + "\r\n", `{"events":[` + ev + `,` + ev2 + `]}`, `{ "events" : [ ` + ev + ` , ` + ev2 + ` ] }`,
		`{"events":[]}`, `{"events":[` + ev + `]}x`, `{"events":[` + ev + `,]}`, `{"events":[,` + ev + `]}`,
		`{"events":[` + ev + ` ` + ev2 + `]}`, `{"events":{}}`, `{"events":"x"}`, `{"events":null}`, `{"events":[1]}`,
		`{"events":[` + ev + `],"other":1}`, `{"events":[` + ev2 + `],"events":[` + ev + `]}`, `{"\u0065vents":[` + ev2 + `]}`,
		`{"events":[` + ev + `}`, `{"events":[` + ev, `{"events":[{"sessionId":"s`, `{`, `}`, `[]`, `[` + ev + `]`, `"x"`, `1`,
		``, ` `, `{}`, `{"sessionId":}`, `{"sessionId":"s-1",}`, `{"sessionId" "s-1"}`, `{"sessionId":"s-1"}}`,
		`{"events":[{"sessionId":"s-1","type":"SessionStarted"}}]}`, `{"events":[[` + ev + `]]}`, deep, `{"events":[` + deep + `]}`,
		`{"sessionId":"s-1","type":"SessionStarted","payload":"\`, "{\"sessionId\":\"s\xff\",\"type\":\"SessionStarted\"}",
		`{"events":[1}`, `{"events":[` + ev + `]]}`, `{"a":[1}`,
	}
	for _, b := range bodies {
		t.Run("", func(t *testing.T) { sameAsEncodingJSON(t, b) })
	}
}

// sameAsEncodingJSON fails t unless splitJSON and the decoder accept body,
// with the same events, exactly when encoding/json's split and the decoder
// do, and refuse it with 400.
func sameAsEncodingJSON(t *testing.T, b string) {
	t.Helper()
	wantSplit, ok := splitWithEncodingJSON([]byte(b))
	var want []fsm.Event
	if ok {
		want, ok = decodeAll(wantSplit)
		ok = ok && len(want) > 0 // decodeBody refuses none with 400 too
	}
	gotSplit, perr := splitJSON([]byte(b))
	var got []fsm.Event
	gotOK := perr == nil
	if gotOK {
		got, gotOK = decodeAll(gotSplit)
		gotOK = gotOK && len(got) > 0
	}
	if gotOK != ok {
		t.Fatalf("%.120q: accepted %v, encoding/json and the decoder: %v", b, gotOK, ok)
	}
	if ok && len(got) != len(want) {
		t.Fatalf("%.120q: %d events, want %d", b, len(got), len(want))
	}
	for i := range got {
		if got[i].ID != want[i].ID || got[i].SessionID != want[i].SessionID || !bytes.Equal(fsm.AppendCanonical(nil, &got[i]), fsm.AppendCanonical(nil, &want[i])) {
			t.Fatalf("%.120q: event %d differs", b, i)
		}
	}
	if perr != nil && perr.Status != 400 {
		t.Fatalf("%.120q: status %d, want 400", b, perr.Status)
	}
}

// FuzzSplitJSON: sameAsEncodingJSON holds for any body.
func FuzzSplitJSON(f *testing.F) {
	f.Add(`{"events":[{"sessionId":"s-1","type":"SessionStarted"},{"sessionId":"s-2","type":"SessionPaused","payload":{"a":["]"]}}]}`)
	f.Add(`{"sessionId":"s-1","type":"SessionCreated","payload":{"goal":"x\"}"}}`)
	f.Add(`{"events":[1}`)
	f.Fuzz(func(t *testing.T, body string) { sameAsEncodingJSON(t, body) })
}

// BenchmarkSplitJSON decodes a batch of 1000 events and a single event
// with the skimming split and with encoding/json's, in one run:
// encodingjson/skim is the ratio of their times.
func BenchmarkSplitJSON(b *testing.B) {
	g := workload.New(9, workload.Options{})
	stream := g.Interleave(g.Sessions("bj", 100, time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)))
	var batch []byte
	batch = append(batch, `{"events":[`...)
	for i := range min(1000, len(stream)) {
		if i > 0 {
			batch = append(batch, ',')
		}
		batch = fsm.AppendRecord(batch, &stream[i])
	}
	batch = append(batch, "]}"...)
	single := fsm.AppendRecord(nil, &stream[0])
	for _, c := range []struct {
		name string
		body []byte
	}{{"batch=1000", batch}, {"single", single}} {
		b.Run(c.name, func(b *testing.B) {
			var skim, ref time.Duration
			for b.Loop() {
				start := time.Now()
				split, perr := splitJSON(c.body)
				if _, ok := decodeAll(split); perr != nil || !ok {
					b.Fatal(errors.New("refused"))
				}
				mid := time.Now()
				split, ok := splitWithEncodingJSON(c.body)
				if _, dok := decodeAll(split); !ok || !dok {
					b.Fatal("refused by encoding/json")
				}
				ref += time.Since(mid)
				skim += mid.Sub(start)
			}
			b.ReportMetric(float64(skim.Microseconds())/float64(b.N), "skim-µs/body")
			b.ReportMetric(float64(ref.Microseconds())/float64(b.N), "encodingjson-µs/body")
			b.ReportMetric(float64(ref)/float64(skim), "encodingjson/skim")
		})
	}
}
