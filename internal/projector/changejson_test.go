package projector

import (
	"bytes"
	"testing"
	"time"

	"github.com/correx/sessions/pkg/fsm"
)

// TestAppendChangeJSON requires change.appendJSON's bytes to equal
// feed.Change.AppendJSON's of the change with its labels as a map, for
// plain changes (written by hand) and for changes that need escaping or
// ordering (written by encoding/json); pkg/wire's TestAppendJSON holds
// those equal to encoding/json's.
func TestAppendChangeJSON(t *testing.T) {
	at := time.Date(2026, 11, 29, 6, 0, 0, 250_000_000, time.FixedZone("x", 3600))
	base := change{source: 40, id: fsm.EventID{0x01, 0x93, 0xa0, 0xff, 0x70, 0x01, 0x80, 0x42}, typ: "SessionPaused", at: at,
		out: outcome{from: fsm.StateActive, to: fsm.StatePaused, version: 3}, session: "acme:s-1", correlation: "c-1"}
	lbl := func(kv ...string) []fsm.Label {
		var out []fsm.Label
		for i := 0; i < len(kv); i += 2 {
			out = append(out, fsm.Label{Key: kv[i], Value: kv[i+1]})
		}
		return out
	}
	tests := []struct {
		name string
		edit func(*change)
	}{
		{"plain", func(*change) {}},
		{"creation, no from", func(c *change) {
			c.out.from, c.typ, c.out.to, c.out.version = fsm.StateNone, "SessionCreated", fsm.StateCreated, 1
		}},
		{"rejected", func(c *change) {
			c.out = outcome{rejected: true, reason: fsm.ReasonAfterTerminal, from: fsm.StateCompleted, to: fsm.StateCompleted, terminal: true, version: 9}
		}},
		{"terminal, parent, no correlation", func(c *change) { c.out.terminal, c.parent, c.correlation = true, "p-1", "" }},
		{"labels", func(c *change) { c.labels = lbl("env", "prod", "team", "a/b", "x.y", "<&>") }},
		{"labels out of order", func(c *change) { c.labels = lbl("team", "a", "env", "b") }},
		{"escaped label value", func(c *change) { c.labels = lbl("env", "\"quoted\" \\ back\nline") }},
		{"unicode label value", func(c *change) { c.labels = lbl("env", "é\u2028ü") }},
		{"invalid UTF-8 correlation", func(c *change) { c.correlation = "a\xffb" }},
		{"control character", func(c *change) { c.correlation = "a\x01b" }},
		{"html characters", func(c *change) { c.correlation = "<a&b>" }},
		{"whole second", func(c *change) { c.at = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }},
		{"nanoseconds", func(c *change) { c.at = time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC) }},
		{"large numbers", func(c *change) { c.out.version, c.source = 1<<63, 1<<62 }},
		{"custom type", func(c *change) { c.typ, c.out.to = "x.acme.Deployed", fsm.StateActive; c.out.from = fsm.StateActive }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base
			tt.edit(&c)
			for _, part := range []int32{0, 1 << 30} {
				got := c.appendJSON([]byte("prefix"), part)
				fc := c.feedChange(part)
				if len(c.labels) > 0 {
					fc.Labels = map[string]string{}
					for _, l := range c.labels {
						fc.Labels[l.Key] = l.Value
					}
				}
				want := fc.AppendJSON([]byte("prefix"))
				if !bytes.Equal(got, want) {
					t.Fatalf("got  %s\nwant %s", got, want)
				}
			}
		})
	}
}

func BenchmarkAppendChangeJSON(b *testing.B) {
	c := change{source: 40, typ: "SessionPaused", at: time.Now(), session: "acme:s-1", correlation: "c-1",
		out:    outcome{from: fsm.StateActive, to: fsm.StatePaused, version: 3},
		labels: []fsm.Label{{Key: "env", Value: "prod"}, {Key: "team", Value: "a"}}}
	b.Run("labelList", func(b *testing.B) { // what the projector runs
		b.ReportAllocs()
		buf := make([]byte, 0, 1024)
		for b.Loop() {
			buf = c.appendJSON(buf[:0], 2)
		}
	})
	b.Run("AppendJSON", func(b *testing.B) { // a feed.Change with a label map
		b.ReportAllocs()
		fc := c.feedChange(2)
		fc.Labels = map[string]string{"env": "prod", "team": "a"}
		for b.Loop() {
			fc.AppendJSON(nil)
		}
	})
}
