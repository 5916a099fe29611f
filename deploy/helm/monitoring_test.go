package helm

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"text/template"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// The chart's monitoring: the PrometheusRule and the Grafana dashboard.
// Their expressions are parsed with Prometheus' own parser, every series
// they read is scoped to the release (its namespace and a job of its
// Services), every runbook_url names a section of docs/alerts.md, and the
// metric names they read are those of chart-metrics.txt, which the main
// module's internal/e2e test finds on the running services' /metrics.

const (
	ruleAPI     = "monitoring.coreos.com/v1/PrometheusRule"
	metricsList = "chart-metrics.txt"
	alertsDoc   = "../../docs/alerts.md"
	runbookURL  = "https://github.com/correx/sessions/blob/main/docs/alerts.md"
)

var update = flag.Bool("update", false, "rewrite "+metricsList+" with the metric names the templates read")

// wantAlerts are the alerts of docs/alerts.md, restated.
var wantAlerts = []string{"CorrexArchiveFailures", "CorrexDeadLetters", "CorrexPartitionLag",
	"CorrexProjectionStalled", "CorrexRestoreGap", "CorrexVerifyMismatch"}

// promql parses as Prometheus does by default: no experimental syntax.
var promql = parser.NewParser(parser.Options{})

// renderMonitoring renders minimal.yaml with the PrometheusRule and the
// dashboard on, on a cluster that serves the PrometheusRule API.
func renderMonitoring(t *testing.T, extra ...string) *manifests {
	t.Helper()
	args := []string{"--set", "prometheusRule.enabled=true", "--set", "grafanaDashboard.enabled=true", "--api-versions", ruleAPI}
	return render(t, "minimal.yaml", append(args, extra...)...)
}

// TestPrometheusRuleNeedsItsAPI: the rule is rendered when it is enabled
// and the cluster serves its API, and in no other case.
func TestPrometheusRuleNeedsItsAPI(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want int
	}{
		{"enabled, API served", []string{"--set", "prometheusRule.enabled=true", "--api-versions", ruleAPI}, 1},
		{"enabled, API not served", []string{"--set", "prometheusRule.enabled=true"}, 0},
		{"enabled, another monitoring API served", []string{"--set", "prometheusRule.enabled=true", "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor"}, 0},
		{"disabled, API served", []string{"--api-versions", ruleAPI}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := len(render(t, "minimal.yaml", tt.args...).prometheusRules); got != tt.want {
				t.Errorf("%d PrometheusRule(s), want %d", got, tt.want)
			}
		})
	}
}

// jobs maps the job of each of the release's Services (the ServiceMonitor
// scrapes a Service's endpoints under its name) to its component.
func jobs(t *testing.T, m *manifests) map[string]string {
	t.Helper()
	out := map[string]string{}
	for name, svc := range m.services {
		out[name] = svc.Labels[componentLabel]
	}
	if len(out) != 3 {
		t.Fatalf("jobs of %d Services, want 3: %v", len(out), out)
	}
	return out
}

// series is a metric a query reads, with the component whose job it
// selects.
type series struct{ component, name string }

func (s series) String() string { return s.component + " " + s.name }

// readSeries parses expr and returns the series it reads; a selector
// without a metric name, or not scoped to the release's namespace and one
// of its jobs, is an error.
func readSeries(expr string, jobs map[string]string) ([]series, error) {
	e, err := promql.ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var out []series
	var problems []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		eq := map[string]string{}
		for _, m := range vs.LabelMatchers {
			if m.Type == labels.MatchEqual {
				eq[m.Name] = m.Value
			}
		}
		comp, ok := jobs[eq["job"]]
		switch {
		case vs.Name == "":
			problems = append(problems, fmt.Sprintf("%s: no metric name", vs))
		case eq["namespace"] != namespace:
			problems = append(problems, fmt.Sprintf("%s: not namespace=%q", vs, namespace))
		case !ok:
			problems = append(problems, fmt.Sprintf("%s: job %q is none of the release's Services", vs, eq["job"]))
		default:
			out = append(out, series{comp, vs.Name})
		}
		return nil
	})
	if len(problems) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("reads no series")
	}
	return out, nil
}

// outputLabels returns the labels every series of an alert's expression
// carries: the grouping of its aggregations, through comparisons with a
// number and `or`. ok is false for any other shape, which the
// annotations' $labels cannot be checked against.
func outputLabels(e parser.Expr) (out []string, ok bool) {
	switch n := e.(type) {
	case *parser.ParenExpr:
		return outputLabels(n.Expr)
	case *parser.AggregateExpr:
		return n.Grouping, !n.Without
	case *parser.BinaryExpr:
		if n.Op == parser.LOR {
			l, lok := outputLabels(n.LHS)
			r, rok := outputLabels(n.RHS)
			return slices.DeleteFunc(l, func(s string) bool { return !slices.Contains(r, s) }), lok && rok
		}
		if _, num := n.RHS.(*parser.NumberLiteral); num && n.Op.IsComparisonOperator() {
			return outputLabels(n.LHS)
		}
	}
	return nil, false
}

var labelRef = regexp.MustCompile(`\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)`)

// checkAnnotation parses an annotation as Prometheus expands it (text/template
// after its own definitions of $labels and $value), with stand-ins of the
// functions it uses, and checks that each $labels.x is a label the
// expression's series carry.
func checkAnnotation(text string, have []string) error {
	const defs = "{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$value := .Value}}"
	funcs := template.FuncMap{"humanize": func(v float64) string { return fmt.Sprint(v) }}
	tmpl, err := template.New("").Funcs(funcs).Option("missingkey=error").Parse(defs + text)
	if err != nil {
		return err
	}
	data := struct {
		Labels, ExternalLabels map[string]string
		Value                  float64
	}{Labels: map[string]string{}, Value: 1}
	for _, l := range have {
		data.Labels[l] = l
	}
	for _, m := range labelRef.FindAllStringSubmatch(text, -1) {
		if !slices.Contains(have, m[1]) {
			return fmt.Errorf("$labels.%s: the expression's series carry only %v", m[1], have)
		}
	}
	return tmpl.Execute(&bytes.Buffer{}, data)
}

// anchors returns the anchors GitHub gives the headings of a Markdown file.
func anchors(t *testing.T, file string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			a := strings.Map(func(r rune) rune {
				switch {
				case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
					return r
				case r >= 'A' && r <= 'Z':
					return r + 'a' - 'A'
				case r == ' ':
					return '-'
				}
				return -1
			}, h)
			out[a] = true
		}
	}
	return out
}

// TestAlertRules checks every alert of the rule: its expression parses and
// reads only the release's series, the labels its annotations name are
// on those series, and its runbook_url is a section of docs/alerts.md.
func TestAlertRules(t *testing.T) {
	t.Parallel()
	m := renderMonitoring(t)
	js := jobs(t, m)
	sections := anchors(t, alertsDoc)
	var got []string
	for name, pr := range m.prometheusRules {
		for _, g := range pr.Spec.Groups {
			for _, r := range g.Rules {
				where := name + " " + r.Alert
				got = append(got, r.Alert)
				if _, err := readSeries(r.Expr, js); err != nil {
					t.Errorf("%s: %v\n%s", where, err, r.Expr)
					continue
				}
				if _, err := model.ParseDuration(r.For); err != nil {
					t.Errorf("%s: for %q: %v", where, r.For, err)
				}
				if r.Labels["severity"] == "" {
					t.Errorf("%s: no severity label", where)
				}
				e, _ := promql.ParseExpr(r.Expr)
				have, ok := outputLabels(e)
				if !ok {
					t.Errorf("%s: cannot tell the labels of its series (an aggregation with by, compared with a number, or several joined by or):\n%s", where, r.Expr)
				}
				for _, a := range []string{"summary", "description"} {
					if r.Annotations[a] == "" {
						t.Errorf("%s: no %s", where, a)
					} else if err := checkAnnotation(r.Annotations[a], have); err != nil {
						t.Errorf("%s: %s: %v", where, a, err)
					}
				}
				anchor := strings.ToLower(r.Alert)
				if want := runbookURL + "#" + anchor; r.Annotations["runbook_url"] != want {
					t.Errorf("%s: runbook_url %q, want %q", where, r.Annotations["runbook_url"], want)
				}
				if !sections[anchor] {
					t.Errorf("%s: %s has no section %q", where, alertsDoc, "## "+r.Alert)
				}
			}
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, wantAlerts) {
		t.Errorf("alerts %v, want %v", got, wantAlerts)
	}
}

// TestAlertValues: the values of each alert reach its rule.
func TestAlertValues(t *testing.T) {
	t.Parallel()
	m := renderMonitoring(t,
		"--set", "prometheusRule.alerts.partitionLag.threshold=500",
		"--set", "prometheusRule.alerts.partitionLag.for=3m",
		"--set", "prometheusRule.alerts.deadLetters.window=2h",
		"--set", "prometheusRule.alerts.deadLetters.severity=critical",
		"--set", "prometheusRule.alerts.restoreGap.enabled=false",
		"--set", "prometheusRule.alertLabels.team=sessions",
		"--set", "prometheusRule.labels.release=kube-prometheus-stack",
		"--set", "prometheusRule.runbookUrl=https://runbooks.example.com/correx",
	)
	if len(m.prometheusRules) != 1 {
		t.Fatalf("%d PrometheusRules, want 1", len(m.prometheusRules))
	}
	for name, pr := range m.prometheusRules {
		if pr.Labels["release"] != "kube-prometheus-stack" {
			t.Errorf("%s: labels %v, want release=kube-prometheus-stack among them", name, pr.Labels)
		}
		seen := map[string]bool{}
		for _, g := range pr.Spec.Groups {
			for _, r := range g.Rules {
				seen[r.Alert] = true
				if r.Labels["team"] != "sessions" {
					t.Errorf("%s: labels %v, want team=sessions among them", r.Alert, r.Labels)
				}
				if !strings.HasPrefix(r.Annotations["runbook_url"], "https://runbooks.example.com/correx#") {
					t.Errorf("%s: runbook_url %q", r.Alert, r.Annotations["runbook_url"])
				}
				switch r.Alert {
				case "CorrexPartitionLag":
					if !strings.Contains(r.Expr, ") > 500") || r.For != "3m" {
						t.Errorf("%s: for %s, expr\n%s\nwant for 3m and the threshold 500", r.Alert, r.For, r.Expr)
					}
				case "CorrexDeadLetters":
					if !strings.Contains(r.Expr, "[2h]") || !strings.Contains(r.Expr, "< 7200") || r.Labels["severity"] != "critical" {
						t.Errorf("%s: severity %s, expr\n%s\nwant severity critical and the window 2h", r.Alert, r.Labels["severity"], r.Expr)
					}
				}
			}
		}
		if seen["CorrexRestoreGap"] || len(seen) != len(wantAlerts)-1 {
			t.Errorf("%s: alerts %v, want all but CorrexRestoreGap", name, slices.Sorted(maps.Keys(seen)))
		}
	}
}

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query string `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []dashboardPanel `json:"panels"`
}

type dashboardPanel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []dashboardPanel `json:"panels"` // of a collapsed row
}

// renderedDashboard returns the dashboard of m's ConfigMap.
func renderedDashboard(t *testing.T, m *manifests, fullname string) dashboard {
	t.Helper()
	cm := m.configMaps[fullname+"-dashboard"]
	if cm == nil {
		t.Fatalf("no ConfigMap %s-dashboard", fullname)
	}
	if cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("ConfigMap %s: labels %v, want grafana_dashboard=1 (the sidecar's) among them", cm.Name, cm.Labels)
	}
	key := namespace + "-" + fullname + ".json"
	if len(cm.Data) != 1 || cm.Data[key] == "" {
		t.Fatalf("ConfigMap %s: keys %v, want %s alone", cm.Name, slices.Sorted(maps.Keys(cm.Data)), key)
	}
	var d dashboard
	if err := json.Unmarshal([]byte(cm.Data[key]), &d); err != nil {
		t.Fatalf("ConfigMap %s: %v", cm.Name, err)
	}
	return d
}

// grafanaVars are Grafana's own variables, as a query sees them.
var grafanaVars = map[string]string{"__rate_interval": "2m", "__interval": "30s", "__range": "6h"}

var grafanaVar = regexp.MustCompile(`\$\{?([a-zA-Z_][a-zA-Z0-9_]*)\}?`)

// panelSeries returns what each panel of d reads, by panel title, with
// Grafana's variables and the dashboard's constants put in.
func panelSeries(t *testing.T, d dashboard, js map[string]string) map[string][]series {
	t.Helper()
	vars := maps.Clone(grafanaVars)
	for _, v := range d.Templating.List {
		if v.Type == "constant" {
			vars[v.Name] = v.Query
		}
	}
	out := map[string][]series{}
	ids := map[int]bool{}
	var walk func([]dashboardPanel)
	walk = func(ps []dashboardPanel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel %q: id %d used twice", p.Title, p.ID)
			}
			ids[p.ID] = true
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			if p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 {
				t.Errorf("panel %q: datasource %q and %d targets, want ${datasource} and some", p.Title, p.Datasource.UID, len(p.Targets))
			}
			for _, tg := range p.Targets {
				expr := grafanaVar.ReplaceAllStringFunc(tg.Expr, func(s string) string {
					if v, ok := vars[grafanaVar.FindStringSubmatch(s)[1]]; ok {
						return v
					}
					t.Errorf("panel %q: %s is no variable of the dashboard or Grafana", p.Title, s)
					return s
				})
				ss, err := readSeries(expr, js)
				if err != nil {
					t.Errorf("panel %q: %v\n%s", p.Title, err, expr)
				}
				out[p.Title] = append(out[p.Title], ss...)
			}
		}
	}
	walk(d.Panels)
	return out
}

// TestDashboard checks the rendered dashboard: it selects the release's
// namespace and Services, each release has its own uid, and every panel's
// queries parse and read only the release's series.
func TestDashboard(t *testing.T) {
	t.Parallel()
	m := renderMonitoring(t)
	js := jobs(t, m)
	d := renderedDashboard(t, m, "correx-correx-sessions")
	want := map[string]string{"namespace": namespace}
	for job, comp := range js {
		want[comp+"_job"] = job
	}
	got := map[string]string{}
	for _, v := range d.Templating.List {
		if v.Type == "constant" {
			got[v.Name] = v.Query
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("the dashboard's constants %v, want %v", got, want)
	}
	if len(panelSeries(t, d, js)) < 10 {
		t.Errorf("fewer than 10 panels with queries")
	}
	other := render(t, "minimal.yaml", "--set", "grafanaDashboard.enabled=true", "--set", "fullnameOverride=other")
	o := renderedDashboard(t, other, "other")
	if o.UID == d.UID || o.Title == d.Title || len(d.UID) > 40 {
		t.Errorf("uids %q and %q, titles %q and %q: want each release its own, uids of at most 40 characters", d.UID, o.UID, d.Title, o.Title)
	}
}

// TestChartMetricsList keeps chart-metrics.txt equal to the metric names the
// rule and the dashboard read, each with the component whose job it
// selects (go test -run TestChartMetricsList -update rewrites it). The
// main module's internal/e2e test requires each on that component's
// /metrics.
func TestChartMetricsList(t *testing.T) {
	t.Parallel()
	m := renderMonitoring(t)
	js := jobs(t, m)
	used := map[string]bool{}
	for _, pr := range m.prometheusRules {
		for _, g := range pr.Spec.Groups {
			for _, r := range g.Rules {
				ss, err := readSeries(r.Expr, js)
				if err != nil {
					t.Fatalf("%s: %v", r.Alert, err)
				}
				for _, s := range ss {
					used[s.String()] = true
				}
			}
		}
	}
	for _, ss := range panelSeries(t, renderedDashboard(t, m, "correx-correx-sessions"), js) {
		for _, s := range ss {
			used[s.String()] = true
		}
	}
	want := slices.Sorted(maps.Keys(used))
	if *update {
		header := "# The metrics the Helm chart's alerts and dashboard read, each with the\n" +
			"# component whose /metrics exports it. Written by `go test -run\n" +
			"# TestChartMetricsList -update` in deploy/helm, which fails when it differs\n" +
			"# from what the templates read; internal/e2e's TestChartMetricsExported\n" +
			"# finds each on the running services.\n"
		if err := os.WriteFile(metricsList, []byte(header+strings.Join(want, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(metricsList)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			got = append(got, line)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s is not what the templates read (go test -run TestChartMetricsList -update rewrites it)\n got: %q\nwant: %q", metricsList, got, want)
	}
}
