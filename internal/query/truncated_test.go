package query_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/correx/sessions/api/apitest"
	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/query"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestHistoryTruncated: once the log's first records are deleted (as
// retention deletes them; DeleteRecords moves the log start offset), the
// history, the replay and the rebuild of a session whose first events are
// gone answer 409 history-truncated naming the earliest offset the log
// holds; those of a session the log still holds whole are unchanged.
func TestHistoryTruncated(t *testing.T) {
	f := newHistoryFixture(t)
	v, err := apitest.New()
	if err != nil {
		t.Fatal(err)
	}
	f.client = v.Client(&http.Client{})
	defer func() {
		if err := v.Err(); err != nil || v.Checked() == 0 {
			t.Errorf("against the OpenAPI description (%d answers checked): %v", v.Checked(), err)
		}
	}()
	parts, err := query.NewKafkaPartitions(kafka.Config{Brokers: f.brokers}, topic)
	if err != nil {
		t.Fatal(err)
	}
	defer parts.Close()
	srv, _ := f.server(query.Options{LogStarts: parts})

	// Before: whole.
	if status, body := f.get(srv, "reader", "acme:h-1", nil); status != http.StatusOK {
		t.Fatalf("history before the deletion: %d %s", status, body)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(f.brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var offs kadm.Offsets
	offs.Add(kadm.Offset{Topic: topic, Partition: 0, At: 1})
	if resp, err := kadm.NewClient(cl).DeleteRecords(ctx, offs); err != nil || resp.Error() != nil {
		t.Fatalf("delete records: %v %v", err, resp.Error())
	}
	// acme:h-1 starts at offset 0, gone; acme:h-2 at 1, kept. The log
	// starts are cached for a second at most: a new handler asks at once.
	srv, _ = f.server(query.Options{LogStarts: parts})
	for _, c := range []struct{ method, path string }{
		{http.MethodGet, "/v1/sessions/acme:h-1/history"},
		{http.MethodGet, "/v1/sessions/acme:h-1/replay"},
		{http.MethodPost, "/v1/sessions/acme:h-1/rebuild"},
	} {
		status, body := f.request(c.method, srv, "admin", c.path)
		if status != http.StatusConflict {
			t.Fatalf("%s %s: %d %s, want 409", c.method, c.path, status, body)
		}
		var p struct {
			Type           string `json:"type"`
			Detail         string `json:"detail"`
			Partition      *int32 `json:"partition"`
			FirstOffset    *int64 `json:"firstOffset"`
			EarliestOffset *int64 `json:"earliestOffset"`
		}
		if err := json.Unmarshal(body, &p); err != nil {
			t.Fatal(err)
		}
		if p.Type != query.TypeHistoryTruncated || p.EarliestOffset == nil || *p.EarliestOffset != 1 ||
			p.FirstOffset == nil || *p.FirstOffset != 0 || p.Partition == nil || *p.Partition != 0 ||
			!strings.Contains(p.Detail, "starts at offset 1") {
			t.Errorf("%s %s: %s", c.method, c.path, body)
		}
	}
	if status, body := f.get(srv, "reader", "acme:h-2", url.Values{"limit": {"5"}}); status != http.StatusOK {
		t.Errorf("history of a session the log holds whole: %d %s", status, body)
	}
	if status, body := f.request(http.MethodGet, srv, "admin", "/v1/sessions/acme:h-2/replay"); status != http.StatusOK ||
		!strings.Contains(string(body), `"matchesStored":true`) {
		t.Errorf("replay of a session the log holds whole: %d %s", status, body)
	}
}
