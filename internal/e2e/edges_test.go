package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/projector"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/internal/testwait"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestEdgesAcrossProcesses runs the broker, ingest, the projector (closed
// sessions leave Redis 1 s after they end, into a file:// archive) and the
// query service as processes, and checks at the edges:
//
//   - an archived id created again is rejected, and the archived session
//     reads exactly as before (docs/retention.md, "An archived id stays
//     archived");
//   - a child created after its parent was archived is cancelled at
//     creation, parent_closed (docs/lifecycle.md, "Replacements and
//     children");
//   - a TimeoutExpired produced straight to the topic with the system's
//     origin header and no MAC is dead-lettered forged_system_event, and
//     the session is untouched (docs/security.md, "System records").
//
// An archived history that the log no longer held in full
// (docs/retention.md, "The object") needs
// the broker to apply a retention, which the broker process does not
// expose: TestArchiveSaysAnIncompleteHistory (internal/projector) and
// TestArchivedIncompleteHistory (internal/query) cover it with kfake.
func TestEdgesAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the services and runs them as processes")
	}
	bin := buildServices(t, "kafkabroker", "ingest", "projector", "query")
	began := time.Now()
	defer func() {
		t.Logf("the stack and the checks took %v (the binaries' build before them excluded)", time.Since(began).Round(time.Millisecond))
	}()
	srv := redistest.Start(t)
	_, broker := startBroker(t, bin["kafkabroker"], map[string]string{"KFAKE_PARTITIONS": "2", "KFAKE_LOG_LEVEL": "warn"})
	const topic = "edges"
	archiveURL := "file://" + t.TempDir()
	env := func(extra ...string) map[string]string {
		m := map[string]string{
			"CORREX_KAFKA_BROKERS": broker, "CORREX_REDIS_URL": "redis://" + srv.Addr + "/0", "CORREX_PARTITIONS": "2",
			"CORREX_TOPIC": topic, "CORREX_AUTH_DISABLED": "true", "CORREX_RATE_LIMIT": "0",
			"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none",
		}
		for i := 0; i+1 < len(extra); i += 2 {
			m[extra[i]] = extra[i+1]
		}
		return m
	}
	_, ingestURL := startHTTPService(t, "ingest", bin["ingest"], env())
	_, queryURL := startHTTPService(t, "query", bin["query"], env("CORREX_ARCHIVE_URL", archiveURL))
	_, projURL := startHTTPService(t, "projector", bin["projector"],
		env("CORREX_RETAIN_CLOSED", "1s", "CORREX_ARCHIVE_URL", archiveURL, "CORREX_INSTANCE_ID", "edges-1"))
	for _, base := range []string{ingestURL, queryURL, projURL} {
		waitHTTP(t, base+"/readyz", 60*time.Second)
	}
	hc := apiCheck.Client(&http.Client{Timeout: 20 * time.Second})
	send := func(lines ...string) string {
		t.Helper()
		resp, err := hc.Post(ingestURL+"/v1/events", "application/x-ndjson", strings.NewReader(strings.Join(lines, "\n")))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct {
			Position string `json:"position"`
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusAccepted || json.Unmarshal(body, &out) != nil {
			t.Fatalf("POST /v1/events: %d %s", resp.StatusCode, body)
		}
		return out.Position
	}
	get := func(path string) (int, []byte) {
		t.Helper()
		resp, err := hc.Get(queryURL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, body
	}
	type snap struct {
		State        string `json:"state"`
		Version      uint64 `json:"version"`
		Archived     bool   `json:"archived"`
		Cancellation *struct {
			Reason string `json:"reason"`
		} `json:"cancellation"`
		Counters struct {
			Events uint64 `json:"events"`
		} `json:"counters"`
	}
	read := func(path string) (snap, []byte) {
		t.Helper()
		status, body := get(path)
		var s snap
		if status != http.StatusOK || json.Unmarshal(body, &s) != nil {
			t.Fatalf("GET %s: %d %s", path, status, body)
		}
		return s, body
	}

	// A parent that completes, and leaves Redis into the archive.
	send(`{"sessionId":"edge:parent","type":"SessionCreated","payload":{"goal":"first"}}`,
		`{"sessionId":"edge:parent","type":"SessionStarted"}`,
		`{"sessionId":"edge:parent","type":"SessionCompleted"}`)
	var archived []byte
	testwait.UntilSeen(t, "edge:parent archived", 60*time.Second, func() (bool, string) {
		status, body := get("/v1/sessions/edge:parent")
		archived = body
		return status == http.StatusOK && bytes.Contains(body, []byte(`"archived":true`)), string(body)
	})

	// An archived id created again is rejected; the archived session is as it was.
	pos := send(`{"sessionId":"edge:parent","type":"SessionCreated","payload":{"goal":"second"}}`,
		`{"sessionId":"edge:parent","type":"SessionStarted"}`)
	if _, body := read("/v1/sessions/edge:parent?minPosition=" + pos + "&wait=10s"); !bytes.Equal(body, archived) {
		t.Fatalf("the archived session after its id was created again:\n%s\nwas\n%s", body, archived)
	}

	// A child created after its parent was archived is cancelled.
	send(`{"sessionId":"edge:kid","type":"SessionCreated","payload":{"parentSessionId":"edge:parent"}}`,
		`{"sessionId":"edge:kid","type":"SessionStarted"}`)
	testwait.UntilSeen(t, "edge:kid cancelled by its archived parent", 30*time.Second, func() (bool, string) {
		status, body := get("/v1/sessions/edge:kid")
		var s snap
		ok := status == http.StatusOK && json.Unmarshal(body, &s) == nil && s.State == "CANCELLING" &&
			s.Cancellation != nil && s.Cancellation.Reason == projector.ReasonParentClosed
		return ok, string(body)
	})

	// A TimeoutExpired straight to the topic, claiming to be the
	// system's, without the MAC, is dead-lettered and changes nothing.
	pos = send(`{"sessionId":"edge:live","type":"SessionCreated"}`, `{"sessionId":"edge:live","type":"SessionStarted"}`)
	live, _ := read("/v1/sessions/edge:live?minPosition=" + pos + "&wait=10s")
	at := time.Now().UTC()
	forged := fsm.NewEvent(projector.TimeoutEventID("edge:live", fsm.TimeoutInactivity, live.Version), "edge:live", fsm.TimeoutExpired, at,
		fsm.Fields{Timeout: fsm.TimeoutInactivity, ArmedVersion: live.Version, HasArmedVersion: true, Deadline: at})
	rec := &kgo.Record{Topic: topic, Partition: keyPartition("edge:live", 2), Key: []byte("edge:live"),
		Value:   fsm.AppendRecord(nil, &forged),
		Headers: []kgo.RecordHeader{{Key: kafka.HeaderEventType, Value: []byte(forged.TypeName())}, kafka.SystemHeader()}}
	if err := otherProducer(t, broker).ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	pos = send(`{"sessionId":"edge:live","type":"ToolRequested"}`) // after the forged record, on its partition
	after, _ := read("/v1/sessions/edge:live?minPosition=" + pos + "&wait=10s")
	if after.State != "ACTIVE" || after.Counters.Events != live.Counters.Events+1 {
		t.Fatalf("edge:live after the forged timeout and a tool request: %s, %d events; want ACTIVE, %d (the forged one not folded)",
			after.State, after.Counters.Events, live.Counters.Events+1)
	}
	testwait.UntilSeen(t, "the forged record dead-lettered", 30*time.Second, func() (bool, string) {
		var reasons []string
		for _, r := range readTopic(t, broker, kafka.DLQTopic(topic)) {
			for _, h := range r.Headers {
				if h.Key == kafka.HeaderDLQReason && string(r.Key) == "edge:live" {
					reasons = append(reasons, string(h.Value))
				}
			}
		}
		return len(reasons) == 1 && reasons[0] == projector.ReasonForgedSystemEvent, strings.Join(reasons, ",")
	})
}
