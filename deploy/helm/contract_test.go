package helm

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// The environment contract of the three services. These names are fixed
// (README, Configuration); the rendered manifests must use exactly
// these CORREX_* names and no others.
var (
	// commonEnv is what every component gets.
	commonEnv = []string{
		"CORREX_KAFKA_BROKERS", "CORREX_TOPIC", "CORREX_PARTITIONS",
		"CORREX_REDIS_URL", "CORREX_REDIS_PREFIX", "CORREX_REDIS_CLUSTER", "CORREX_HTTP_ADDR",
	}
	// componentEnv is what one component gets on top of commonEnv.
	componentEnv = map[string][]string{
		"ingest": {"CORREX_PRODUCE_TIMEOUT"},
		"query":  {"CORREX_INGEST_URL"},
		"projector": {"CORREX_GROUP", "CORREX_INSTANCE_ID", "CORREX_FLUSH_INTERVAL", "CORREX_CACHE_SIZE", "CORREX_CACHE_BYTES", "CORREX_CHANGE_FEED",
			"CORREX_REDIS_WAIT_REPLICAS", "CORREX_REDIS_WAIT_TIMEOUT", "CORREX_RETAIN_CLOSED", "CORREX_VERIFY_RATE", "CORREX_VERIFY_REPAIR"},
	}
	// topicEnv is what the two services that create the events topic
	// (ingest, projector) get: its retention.
	topicEnv = []string{"CORREX_EVENTS_RETENTION"}
	// timeoutEnv are the session timeout defaults, which the projector (to
	// arm deadlines) and the query service (to show effective timeouts)
	// both take.
	timeoutEnv = []string{"CORREX_TIMEOUT_EXECUTION", "CORREX_TIMEOUT_INACTIVITY", "CORREX_TIMEOUT_APPROVAL",
		"CORREX_TIMEOUT_RECOVERY", "CORREX_TIMEOUT_CANCELLATION"}
	// apiEnv is what the two API services (ingest, query) get on top of
	// their componentEnv: the rate limit, always set.
	apiEnv = []string{"CORREX_RATE_LIMIT", "CORREX_RATE_BURST"}
	// securityEnv is optional: present only when the values turn a feature on.
	securityEnv = []string{
		"CORREX_AUTH_TOKENS_FILE", "CORREX_AUTH_DISABLED",
		"CORREX_TLS_CERT_FILE", "CORREX_TLS_KEY_FILE", "CORREX_TLS_CLIENT_CA_FILE",
		"CORREX_KAFKA_TLS", "CORREX_KAFKA_TLS_CA_FILE", "CORREX_KAFKA_TLS_CERT_FILE", "CORREX_KAFKA_TLS_KEY_FILE",
		"CORREX_KAFKA_SASL_MECHANISM", "CORREX_KAFKA_SASL_USERNAME", "CORREX_KAFKA_SASL_PASSWORD_FILE",
		"CORREX_REDIS_TLS_CA_FILE", "CORREX_REDIS_PASSWORD_FILE",
		"CORREX_ARCHIVE_URL",     // not a secret, but optional too: set with archiveUrl
		"CORREX_ARCHIVE_TIMEOUT", // likewise, with archiveUrl
	}
	// otelEnv are the standard OpenTelemetry variables the chart may set.
	otelEnv = []string{
		"OTEL_SERVICE_NAME", "OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER",
		"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL",
		"OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG", "OTEL_RESOURCE_ATTRIBUTES",
	}
	// authOnly are the security variables that only ingest and query take.
	authOnly = []string{"CORREX_AUTH_TOKENS_FILE", "CORREX_AUTH_DISABLED", "CORREX_RATE_LIMIT", "CORREX_RATE_BURST"}
)

// documentedEnv is every CORREX_* name the services know.
func documentedEnv() map[string]bool {
	all := map[string]bool{}
	for _, n := range commonEnv {
		all[n] = true
	}
	for _, ns := range componentEnv {
		for _, n := range ns {
			all[n] = true
		}
	}
	for _, n := range securityEnv {
		all[n] = true
	}
	for _, n := range apiEnv {
		all[n] = true
	}
	for _, n := range timeoutEnv {
		all[n] = true
	}
	for _, n := range topicEnv {
		all[n] = true
	}
	return all
}

func TestDocumentedEnvIsConsistent(t *testing.T) {
	// A name listed twice would make the exact-set checks below weaker than
	// they read; so would a security name that is also a base name.
	seen := map[string]int{}
	for _, list := range [][]string{commonEnv, componentEnv["ingest"], componentEnv["query"], componentEnv["projector"], securityEnv, apiEnv, timeoutEnv, topicEnv} {
		for _, n := range list {
			seen[n]++
			if !strings.HasPrefix(n, "CORREX_") {
				t.Errorf("%s: not a CORREX_ name", n)
			}
		}
	}
	for n, count := range seen {
		if count != 1 {
			t.Errorf("%s is listed %d times", n, count)
		}
	}
	if got, want := len(documentedEnv()), 7+1+1+11+15+2+5+1+1; got != want {
		t.Errorf("documented CORREX_ names: got %d, want %d", got, want)
	}
}

// scenario is one rendering of the chart and what it must produce.
type scenario struct {
	name       string
	valuesFile string // "" renders the chart's defaults
	// security lists, per component, the optional CORREX_* variables it must get.
	security map[string][]string
	// kinds is the number of documents of each kind.
	kinds map[string]int
	// extraEnv are the names outside CORREX_*/OTEL_* each container may have.
	extraEnv          map[string][]string
	projectorReplicas int32
	partitions        int64
	scheme            corev1.URIScheme
	imagePrefix       string
	autoscaling       bool
	// secrets are the names of the Secrets the pods must reference, all components together.
	secrets []string
	// monitorCA is the Secret with the CA Prometheus verifies HTTPS scrapes with.
	monitorCA string
}

func perComponent(all []string, apiOnly ...string) map[string][]string {
	return map[string][]string{
		"ingest":    append(slices.Clone(all), apiOnly...),
		"query":     append(slices.Clone(all), apiOnly...),
		"projector": slices.Clone(all),
	}
}

// withArchive adds CORREX_ARCHIVE_URL and CORREX_ARCHIVE_TIMEOUT to the
// projector and the query service, which archiveUrl gives them.
func withArchive(m map[string][]string) map[string][]string {
	m["projector"] = append(m["projector"], "CORREX_ARCHIVE_URL", "CORREX_ARCHIVE_TIMEOUT")
	m["query"] = append(m["query"], "CORREX_ARCHIVE_URL", "CORREX_ARCHIVE_TIMEOUT")
	return m
}

var baseKinds = map[string]int{
	"ConfigMap": 3, "Service": 3, "ServiceAccount": 1,
	"Deployment": 2, "StatefulSet": 1, "PodDisruptionBudget": 3,
}

func withKinds(extra map[string]int) map[string]int {
	k := map[string]int{}
	for n, c := range baseKinds {
		k[n] = c
	}
	for n, c := range extra {
		k[n] = c
	}
	return k
}

var scenarios = []scenario{
	{
		name:              "defaults",
		security:          perComponent(nil, "CORREX_AUTH_DISABLED"),
		kinds:             baseKinds,
		extraEnv:          perComponent([]string{"K8S_POD_NAME"}),
		projectorReplicas: 3,
		partitions:        12,
		scheme:            corev1.URISchemeHTTP,
		imagePrefix:       "",
	},
	{
		name:              "minimal",
		valuesFile:        "minimal.yaml",
		security:          perComponent(nil, "CORREX_AUTH_DISABLED"),
		kinds:             baseKinds,
		extraEnv:          perComponent([]string{"K8S_POD_NAME"}),
		projectorReplicas: 3,
		partitions:        12,
		scheme:            corev1.URISchemeHTTP,
	},
	{
		name:       "production",
		valuesFile: "production.yaml",
		security: withArchive(perComponent([]string{
			"CORREX_KAFKA_TLS", "CORREX_KAFKA_TLS_CA_FILE",
			"CORREX_KAFKA_SASL_MECHANISM", "CORREX_KAFKA_SASL_USERNAME", "CORREX_KAFKA_SASL_PASSWORD_FILE",
			"CORREX_REDIS_TLS_CA_FILE", "CORREX_REDIS_PASSWORD_FILE",
		}, "CORREX_AUTH_TOKENS_FILE")),
		// The dashboard's ConfigMap; no PrometheusRule: `helm template`
		// serves no monitoring.coreos.com API unless told.
		kinds: withKinds(map[string]int{"HorizontalPodAutoscaler": 2, "NetworkPolicy": 3, "ServiceMonitor": 1, "ConfigMap": 4}),
		extraEnv: map[string][]string{
			"ingest":    {"K8S_POD_NAME"},
			"query":     {"K8S_POD_NAME"},
			"projector": {"K8S_POD_NAME", "GOMEMLIMIT"},
		},
		projectorReplicas: 6,
		partitions:        12,
		scheme:            corev1.URISchemeHTTP,
		imagePrefix:       "registry.example.com/correx/",
		autoscaling:       true,
		secrets:           []string{"correx-auth-tokens", "correx-kafka-ca", "correx-kafka-sasl", "correx-redis", "correx-redis-ca"},
	},
	{
		name:       "https-mtls",
		valuesFile: "https-mtls.yaml",
		security: perComponent([]string{
			"CORREX_TLS_CERT_FILE", "CORREX_TLS_KEY_FILE", "CORREX_TLS_CLIENT_CA_FILE",
			"CORREX_KAFKA_TLS", "CORREX_KAFKA_TLS_CA_FILE", "CORREX_KAFKA_TLS_CERT_FILE", "CORREX_KAFKA_TLS_KEY_FILE",
			"CORREX_KAFKA_SASL_MECHANISM", "CORREX_KAFKA_SASL_USERNAME", "CORREX_KAFKA_SASL_PASSWORD_FILE",
		}, "CORREX_AUTH_TOKENS_FILE"),
		kinds:             withKinds(map[string]int{"ServiceMonitor": 1}),
		extraEnv:          perComponent([]string{"K8S_POD_NAME"}),
		projectorReplicas: 24,
		partitions:        24,
		scheme:            corev1.URISchemeHTTPS,
		secrets: []string{"correx-auth-tokens", "correx-clients-ca", "correx-http-tls", "correx-kafka-ca",
			"correx-kafka-client", "correx-kafka-plain", "correx-redis-url"},
		monitorCA: "correx-http-ca",
	},
}

// TestRenderedManifests renders the chart with its defaults and with each good
// values file, decodes every document strictly into its Kubernetes type, and
// checks the whole contract on the result.
func TestRenderedManifests(t *testing.T) {
	appVersion := chartAppVersion(t)
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			m := render(t, sc.valuesFile)
			t.Run("kinds", func(t *testing.T) { checkKinds(t, sc, m) })
			t.Run("containers", func(t *testing.T) { checkContainers(t, sc, m, appVersion) })
			t.Run("env", func(t *testing.T) { checkEnv(t, sc, m) })
			t.Run("secrets", func(t *testing.T) { checkSecrets(t, sc, m) })
			t.Run("projector", func(t *testing.T) { checkProjector(t, sc, m) })
			t.Run("apis", func(t *testing.T) { checkAPIs(t, sc, m) })
			t.Run("selectors", func(t *testing.T) { checkSelectors(t, sc, m) })
			t.Run("serviceaccount", func(t *testing.T) { checkServiceAccount(t, m) })
			t.Run("checksum", func(t *testing.T) { checkChecksums(t, m) })
		})
	}
}

func chartAppVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(path.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(b, &chart); err != nil {
		t.Fatal(err)
	}
	if chart.AppVersion == "" {
		t.Fatal("Chart.yaml has no appVersion")
	}
	return chart.AppVersion
}

func checkKinds(t *testing.T, sc scenario, m *manifests) {
	for kind, want := range sc.kinds {
		if got := m.kinds[kind]; got != want {
			t.Errorf("%s documents: got %d, want %d", kind, got, want)
		}
	}
	for kind, got := range m.kinds {
		if _, ok := sc.kinds[kind]; !ok {
			t.Errorf("unexpected %d %s document(s)", got, kind)
		}
	}
	ws := m.workloads()
	for _, c := range []string{"ingest", "query", "projector"} {
		if _, ok := ws[c]; !ok {
			t.Errorf("no workload for component %s", c)
		}
	}
	if w := ws["projector"]; w.kind != "StatefulSet" {
		t.Errorf("projector is a %s, want a StatefulSet (stable pod names for static membership)", w.kind)
	}
	for _, o := range m.objects {
		if o.meta.Namespace != namespace {
			t.Errorf("%s %s: namespace %q, want %q", o.kind, o.meta.Name, o.meta.Namespace, namespace)
		}
	}
}

// allContainers returns init and regular containers: the rules hold for every one.
func allContainers(spec *corev1.PodSpec) []corev1.Container {
	return append(slices.Clone(spec.InitContainers), spec.Containers...)
}

func checkContainers(t *testing.T, sc scenario, m *manifests, appVersion string) {
	for comp, w := range m.workloads() {
		spec := &w.template.Spec
		if psc := spec.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
			t.Errorf("%s: pod securityContext.runAsNonRoot is not true", comp)
		}
		if len(allContainers(spec)) == 0 {
			t.Errorf("%s: no containers", comp)
		}
		for _, c := range allContainers(spec) {
			where := comp + "/" + c.Name
			checkProbe(t, where+" liveness", c, c.LivenessProbe, "/healthz", sc.scheme)
			checkProbe(t, where+" readiness", c, c.ReadinessProbe, "/readyz", sc.scheme)
			checkResources(t, where, c.Resources)
			checkSecurityContext(t, where, c.SecurityContext)
			checkTmp(t, where, c, spec)
			wantImage := fmt.Sprintf("%scorrex/%s:%s", sc.imagePrefix, comp, appVersion)
			if c.Image != wantImage {
				t.Errorf("%s: image %q, want %q", where, c.Image, wantImage)
			}
			if c.ImagePullPolicy != corev1.PullIfNotPresent {
				t.Errorf("%s: imagePullPolicy %q, want IfNotPresent", where, c.ImagePullPolicy)
			}
		}
	}
}

func checkProbe(t *testing.T, where string, c corev1.Container, p *corev1.Probe, wantPath string, scheme corev1.URIScheme) {
	t.Helper()
	if p == nil || p.HTTPGet == nil {
		t.Errorf("%s: no HTTP probe", where)
		return
	}
	if p.HTTPGet.Path != wantPath {
		t.Errorf("%s: path %q, want %q", where, p.HTTPGet.Path, wantPath)
	}
	if p.HTTPGet.Scheme != scheme {
		t.Errorf("%s: scheme %q, want %q", where, p.HTTPGet.Scheme, scheme)
	}
	if !slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool {
		return cp.Name == p.HTTPGet.Port.String() || strconv.Itoa(int(cp.ContainerPort)) == p.HTTPGet.Port.String()
	}) {
		t.Errorf("%s: port %q is not a port of the container", where, p.HTTPGet.Port.String())
	}
}

func checkResources(t *testing.T, where string, r corev1.ResourceRequirements) {
	t.Helper()
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, hasReq := r.Requests[name]
		lim, hasLim := r.Limits[name]
		if !hasReq || req.IsZero() {
			t.Errorf("%s: no %s request", where, name)
		}
		if !hasLim || lim.IsZero() {
			t.Errorf("%s: no %s limit", where, name)
		}
		if hasReq && hasLim && lim.Cmp(req) < 0 {
			t.Errorf("%s: %s limit %s is below the request %s", where, name, lim.String(), req.String())
		}
	}
}

func checkSecurityContext(t *testing.T, where string, s *corev1.SecurityContext) {
	t.Helper()
	if s == nil {
		t.Errorf("%s: no securityContext", where)
		return
	}
	isTrue := func(b *bool) bool { return b != nil && *b }
	isFalse := func(b *bool) bool { return b != nil && !*b }
	is := func(p *int64, v int64) bool { return p != nil && *p == v }
	if !isTrue(s.RunAsNonRoot) {
		t.Errorf("%s: runAsNonRoot is not true", where)
	}
	if !is(s.RunAsUser, 65532) || !is(s.RunAsGroup, 65532) {
		t.Errorf("%s: runAsUser/runAsGroup are not 65532", where)
	}
	if !isTrue(s.ReadOnlyRootFilesystem) {
		t.Errorf("%s: readOnlyRootFilesystem is not true", where)
	}
	if !isFalse(s.AllowPrivilegeEscalation) {
		t.Errorf("%s: allowPrivilegeEscalation is not false", where)
	}
	if isTrue(s.Privileged) {
		t.Errorf("%s: privileged", where)
	}
	if s.Capabilities == nil || !slices.Equal(s.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(s.Capabilities.Add) != 0 {
		t.Errorf("%s: capabilities %+v, want drop [ALL] and no add", where, s.Capabilities)
	}
	if s.SeccompProfile == nil || s.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: seccompProfile is not RuntimeDefault", where)
	}
}

func checkTmp(t *testing.T, where string, c corev1.Container, spec *corev1.PodSpec) {
	t.Helper()
	for _, vm := range c.VolumeMounts {
		if vm.MountPath != "/tmp" {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name == vm.Name && v.EmptyDir != nil && !vm.ReadOnly {
				return
			}
		}
	}
	t.Errorf("%s: no writable emptyDir mounted at /tmp", where)
}

func checkEnv(t *testing.T, sc scenario, m *manifests) {
	documented := documentedEnv()
	otel := map[string]bool{}
	for _, n := range otelEnv {
		otel[n] = true
	}
	serviceNames := map[string]string{}
	for comp, w := range m.workloads() {
		for _, c := range allContainers(&w.template.Spec) {
			where := comp + "/" + c.Name
			env, problems := m.containerEnv(c)
			for _, p := range problems {
				t.Errorf("%s: %s", where, p)
			}
			want := slices.Concat(commonEnv, componentEnv[comp], sc.security[comp])
			if comp != "projector" {
				want = append(want, apiEnv...)
			}
			if comp != "ingest" {
				want = append(want, timeoutEnv...)
			}
			if comp != "query" {
				want = append(want, topicEnv...)
			}
			sort.Strings(want)
			var got []string
			for name := range env {
				switch {
				case strings.HasPrefix(name, "CORREX_"):
					got = append(got, name)
					if !documented[name] {
						t.Errorf("%s: %s is not a documented CORREX_ variable", where, name)
					}
				case strings.HasPrefix(name, "OTEL_"):
					if !otel[name] {
						t.Errorf("%s: %s is not one of the chart's OTEL_ variables", where, name)
					}
				default:
					if !slices.Contains(sc.extraEnv[comp], name) {
						t.Errorf("%s: unexpected variable %s", where, name)
					}
				}
			}
			sort.Strings(got)
			if !slices.Equal(got, want) {
				t.Errorf("%s: CORREX_ variables\n got: %v\nwant: %v", where, got, want)
			}
			for _, n := range authOnly {
				if comp == "projector" && slices.Contains(got, n) {
					t.Errorf("%s: %s is for ingest and query only", where, n)
				}
			}
			if len(c.Ports) != 1 {
				t.Errorf("%s: %d ports, want 1 (API, health and metrics share it)", where, len(c.Ports))
			} else if got, want := env["CORREX_HTTP_ADDR"].value, fmt.Sprintf(":%d", c.Ports[0].ContainerPort); got != want {
				t.Errorf("%s: CORREX_HTTP_ADDR %q, want %q (the container port)", where, got, want)
			}
			if got := env["CORREX_PARTITIONS"].value; got != strconv.FormatInt(sc.partitions, 10) {
				t.Errorf("%s: CORREX_PARTITIONS %q, want %d", where, got, sc.partitions)
			}
			svc := env["OTEL_SERVICE_NAME"].value
			if svc == "" {
				t.Errorf("%s: OTEL_SERVICE_NAME is not set", where)
			} else if other, dup := serviceNames[svc]; dup {
				t.Errorf("%s: OTEL_SERVICE_NAME %q is also %s's", where, svc, other)
			}
			serviceNames[svc] = comp
			if comp == "projector" {
				id := env["CORREX_INSTANCE_ID"]
				if id.from == nil || id.from.FieldRef == nil || id.from.FieldRef.FieldPath != "metadata.name" {
					t.Errorf("%s: CORREX_INSTANCE_ID must come from fieldRef metadata.name (the stable pod name), got %+v", where, id)
				}
			}
		}
	}
}

// secretish names a variable whose value would be a credential.
var secretish = regexp.MustCompile(`(?i)(PASSWORD|PASSWD|TOKEN|SECRET|CREDENTIAL|PRIVATE|_KEY$)`)

func checkSecrets(t *testing.T, sc scenario, m *manifests) {
	// decodeManifests already refuses any kind it does not expect, Secret
	// included: the chart only refers to Secrets that exist.
	if n := m.kinds["Secret"]; n != 0 {
		t.Errorf("the chart renders %d Secret(s)", n)
	}
	for name, cm := range m.configMaps {
		for k, v := range cm.Data {
			checkLiteral(t, "ConfigMap "+name+" "+k, k, v)
		}
	}
	referenced := map[string]bool{}
	for comp, w := range m.workloads() {
		spec := &w.template.Spec
		mounts := secretMounts(spec, referenced)
		for _, c := range allContainers(spec) {
			where := comp + "/" + c.Name
			env, _ := m.containerEnv(c)
			used := map[string]bool{}
			for name, src := range env {
				if src.from != nil {
					switch {
					case src.from.FieldRef != nil:
					case src.from.SecretKeyRef != nil:
						if src.from.SecretKeyRef.Name == "" || src.from.SecretKeyRef.Key == "" {
							t.Errorf("%s: %s: secretKeyRef without name or key", where, name)
						}
						referenced[src.from.SecretKeyRef.Name] = true
					default:
						t.Errorf("%s: %s: valueFrom other than fieldRef or secretKeyRef: %+v", where, name, src.from)
					}
					continue
				}
				checkLiteral(t, where+" "+name, name, src.value)
				if strings.HasSuffix(name, "_FILE") {
					if !mounts.provides(c, src.value) {
						t.Errorf("%s: %s=%s is not a file mounted from a Secret", where, name, src.value)
					}
					used[src.value] = true
				}
				if name == "CORREX_REDIS_URL" && !strings.HasPrefix(src.value, "redis://") && !strings.HasPrefix(src.value, "rediss://") {
					t.Errorf("%s: CORREX_REDIS_URL %q is not a redis:// or rediss:// URL", where, src.value)
				}
			}
			// Least privilege: a container mounts only the secret files it is told about.
			for _, file := range mounts.files(c) {
				if !used[file] {
					t.Errorf("%s: secret file %s is mounted but no *_FILE variable names it", where, file)
				}
			}
		}
	}
	if sc.secrets != nil {
		var got []string
		for n := range referenced {
			got = append(got, n)
		}
		sort.Strings(got)
		if !slices.Equal(got, sc.secrets) {
			t.Errorf("referenced Secrets\n got: %v\nwant: %v", got, sc.secrets)
		}
	} else if len(referenced) != 0 {
		t.Errorf("Secrets referenced without any security value set: %v", referenced)
	}
}

// checkLiteral fails on a literal value that is, or carries, a credential.
func checkLiteral(t *testing.T, where, name, value string) {
	t.Helper()
	for _, p := range literalProblems(name, value) {
		t.Errorf("%s: %s", where, p)
	}
}

// literalProblems says why a literal (ConfigMap entry or env value) named name
// must not hold value: a credential-like name, PEM material, or a URL with a
// password. Paths in *_FILE variables are fine: they name mounted files.
func literalProblems(name, value string) []string {
	var out []string
	if secretish.MatchString(name) && !strings.HasSuffix(name, "_FILE") {
		out = append(out, "a credential-like variable with a literal value; it must come from a Secret")
	}
	if strings.Contains(value, "-----BEGIN") {
		out = append(out, "PEM material in a literal value")
	}
	for _, field := range strings.Split(value, ",") {
		if u, err := url.Parse(strings.TrimSpace(field)); err == nil && u.User != nil {
			if _, has := u.User.Password(); has {
				out = append(out, "URL with a password in a literal value")
			}
		}
	}
	return out
}

// TestLiteralProblems shows that the secret checks above can fail.
func TestLiteralProblems(t *testing.T) {
	tests := []struct {
		name, value string
		bad         bool
	}{
		{"CORREX_REDIS_URL", "redis://redis:6379/0", false},
		{"CORREX_REDIS_URL", "rediss://:hunter2@redis:6380/0", true},
		{"CORREX_REDIS_URL", "redis://correx:hunter2@redis:6379", true},
		{"CORREX_KAFKA_BROKERS", "b-1:9096,b-2:9096", false},
		{"CORREX_KAFKA_SASL_PASSWORD", "hunter2", true},
		{"CORREX_KAFKA_SASL_PASSWORD_FILE", "/etc/correx/secrets/kafka/sasl-password", false},
		{"CORREX_AUTH_TOKENS", "abc", true},
		{"CORREX_TLS_KEY", "/x", true},
		{"CORREX_TLS_CERT_FILE", "-----BEGIN CERTIFICATE-----", true},
		{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317", false},
	}
	for _, tt := range tests {
		got := literalProblems(tt.name, tt.value)
		if bad := len(got) > 0; bad != tt.bad {
			t.Errorf("%s=%s: problems %q, want bad=%v", tt.name, tt.value, got, tt.bad)
		}
	}
}

// secretFiles maps each secret-backed volume mount to the files it provides.
type secretFiles map[string]secretVolume

type secretVolume struct {
	// paths are the item paths of the volume; nil means every key of a Secret.
	paths []string
}

// secretMounts finds the volumes built only from Secrets, and records the
// Secrets they read in referenced.
func secretMounts(spec *corev1.PodSpec, referenced map[string]bool) secretFiles {
	sf := secretFiles{}
	for _, v := range spec.Volumes {
		switch {
		case v.Secret != nil:
			referenced[v.Secret.SecretName] = true
			var paths []string
			for _, it := range v.Secret.Items {
				paths = append(paths, it.Path)
			}
			sf[v.Name] = secretVolume{paths: paths}
		case v.Projected != nil:
			var paths []string
			onlySecrets := true
			for _, src := range v.Projected.Sources {
				if src.Secret == nil || len(src.Secret.Items) == 0 {
					onlySecrets = false
					continue
				}
				referenced[src.Secret.Name] = true
				for _, it := range src.Secret.Items {
					paths = append(paths, it.Path)
				}
			}
			if onlySecrets {
				sf[v.Name] = secretVolume{paths: paths}
			}
		}
	}
	return sf
}

// provides reports whether file is a file of a secret-backed, read-only mount of c.
func (sf secretFiles) provides(c corev1.Container, file string) bool {
	for _, vm := range c.VolumeMounts {
		sv, ok := sf[vm.Name]
		if !ok || !vm.ReadOnly || vm.SubPath != "" {
			continue
		}
		rel, ok := strings.CutPrefix(file, strings.TrimSuffix(vm.MountPath, "/")+"/")
		if !ok {
			continue
		}
		if sv.paths == nil || slices.Contains(sv.paths, rel) {
			return true
		}
	}
	return false
}

// files lists the absolute paths of every secret file mounted in c.
func (sf secretFiles) files(c corev1.Container) []string {
	var out []string
	for _, vm := range c.VolumeMounts {
		for _, p := range sf[vm.Name].paths {
			out = append(out, path.Join(vm.MountPath, p))
		}
	}
	return out
}

func checkProjector(t *testing.T, sc scenario, m *manifests) {
	w, ok := m.workloads()["projector"]
	if !ok {
		t.Fatal("no projector workload")
	}
	sts := m.statefulSets[w.name]
	if sts == nil {
		t.Fatalf("projector %s is not a StatefulSet", w.name)
	}
	if sts.Spec.PodManagementPolicy != "Parallel" {
		t.Errorf("podManagementPolicy %q, want Parallel", sts.Spec.PodManagementPolicy)
	}
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != sc.projectorReplicas {
		t.Errorf("replicas %v, want %d", sts.Spec.Replicas, sc.projectorReplicas)
	}
	env, _ := m.containerEnv(sts.Spec.Template.Spec.Containers[0])
	partitions, err := strconv.ParseInt(env["CORREX_PARTITIONS"].value, 10, 32)
	if err != nil {
		t.Fatalf("CORREX_PARTITIONS: %v", err)
	}
	if sts.Spec.Replicas != nil && int64(*sts.Spec.Replicas) > partitions {
		t.Errorf("replicas %d exceed the %d partitions", *sts.Spec.Replicas, partitions)
	}
	svc := m.services[sts.Spec.ServiceName]
	if svc == nil {
		t.Errorf("serviceName %q is not a rendered Service", sts.Spec.ServiceName)
	} else {
		if svc.Spec.ClusterIP != corev1.ClusterIPNone {
			t.Errorf("Service %s is not headless (clusterIP %q)", svc.Name, svc.Spec.ClusterIP)
		}
		if !selects(svc.Spec.Selector, sts.Spec.Template.Labels) {
			t.Errorf("headless Service %s does not select the projector pods", svc.Name)
		}
	}
	if g := sts.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || *g < 60 {
		t.Errorf("terminationGracePeriodSeconds %v, want at least 60 to flush and checkpoint", g)
	}
	covered := false
	for _, p := range m.pdbs {
		covered = covered || labelSelectorMatches(p.Spec.Selector, sts.Spec.Template.Labels)
	}
	if !covered {
		t.Error("no PodDisruptionBudget covers the projector pods")
	}
}

func checkAPIs(t *testing.T, sc scenario, m *manifests) {
	ws := m.workloads()
	for _, comp := range []string{"ingest", "query"} {
		w := ws[comp]
		d := m.deployments[w.name]
		if d == nil {
			t.Errorf("%s is not a Deployment", comp)
			continue
		}
		svc := m.services[w.name]
		if svc == nil {
			t.Errorf("%s: no Service named %s", comp, w.name)
		} else {
			if !selects(svc.Spec.Selector, d.Spec.Template.Labels) {
				t.Errorf("%s: Service does not select the pods", comp)
			}
			if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.String() != "http" {
				t.Errorf("%s: Service ports %+v, want one with targetPort http", comp, svc.Spec.Ports)
			}
		}
		hpa := m.hpas[w.name]
		switch {
		case sc.autoscaling && hpa == nil:
			t.Errorf("%s: no HorizontalPodAutoscaler", comp)
		case sc.autoscaling:
			ref := hpa.Spec.ScaleTargetRef
			if ref.Kind != "Deployment" || ref.Name != d.Name || ref.APIVersion != "apps/v1" {
				t.Errorf("%s: HPA targets %+v", comp, ref)
			}
			if hpa.Spec.MinReplicas == nil || *hpa.Spec.MinReplicas < 1 || *hpa.Spec.MinReplicas > hpa.Spec.MaxReplicas {
				t.Errorf("%s: HPA min %v max %d", comp, hpa.Spec.MinReplicas, hpa.Spec.MaxReplicas)
			}
			if len(hpa.Spec.Metrics) == 0 {
				t.Errorf("%s: HPA without metrics", comp)
			}
			if d.Spec.Replicas != nil {
				t.Errorf("%s: Deployment sets replicas while an HPA owns them", comp)
			}
		case hpa != nil:
			t.Errorf("%s: HorizontalPodAutoscaler rendered with autoscaling off", comp)
		case d.Spec.Replicas == nil || *d.Spec.Replicas < 1:
			t.Errorf("%s: replicas %v", comp, d.Spec.Replicas)
		}
		ru := d.Spec.Strategy.RollingUpdate
		if ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 {
			t.Errorf("%s: rolling update may take pods away before new ones are ready", comp)
		}
		c := d.Spec.Template.Spec.Containers[0]
		if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil || c.Lifecycle.PreStop.Sleep.Seconds < 1 {
			t.Errorf("%s: no preStop sleep to drain endpoints before SIGTERM", comp)
		} else if g := d.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || *g <= c.Lifecycle.PreStop.Sleep.Seconds {
			t.Errorf("%s: terminationGracePeriodSeconds %v does not cover the preStop sleep", comp, g)
		}
	}
}

func selects(selector map[string]string, podLabels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	return labels.SelectorFromSet(selector).Matches(labels.Set(podLabels))
}

func labelSelectorMatches(ls *metav1.LabelSelector, podLabels map[string]string) bool {
	if ls == nil {
		return false
	}
	sel, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil || sel.Empty() {
		return false
	}
	return sel.Matches(labels.Set(podLabels))
}

// matchingWorkloads returns the components whose pods ls selects.
func matchingWorkloads(ws map[string]workload, ls *metav1.LabelSelector) []string {
	var out []string
	for comp, w := range ws {
		if labelSelectorMatches(ls, w.template.Labels) {
			out = append(out, comp)
		}
	}
	sort.Strings(out)
	return out
}

func checkSelectors(t *testing.T, sc scenario, m *manifests) {
	ws := m.workloads()
	for comp, w := range ws {
		if !labelSelectorMatches(w.selector, w.template.Labels) {
			t.Errorf("%s: the workload's selector does not match its own pods", comp)
		}
	}
	for name, svc := range m.services {
		got := matchingWorkloads(ws, &metav1.LabelSelector{MatchLabels: svc.Spec.Selector})
		if len(got) != 1 {
			t.Errorf("Service %s selects %v, want exactly one component", name, got)
		}
	}
	for name, p := range m.pdbs {
		if got := matchingWorkloads(ws, p.Spec.Selector); len(got) != 1 {
			t.Errorf("PodDisruptionBudget %s selects %v, want exactly one component", name, got)
		}
		if p.Spec.MaxUnavailable == nil && p.Spec.MinAvailable == nil {
			t.Errorf("PodDisruptionBudget %s has neither maxUnavailable nor minAvailable", name)
		}
	}
	for name, np := range m.networkPolicies {
		got := matchingWorkloads(ws, &np.Spec.PodSelector)
		if len(got) != 1 {
			t.Errorf("NetworkPolicy %s selects %v, want exactly one component", name, got)
			continue
		}
		if !slices.Contains(np.Spec.PolicyTypes, "Ingress") || !slices.Contains(np.Spec.PolicyTypes, "Egress") {
			t.Errorf("NetworkPolicy %s: policyTypes %v, want Ingress and Egress", name, np.Spec.PolicyTypes)
		}
		for _, rule := range np.Spec.Ingress {
			if len(rule.From) == 0 {
				t.Errorf("NetworkPolicy %s: an ingress rule without from admits every source", name)
			}
			for _, p := range rule.Ports {
				if p.Port == nil || p.Port.String() != "http" {
					t.Errorf("NetworkPolicy %s: ingress port %v, want the named port http", name, p.Port)
				}
			}
		}
		var dns bool
		for _, rule := range np.Spec.Egress {
			if len(rule.Ports) == 0 {
				t.Errorf("NetworkPolicy %s: an egress rule without ports admits everything", name)
			}
			for _, p := range rule.Ports {
				if p.Port != nil && p.Port.IntValue() == 53 {
					dns = true
				}
			}
		}
		if !dns {
			t.Errorf("NetworkPolicy %s: no egress to DNS", name)
		}
	}
	for name, smon := range m.serviceMonitors {
		var selected []string
		for svcName, svc := range m.services {
			if labelSelectorMatches(&smon.Spec.Selector, svc.Labels) {
				selected = append(selected, svcName)
				if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "http" }) {
					t.Errorf("ServiceMonitor %s selects Service %s, which has no port named http", name, svcName)
				}
			}
		}
		if len(selected) != 3 {
			t.Errorf("ServiceMonitor %s selects Services %v, want the 3 of the release", name, selected)
		}
		if len(smon.Spec.Endpoints) != 1 {
			t.Fatalf("ServiceMonitor %s: %d endpoints, want 1", name, len(smon.Spec.Endpoints))
		}
		ep := smon.Spec.Endpoints[0]
		if ep.Port != "http" || ep.Path != "/metrics" || ep.Scheme != strings.ToLower(string(sc.scheme)) {
			t.Errorf("ServiceMonitor %s: endpoint %+v, want port http, path /metrics, scheme %s", name, ep, strings.ToLower(string(sc.scheme)))
		}
		switch tls := ep.TLSConfig; {
		case sc.scheme == corev1.URISchemeHTTP && tls != nil:
			t.Errorf("ServiceMonitor %s: tlsConfig on a plain HTTP scrape", name)
		case sc.scheme == corev1.URISchemeHTTPS && (tls == nil || tls.InsecureSkipVerify):
			t.Errorf("ServiceMonitor %s: HTTPS scrape without verified TLS: %+v", name, tls)
		case sc.monitorCA != "" && (tls.CA == nil || tls.CA.Secret == nil || tls.CA.Secret.Name != sc.monitorCA):
			t.Errorf("ServiceMonitor %s: CA %+v, want Secret %s", name, tls.CA, sc.monitorCA)
		}
		if !slices.Equal(smon.Spec.NamespaceSelector.MatchNames, []string{namespace}) {
			t.Errorf("ServiceMonitor %s: namespaceSelector %+v", name, smon.Spec.NamespaceSelector)
		}
	}
}

func checkServiceAccount(t *testing.T, m *manifests) {
	for name, sa := range m.serviceAccounts {
		if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
			t.Errorf("ServiceAccount %s: automountServiceAccountToken is not false", name)
		}
	}
	for comp, w := range m.workloads() {
		spec := w.template.Spec
		if _, ok := m.serviceAccounts[spec.ServiceAccountName]; !ok {
			t.Errorf("%s: serviceAccountName %q is not rendered by the chart", comp, spec.ServiceAccountName)
		}
		if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
			t.Errorf("%s: automountServiceAccountToken is not false", comp)
		}
		if spec.EnableServiceLinks == nil || *spec.EnableServiceLinks {
			t.Errorf("%s: enableServiceLinks is not false (service links can inject CORREX_* variables)", comp)
		}
	}
}

// configChecksum is what the chart writes into checksum/config: the SHA-256 of
// the ConfigMap's data as Helm's toYaml prints it.
func configChecksum(t *testing.T, data map[string]string) string {
	t.Helper()
	b, err := yaml.Marshal(data)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(strings.TrimSuffix(string(b), "\n")))
	return hex.EncodeToString(sum[:])
}

func checkChecksums(t *testing.T, m *manifests) {
	for comp, w := range m.workloads() {
		got := w.template.Annotations["checksum/config"]
		if got == "" {
			t.Errorf("%s: no checksum/config pod annotation", comp)
			continue
		}
		c := w.template.Spec.Containers[0]
		if len(c.EnvFrom) != 1 || c.EnvFrom[0].ConfigMapRef == nil {
			t.Errorf("%s: want one envFrom ConfigMap, got %+v", comp, c.EnvFrom)
			continue
		}
		cm := m.configMaps[c.EnvFrom[0].ConfigMapRef.Name]
		if cm == nil {
			t.Errorf("%s: ConfigMap %s not rendered", comp, c.EnvFrom[0].ConfigMapRef.Name)
			continue
		}
		if want := configChecksum(t, cm.Data); got != want {
			t.Errorf("%s: checksum/config %s is not the checksum of ConfigMap %s (%s)", comp, got, cm.Name, want)
		}
	}
}
