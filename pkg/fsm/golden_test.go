package fsm_test

import (
	"bytes"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/pkg/fsm"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/events.golden from the current code")

// TestEventsGolden pins the bytes every digest is computed from: the
// canonical bytes (AppendCanonical), the record value (AppendRecord), the
// payload NewEvent writes, the fields the decoder reads and the messages it
// refuses with, and the digest chain of a fold, for every event type with
// every payload member set, unicode and escapes, text longer than the
// bounds, and bad members. testdata/events.golden was written by the code
// these bytes must never change from; a difference is a change of every
// stored digest, not a test to update.
func TestEventsGolden(t *testing.T) {
	var out bytes.Buffer
	at := time.Date(2026, 11, 29, 6, 0, 0, 123456789, time.FixedZone("CET", 3600))
	id := func(n int) fsm.EventID {
		v, _ := fsm.ParseEventID(fmt.Appendf(nil, "0190f2a4-5b6c-7d8e-9f00-%012x", n))
		return v
	}
	long := strings.Repeat("é", fsm.MaxGoalBytes) // twice the bound in bytes, cut on a rune boundary by the fold
	full := fsm.Fields{
		Goal: "fix the build \u2014 \"quoted\" <tag> & \n\t\u0001 \U0001F600", PredecessorSessionID: "acme:run-0",
		Reason: "r\u00e9ason \"x\"\n", Mode: fsm.CancelForced, Timeout: fsm.TimeoutApproval, ToolFailed: true,
		ArmedVersion: 7, HasArmedVersion: true, Deadline: at.Add(90 * time.Second),
		Labels:   []fsm.Label{{Key: "team", Value: "c\u00f6re"}, {Key: "a.b/c-d_e", Value: ""}},
		Metadata: []byte(`{ "a" : [1, 2.50, "\u00e9"], "b" : {"c":null} }`), ParentSessionID: "acme:parent",
		ParentClosePolicy: fsm.ParentCloseAbandon, SuccessorSessionID: "acme:run-2",
	}
	full.Timeouts[fsm.TimeoutExecution] = 90 * time.Second
	full.Timeouts[fsm.TimeoutInactivity] = 2*time.Hour + 30*time.Minute
	full.Timeouts[fsm.TimeoutCancellation] = time.Second
	for i := range full.PredecessorDigest {
		full.PredecessorDigest[i] = byte(i * 7)
	}
	event := func(name string, e fsm.Event) {
		fmt.Fprintf(&out, "== %s\ncanonical %s\nrecord %s\n", name, hex.EncodeToString(fsm.AppendCanonical(nil, &e)), fsm.AppendRecord(nil, &e))
		fmt.Fprintf(&out, "fields %s\n", fieldsText(e.Fields))
	}
	n := 0
	all := append(fsm.EventTypes(), fsm.SystemEventTypes()...)
	for _, typ := range all {
		n++
		event("full "+typ.String(), fsm.NewEvent(id(n), "acme:run-1", typ, at, full))
		n++
		event("empty "+typ.String(), fsm.NewEvent(id(n), "acme:run-1", typ, at, fsm.Fields{}))
	}
	for k := fsm.TimeoutExecution; k <= fsm.TimeoutCancellation; k++ {
		n++
		event("timeout "+k.String(), fsm.NewEvent(id(n), "s", fsm.TimeoutExpired, at, fsm.Fields{Timeout: k}))
	}
	n++
	long1 := fsm.NewEvent(id(n), "s", fsm.SessionCreated, at, fsm.Fields{Goal: long})
	event("long goal", long1)
	n++
	e := fsm.NewEvent(id(n), "s", fsm.SessionFailed, at, fsm.Fields{Reason: long})
	e.CorrelationID, e.ExpectedVersion, e.HasExpectedVersion = "corr \u00e9 \"1\"", 1<<53-1, true
	event("long reason, correlation and expected version", e)
	n++
	event("custom", fsm.NewCustomEvent(id(n), "s", "x.acme-1.Deploy9", at, []byte(`{"k":"\u00e9"}`)))
	n++
	event("custom without payload", fsm.NewCustomEvent(id(n), "s", "x.a.B", time.Unix(0, 0), nil))
	n++
	event("cascade cancellation", fsm.NewEvent(id(n), "acme:child", fsm.CancellationRequested, at,
		fsm.Fields{Reason: "parent_cancelled", CancelledByParent: "acme:parent"}))

	// Envelopes as they arrive, read as records and from clients.
	envelopes := []string{
		`{"v":1,"eventId":"0190f2a4-5b6c-7d8e-9f00-000000000001","sessionId":"s-1","type":"SessionCreated","occurredAt":"2026-11-29T06:00:00.5+01:00",` +
			`"correlationId":"c\u00e9","expectedVersion":0,"payload":{ "goal" : "g\u00e9\ud83d\ude00" , "predecessorSessionId":"s-0","labels":{"team":"core","x":"\u00fc"},` +
			`"metadata":{"a": [1, {"b": "c"}]},"parentSessionId":"p-1","parentClosePolicy":"abandon","timeouts":{"execution":"90s","approval":"1h30m"},"unread":[1, 2]}}`,
		`{"eventId":"0190f2a4-5b6c-7d8e-9f00-000000000002","sessionId":"s-1","type":"SessionCreated","occurredAt":"2026-11-29T06:00:00Z","payload":{"goal":"` + long + `","labels":{"BAD":"v","k":"` + strings.Repeat("v", 300) + `"},"timeouts":{"execution":"0.5s","recovery":"721h"},"metadata":{"m":"` + strings.Repeat("m", fsm.MaxMetadataBytes) + `"}}}`,
		`{"eventId":"0190f2a4-5b6c-7d8e-9f00-000000000003","sessionId":"s-1","type":"CancellationRequested","occurredAt":"2026-11-29T06:00:00Z","payload":{"reason":"` + long + `","mode":"forced","goal":5}}`,
		`{"eventId":"0190f2a4-5b6c-7d8e-9f00-000000000004","sessionId":"s-1","type":"TimeoutExpired","occurredAt":"2026-11-29T06:00:00Z","payload":{"timeout":"recovery","armedVersion":12,"deadline":"2026-11-29T05:59:59.999999999-08:00"}}`,
		`{"eventId":"0190f2a4-5b6c-7d8e-9f00-000000000005","sessionId":"s-1","type":"TimeoutExpired","occurredAt":"2026-11-29T06:00:00Z","payload":{"armedVersion":-1,"deadline":"yesterday"}}`,
		`{"eventId":"0190f2a4-5b6c-7d8e-9f00-000000000006","sessionId":"s-1","type":"TimeoutExpired","occurredAt":"2026-11-29T06:00:00Z","payload":{"timeout":"soon","armedVersion":9007199254740992}}`,
		`{"eventId":"0190f2a4-5b6c-7d8e-9f00-000000000007","sessionId":"s-1","type":"ToolCompleted","occurredAt":"2026-11-29T06:00:00Z","payload":{"ok":"no","ok":false}}`,
		`{"eventId":"0190f2a4-5b6c-7d8e-9f00-000000000008","sessionId":"s-1","type":"SessionReplaced","occurredAt":"2026-11-29T06:00:00Z","payload":{"successorSessionId":"bad id"}}`,
		`{"eventId":"0190f2a4-5b6c-7d8e-9f00-000000000009","sessionId":"s-1","type":"ReplacementLinked","occurredAt":"2026-11-29T06:00:00Z","payload":{"predecessorDigest":"` + strings.Repeat("ab", 32) + `"}}`,
		`{"eventId":"0190f2a4-5b6c-7d8e-9f00-00000000000a","sessionId":"s-1","type":"ReplacementLinked","occurredAt":"2026-11-29T06:00:00Z","payload":{"predecessorDigest":"` + strings.Repeat("zz", 32) + `"}}`,
		`{"eventId":"0190f2a4-5b6c-7d8e-9f00-00000000000b","sessionId":"s-1","type":"ReplacementRefused","occurredAt":"2026-11-29T06:00:00Z","payload":{"reason":null}}`,
		`{"eventId":"0190f2a4-5b6c-7d8e-9f00-00000000000c","sessionId":"s-1","type":"SessionCreated","occurredAt":"2026-11-29T06:00:00Z","payload":{"labels":[],"metadata":"m","timeouts":{"forever":"1s","execution":5,"approval":"soon"},"parentClosePolicy":"orphan","mode":"x"}}`,
		`{"eventId":"0190f2a4-5b6c-7d8e-9f00-00000000000d","sessionId":"s-1","type":"CancellationRequested","occurredAt":"2026-11-29T06:00:00Z","payload":{"mode":"later","reason":1}}`,
		`{"eventId":"0190f2a4-5b6c-7d8e-9f00-00000000000e","sessionId":"s-1","type":"SessionFailed","occurredAt":"2026-11-29T06:00:00Z","payload":{"reason":"x","reason":"y"}}`,
		`{"eventId":"0190f2a4-5b6c-7d8e-9f00-00000000000f","sessionId":"s-1","type":"SessionCreated","occurredAt":"2026-11-29T06:00:00Z","payload":{"labels":{"k":"a","k":"b","n":1}}}`,
		`{"eventId":"0190f2a4-5b6c-7d8e-9f00-000000000010","sessionId":"s-1","type":"x.acme.Thing","occurredAt":"2026-11-29T06:00:00Z","payload":{ "any" : "thing" }}`,
		`{"eventId":"0190f2a4-5b6c-7d8e-9f00-000000000011","sessionId":"s-1","type":"ModelRequested","occurredAt":"2026-11-29T06:00:00Z","payload":{}}`,
		`{"eventId":"0190f2a4-5b6c-7d8e-9f00-000000000012","sessionId":"s-1","type":"TimeoutExpired","occurredAt":"2026-11-29T06:00:00Z","payload":5}`,
	}
	for i, env := range envelopes {
		for _, ingest := range []bool{false, true} {
			var e fsm.Event
			err := fsm.DecodeEnvelope([]byte(env), &e, fsm.DecodeOptions{Ingest: ingest})
			fmt.Fprintf(&out, "== envelope %d ingest=%v\n", i, ingest)
			if err != nil {
				fmt.Fprintf(&out, "error %s\n", err)
				continue
			}
			fmt.Fprintf(&out, "canonical %s\nfields %s\n", hex.EncodeToString(fsm.AppendCanonical(nil, &e)), fieldsText(e.Fields))
		}
	}

	// The digest chain of a fold.
	var s fsm.Session
	var r fsm.Reducer
	for i, typ := range []fsm.EventType{fsm.SessionCreated, fsm.SessionStarted, fsm.ToolRequested, fsm.ToolCompleted,
		fsm.ApprovalRequested, fsm.ApprovalGranted, fsm.CancellationRequested, fsm.SessionCancelled} {
		e := fsm.NewEvent(id(1000+i), "acme:run-1", typ, at.Add(time.Duration(i)*time.Second), full)
		o := r.Apply(&s, &e)
		fmt.Fprintf(&out, "== fold %s %s %s\ndigest %x\n", typ, o.Result, o.Reason, s.Digest)
	}

	const path = "testdata/events.golden"
	if *updateGolden {
		if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), want) {
		got, wantLines := strings.Split(out.String(), "\n"), strings.Split(string(want), "\n")
		for i := range min(len(got), len(wantLines)) {
			if g, w := got[i], wantLines[i]; g != w {
				j := 0
				for j < min(len(g), len(w)) && g[j] == w[j] {
					j++
				}
				from := max(j-40, 0)
				t.Fatalf("%s differs at line %d, byte %d:\n got ...%.200s\nwant ...%.200s", path, i+1, j, g[from:], w[from:])
			}
		}
		t.Fatalf("%s differs in length: %d lines, want %d", path, len(got), len(wantLines))
	}
}

// fieldsText spells out the members of f that are set, the metadata as
// text, so that a member added later and left unset changes nothing.
func fieldsText(f fsm.Fields) string {
	var b strings.Builder
	v := reflect.ValueOf(f)
	for i := range v.NumField() {
		if fv := v.Field(i); !fv.IsZero() {
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			if m, ok := fv.Interface().([]byte); ok {
				fmt.Fprintf(&b, "%s:%q", v.Type().Field(i).Name, m)
			} else {
				fmt.Fprintf(&b, "%s:%#v", v.Type().Field(i).Name, fv.Interface())
			}
		}
	}
	return "{" + b.String() + "}"
}
