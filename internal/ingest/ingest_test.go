package ingest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/ingest"
	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/kafkatest"
	"github.com/correx/sessions/internal/projector"
	correxotel "github.com/correx/sessions/otel"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

const topic = "events"

type fixture struct {
	t       *testing.T
	cluster *kfake.Cluster
	cl      *kgo.Client
	srv     *httptest.Server
}

func newFixture(t *testing.T, timeout time.Duration) *fixture {
	return newTracedFixture(t, timeout, nil)
}

// newTracedFixture is newFixture with telemetry wired as the service wires
// it (otelhttp around the handler, kotel hooks on the producer) when tel is
// not nil.
func newTracedFixture(t *testing.T, timeout time.Duration, tel *correxotel.Telemetry) *fixture {
	t.Helper()
	c := kafkatest.Start(t)
	cfg := ingest.DefaultConfig()
	cfg.Kafka.Brokers, cfg.Topic, cfg.ProduceTimeout = c.ListenAddrs(), topic, timeout
	opts := append(ingest.ProducerOpts(cfg), kgo.RetryTimeout(timeout))
	if tel != nil {
		opts = append(opts, correxotel.KafkaHooks(tel))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	if _, err := kafka.EnsureTopic(context.Background(), kadm.NewClient(cl), topic, 3); err != nil {
		t.Fatal(err)
	}
	h := &ingest.Handler{Producer: cl, Topic: topic, ProduceTimeout: timeout,
		Now: func() time.Time { return time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC) }}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/events", h)
	var api http.Handler = mux
	if tel != nil {
		api = correxotel.HTTPHandler(tel, "ingest", mux)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	return &fixture{t: t, cluster: c, cl: cl, srv: srv}
}

func (f *fixture) post(ct string, body []byte) (*http.Response, []byte) {
	f.t.Helper()
	return f.postWith(ct, body, nil)
}

func (f *fixture) postWith(ct string, body []byte, header http.Header) (*http.Response, []byte) {
	f.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/v1/events", bytes.NewReader(body))
	for k, v := range header {
		req.Header[k] = v
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// produced counts the records in the topic.
func (f *fixture) produced() int64 {
	f.t.Helper()
	ends, err := kadm.NewClient(f.cl).ListEndOffsets(context.Background(), topic)
	if err != nil {
		f.t.Fatal(err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

func event(session, typ string) string {
	return fmt.Sprintf(`{"sessionId":%q,"type":%q}`, session, typ)
}

// created is a SessionCreated envelope whose payload holds members.
func created(members string) string {
	return `{"sessionId":"s","type":"SessionCreated","payload":{` + members + `}}`
}

func seventeenLabels() string {
	var parts []string
	for i := range 17 {
		parts = append(parts, fmt.Sprintf(`"k%d":"v"`, i))
	}
	return strings.Join(parts, ",")
}

type problem struct {
	Type   string           `json:"type"`
	Title  string           `json:"title"`
	Status int              `json:"status"`
	Detail string           `json:"detail"`
	Errors []fsm.FieldError `json:"errors"`
}

// TestBadInput is the catalogue of bad requests: each gets its documented
// status and a problem+json naming the field, the service stays up, and
// nothing is produced.
func TestBadInput(t *testing.T) {
	f := newFixture(t, 5*time.Second)
	many := make([]string, 1001)
	for i := range many {
		many[i] = event(fmt.Sprintf("s-%d", i), "SessionCreated")
	}
	bigPayload := `{"sessionId":"s","type":"SessionCreated","payload":{"x":"` + strings.Repeat("a", 70<<10) + `"}}`
	cases := []struct {
		name   string
		ct     string
		body   string
		status int
		field  string // a field that must be named in errors ("-" for none)
	}{
		{"malformed JSON", "application/json", `{"sessionId":`, 400, ""},
		{"not an object", "application/json", `[1,2]`, 400, ""},
		{"wrong types", "application/json", `{"sessionId":7,"type":"SessionCreated"}`, 400, "sessionId"},
		{"unknown event type", "application/json", event("s", "SessionExploded"), 400, "type"},
		{"bad session id", "application/json", event("has spaces", "SessionCreated"), 400, "sessionId"},
		// Path segments: S3 and URL paths rewrite them, so such a session
		// could be neither read nor archived under its own key.
		{"session id .", "application/json", event(".", "SessionCreated"), 400, "sessionId"},
		{"session id ..", "application/x-ndjson", event("..", "SessionCreated"), 400, "sessionId"},
		{"session id ...", "application/json", event("...", "SessionStarted"), 400, "sessionId"},
		{"parent id ..", "application/json", created(`"parentSessionId":".."`), 400, "payload.parentSessionId"},
		{"bad timestamp", "application/json", `{"sessionId":"s","type":"SessionCreated","occurredAt":"yesterday"}`, 400, "occurredAt"},
		{"timestamp without zone", "application/json", `{"sessionId":"s","type":"SessionCreated","occurredAt":"2026-11-29T06:00:00"}`, 400, "occurredAt"},
		{"bad event id", "application/json", `{"eventId":"42","sessionId":"s","type":"SessionCreated"}`, 400, "eventId"},
		{"the id the firer will use", "application/json",
			`{"eventId":"` + projector.TimeoutEventID("s", fsm.TimeoutInactivity, 1).String() + `","sessionId":"s","type":"SessionPaused"}`, 400, "eventId"},
		{"an id in the reserved space", "application/json", `{"eventId":"636f7272-6578-8abc-9def-0123456789ab","sessionId":"s","type":"SessionCreated"}`, 400, "eventId"},
		{"payload not an object", "application/json", `{"sessionId":"s","type":"SessionCreated","payload":[1]}`, 400, "payload"},
		{"oversize payload", "application/json", bigPayload, 400, "payload"},
		{"goal over 4 KiB", "application/json", `{"sessionId":"s","type":"SessionCreated","payload":{"goal":"` + strings.Repeat("g", fsm.MaxGoalBytes+1) + `"}}`, 400, "payload.goal"},
		{"reason over 1 KiB", "application/x-ndjson", event("s", "SessionStarted") + "\n" +
			`{"sessionId":"s","type":"SessionFailed","payload":{"reason":"` + strings.Repeat("r", fsm.MaxReasonBytes+1) + `"}}`, 400, "payload.reason"},
		{"missing timeout kind", "application/json", event("s", "TimeoutExpired"), 400, "payload.timeout"},
		{"failure category", "application/json", `{"sessionId":"s","type":"SessionFailed","payload":{"category":"network"}}`, 400, "payload.category"},
		{"failure code", "application/json", `{"sessionId":"s","type":"SessionFailed","payload":{"code":"Bad Code"}}`, 400, "payload.code"},
		{"failure retryable", "application/json", `{"sessionId":"s","type":"SessionFailed","payload":{"retryable":1}}`, 400, "payload.retryable"},
		{"approval request id", "application/json", `{"sessionId":"s","type":"ApprovalGranted","payload":{"requestId":"a b"}}`, 400, "payload.requestId"},
		{"approval by", "application/json", `{"sessionId":"s","type":"ApprovalDenied","payload":{"by":"` + strings.Repeat("b", 257) + `"}}`, 400, "payload.by"},
		{"approval reason", "application/json", `{"sessionId":"s","type":"ApprovalRequested","payload":{"reason":"` + strings.Repeat("r", 1025) + `"}}`, 400, "payload.reason"},
		{"cancellation mode", "application/json", `{"sessionId":"s","type":"CancellationRequested","payload":{"mode":"hard"}}`, 400, "payload.mode"},
		{"labels not an object", "application/json", created(`"labels":["a"]`), 400, "payload.labels"},
		{"label key syntax", "application/json", created(`"labels":{"Team":"x"}`), 400, "payload.labels.Team"},
		{"label value over 256 bytes", "application/json", created(`"labels":{"k":"` + strings.Repeat("v", 257) + `"}`), 400, "payload.labels.k"},
		{"label value not a string", "application/json", created(`"labels":{"k":1}`), 400, "payload.labels.k"},
		{"17 labels", "application/json", created(`"labels":{` + seventeenLabels() + `}`), 400, "payload.labels"},
		{"metadata not an object", "application/json", created(`"metadata":"x"`), 400, "payload.metadata"},
		{"metadata over 4 KiB", "application/json", created(`"metadata":{"x":"` + strings.Repeat("m", 4096) + `"}`), 400, "payload.metadata"},
		{"parent id syntax", "application/json", created(`"parentSessionId":"a b"`), 400, "payload.parentSessionId"},
		{"parent close policy", "application/json", created(`"parentClosePolicy":"orphan"`), 400, "payload.parentClosePolicy"},
		{"timeouts unknown kind", "application/json", created(`"timeouts":{"lunch":"1h"}`), 400, "payload.timeouts.lunch"},
		{"timeout not a duration", "application/json", created(`"timeouts":{"approval":"soon"}`), 400, "payload.timeouts.approval"},
		{"timeout under 1s", "application/json", created(`"timeouts":{"approval":"500ms"}`), 400, "payload.timeouts.approval"},
		{"timeout over 720h", "application/json", created(`"timeouts":{"execution":"721h"}`), 400, "payload.timeouts.execution"},
		{"armedVersion negative", "application/json", `{"sessionId":"s","type":"TimeoutExpired","payload":{"timeout":"execution","armedVersion":-1}}`, 400, "payload.armedVersion"},
		{"armedVersion fraction", "application/json", `{"sessionId":"s","type":"TimeoutExpired","payload":{"timeout":"execution","armedVersion":1.5}}`, 400, "payload.armedVersion"},
		{"deadline not RFC 3339", "application/json", `{"sessionId":"s","type":"TimeoutExpired","payload":{"timeout":"execution","deadline":"tomorrow"}}`, 400, "payload.deadline"},
		{"expectedVersion a string", "application/json", `{"sessionId":"s","type":"SessionStarted","expectedVersion":"1"}`, 400, "expectedVersion"},
		{"expectedVersion negative", "application/json", `{"sessionId":"s","type":"SessionStarted","expectedVersion":-2}`, 400, "expectedVersion"},
		{"custom type vendor", "application/json", event("s", "x.Acme.Note"), 400, "type"},
		{"custom type name", "application/json", event("s", "x.acme.9note"), 400, "type"},
		{"SessionReplaced from a client", "application/json", `{"sessionId":"s","type":"SessionReplaced","payload":{"successorSessionId":"t"}}`, 400, "type"},
		{"ReplacementLinked from a client", "application/json", event("s", "ReplacementLinked"), 400, "type"},
		{"ReplacementRefused from a client", "application/json", event("s", "ReplacementRefused"), 400, "type"},
		{"one bad event spoils the batch", "application/json", `{"events":[` + event("s", "SessionCreated") + `,` + event("s", "Nope") + `]}`, 400, "type"},
		{"empty batch", "application/json", `{"events":[]}`, 400, "events"},
		{"batch with extra member", "application/json", `{"events":[],"x":1}`, 400, "events"},
		{"events not an array", "application/json", `{"events":{}}`, 400, "events"},
		{"empty NDJSON", "application/x-ndjson", "\n\n", 400, "events"},
		{"1001 events", "application/json", `{"events":[` + strings.Join(many, ",") + `]}`, 413, "-"},
		{"body over 1 MiB", "application/x-ndjson", strings.Repeat(event("s", "SessionCreated")+"\n", 30000), 413, "-"},
		{"no content type", "", event("s", "SessionCreated"), 415, "-"},
		{"wrong content type", "text/plain", event("s", "SessionCreated"), 415, "-"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := f.produced()
			resp, body := f.post(c.ct, []byte(c.body))
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, c.status, body)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
				t.Fatalf("content type %q", ct)
			}
			var p problem
			if err := json.Unmarshal(body, &p); err != nil || p.Status != c.status || p.Type == "" || p.Title == "" {
				t.Fatalf("not a problem document: %s (%v)", body, err)
			}
			if c.field != "-" {
				found := false
				for _, e := range p.Errors {
					found = found || e.Field == c.field
				}
				if !found {
					t.Fatalf("errors %v do not name %q", p.Errors, c.field)
				}
			}
			if after := f.produced(); after != before {
				t.Fatalf("%d records produced by a rejected request", after-before)
			}
		})
	}
	// The service is still up and takes a good request; dots among other
	// characters are a session id like any other.
	for _, id := range []string{"s-ok", ".a", "a.", "..a..", "a..b"} {
		if resp, body := f.post("application/json", []byte(event(id, "SessionCreated"))); resp.StatusCode != 202 {
			t.Fatalf("after the catalogue, %s: %d %s", id, resp.StatusCode, body)
		}
	}
}

func TestAllErrorsAtOnce(t *testing.T) {
	f := newFixture(t, 5*time.Second)
	resp, body := f.post("application/x-ndjson", []byte(event("ok", "SessionCreated")+"\n"+
		`{"sessionId":"bad id","type":"Nope","occurredAt":"x"}`+"\n"+event("ok2", "Nope2")+"\n"))
	if resp.StatusCode != 400 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	var p problem
	_ = json.Unmarshal(body, &p)
	got := map[string]bool{}
	for _, e := range p.Errors {
		got[fmt.Sprintf("%d:%s", e.Index, e.Field)] = true
	}
	for _, want := range []string{"1:sessionId", "1:type", "1:occurredAt", "2:type"} {
		if !got[want] {
			t.Errorf("missing error %s in %v", want, p.Errors)
		}
	}
	if len(p.Errors) != 4 {
		t.Errorf("%d errors, want 4: %v", len(p.Errors), p.Errors)
	}
}

func TestAccepted(t *testing.T) {
	f := newFixture(t, 5*time.Second)
	body := `{"events":[` + event("s-1", "SessionCreated") + `,` +
		`{"eventId":"0190f2a4-5b6c-7d8e-9f00-112233445566","sessionId":"s-1","type":"SessionStarted","occurredAt":"2026-11-29T07:00:00+01:00"}` + `]}`
	resp, raw := f.post("application/json", []byte(body))
	if resp.StatusCode != 202 {
		t.Fatalf("%d %s", resp.StatusCode, raw)
	}
	var ans ingest.Response
	if err := json.Unmarshal(raw, &ans); err != nil {
		t.Fatal(err)
	}
	if len(ans.Accepted) != 2 || ans.Accepted[1].EventID != "0190f2a4-5b6c-7d8e-9f00-112233445566" {
		t.Fatalf("accepted %+v", ans.Accepted)
	}
	a0, a1 := ans.Accepted[0], ans.Accepted[1]
	if a0.Partition != a1.Partition || a1.Offset <= a0.Offset {
		t.Fatalf("one session's events are not ordered on one partition: %+v", ans.Accepted)
	}
	if want := fmt.Sprintf("%d:%d", a1.Partition, a1.Offset); ans.Position != want {
		t.Fatalf("position %q, want %q", ans.Position, want)
	}
	// The records carry the envelope (v1, assigned id, UTC time) and the type header.
	cl, _ := kgo.NewClient(kgo.SeedBrokers(f.cluster.ListenAddrs()...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {a0.Partition: kgo.NewOffset().At(a0.Offset)}}))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for len(recs) < 2 && ctx.Err() == nil {
		recs = append(recs, cl.PollFetches(ctx).Records()...)
	}
	if len(recs) < 2 {
		t.Fatalf("read %d records", len(recs))
	}
	var e0, e1 fsm.Event
	if err := fsm.DecodeRecord(recs[0].Value, &e0); err != nil {
		t.Fatal(err)
	}
	if err := fsm.DecodeRecord(recs[1].Value, &e1); err != nil {
		t.Fatal(err)
	}
	if e0.ID.String() != a0.EventID || e0.ID[6]>>4 != 7 {
		t.Errorf("assigned id %s is not the UUIDv7 answered (%s)", e0.ID, a0.EventID)
	}
	if !e0.OccurredAt.Equal(time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)) {
		t.Errorf("occurredAt %v, want the receive time", e0.OccurredAt)
	}
	if !e1.OccurredAt.Equal(time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)) || e1.OccurredAt.Location() != time.UTC {
		t.Errorf("occurredAt %v, want 06:00 UTC", e1.OccurredAt)
	}
	if string(recs[0].Key) != "s-1" || len(recs[0].Headers) == 0 || recs[0].Headers[0].Key != kafka.HeaderEventType || string(recs[0].Headers[0].Value) != "SessionCreated" {
		t.Errorf("key %q headers %v", recs[0].Key, recs[0].Headers)
	}
}

// TestSecondStageAccepted sends every field added to record version 1 that
// clients may use and checks that the records carry them: the creation
// additions, armedVersion and deadline, expectedVersion, and a custom type
// (whose name is also the record's type header).
func TestSecondStageAccepted(t *testing.T) {
	f := newFixture(t, 5*time.Second)
	body := created(`"goal":"g","labels":{"team":"core","app/tier":"web"},"metadata":{"ticket":"T-1","n":[1]},`+
		`"parentSessionId":"p-1","parentClosePolicy":"abandon","timeouts":{"execution":"2h","approval":"90s"}`) + "\n" +
		`{"sessionId":"s","type":"x.acme.BudgetChecked","expectedVersion":1,"payload":{"spent":3}}` + "\n" +
		`{"sessionId":"s","type":"TimeoutExpired","payload":{"timeout":"approval","armedVersion":2,"deadline":"2026-11-29T06:01:30Z"}}` + "\n"
	resp, raw := f.post("application/x-ndjson", []byte(body))
	if resp.StatusCode != 202 {
		t.Fatalf("%d %s", resp.StatusCode, raw)
	}
	var ans ingest.Response
	if err := json.Unmarshal(raw, &ans); err != nil || len(ans.Accepted) != 3 {
		t.Fatalf("%s (%v)", raw, err)
	}
	a0 := ans.Accepted[0]
	cl, _ := kgo.NewClient(kgo.SeedBrokers(f.cluster.ListenAddrs()...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {a0.Partition: kgo.NewOffset().At(a0.Offset)}}))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for len(recs) < 3 && ctx.Err() == nil {
		recs = append(recs, cl.PollFetches(ctx).Records()...)
	}
	if len(recs) < 3 {
		t.Fatalf("read %d records", len(recs))
	}
	var ev [3]fsm.Event
	for i := range ev {
		if err := fsm.DecodeRecord(recs[i].Value, &ev[i]); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	c := ev[0].Fields
	if len(c.Labels) != 2 || string(c.Metadata) != `{"ticket":"T-1","n":[1]}` || c.ParentSessionID != "p-1" ||
		c.ParentClosePolicy != fsm.ParentCloseAbandon || c.Timeouts[fsm.TimeoutExecution] != 2*time.Hour ||
		c.Timeouts[fsm.TimeoutApproval] != 90*time.Second {
		t.Errorf("creation fields %+v", c)
	}
	if ev[1].Type != fsm.EventCustom || ev[1].Custom != "x.acme.BudgetChecked" || !ev[1].HasExpectedVersion || ev[1].ExpectedVersion != 1 {
		t.Errorf("custom event %+v", ev[1])
	}
	if h := recs[1].Headers; len(h) == 0 || h[0].Key != kafka.HeaderEventType || string(h[0].Value) != "x.acme.BudgetChecked" {
		t.Errorf("custom event headers %v", h)
	}
	if x := ev[2].Fields; !x.HasArmedVersion || x.ArmedVersion != 2 || !x.Deadline.Equal(time.Date(2026, 11, 29, 6, 1, 30, 0, time.UTC)) {
		t.Errorf("timeout fields %+v", x)
	}
}

// TestKafkaDown answers 503 with Retry-After, names the events that were
// not written, and writes nothing silently.
func TestKafkaDown(t *testing.T) {
	f := newFixture(t, time.Second)
	if resp, _ := f.post("application/json", []byte(event("s-1", "SessionCreated"))); resp.StatusCode != 202 {
		t.Fatal("warm-up failed")
	}
	f.cluster.Close()
	start := time.Now()
	resp, body := f.post("application/x-ndjson", []byte(event("s-1", "SessionStarted")+"\n"+event("s-2", "SessionCreated")+"\n"))
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if resp.Header.Get("Retry-After") == "" {
		t.Error("no Retry-After")
	}
	var p struct {
		problem
		Accepted []ingest.Accepted `json:"accepted"`
		Failed   []struct {
			Index   int    `json:"index"`
			EventID string `json:"eventId"`
		} `json:"failed"`
		Pending []struct {
			Index   int    `json:"index"`
			EventID string `json:"eventId"`
		} `json:"pending"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatal(err)
	}
	// Every event is accounted for: written, failed, or pending (unknown).
	seen := map[int]bool{}
	for _, f := range p.Failed {
		seen[f.Index] = f.EventID != ""
	}
	for _, f := range p.Pending {
		seen[f.Index] = f.EventID != ""
	}
	if len(p.Accepted) != 0 || !seen[0] || !seen[1] || len(seen) != 2 {
		t.Fatalf("answer does not say what happened to each event: %s", body)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("answered after %v", d)
	}
}
