package wire_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/correx/sessions/pkg/wire"
)

// reference is encoding/json's encoding of c with OccurredAt in UTC and no
// HTML escaping: what AppendJSON promises.
func reference(t *testing.T, c wire.Change) []byte {
	t.Helper()
	c.OccurredAt = c.OccurredAt.UTC()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(&c); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

type label struct{ k, v string }

// TestAppendJSON requires AppendJSON's bytes, and AppendJSONWithLabels'
// with the labels as a list, to equal encoding/json's, for changes written
// by hand and for changes that need escaping or ordering (written by
// encoding/json).
func TestAppendJSON(t *testing.T) {
	base := wire.Change{SessionID: "acme:s-1", Version: 3, Position: wire.Position{Partition: 2, Offset: 40},
		EventID: "0193a0ff-7001-8042-0000-000000000000", Type: "SessionPaused",
		OccurredAt: time.Date(2026, 11, 29, 6, 0, 0, 250_000_000, time.FixedZone("x", 3600)),
		Outcome:    wire.Applied, From: "ACTIVE", To: "PAUSED", CorrelationID: "c-1"}
	tests := []struct {
		name   string
		edit   func(*wire.Change)
		labels []label // in this order; also set as the map
	}{
		{"plain", func(*wire.Change) {}, nil},
		{"creation, no from", func(c *wire.Change) { c.From, c.Type, c.To, c.Version = "", "SessionCreated", "CREATED", 1 }, nil},
		{"rejected", func(c *wire.Change) {
			c.Outcome, c.Reason, c.From, c.To, c.Terminal = wire.Rejected, "after_terminal", "COMPLETED", "COMPLETED", true
		}, nil},
		{"terminal, parent, no correlation", func(c *wire.Change) { c.Terminal, c.ParentSessionID, c.CorrelationID = true, "p-1", "" }, nil},
		{"labels", func(*wire.Change) {}, []label{{"env", "prod"}, {"team", "a/b"}, {"x.y", "<&>"}}},
		{"labels out of order", func(*wire.Change) {}, []label{{"team", "a"}, {"env", "b"}}},
		{"a label repeated", func(*wire.Change) {}, []label{{"env", "a"}, {"env", "b"}}},
		{"empty label value", func(*wire.Change) {}, []label{{"env", ""}}},
		{"escaped label value", func(*wire.Change) {}, []label{{"env", "\"quoted\" \\ back\nline"}}},
		{"escaped label key", func(*wire.Change) {}, []label{{"a\tb", "x"}}},
		{"unicode label value", func(*wire.Change) {}, []label{{"env", "é\u2028ü"}}},
		{"invalid UTF-8 correlation", func(c *wire.Change) { c.CorrelationID = "a\xffb" }, nil},
		{"control character", func(c *wire.Change) { c.CorrelationID = "a\x01b" }, nil},
		{"html characters", func(c *wire.Change) { c.CorrelationID = "<a&b>" }, nil},
		{"escaped session id", func(c *wire.Change) { c.SessionID = `a"b` }, nil},
		{"escaped type", func(c *wire.Change) { c.Type = "x.a\x7f" }, nil},
		{"escaped event id", func(c *wire.Change) { c.EventID = `\` }, nil},
		{"escaped states and reason", func(c *wire.Change) { c.Outcome, c.Reason, c.From, c.To = "é", "\n", "\x00", `"` }, nil},
		{"whole second", func(c *wire.Change) { c.OccurredAt = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }, nil},
		{"nanoseconds", func(c *wire.Change) { c.OccurredAt = time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC) }, nil},
		{"zero time", func(c *wire.Change) { c.OccurredAt = time.Time{} }, nil},
		{"year 9999 in UTC", func(c *wire.Change) { c.OccurredAt = time.Date(9999, 12, 31, 23, 0, 0, 0, time.UTC) }, nil},
		{"large numbers", func(c *wire.Change) {
			c.Version, c.Position = 1<<64-1, wire.Position{Partition: 1<<31 - 1, Offset: 1<<63 - 1}
		}, nil},
		{"negative position", func(c *wire.Change) { c.Position = wire.Position{Partition: -1, Offset: -2} }, nil},
		{"all empty", func(c *wire.Change) { *c = wire.Change{} }, nil},
		{"failure", func(c *wire.Change) {
			c.Type, c.To, c.Terminal, c.FailureCategory, c.FailureCode = "SessionFailed", "FAILED", true, "provider", "http.503"
		}, []label{{"env", "prod"}}},
		{"failure without code", func(c *wire.Change) { c.To, c.FailureCategory = "FAILED", "unknown" }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base
			tt.edit(&c)
			if tt.labels != nil {
				c.Labels = map[string]string{}
				for _, l := range tt.labels {
					c.Labels[l.k] = l.v
				}
			}
			want := append([]byte("prefix"), reference(t, c)...)
			if got := c.AppendJSON([]byte("prefix")); !bytes.Equal(got, want) {
				t.Fatalf("AppendJSON\ngot  %s\nwant %s", got, want)
			}
			list := c
			list.Labels = map[string]string{"ignored": "yes"}
			label := func(i int) (string, string) { return tt.labels[i].k, tt.labels[i].v }
			if got := list.AppendJSONWithLabels([]byte("prefix"), len(tt.labels), label); !bytes.Equal(got, want) {
				t.Fatalf("AppendJSONWithLabels\ngot  %s\nwant %s", got, want)
			}
		})
	}
}

func TestParsePosition(t *testing.T) {
	for in, want := range map[string]wire.Position{
		"3:1234":                         {Partition: 3, Offset: 1234},
		"0:0":                            {},
		"2147483647:9223372036854775807": {Partition: 1<<31 - 1, Offset: 1<<63 - 1},
		"+1:+2":                          {Partition: 1, Offset: 2}, // strconv's sign, as before
	} {
		got, err := wire.ParsePosition(in)
		if err != nil || got != want {
			t.Errorf("ParsePosition(%q) = %v, %v; want %v", in, got, err, want)
		}
		if err == nil && in[0] != '+' && got.String() != in {
			t.Errorf("%q reads back as %q", in, got.String())
		}
	}
	for _, bad := range []string{"", "3", "3:", ":4", "-1:4", "3:-4", "a:1", "1:b", "1:2:3", "2147483648:0", "0:9223372036854775808", " 1:2", "1.0:2"} {
		if p, err := wire.ParsePosition(bad); !errors.Is(err, wire.ErrBadPosition) {
			t.Errorf("ParsePosition(%q) = %v, %v; want ErrBadPosition", bad, p, err)
		}
	}
}
