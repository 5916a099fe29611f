package fsm_test

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/pkg/fsm"
)

const validID = "0190f2a4-5b6c-7d8e-9f00-112233445566"

func TestDecodeEnvelopeErrors(t *testing.T) {
	big := `"` + strings.Repeat("x", fsm.MaxPayloadBytes) + `"`
	tests := []struct {
		name   string
		in     string
		ingest bool
		want   []string // "field: message fragment"
	}{
		{"empty", ``, false, []string{": empty body"}},
		{"not an object", `[1]`, false, []string{": expected a JSON object"}},
		{"malformed", `{"type":`, false, []string{": malformed JSON"}},
		{"trailing data", `{"sessionId":"s","type":"SessionStarted"} x`, true, []string{": malformed JSON at byte"}},
		{"invalid utf8", "{\"sessionId\":\"s\xff\"}", true, []string{": malformed JSON"}},
		{"missing everything", `{}`, false, []string{"eventId: is required", "sessionId: is required", "type: is required", "occurredAt: is required"}},
		{"ingest may omit id and time", `{}`, true, []string{"sessionId: is required", "type: is required"}},
		{"wrong types", `{"eventId":1,"sessionId":true,"type":null,"occurredAt":[],"correlationId":5,"payload":"x"}`, false,
			[]string{"eventId: must be a string", "sessionId: must be a string", "type: must be a string",
				"occurredAt: must be a string", "correlationId: must be a string", "payload: must be an object"}},
		{"bad values", `{"eventId":"nope","sessionId":"has space","type":"SessionExploded","occurredAt":"2026-11-29 06:00:00"}`, false,
			[]string{"eventId: must be a UUID", "sessionId: must be 1-128", "type: unknown event type", "occurredAt: must be an RFC 3339"}},
		{"nil uuid", `{"eventId":"00000000-0000-0000-0000-000000000000","sessionId":"s","type":"SessionStarted"}`, true,
			[]string{"eventId: must not be the nil UUID"}},
		{"time without zone", `{"sessionId":"s","type":"SessionStarted","occurredAt":"2026-11-29T06:00:00"}`, true,
			[]string{"occurredAt: must be an RFC 3339"}},
		{"time out of range", `{"sessionId":"s","type":"SessionStarted","occurredAt":"1969-12-31T23:59:59Z"}`, true,
			[]string{"occurredAt: must be between"}},
		{"long session id", `{"sessionId":"` + strings.Repeat("a", 129) + `","type":"SessionStarted"}`, true,
			[]string{"sessionId: must be 1-128"}},
		{"long correlation id", `{"sessionId":"s","type":"SessionStarted","correlationId":"` + strings.Repeat("é", 129) + `"}`, true,
			[]string{"correlationId: must be 1-128"}},
		{"empty correlation id", `{"sessionId":"s","type":"SessionStarted","correlationId":""}`, true,
			[]string{"correlationId: must be 1-128"}},
		{"unknown field", `{"sessionId":"s","type":"SessionStarted","color":"red"}`, true, []string{"color: unknown field"}},
		{"duplicate field", `{"sessionId":"s","sessionId":"t","type":"SessionStarted"}`, true, []string{"sessionId: duplicate field"}},
		{"unknown version", `{"v":2,"sessionId":"s","type":"SessionStarted"}`, true, []string{"v: unsupported version 2"}},
		{"oversize payload", `{"sessionId":"s","type":"SessionStarted","payload":{"x":` + big + `}}`, true, []string{"payload: is 65544 bytes"}},
		{"timeout required", `{"sessionId":"s","type":"TimeoutExpired"}`, true, []string{"payload.timeout: is required"}},
		{"bad timeout", `{"sessionId":"s","type":"TimeoutExpired","payload":{"timeout":"lunch"}}`, true, []string{"payload.timeout: must be one of"}},
		{"bad mode", `{"sessionId":"s","type":"CancellationRequested","payload":{"mode":"gently"}}`, true, []string{"payload.mode: must be graceful or forced"}},
		{"ok not bool", `{"sessionId":"s","type":"ToolCompleted","payload":{"ok":"yes"}}`, true, []string{"payload.ok: must be a boolean"}},
		{"goal not string", `{"sessionId":"s","type":"SessionCreated","payload":{"goal":7}}`, true, []string{"payload.goal: must be a string"}},
		{"bad predecessor", `{"sessionId":"s","type":"SessionCreated","payload":{"predecessorSessionId":"a b"}}`, true, []string{"payload.predecessorSessionId: must be"}},
		{"duplicate payload field", `{"sessionId":"s","type":"SessionFailed","payload":{"reason":"a","reason":"b"}}`, true, []string{"payload.reason: duplicate field"}},
		{"goal over 4 KiB", `{"sessionId":"s","type":"SessionCreated","payload":{"goal":"` + strings.Repeat("g", fsm.MaxGoalBytes+1) + `"}}`, true,
			[]string{"payload.goal: is 4097 bytes; the limit is 4096"}},
		{"failure reason over 1 KiB", `{"sessionId":"s","type":"SessionFailed","payload":{"reason":"` + strings.Repeat("r", fsm.MaxReasonBytes+1) + `"}}`, true,
			[]string{"payload.reason: is 1025 bytes; the limit is 1024"}},
		{"long reason beside other errors", `{"sessionId":"s s","type":"CancellationRequested","payload":{"reason":"` +
			strings.Repeat("é", fsm.MaxReasonBytes/2) + `\u00e9","mode":"gently"}}`, true,
			[]string{"sessionId: must be 1-128", "payload.reason: is 1026 bytes; the limit is 1024", "payload.mode: must be graceful or forced"}},
		{"bad failure category", `{"sessionId":"s","type":"SessionFailed","payload":{"category":"network"}}`, true,
			[]string{"payload.category: must be one of infrastructure"}},
		{"bad failure code", `{"sessionId":"s","type":"SessionFailed","payload":{"code":"Rate Limited"}}`, true,
			[]string{"payload.code: must match [a-z0-9]"}},
		{"failure code over 64", `{"sessionId":"s","type":"SessionFailed","payload":{"code":"` + strings.Repeat("e", 65) + `"}}`, true,
			[]string{"payload.code: must match"}},
		{"retryable not bool", `{"sessionId":"s","type":"SessionFailed","payload":{"retryable":"yes"}}`, true,
			[]string{"payload.retryable: must be a boolean"}},
		{"bad request id", `{"sessionId":"s","type":"ApprovalRequested","payload":{"requestId":"a b"}}`, true,
			[]string{"payload.requestId: must match [A-Za-z0-9._:-]{1,128}"}},
		{"empty request id", `{"sessionId":"s","type":"ApprovalGranted","payload":{"requestId":""}}`, true,
			[]string{"payload.requestId: must match"}},
		{"approval reason over 1 KiB", `{"sessionId":"s","type":"ApprovalRequested","payload":{"reason":"` + strings.Repeat("r", fsm.MaxReasonBytes+1) + `"}}`, true,
			[]string{"payload.reason: is 1025 bytes; the limit is 1024"}},
		{"decider over 256 bytes", `{"sessionId":"s","type":"ApprovalDenied","payload":{"by":"` + strings.Repeat("b", fsm.MaxDeciderBytes+1) + `","requestId":"r/1"}}`, true,
			[]string{"payload.by: is 257 bytes; the limit is 256", "payload.requestId: must match"}},
		{"decider not a string", `{"sessionId":"s","type":"ApprovalGranted","payload":{"by":1}}`, true,
			[]string{"payload.by: must be a string"}},
		{"deep nesting", `{"sessionId":"s","type":"SessionStarted","payload":{"a":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}}`, true, []string{": malformed JSON"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var e fsm.Event
			err := fsm.DecodeEnvelope([]byte(tt.in), &e, fsm.DecodeOptions{Ingest: tt.ingest})
			var ve *fsm.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("got %v, want a *ValidationError", err)
			}
			if len(ve.Errors) != len(tt.want) {
				t.Fatalf("got %d errors %v, want %d %v", len(ve.Errors), ve.Errors, len(tt.want), tt.want)
			}
			for i, w := range tt.want {
				field, msg, _ := strings.Cut(w, ": ")
				got := ve.Errors[i]
				if got.Field != field || !strings.Contains(got.Message, msg) {
					t.Errorf("error %d: got %q: %q, want %q: %q", i, got.Field, got.Message, field, msg)
				}
			}
		})
	}
}

// TestTextBounds: ingest takes goal and reason up to their bounds, counted
// in bytes of the decoded text, and refuses longer; records from other
// producers still decode with the long text (the fold cuts it).
func TestTextBounds(t *testing.T) {
	created := func(goal string) string {
		return `{"eventId":"` + validID + `","sessionId":"s","type":"SessionCreated","occurredAt":"2026-11-29T06:00:00Z","payload":{"goal":"` + goal + `"}}`
	}
	failed := func(reason string) string {
		return `{"eventId":"` + validID + `","sessionId":"s","type":"SessionFailed","occurredAt":"2026-11-29T06:00:00Z","payload":{"reason":"` + reason + `"}}`
	}
	tests := []struct {
		name     string
		in       string
		ingestOK bool
	}{
		{"goal at the bound", created(strings.Repeat("g", fsm.MaxGoalBytes)), true},
		{"goal at the bound, escaped", created(strings.Repeat(`\u00e9`, fsm.MaxGoalBytes/2)), true},
		{"goal one byte over", created(strings.Repeat("g", fsm.MaxGoalBytes-1) + "é"), false},
		{"reason at the bound", failed(strings.Repeat("r", fsm.MaxReasonBytes)), true},
		{"reason one byte over", failed(strings.Repeat("r", fsm.MaxReasonBytes+1)), false},
		{"reason of another type is not read", `{"sessionId":"s","type":"SessionPaused","payload":{"reason":"` + strings.Repeat("r", 2*fsm.MaxReasonBytes) + `"}}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var e fsm.Event
			err := fsm.DecodeEnvelope([]byte(tt.in), &e, fsm.DecodeOptions{Ingest: true})
			if (err == nil) != tt.ingestOK {
				t.Fatalf("ingest decode: got %v, want ok=%v", err, tt.ingestOK)
			}
			if strings.Contains(tt.in, `"eventId"`) {
				if err := fsm.DecodeRecord([]byte(tt.in), &e); err != nil {
					t.Fatalf("record decode refused the text of another producer: %v", err)
				}
			}
		})
	}
}

func TestUnsupportedVersionIs(t *testing.T) {
	var e fsm.Event
	err := fsm.DecodeRecord([]byte(`{"v":9,"eventId":"`+validID+`","sessionId":"s","type":"SessionStarted","occurredAt":"2026-11-29T06:00:00Z"}`), &e)
	if !errors.Is(err, fsm.ErrUnsupportedVersion) {
		t.Fatalf("got %v, want ErrUnsupportedVersion", err)
	}
	err = fsm.DecodeRecord([]byte(`{"v":9,"sessionId":"s"}`), &e)
	if errors.Is(err, fsm.ErrUnsupportedVersion) {
		t.Fatalf("an event with other problems matched ErrUnsupportedVersion: %v", err)
	}
}

func TestDecodeEnvelopeIngest(t *testing.T) {
	in := `{ "sessionId" : "acme:s-1", "type":"SessionCreated",
	  "occurredAt":"2026-11-29T07:00:00.5+01:00",
	  "payload": { "goal" : "fix \"it\"", "extra": [1, {"a": null}] } }`
	var e fsm.Event
	if err := fsm.DecodeEnvelope([]byte(in), &e, fsm.DecodeOptions{Ingest: true}); err != nil {
		t.Fatal(err)
	}
	if !e.ID.IsZero() {
		t.Errorf("id assigned by the decoder: %v", e.ID)
	}
	if want := time.Date(2026, 11, 29, 6, 0, 0, 5e8, time.UTC); !e.OccurredAt.Equal(want) || e.OccurredAt.Location() != time.UTC {
		t.Errorf("occurredAt %v, want %v in UTC", e.OccurredAt, want)
	}
	if e.CorrelationID != "acme:s-1" {
		t.Errorf("correlationId %q, want the session id", e.CorrelationID)
	}
	if got := string(e.Payload); got != `{"goal":"fix \"it\"","extra":[1,{"a":null}]}` {
		t.Errorf("payload not compacted: %s", got)
	}
	if e.Fields.Goal != `fix "it"` {
		t.Errorf("goal %q", e.Fields.Goal)
	}
}

// TestSessionIDOfDotsAlone: ingest refuses a session id of dots alone (a
// path segment that URL paths and S3 rewrite), as the session and as a
// parent; a record already in the log is read as before.
func TestSessionIDOfDotsAlone(t *testing.T) {
	for id, want := range map[string]bool{".": false, "..": false, "...": false, ".a": true, "a.": true, "a..b": true, "a": true, "a b": false} {
		if got := fsm.ValidNewSessionID(id); got != want {
			t.Errorf("ValidNewSessionID(%q) = %v, want %v", id, got, want)
		}
	}
	for _, c := range []struct{ in, field string }{
		{`{"sessionId":"..","type":"SessionCreated"}`, "sessionId"},
		{`{"sessionId":"a","type":"SessionCreated","payload":{"parentSessionId":"."}}`, "payload.parentSessionId"},
	} {
		var e fsm.Event
		err := fsm.DecodeEnvelope([]byte(c.in), &e, fsm.DecodeOptions{Ingest: true})
		var ve *fsm.ValidationError
		if !errors.As(err, &ve) || len(ve.Errors) != 1 || ve.Errors[0].Field != c.field {
			t.Errorf("%s at ingest: %v, want one error naming %s", c.in, err, c.field)
		}
	}
	var e fsm.Event
	rec := `{"v":1,"eventId":"0193a5c0-0000-7000-8000-000000000001","sessionId":"..","type":"SessionCreated","occurredAt":"2026-11-29T06:00:00Z"}`
	if err := fsm.DecodeRecord([]byte(rec), &e); err != nil || e.SessionID != ".." {
		t.Errorf("a record of session ..: %v %q, want it read", err, e.SessionID)
	}
}

func TestRecordRoundTrip(t *testing.T) {
	at := time.Date(2026, 11, 29, 6, 0, 0, 123456789, time.UTC)
	id, _ := fsm.ParseEventID([]byte(validID))
	for _, et := range fsm.EventTypes() {
		f := fsm.Fields{Goal: "g\n<x>", PredecessorSessionID: "s-0", Reason: "r é", Mode: fsm.CancelForced,
			Timeout: fsm.TimeoutApproval, ToolFailed: true, CancelledByParent: "p-1"}
		e := fsm.NewEvent(id, "s-1", et, at, f)
		e.CorrelationID = "corr \"1\""
		rec := fsm.AppendRecord(nil, &e)
		var got fsm.Event
		if err := fsm.DecodeRecord(rec, &got); err != nil {
			t.Fatalf("%s: %v\n%s", et, err, rec)
		}
		if !reflect.DeepEqual(got, e) {
			t.Fatalf("%s: round trip\n got %+v\nwant %+v", et, got, e)
		}
		if !bytes.Equal(fsm.AppendCanonical(nil, &got), fsm.AppendCanonical(nil, &e)) {
			t.Fatalf("%s: canonical bytes differ", et)
		}
	}
}

func TestNewEventIDIsV7(t *testing.T) {
	now := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	a, err := fsm.NewEventID(now)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := fsm.NewEventID(now.Add(time.Millisecond))
	if a[6]>>4 != 7 || a[8]>>6 != 2 {
		t.Fatalf("%s is not a UUIDv7", a)
	}
	if a.String() >= b.String() {
		t.Fatalf("ids do not sort by time: %s >= %s", a, b)
	}
	if p, ok := fsm.ParseEventID([]byte(a.String())); !ok || p != a {
		t.Fatalf("parse(%s) = %v %v", a, p, ok)
	}
}

// TestDecodeEscapedSpellings: a string member spelled with JSON escapes
// means what encoding/json reads from it, for every member the decoder
// parses, so a client's JSON library may escape as it likes.
func TestDecodeEscapedSpellings(t *testing.T) {
	in := `{"eventId":"0190f2a4-5b6c-7d8e-9f00-11223344556\u0036","sessionId":"s\u002d1","type":"Tool\u0043ompleted",` +
		`"occurredAt":"2026-11-29T06:00:00\u005a","payload":{"ok":false}}`
	plain := `{"eventId":"` + validID + `","sessionId":"s-1","type":"ToolCompleted","occurredAt":"2026-11-29T06:00:00Z","payload":{"ok":false}}`
	for _, ingest := range []bool{true, false} {
		var got, want fsm.Event
		if err := fsm.DecodeEnvelope([]byte(in), &got, fsm.DecodeOptions{Ingest: ingest}); err != nil {
			t.Fatalf("ingest=%v: %v", ingest, err)
		}
		if err := fsm.DecodeEnvelope([]byte(plain), &want, fsm.DecodeOptions{Ingest: ingest}); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("ingest=%v: got %+v, want %+v", ingest, got, want)
		}
	}
}

// TestStructuredFieldsFromOtherProducers: a record keeps a category, code or
// requestId out of its rule (ingest refuses them), and the fold bounds them
// deterministically: category unknown, code dropped, the request known by
// its eventId, a decision with an invalid requestId a mismatch.
func TestStructuredFieldsFromOtherProducers(t *testing.T) {
	rec := func(id, typ, payload string) fsm.Event {
		t.Helper()
		var e fsm.Event
		in := `{"eventId":"00000000-0000-4000-8000-0000000000` + id + `","sessionId":"s","type":"` + typ +
			`","occurredAt":"2026-11-29T06:00:0` + id[1:] + `Z","payload":` + payload + `}`
		if err := fsm.DecodeRecord([]byte(in), &e); err != nil {
			t.Fatalf("record %s: %v", typ, err)
		}
		return e
	}
	var s fsm.Session
	var r fsm.Reducer
	for _, e := range []fsm.Event{rec("01", "SessionCreated", `{}`), rec("02", "SessionStarted", `{}`),
		rec("03", "ApprovalRequested", `{"requestId":"not valid"}`), rec("04", "ApprovalGranted", `{"requestId":"not valid"}`)} {
		r.Apply(&s, &e)
	}
	if s.Approval.RequestID != "00000000-0000-4000-8000-000000000003" {
		t.Fatalf("request id %q, want the request's eventId", s.Approval.RequestID)
	}
	if s.NumRejections() != 1 || s.RejectionAt(0).Reason != fsm.ReasonApprovalMismatch {
		t.Fatalf("decision with an invalid requestId: %d rejections, want approval_mismatch", s.NumRejections())
	}
	e := rec("05", "SessionFailed", `{"reason":"x","category":"Network","code":"-bad","retryable":true}`)
	r.Apply(&s, &e)
	if f := s.Failure; f.Category != fsm.FailureUnknown || f.Code != "" || !f.Retryable || f.From != fsm.StateAwaitingApproval {
		t.Fatalf("failure %+v, want unknown, no code, retryable", f)
	}
	if s.NumDecisions() != 1 || s.DecisionAt(0).Kind != fsm.DecisionCancelled {
		t.Fatalf("the failure left the request without a cancelled decision")
	}
}
