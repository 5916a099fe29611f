package helm

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

const (
	chartDir  = "correx-sessions"
	valuesDir = "values"
	release   = "correx"
	namespace = "sessions"
)

// helmBin is the Helm binary pinned in go.mod, set by TestMain.
var helmBin string

// helmHome keeps Helm's config, cache and data out of the user's home, so a
// local Helm setup (repositories, plugins) cannot change what the tests see.
var helmHome string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	bin, err := pinnedHelm()
	if err != nil {
		fmt.Fprintln(os.Stderr, "helm tests:", err)
		return 1
	}
	helmBin = bin
	home, err := os.MkdirTemp("", "correx-helm-home-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "helm tests:", err)
		return 1
	}
	defer os.RemoveAll(home)
	helmHome = home
	return m.Run()
}

// pinnedHelm returns the path of the Helm binary named by the tool directive in
// go.mod. `go tool -n` builds it into the Go build cache the first time and
// then only checks that the cached binary is current (a fraction of a second),
// which is much cheaper than `go run` or `go tool helm` per invocation: those
// repeat that check for each of the dozens of Helm runs below.
func pinnedHelm() (string, error) {
	cmd := exec.Command("go", "tool", "-n", "helm")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go tool -n helm: %w\n%s", err, stderr.String())
	}
	path := strings.TrimSpace(string(out))
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("go tool -n helm printed %q: %w", path, err)
	}
	return path, nil
}

// helmResult is what one Helm run printed.
type helmResult struct {
	stdout, stderr string
	err            error
}

// output is stdout and stderr together, for messages and assertions on errors.
func (r helmResult) output() string { return r.stdout + r.stderr }

// inputsOnce makes the test read, once per run, every file Helm reads.
var inputsOnce sync.Once

// trackInputs reads the chart, the values files and the Helm binary from the
// test itself. Helm runs in a subprocess, whose file reads `go test` cannot see;
// without this a cached "ok" would survive a change to a template or a values
// file. Reads made here, from a test, go into the test log that the test
// cache checks.
func trackInputs(t *testing.T) {
	t.Helper()
	inputsOnce.Do(func() {
		for _, dir := range []string{chartDir, valuesDir} {
			err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				_, err = os.ReadFile(p)
				return err
			})
			if err != nil {
				t.Fatalf("read the chart's files: %v", err)
			}
		}
		if _, err := os.Stat(helmBin); err != nil {
			t.Fatal(err)
		}
	})
}

// runHelm runs the pinned Helm with args and returns what it printed.
func runHelm(t *testing.T, args ...string) helmResult {
	t.Helper()
	trackInputs(t)
	cmd := exec.Command(helmBin, args...)
	cmd.Env = append(os.Environ(),
		"HELM_CONFIG_HOME="+filepath.Join(helmHome, "config"),
		"HELM_CACHE_HOME="+filepath.Join(helmHome, "cache"),
		"HELM_DATA_HOME="+filepath.Join(helmHome, "data"),
		"KUBECONFIG="+filepath.Join(helmHome, "no-kubeconfig"),
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	err := cmd.Run()
	return helmResult{stdout: stdout.String(), stderr: stderr.String(), err: err}
}

// templateArgs is `helm template` of the chart as release "correx" in namespace
// "sessions", with the given values files and further arguments.
func templateArgs(valuesFile string, extra ...string) []string {
	args := []string{"template", release, chartDir, "--namespace", namespace}
	if valuesFile != "" {
		args = append(args, "-f", filepath.Join(valuesDir, valuesFile))
	}
	return append(args, extra...)
}

// render runs `helm template` and decodes its output; any failure ends the test.
func render(t *testing.T, valuesFile string, extra ...string) *manifests {
	t.Helper()
	res := runHelm(t, templateArgs(valuesFile, extra...)...)
	if res.err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(templateArgs(valuesFile, extra...), " "), res.err, res.output())
	}
	m, err := decodeManifests([]byte(res.stdout))
	if err != nil {
		t.Fatalf("decode the rendered manifests: %v", err)
	}
	return m
}

// serviceMonitor is the part of the Prometheus Operator's ServiceMonitor
// (monitoring.coreos.com/v1) that the chart uses. It is not in k8s.io/api; the
// fields here follow the CRD, and strict decoding makes any other field an
// error, so a typo in the template cannot pass silently.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		JobLabel          string `json:"jobLabel,omitempty"`
		NamespaceSelector struct {
			Any        bool     `json:"any,omitempty"`
			MatchNames []string `json:"matchNames,omitempty"`
		} `json:"namespaceSelector"`
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port          string `json:"port"`
			Path          string `json:"path"`
			Scheme        string `json:"scheme"`
			Interval      string `json:"interval"`
			ScrapeTimeout string `json:"scrapeTimeout"`
			TLSConfig     *struct {
				InsecureSkipVerify bool   `json:"insecureSkipVerify"`
				ServerName         string `json:"serverName,omitempty"`
				CA                 *struct {
					Secret *struct {
						Name string `json:"name"`
						Key  string `json:"key"`
					} `json:"secret,omitempty"`
				} `json:"ca,omitempty"`
			} `json:"tlsConfig,omitempty"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// prometheusRule is the part of the Prometheus Operator's PrometheusRule
// (monitoring.coreos.com/v1) that the chart uses, decoded strictly as
// serviceMonitor is.
type prometheusRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				For         string            `json:"for,omitempty"`
				Labels      map[string]string `json:"labels,omitempty"`
				Annotations map[string]string `json:"annotations,omitempty"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

// manifests holds every rendered document, decoded and indexed by kind and name.
type manifests struct {
	configMaps      map[string]*corev1.ConfigMap
	services        map[string]*corev1.Service
	serviceAccounts map[string]*corev1.ServiceAccount
	deployments     map[string]*appsv1.Deployment
	statefulSets    map[string]*appsv1.StatefulSet
	pdbs            map[string]*policyv1.PodDisruptionBudget
	hpas            map[string]*autoscalingv2.HorizontalPodAutoscaler
	networkPolicies map[string]*networkingv1.NetworkPolicy
	serviceMonitors map[string]*serviceMonitor
	prometheusRules map[string]*prometheusRule
	// kinds counts documents per kind.
	kinds map[string]int
	// objects lists every document's metadata, in rendering order.
	objects []objectRef
}

type objectRef struct {
	kind string
	meta *metav1.ObjectMeta
}

// decodeManifests splits the multi-document YAML that helm prints and decodes
// each document strictly into its Go type, chosen by apiVersion and kind.
func decodeManifests(out []byte) (*manifests, error) {
	m := &manifests{
		configMaps:      map[string]*corev1.ConfigMap{},
		services:        map[string]*corev1.Service{},
		serviceAccounts: map[string]*corev1.ServiceAccount{},
		deployments:     map[string]*appsv1.Deployment{},
		statefulSets:    map[string]*appsv1.StatefulSet{},
		pdbs:            map[string]*policyv1.PodDisruptionBudget{},
		hpas:            map[string]*autoscalingv2.HorizontalPodAutoscaler{},
		networkPolicies: map[string]*networkingv1.NetworkPolicy{},
		serviceMonitors: map[string]*serviceMonitor{},
		prometheusRules: map[string]*prometheusRule{},
		kinds:           map[string]int{},
	}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
	for i := 0; ; i++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if tm.Kind == "" && tm.APIVersion == "" {
			// A separator followed only by comments: nothing rendered.
			if len(bytes.TrimSpace(stripComments(doc))) > 0 {
				return nil, fmt.Errorf("document %d has no apiVersion and kind:\n%s", i, doc)
			}
			continue
		}
		if err := m.add(tm, doc); err != nil {
			return nil, fmt.Errorf("document %d (%s %s): %w", i, tm.APIVersion, tm.Kind, err)
		}
	}
	return m, nil
}

func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, line := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// decodeInto decodes doc strictly into a new T, indexes it by name and records it.
func decodeInto[T any](m *manifests, index map[string]*T, kind string, doc []byte, meta func(*T) *metav1.ObjectMeta) error {
	obj := new(T)
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return err
	}
	md := meta(obj)
	if md.Name == "" {
		return errors.New("metadata.name is empty")
	}
	if _, dup := index[md.Name]; dup {
		return fmt.Errorf("%s %q rendered twice", kind, md.Name)
	}
	index[md.Name] = obj
	m.kinds[kind]++
	m.objects = append(m.objects, objectRef{kind: kind, meta: md})
	return nil
}

func (m *manifests) add(tm metav1.TypeMeta, doc []byte) error {
	switch tm.APIVersion + " " + tm.Kind {
	case "v1 ConfigMap":
		return decodeInto(m, m.configMaps, tm.Kind, doc, func(o *corev1.ConfigMap) *metav1.ObjectMeta { return &o.ObjectMeta })
	case "v1 Service":
		return decodeInto(m, m.services, tm.Kind, doc, func(o *corev1.Service) *metav1.ObjectMeta { return &o.ObjectMeta })
	case "v1 ServiceAccount":
		return decodeInto(m, m.serviceAccounts, tm.Kind, doc, func(o *corev1.ServiceAccount) *metav1.ObjectMeta { return &o.ObjectMeta })
	case "apps/v1 Deployment":
		return decodeInto(m, m.deployments, tm.Kind, doc, func(o *appsv1.Deployment) *metav1.ObjectMeta { return &o.ObjectMeta })
	case "apps/v1 StatefulSet":
		return decodeInto(m, m.statefulSets, tm.Kind, doc, func(o *appsv1.StatefulSet) *metav1.ObjectMeta { return &o.ObjectMeta })
	case "policy/v1 PodDisruptionBudget":
		return decodeInto(m, m.pdbs, tm.Kind, doc, func(o *policyv1.PodDisruptionBudget) *metav1.ObjectMeta { return &o.ObjectMeta })
	case "autoscaling/v2 HorizontalPodAutoscaler":
		return decodeInto(m, m.hpas, tm.Kind, doc, func(o *autoscalingv2.HorizontalPodAutoscaler) *metav1.ObjectMeta { return &o.ObjectMeta })
	case "networking.k8s.io/v1 NetworkPolicy":
		return decodeInto(m, m.networkPolicies, tm.Kind, doc, func(o *networkingv1.NetworkPolicy) *metav1.ObjectMeta { return &o.ObjectMeta })
	case "monitoring.coreos.com/v1 ServiceMonitor":
		return decodeInto(m, m.serviceMonitors, tm.Kind, doc, func(o *serviceMonitor) *metav1.ObjectMeta { return &o.ObjectMeta })
	case "monitoring.coreos.com/v1 PrometheusRule":
		return decodeInto(m, m.prometheusRules, tm.Kind, doc, func(o *prometheusRule) *metav1.ObjectMeta { return &o.ObjectMeta })
	default:
		// Includes kind Secret: the chart must never render one.
		return fmt.Errorf("the chart is not expected to render %s %s", tm.APIVersion, tm.Kind)
	}
}

// workload is a Deployment or StatefulSet, seen through what the checks need.
type workload struct {
	kind      string
	name      string
	component string
	replicas  *int32
	selector  *metav1.LabelSelector
	template  *corev1.PodTemplateSpec
}

// workloads returns every Deployment and StatefulSet, keyed by component label.
func (m *manifests) workloads() map[string]workload {
	ws := map[string]workload{}
	for name, d := range m.deployments {
		c := d.Spec.Template.Labels[componentLabel]
		ws[c] = workload{"Deployment", name, c, d.Spec.Replicas, d.Spec.Selector, &d.Spec.Template}
	}
	for name, s := range m.statefulSets {
		c := s.Spec.Template.Labels[componentLabel]
		ws[c] = workload{"StatefulSet", name, c, s.Spec.Replicas, s.Spec.Selector, &s.Spec.Template}
	}
	return ws
}

const componentLabel = "app.kubernetes.io/component"

// envSource says where a container's variable comes from.
type envSource struct {
	value     string // the literal value, from env or the ConfigMap
	literal   bool   // value is a literal (env value or ConfigMap entry)
	configMap string // name of the ConfigMap, for envFrom entries
	from      *corev1.EnvVarSource
}

// containerEnv resolves a container's environment: ConfigMap keys read through
// envFrom, then env entries. It reports a variable defined twice, an envFrom
// of anything but a rendered ConfigMap, and a missing ConfigMap.
func (m *manifests) containerEnv(c corev1.Container) (map[string]envSource, []string) {
	env := map[string]envSource{}
	var problems []string
	for _, ef := range c.EnvFrom {
		if ef.ConfigMapRef == nil {
			problems = append(problems, fmt.Sprintf("envFrom other than a ConfigMap: %+v", ef))
			continue
		}
		cm, ok := m.configMaps[ef.ConfigMapRef.Name]
		if !ok {
			problems = append(problems, fmt.Sprintf("envFrom ConfigMap %q is not rendered by the chart", ef.ConfigMapRef.Name))
			continue
		}
		for k, v := range cm.Data {
			name := ef.Prefix + k
			if _, dup := env[name]; dup {
				problems = append(problems, fmt.Sprintf("%s is defined twice", name))
			}
			env[name] = envSource{value: v, literal: true, configMap: cm.Name}
		}
	}
	for _, e := range c.Env {
		if _, dup := env[e.Name]; dup {
			problems = append(problems, fmt.Sprintf("%s is defined twice (env overrides envFrom silently)", e.Name))
		}
		env[e.Name] = envSource{value: e.Value, literal: e.ValueFrom == nil, from: e.ValueFrom}
	}
	return env, problems
}
