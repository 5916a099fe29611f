package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/devstack"
	"github.com/correx/sessions/internal/projector"
	"github.com/correx/sessions/internal/redisconn"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/internal/service"
	"github.com/correx/sessions/internal/testwait"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// chartMetrics is the list of the metric names the Helm chart's alerts and
// dashboard read, with the component that exports each; deploy/helm's
// tests keep it equal to what the templates use.
const chartMetrics = "../../deploy/helm/chart-metrics.txt"

// TestChartMetricsExported runs the three services as their binaries do
// (each with its own telemetry, built from an empty OTEL_* environment:
// Prometheus only), with an archive, sends a session through them, opens
// and closes a watch, and requires every name of chart-metrics.txt on the
// /metrics of the component it names: a renamed instrument, a changed unit
// (a name's suffix) or a series exported only after a rare event would
// otherwise leave an alert that never fires. A histogram's _bucket, _sum
// and _count are the series of its family.
func TestChartMetricsExported(t *testing.T) {
	want := readChartMetrics(t)
	srv := redistest.Start(t)
	archiveDir := t.TempDir()
	st, err := devstack.Start(context.Background(), devstack.Options{
		Redis: redisconn.Config{URL: srv.URL()}, Partitions: 3, Log: quietLog(),
		Projector: func(c *projector.Config) {
			c.FlushInterval = 20 * time.Millisecond
			// An archive, so that its sweep runs and both services watch it.
			c.RetainClosed = time.Hour
			c.ArchiveURL = "file://" + filepath.ToSlash(archiveDir)
			c.ArchiveSweep = 200 * time.Millisecond
		},
		Runtime: func(name string) service.Runtime {
			rt, shutdown, err := service.Telemetry(context.Background(), name, func(string) string { return "" }, quietLog())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(shutdown) // after st.Stop, registered later
			return rt
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Stop() })

	at := time.Now().UTC().Truncate(time.Second)
	for i, typ := range []string{"SessionCreated", "SessionStarted"} {
		body := fmt.Sprintf(`{"sessionId":"chart-1","type":%q,"occurredAt":%q,"payload":{}}`, typ,
			at.Add(time.Duration(i)*time.Second).Format(time.RFC3339))
		resp, err := http.Post(st.IngestURL+"/v1/events", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("POST %s: %d %s", typ, resp.StatusCode, raw)
		}
	}
	testwait.Until(t, "the session is folded", 30*time.Second, func() bool {
		resp, err := http.Get(st.QueryURL + "/v1/sessions/chart-1")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	resp, err := http.Get(st.QueryURL + "/v1/watch")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	urls := map[string]string{"ingest": st.IngestURL, "query": st.QueryURL, "projector": st.ProjectorURL}
	testwait.UntilSeen(t, "every name of "+chartMetrics+" on its component's /metrics", 60*time.Second, func() (bool, string) {
		var missing []string
		for comp, names := range want {
			fams := scrapeFamilies(t, urls[comp]+"/metrics")
			for _, n := range names {
				if !exported(fams, n) {
					missing = append(missing, comp+" "+n)
				}
			}
		}
		slices.Sort(missing)
		return len(missing) == 0, "missing: " + strings.Join(missing, ", ")
	})
}

// readChartMetrics reads chart-metrics.txt: "<component> <name>" lines,
// with # comments and blank lines.
func readChartMetrics(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(chartMetrics)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		comp, name, ok := strings.Cut(line, " ")
		if !ok || (comp != "ingest" && comp != "query" && comp != "projector") {
			t.Fatalf("%s: %q is not \"<ingest|query|projector> <name>\"", chartMetrics, line)
		}
		out[comp] = append(out[comp], name)
	}
	if len(out) == 0 {
		t.Fatalf("%s lists no metric", chartMetrics)
	}
	return out
}

// exported reports whether fams has the series name: a family of that
// name, or the _bucket, _sum or _count series of a histogram family.
func exported(fams map[string]*dto.MetricFamily, name string) bool {
	if f, ok := fams[name]; ok && len(f.GetMetric()) > 0 {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if f, ok := fams[base]; ok && f.GetType() == dto.MetricType_HISTOGRAM && len(f.GetMetric()) > 0 {
				return true
			}
		}
	}
	return false
}

func scrapeFamilies(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("%s does not parse: %v", url, err)
	}
	return fams
}
