package service_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/correx/sessions/internal/service"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestClientChosenValuesMakeNoSeries sends requests with a distinct Host
// header each (names and ports) and random paths, unauthenticated, to a
// service with the services' telemetry: the series /metrics serves are
// the same after them as after a few requests that took every route, and
// no label holds a Host the clients sent. Routes are labelled by their
// pattern, never by the path.
func TestClientChosenValuesMakeNoSeries(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	log := slog.New(slog.DiscardHandler)
	rt, shutdown, err := service.Telemetry(ctx, "test", func(string) string { return "" }, log)
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown()
	// A stand-in API: every route refuses a request without a token, as
	// the services' do, and other paths are not found.
	unauthorized := func(w http.ResponseWriter, r *http.Request) { http.Error(w, "no token", http.StatusUnauthorized) }
	api := http.NewServeMux()
	api.HandleFunc("POST /v1/events", unauthorized)
	api.HandleFunc("GET /v1/sessions/{id}", unauthorized)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rt.Listener = l
	done := make(chan error, 1)
	go func() { done <- rt.HTTP(ctx, service.Endpoint{API: api}) }()
	defer func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("serve: %v", err)
		}
	}()
	base := "http://" + l.Addr().String()

	send := func(host string, i int) {
		t.Helper()
		for _, r := range []struct{ method, path string }{
			{http.MethodPost, "/v1/events"},
			{http.MethodGet, fmt.Sprintf("/v1/sessions/s-%d", i)},
			{http.MethodGet, fmt.Sprintf("/v1/x%d/y-%d", i, i*7)},
			{http.MethodGet, fmt.Sprintf("/nowhere-%d", i)},
		} {
			req, err := http.NewRequest(r.method, base+r.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			if host != "" {
				req.Host = host
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	// series counts the http_server_* series and returns every label value
	// of every family: a value a client chose can only leak into a label
	// (a sample is a number, and searching the whole text for "1150"
	// matched a duration's digits).
	series := func() (n int, labels []string) {
		t.Helper()
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		for name, f := range fams {
			if strings.HasPrefix(name, "http_server_") {
				n += len(f.GetMetric())
			}
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					labels = append(labels, l.GetName()+"="+l.GetValue())
				}
			}
		}
		return n, labels
	}

	for i := range 3 {
		send("", i)
	}
	before, _ := series()
	if before == 0 {
		t.Fatal("no http_server_* series after the first requests")
	}
	for i := range 300 {
		send(fmt.Sprintf("h%d.example.org:%d", i, 1000+i), 100+i)
	}
	after, labels := series()
	t.Logf("%d http_server_* series before, %d after", before, after)
	if after != before {
		t.Errorf("http_server_* series: %d after requests with distinct Host headers and paths, %d before; want the same", after, before)
	}
	for _, l := range labels {
		_, v, _ := strings.Cut(l, "=")
		for _, leak := range []string{"example.org", "s-150", "x150", "nowhere-150"} {
			if strings.Contains(v, leak) {
				t.Errorf("/metrics has the label %s, which holds %q, which a client chose", l, leak)
			}
		}
		if v == "1150" { // the port of h150.example.org:1150
			t.Errorf("/metrics has the label %s, a port a client chose", l)
		}
	}
}
