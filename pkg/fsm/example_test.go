package fsm_test

import (
	"fmt"
	"time"

	"github.com/correx/sessions/pkg/fsm"
)

// Fold a session's events, as they arrive on the wire, into its state.
func ExampleReducer_Apply() {
	records := []string{
		`{"eventId":"0190f2a4-5b6c-7d8e-9f00-000000000001","sessionId":"acme:run-1","type":"SessionCreated","occurredAt":"2026-11-29T06:00:00Z","payload":{"goal":"fix the build"}}`,
		`{"eventId":"0190f2a4-5b6c-7d8e-9f00-000000000002","sessionId":"acme:run-1","type":"SessionStarted","occurredAt":"2026-11-29T06:00:01Z"}`,
		`{"eventId":"0190f2a4-5b6c-7d8e-9f00-000000000003","sessionId":"acme:run-1","type":"SessionResumed","occurredAt":"2026-11-29T06:00:02Z"}`,
		`{"eventId":"0190f2a4-5b6c-7d8e-9f00-000000000003","sessionId":"acme:run-1","type":"SessionResumed","occurredAt":"2026-11-29T06:00:02Z"}`,
	}
	var s fsm.Session
	var r fsm.Reducer
	for _, rec := range records {
		var e fsm.Event
		if err := fsm.DecodeRecord([]byte(rec), &e); err != nil {
			fmt.Println(err)
			return
		}
		o := r.Apply(&s, &e)
		if o.Reason != fsm.ReasonNone {
			fmt.Println(e.Type, o.Result, o.Reason)
		} else {
			fmt.Println(e.Type, o.Result)
		}
	}
	fmt.Println(s.State, s.Version, s.Counters.Events, s.Durations[fsm.StateCreated])
	// Output:
	// SessionCreated applied
	// SessionStarted applied
	// SessionResumed rejected invalid_transition
	// SessionResumed duplicate
	// ACTIVE 2 4 1000000000
}

// Validation reports every problem of an envelope at once.
func ExampleDecodeEnvelope() {
	var e fsm.Event
	err := fsm.DecodeEnvelope([]byte(`{"sessionId":"has spaces","type":"SessionExploded","occurredAt":"yesterday"}`), &e,
		fsm.DecodeOptions{Ingest: true})
	for _, fe := range err.(*fsm.ValidationError).Errors {
		fmt.Println(fe.Field+":", fe.Message)
	}
	// Output:
	// sessionId: must be 1-128 characters of [A-Za-z0-9._:-]
	// type: unknown event type "SessionExploded"
	// occurredAt: must be an RFC 3339 timestamp with a zone, such as 2026-11-29T06:00:00.25Z
}

// What ingest does with a client's envelope: decode it with
// DecodeOptions.Ingest (eventId and occurredAt may be absent), fill in what
// is missing, and write the record value the projector folds.
func ExampleDecodeEnvelope_ingest() {
	body := []byte(`{"sessionId":"acme:run-1","type":"SessionCreated",
	  "payload":{"goal":"fix the build", "labels":{"team":"core"}}}`)
	var e fsm.Event
	if err := fsm.DecodeEnvelope(body, &e, fsm.DecodeOptions{Ingest: true}); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(e.Type, e.SessionID, e.CorrelationID, e.ID.IsZero(), e.OccurredAt.IsZero())
	fmt.Printf("goal %q, labels %v, payload %s\n", e.Fields.Goal, e.Fields.Labels, e.Payload)

	// Ingest assigns a UUIDv7 and the receive time; fixed here.
	e.ID, _ = fsm.ParseEventID([]byte("0190f2a4-5b6c-7d8e-9f00-000000000001"))
	e.OccurredAt = time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	record := fsm.AppendRecord(nil, &e)
	fmt.Printf("%s\n", record)

	var back fsm.Event
	if err := fsm.DecodeRecord(record, &back); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(back.ID, back.OccurredAt.Format(time.RFC3339))
	// Output:
	// SessionCreated acme:run-1 acme:run-1 true true
	// goal "fix the build", labels [{team core}], payload {"goal":"fix the build","labels":{"team":"core"}}
	// {"v":1,"eventId":"0190f2a4-5b6c-7d8e-9f00-000000000001","sessionId":"acme:run-1","type":"SessionCreated","occurredAt":"2026-11-29T06:00:00Z","correlationId":"acme:run-1","payload":{"goal":"fix the build","labels":{"team":"core"}}}
	// 0190f2a4-5b6c-7d8e-9f00-000000000001 2026-11-29T06:00:00Z
}
