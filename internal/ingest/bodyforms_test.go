package ingest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/pkg/fsm"
)

// BodyForms is one batch of valid events spelled in each form a request
// may take. Single is empty unless the batch holds one event; Events is the
// number of events.
type BodyForms struct {
	Single, Batch, NDJSON []byte
	Events                int
}

// bodyGen builds valid events with varied spellings: members in any order,
// optional members present or not, escapes, UTF-8, and insignificant
// whitespace wherever JSON allows it (no line breaks inside an NDJSON
// line). text supplies string contents; rng every other choice.
type bodyGen struct {
	rng  *rand.Rand
	text []byte
	at   int
}

var genTypes = []string{"SessionCreated", "SessionInitializing", "SessionStarted", "SessionPaused", "SessionResumed",
	"ApprovalRequested", "ApprovalGranted", "ApprovalDenied", "CancellationRequested", "SessionCancelled",
	"SessionCompleted", "SessionFailed", "RecoveryStarted", "RecoveryCompleted", "TimeoutExpired",
	"ModelRequested", "ToolRequested", "ToolCompleted", "RepairStarted"}

// ws returns insignificant whitespace; lines allows line breaks.
func (g *bodyGen) ws(lines bool) string {
	if g.rng.IntN(3) > 0 {
		return ""
	}
	set := " \t"
	if lines {
		set = " \t\r\n"
	}
	var b strings.Builder
	for range g.rng.IntN(4) + 1 {
		b.WriteByte(set[g.rng.IntN(len(set))])
	}
	return b.String()
}

// textOf returns up to n bytes of the fuzzer's text (any bytes).
func (g *bodyGen) textOf(n int) string {
	if len(g.text) == 0 || n == 0 {
		return strings.Repeat("t", n)
	}
	var b []byte
	for range g.rng.IntN(n + 1) {
		b = append(b, g.text[g.at%len(g.text)])
		g.at++
	}
	return string(b)
}

// quote spells s as a JSON string, sometimes escaping plain letters too.
func (g *bodyGen) quote(s string) string {
	q, _ := json.Marshal(s) // invalid UTF-8 becomes \ufffd
	if g.rng.IntN(4) > 0 {
		return string(q)
	}
	var b strings.Builder
	for i := 0; i < len(q); i++ {
		c := q[i]
		switch {
		case c == '\\':
			n := 2
			if q[i+1] == 'u' {
				n = 6
			}
			b.Write(q[i : i+n])
			i += n - 1
		case c >= 'a' && c <= 'z' && i > 0 && i < len(q)-1 && g.rng.IntN(2) == 0:
			fmt.Fprintf(&b, `\u%04x`, c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// object spells members (name and JSON value) in a random order.
func (g *bodyGen) object(members [][2]string, lines bool) string {
	g.rng.Shuffle(len(members), func(i, j int) { members[i], members[j] = members[j], members[i] })
	var b strings.Builder
	b.WriteString("{" + g.ws(lines))
	for i, m := range members {
		if i > 0 {
			b.WriteString("," + g.ws(lines))
		}
		b.WriteString(g.quote(m[0]) + g.ws(lines) + ":" + g.ws(lines) + m[1] + g.ws(lines))
	}
	b.WriteString("}")
	return b.String()
}

func (g *bodyGen) sessionID() string {
	const chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-"
	n := 1 + g.rng.IntN(12)
	if g.rng.IntN(20) == 0 {
		n = fsm.MaxSessionIDLen
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = chars[g.rng.IntN(len(chars))]
	}
	if strings.Trim(string(b), ".") == "" { // dots alone are not a session id
		b[0] = 'a'
	}
	return string(b)
}

// event returns one valid envelope as JSON without line breaks unless lines.
func (g *bodyGen) event(lines bool) string {
	typ := genTypes[g.rng.IntN(len(genTypes))]
	m := [][2]string{{"sessionId", g.quote(g.sessionID())}, {"type", g.quote(typ)}}
	if g.rng.IntN(2) == 0 {
		var id [16]byte
		for i := range id {
			id[i] = byte(g.rng.Uint32())
		}
		id[0] |= 1 // never the nil UUID
		s := fmt.Sprintf("%x-%x-%x-%x-%x", id[0:4], id[4:6], id[6:8], id[8:10], id[10:])
		if g.rng.IntN(4) == 0 {
			s = strings.ToUpper(s)
		}
		m = append(m, [2]string{"eventId", `"` + s + `"`})
	}
	if g.rng.IntN(2) == 0 {
		t := time.Unix(g.rng.Int64N(7e9), g.rng.Int64N(1e9)).UTC()
		zone := time.FixedZone("", (g.rng.IntN(48)-24)*30*60)
		m = append(m, [2]string{"occurredAt", `"` + t.In(zone).Format(time.RFC3339Nano) + `"`})
	}
	if g.rng.IntN(3) == 0 {
		c := strings.Map(func(r rune) rune {
			if r < 0x20 || r == 0x7f {
				return 'c'
			}
			return r
		}, strings.ToValidUTF8(g.textOf(40), "?"))
		if c == "" {
			c = "c"
		}
		m = append(m, [2]string{"correlationId", g.quote(c)})
	}
	if g.rng.IntN(4) > 0 || typ == "TimeoutExpired" {
		var p [][2]string
		switch typ {
		case "SessionCreated":
			p = append(p, [2]string{"goal", g.quote(g.textOf(200))})
			if g.rng.IntN(3) == 0 {
				p = append(p, [2]string{"predecessorSessionId", g.quote(g.sessionID())})
			}
		case "SessionFailed":
			p = append(p, [2]string{"reason", g.quote(g.textOf(100))})
		case "CancellationRequested":
			p = append(p, [2]string{"reason", g.quote(g.textOf(100))}, [2]string{"mode", []string{`"graceful"`, `"forced"`}[g.rng.IntN(2)]})
		case "TimeoutExpired":
			p = append(p, [2]string{"timeout", g.quote([]string{"execution", "inactivity", "approval", "recovery", "cancellation"}[g.rng.IntN(5)])})
		case "ToolCompleted":
			p = append(p, [2]string{"ok", []string{"true", "false"}[g.rng.IntN(2)]})
		}
		if g.rng.IntN(2) == 0 {
			p = append(p, [2]string{"note", g.quote(g.textOf(60))})
		}
		if g.rng.IntN(3) == 0 {
			p = append(p, [2]string{"n", fmt.Sprint(g.rng.IntN(1e6) - 5e5)},
				[2]string{"list", "[" + g.ws(lines) + "1.5e3" + g.ws(lines) + "," + g.ws(lines) + "null" + g.ws(lines) + "," +
					g.ws(lines) + g.object([][2]string{{"k", "true"}}, lines) + "]"})
		}
		if g.rng.IntN(50) == 0 {
			p = append(p, [2]string{"pad", g.quote(strings.Repeat("p", g.rng.IntN(16<<10)))})
		}
		m = append(m, [2]string{"payload", g.object(p, lines)})
	}
	return g.object(m, lines)
}

// forms builds n valid events (fewer if the forms would pass MaxBodyBytes)
// and spells them in each form. NDJSON lines get random padding, LF or CRLF
// endings, blank lines between them, and maybe no final newline.
func (g *bodyGen) forms(n int) BodyForms {
	var events []string
	var batch strings.Builder
	var nd strings.Builder
	pad := func() string {
		if g.rng.IntN(8) > 0 {
			return g.ws(false)
		}
		return strings.Repeat(" \t"[g.rng.IntN(2):][:1], g.rng.IntN(16<<10))
	}
	for range n {
		e := g.event(false)
		line := pad() + e + pad()
		for g.rng.IntN(6) == 0 {
			line = []string{"\n", "\r\n", " \r\n", "\t\n"}[g.rng.IntN(4)] + line
		}
		line += []string{"\n", "\r\n"}[g.rng.IntN(2)]
		if nd.Len()+len(line)+64 > MaxBodyBytes || batch.Len()+len(e)+2*len(line)+64 > MaxBodyBytes {
			break
		}
		events = append(events, e)
		nd.WriteString(line)
		if batch.Len() > 0 {
			batch.WriteString("," + g.ws(true))
		}
		batch.WriteString(g.ws(true))
		if g.rng.IntN(2) == 0 {
			batch.WriteString(e)
		} else {
			batch.WriteString(g.event(true))
			events[len(events)-1] = "" // spelled differently in the batch
		}
	}
	ndj := nd.String()
	if g.rng.IntN(3) == 0 {
		ndj = strings.TrimRight(ndj, "\r\n")
	}
	f := BodyForms{
		Batch:  []byte(g.ws(true) + "{" + g.ws(true) + `"events"` + g.ws(true) + ":" + g.ws(true) + "[" + batch.String() + g.ws(true) + "]" + g.ws(true) + "}" + g.ws(true)),
		NDJSON: []byte(ndj),
		Events: len(events),
	}
	if len(events) == 1 && events[0] != "" {
		f.Single = []byte(g.ws(true) + events[0] + g.ws(true))
	}
	return f
}

// WireEvent is an envelope as encoding/json reads it.
type WireEvent struct {
	EventID       *string         `json:"eventId"`
	SessionID     string          `json:"sessionId"`
	Type          string          `json:"type"`
	OccurredAt    *time.Time      `json:"occurredAt"`
	CorrelationID *string         `json:"correlationId"`
	Payload       json.RawMessage `json:"payload"`
}

// ReferenceDecode reads a body of media type mt with encoding/json alone.
func ReferenceDecode(mt string, body []byte) ([]WireEvent, error) {
	var out []WireEvent
	switch {
	case mt == "application/x-ndjson":
		d := json.NewDecoder(bytes.NewReader(body))
		for {
			var e WireEvent
			if err := d.Decode(&e); errors.Is(err, io.EOF) {
				return out, nil
			} else if err != nil {
				return nil, err
			}
			out = append(out, e)
		}
	case bytes.Contains(body, []byte(`"events"`)):
		var b struct{ Events []WireEvent }
		err := json.Unmarshal(body, &b)
		return b.Events, err
	default:
		var e WireEvent
		err := json.Unmarshal(body, &e)
		return []WireEvent{e}, err
	}
}

// sameEvents reports how got differs from what encoding/json read, or "".
func sameEvents(got []fsm.Event, want []WireEvent) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d events, encoding/json reads %d", len(got), len(want))
	}
	for i, w := range want {
		e := &got[i]
		wantID := ""
		if w.EventID != nil {
			wantID = strings.ToLower(*w.EventID)
		}
		gotID := ""
		if !e.ID.IsZero() {
			gotID = e.ID.String()
		}
		wantCorr := w.SessionID
		if w.CorrelationID != nil {
			wantCorr = *w.CorrelationID
		}
		var wantPayload bytes.Buffer
		if len(w.Payload) > 0 {
			_ = json.Compact(&wantPayload, w.Payload)
		}
		if wantPayload.String() == "{}" {
			wantPayload.Reset()
		}
		switch {
		case gotID != wantID:
			return fmt.Sprintf("event %d: id %q, want %q", i, gotID, wantID)
		case e.SessionID != w.SessionID:
			return fmt.Sprintf("event %d: session %q, want %q", i, e.SessionID, w.SessionID)
		case e.Type.String() != w.Type:
			return fmt.Sprintf("event %d: type %s, want %s", i, e.Type, w.Type)
		case e.CorrelationID != wantCorr:
			return fmt.Sprintf("event %d: correlation %q, want %q", i, e.CorrelationID, wantCorr)
		case (w.OccurredAt == nil) != e.OccurredAt.IsZero() || (w.OccurredAt != nil && !w.OccurredAt.Equal(e.OccurredAt)):
			return fmt.Sprintf("event %d: occurredAt %v, want %v", i, e.OccurredAt, w.OccurredAt)
		case string(e.Payload) != wantPayload.String():
			return fmt.Sprintf("event %d: payload %.80s, want %.80s", i, e.Payload, wantPayload.String())
		}
	}
	return ""
}

// FuzzBodyForms builds a batch of valid events from the fuzzer's choices
// and sends it, through the split and decode the handler uses, as one
// envelope (a batch of one), as {"events": [...]}, and as NDJSON with
// padded lines, CRLF, blank lines and maybe no final newline, up to
// MaxBodyBytes.
//
// Invariants: every form is accepted, and yields exactly the events an
// encoding/json decode of the same body describes: same ids, session ids,
// types, correlation ids, times and payloads, in the same order.
// TestLargeRandomBodies sends such bodies through the handler to Kafka.
func FuzzBodyForms(f *testing.F) {
	f.Add(uint64(1), uint16(0), []byte("goal"))
	f.Add(uint64(2), uint16(0xf000|999), []byte("é\u2028\"\\\n<>&\x00\xff"))
	f.Add(uint64(3), uint16(0xf000|300), []byte{})
	f.Fuzz(func(t *testing.T, seed uint64, count uint16, text []byte) {
		g := &bodyGen{rng: rand.New(rand.NewPCG(seed, uint64(count))), text: text}
		checkForms(t, g.forms(1+int(count)%fuzzMaxEvents))
	})
}

// fuzzMaxEvents keeps a fuzz iteration, and the minimizing of an input
// (which runs it many times), fast. Lines padded up to 16 KiB still take
// bodies well past 64 KiB; TestLargeRandomBodies covers batches of up to
// MaxEvents and bodies near MaxBodyBytes.
const fuzzMaxEvents = 64

// GenerateForms builds a batch of n valid events from seed (n at most
// MaxEvents) spelled in each form, for the tests that send them through the
// handler.
func GenerateForms(seed uint64, n int) BodyForms {
	g := &bodyGen{rng: rand.New(rand.NewPCG(seed, seed)), text: []byte("é\u2028\"\\\n<>&\x00\xff goal")}
	return g.forms(n)
}

func checkForms(t *testing.T, forms BodyForms) {
	t.Helper()
	for _, c := range []struct {
		name, mt string
		body     []byte
	}{{"single", "application/json", forms.Single}, {"batch", "application/json", forms.Batch}, {"ndjson", "application/x-ndjson", forms.NDJSON}} {
		if c.body == nil {
			continue
		}
		if len(c.body) > MaxBodyBytes {
			t.Fatalf("%s: generated %d bytes, over the limit", c.name, len(c.body))
		}
		want, err := ReferenceDecode(c.mt, c.body)
		if err != nil {
			t.Fatalf("%s: encoding/json refuses the generated body: %v\n%.300q", c.name, err, c.body)
		}
		if len(want) != forms.Events {
			t.Fatalf("%s: encoding/json reads %d events, %d were generated", c.name, len(want), forms.Events)
		}
		got, perr := decodeBody(c.mt, c.body)
		if perr != nil {
			t.Fatalf("%s: refused: %s %v\n%.300q", c.name, perr.Detail, perr.Errors, c.body)
		}
		if d := sameEvents(got, want); d != "" {
			t.Fatalf("%s: %s", c.name, d)
		}
	}
}
