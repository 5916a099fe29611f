package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/correx/sessions/internal/kafkatest"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/internal/testwait"
	"github.com/correx/sessions/pkg/feed"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

const topic = "pj.events"

var day1 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

// lifecycle builds a session's changes on partition p from offset base:
// each step is "type from to", at minutes after start.
func lifecycle(id string, p int32, base int64, start time.Time, labels map[string]string, steps ...struct {
	typ, from, to string
	min           int
}) []feed.Change {
	var out []feed.Change
	for i, s := range steps {
		out = append(out, feed.Change{SessionID: id, Version: uint64(i + 1), Position: feed.Position{Partition: p, Offset: base + int64(i)},
			EventID: fmt.Sprintf("%s-%d", id, i), Type: s.typ, OccurredAt: start.Add(time.Duration(s.min) * time.Minute),
			Outcome: feed.Applied, From: s.from, To: s.to, Terminal: s.to == "COMPLETED", Labels: labels})
	}
	return out
}

type step = struct {
	typ, from, to string
	min           int
}

// fixture: team=a has one active session (s1) and one completed (s2);
// team=b two active (s3, s4), s4 also env=prod. Approvals: on day 1 waits
// of 2 and 4 minutes (s1, s3), on day 2 one of 1 minute (s4).
func fixture() []feed.Change {
	created, started := step{"SessionCreated", "", "CREATED", 0}, step{"SessionStarted", "CREATED", "ACTIVE", 1}
	s1 := lifecycle("s1", 0, 0, day1, map[string]string{"team": "a"}, created, started,
		step{"ApprovalRequested", "ACTIVE", "AWAITING_APPROVAL", 10}, step{"ApprovalGranted", "AWAITING_APPROVAL", "ACTIVE", 12})
	s2 := lifecycle("s2", 1, 0, day1, map[string]string{"team": "a"}, created, started, step{"SessionCompleted", "ACTIVE", "COMPLETED", 5})
	s3 := lifecycle("s3", 1, 10, day1, map[string]string{"team": "b"}, created, started,
		step{"ApprovalRequested", "ACTIVE", "AWAITING_APPROVAL", 60}, step{"ApprovalGranted", "AWAITING_APPROVAL", "ACTIVE", 64})
	s4 := lifecycle("s4", 0, 10, day1.Add(24*time.Hour), map[string]string{"team": "b", "env": "prod"}, created, started,
		step{"ApprovalRequested", "ACTIVE", "AWAITING_APPROVAL", 2}, step{"ApprovalGranted", "AWAITING_APPROVAL", "ACTIVE", 3})
	// A rejection changes nothing.
	rej := feed.Change{SessionID: "s2", Version: 3, Position: feed.Position{Partition: 1, Offset: 5}, EventID: "s2-r", Type: "SessionResumed",
		OccurredAt: day1, Outcome: feed.Rejected, Reason: "after_terminal", To: "COMPLETED", Terminal: true, Labels: map[string]string{"team": "a"}}
	return append(append(append(append(s1, s2...), rej), s3...), s4...)
}

func wantActive() map[string]map[string]int64 {
	return map[string]map[string]int64{"team": {"a": 1, "b": 2}, "env": {"prod": 1}}
}

func wantApprovals() []ApprovalDay {
	return []ApprovalDay{{Day: "2026-11-29", Approvals: 2, MeanMs: 180000}, {Day: "2026-11-30", Approvals: 1, MeanMs: 60000}}
}

func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode
}

// The program folds the feed, written partly twice by the projector, and
// serves both views.
func TestProjectionServesTheFeed(t *testing.T) {
	k := kafkatest.Start(t, kfake.SeedTopics(2, feed.Topic(topic)))
	prod, err := kgo.NewClient(kgo.SeedBrokers(k.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	red := redistest.Start(t)
	all := fixture()
	for _, cs := range [][]feed.Change{all, all[:6]} { // the second: written again after a projector crash
		for _, c := range cs {
			r := &kgo.Record{Topic: feed.Topic(topic), Partition: c.Position.Partition, Key: []byte(c.SessionID), Value: c.AppendJSON(nil)}
			if err := prod.ProduceSync(context.Background(), r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	cfg, err := parseConfig([]string{"-brokers", k.ListenAddrs()[0], "-topic", topic, "-redis", red.URL()}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg, ln, slog.New(slog.DiscardHandler)) }()
	base := "http://" + ln.Addr().String()

	var got struct{ Days []ApprovalDay }
	if !testwait.Eventually(30*time.Second, func() bool {
		getJSON(t, base+"/approval-times", &got)
		return reflect.DeepEqual(got.Days, wantApprovals())
	}) {
		t.Fatalf("approval times %+v, want %+v", got.Days, wantApprovals())
	}
	// The last change of each partition (s4's and s3's grants) is in the
	// approvals above, so the active counts are final.
	for key, want := range wantActive() {
		var got struct {
			Label  string
			Active map[string]int64
		}
		if code := getJSON(t, base+"/active?label="+key, &got); code != 200 || !reflect.DeepEqual(got.Active, want) {
			t.Errorf("/active?label=%s: %d %v, want %v", key, code, got.Active, want)
		}
	}
	var prob struct {
		Status int
		Errors []struct{ Field string }
	}
	if code := getJSON(t, base+"/active?label=Bad%20Key", &prob); code != 400 || len(prob.Errors) != 1 || prob.Errors[0].Field != "label" {
		t.Errorf("a bad label key: %d %+v, want 400 naming the field", code, prob)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
}

// Apply is idempotent per change: every change applied twice, in order and
// again after the end, gives the same views as once.
func TestApplyIsIdempotentPerChange(t *testing.T) {
	red := redistest.Start(t)
	p := NewProjection(red.Client(t), "t", "idem")
	ctx := context.Background()
	all := fixture()
	for _, c := range all {
		for range 2 {
			if err := p.Apply(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, c := range all {
		if err := p.Apply(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	for key, want := range wantActive() {
		if got, err := p.Active(ctx, key); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("active %s = %v (%v), want %v", key, got, err, want)
		}
	}
	if got, err := p.ApprovalTimes(ctx); err != nil || !reflect.DeepEqual(got, wantApprovals()) {
		t.Errorf("approval times = %+v (%v), want %+v", got, err, wantApprovals())
	}
	rec := httptest.NewRecorder()
	p.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/active", nil))
	if rec.Code != 400 || rec.Header().Get("Content-Type") != "application/problem+json" {
		t.Errorf("no label: %d %s", rec.Code, rec.Header().Get("Content-Type"))
	}
}
