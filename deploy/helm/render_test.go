package helm

import (
	"strings"
	"testing"
)

// TestProjectorReplicasAtPartitions renders the boundary the chart must accept:
// as many projectors as partitions.
func TestProjectorReplicasAtPartitions(t *testing.T) {
	t.Parallel()
	m := render(t, "minimal.yaml", "--set", "kafka.partitions=4", "--set", "projector.replicas=4")
	sts := m.statefulSets[m.workloads()["projector"].name]
	if sts == nil || sts.Spec.Replicas == nil || *sts.Spec.Replicas != 4 {
		t.Fatalf("projector replicas: got %+v, want 4", sts)
	}
}

// checksums renders and returns the checksum/config annotation per component.
func checksums(t *testing.T, extra ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for comp, w := range render(t, "minimal.yaml", extra...).workloads() {
		out[comp] = w.template.Annotations["checksum/config"]
	}
	return out
}

// TestConfigChangeRollsPods checks that a configuration change reaches the pod
// templates through the checksum annotation, so `helm upgrade` rolls exactly
// the components whose configuration changed.
func TestConfigChangeRollsPods(t *testing.T) {
	t.Parallel()
	base := checksums(t)
	tests := []struct {
		name    string
		set     string
		changed []string
	}{
		{"topic, read by all", "kafka.topic=other-topic", []string{"ingest", "query", "projector"}},
		{"projector cache", "projector.cacheSize=5000", []string{"projector"}},
		{"projector cache bytes", "projector.cacheBytes=67108864", []string{"projector"}},
		{"projector change feed", "projector.changeFeed=false", []string{"projector"}},
		{"projector verifier rate", "projector.verifyRate=5", []string{"projector"}},
		{"projector verifier repair", "projector.verifyRepair=false", []string{"projector"}},
		{"ingest produce timeout", "ingest.produceTimeout=3s", []string{"ingest"}},
		{"replicas are no configuration", "ingest.replicas=5", nil},
	}
	for _, tt := range tests {
		got := checksums(t, "--set", tt.set)
		for comp, sum := range got {
			want := base[comp]
			changed := false
			for _, c := range tt.changed {
				changed = changed || c == comp
			}
			if changed && sum == want {
				t.Errorf("%s: --set %s left the %s checksum unchanged", tt.name, tt.set, comp)
			}
			if !changed && sum != want {
				t.Errorf("%s: --set %s changed the %s checksum", tt.name, tt.set, comp)
			}
		}
	}
}

// TestLongReleaseName checks that names stay within Kubernetes' limits with
// the longest release name Helm allows (53 characters): 63 for labels and most
// names, 52 for a StatefulSet (its pods' controller-revision-hash label adds 11).
func TestLongReleaseName(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("r", 53)
	res := runHelm(t, "template", long, chartDir, "--namespace", namespace, "-f", "values/production.yaml")
	if res.err != nil {
		t.Fatalf("helm template: %v\n%s", res.err, res.output())
	}
	m, err := decodeManifests([]byte(res.stdout))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range m.objects {
		if len(o.meta.Name) > 63 {
			t.Errorf("%s %s: name longer than 63", o.kind, o.meta.Name)
		}
		for k, v := range o.meta.Labels {
			if len(v) > 63 {
				t.Errorf("%s %s: label %s=%s longer than 63", o.kind, o.meta.Name, k, v)
			}
		}
	}
	for name := range m.statefulSets {
		if len(name) > 52 {
			t.Errorf("StatefulSet %s: name longer than 52", name)
		}
	}
}

// TestImageReferences checks registry, tag and digest handling.
func TestImageReferences(t *testing.T) {
	t.Parallel()
	digest := "sha256:" + strings.Repeat("ab", 32)
	m := render(t, "minimal.yaml",
		"--set", "image.registry=registry.example.com/team/",
		"--set", "query.image.tag=1.2.3",
		"--set", "projector.image.digest="+digest,
	)
	ws := m.workloads()
	want := map[string]string{
		"ingest":    "registry.example.com/team/correx/ingest:" + chartAppVersion(t),
		"query":     "registry.example.com/team/correx/query:1.2.3",
		"projector": "registry.example.com/team/correx/projector@" + digest,
	}
	for comp, img := range want {
		if got := ws[comp].template.Spec.Containers[0].Image; got != img {
			t.Errorf("%s: image %q, want %q", comp, got, img)
		}
	}
}

// TestRedisURLFromSecret checks that a URL kept in a Secret reaches the pods by
// secretKeyRef and never lands in a ConfigMap.
func TestRedisURLFromSecret(t *testing.T) {
	t.Parallel()
	m := render(t, "minimal.yaml", "--set", "redis.existingSecret=redis-url", "--set", "redis.existingSecretKey=uri")
	for name, cm := range m.configMaps {
		if v, ok := cm.Data["CORREX_REDIS_URL"]; ok {
			t.Errorf("ConfigMap %s carries CORREX_REDIS_URL=%s", name, v)
		}
	}
	for comp, w := range m.workloads() {
		env, _ := m.containerEnv(w.template.Spec.Containers[0])
		ref := env["CORREX_REDIS_URL"].from
		if ref == nil || ref.SecretKeyRef == nil || ref.SecretKeyRef.Name != "redis-url" || ref.SecretKeyRef.Key != "uri" {
			t.Errorf("%s: CORREX_REDIS_URL from %+v, want secretKeyRef redis-url/uri", comp, ref)
		}
	}
}

// TestRateLimits checks that each API component gets its own rate limit,
// a fractional rate included, and the projector none.
func TestRateLimits(t *testing.T) {
	t.Parallel()
	m := render(t, "minimal.yaml", "--set", "ingest.rateLimit.requestsPerSecond=0.5", "--set", "ingest.rateLimit.burst=3",
		"--set", "query.rateLimit.requestsPerSecond=1000")
	want := map[string][2]string{"ingest": {"0.5", "3"}, "query": {"1000", "400"}, "projector": {"", ""}}
	for comp, w := range m.workloads() {
		env, _ := m.containerEnv(w.template.Spec.Containers[0])
		got := [2]string{env["CORREX_RATE_LIMIT"].value, env["CORREX_RATE_BURST"].value}
		if got != want[comp] {
			t.Errorf("%s: CORREX_RATE_LIMIT, CORREX_RATE_BURST = %q, want %q", comp, got, want[comp])
		}
	}
}

// TestRedisSentinelAndCluster renders the Redis deployments of
// docs/guarantees.md from values: a Sentinel URL (its master_name and addr
// parameters pass the schema and reach every component as written), and a
// Redis Cluster (redis.cluster sets CORREX_REDIS_CLUSTER, false by default).
func TestRedisSentinelAndCluster(t *testing.T) {
	t.Parallel()
	const sentinel = "redis://sentinel-0.sentinel:26379/0?master_name=mymaster&addr=sentinel-1.sentinel:26379&addr=sentinel-2.sentinel:26379"
	const cluster = "redis://redis-0.redis:6379?addr=redis-1.redis:6379&addr=redis-2.redis:6379"
	for _, tc := range []struct {
		name, url, clusterFlag string
		extra                  []string
	}{
		{"default", "redis://redis-master.cache.svc.cluster.local:6379/0", "false", nil},
		{"sentinel", sentinel, "false", []string{"--set-string", "redis.url=" + sentinel}},
		{"cluster", cluster, "true", []string{"--set-string", "redis.url=" + cluster, "--set", "redis.cluster=true"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := render(t, "minimal.yaml", tc.extra...)
			seen := 0
			for name, cm := range m.configMaps {
				if _, ok := cm.Data["CORREX_REDIS_URL"]; !ok {
					continue
				}
				seen++
				if got := cm.Data["CORREX_REDIS_URL"]; got != tc.url {
					t.Errorf("%s: CORREX_REDIS_URL=%q, want %q", name, got, tc.url)
				}
				if got := cm.Data["CORREX_REDIS_CLUSTER"]; got != tc.clusterFlag {
					t.Errorf("%s: CORREX_REDIS_CLUSTER=%q, want %q", name, got, tc.clusterFlag)
				}
			}
			if seen != 3 {
				t.Errorf("%d ConfigMaps carry CORREX_REDIS_URL, want 3", seen)
			}
		})
	}
}

// TestRetentionArchiveAndIngestURL: eventsRetention reaches ingest and the
// projector, retainClosed the projector, archiveUrl the projector and the
// query service (and nothing without it), and the query service forwards
// the console's actions to the chart's ingest Service.
func TestRetentionArchiveAndIngestURL(t *testing.T) {
	t.Parallel()
	want := map[string]map[string]string{
		"ingest":    {"CORREX_EVENTS_RETENTION": "unlimited", "CORREX_RETAIN_CLOSED": "", "CORREX_ARCHIVE_URL": "", "CORREX_INGEST_URL": ""},
		"projector": {"CORREX_EVENTS_RETENTION": "unlimited", "CORREX_RETAIN_CLOSED": "0s", "CORREX_ARCHIVE_URL": "", "CORREX_INGEST_URL": ""},
		"query": {"CORREX_EVENTS_RETENTION": "", "CORREX_RETAIN_CLOSED": "", "CORREX_ARCHIVE_URL": "",
			"CORREX_INGEST_URL": "http://correx-correx-sessions-ingest.sessions.svc:8081"},
	}
	check := func(m *manifests) {
		t.Helper()
		for comp, w := range m.workloads() {
			env, _ := m.containerEnv(w.template.Spec.Containers[0])
			for name, v := range want[comp] {
				if got := env[name].value; got != v {
					t.Errorf("%s: %s = %q, want %q", comp, name, got, v)
				}
			}
		}
	}
	check(render(t, "minimal.yaml"))
	want["ingest"]["CORREX_EVENTS_RETENTION"], want["projector"]["CORREX_EVENTS_RETENTION"] = "720h", "720h"
	want["projector"]["CORREX_RETAIN_CLOSED"] = "168h"
	want["projector"]["CORREX_ARCHIVE_URL"], want["query"]["CORREX_ARCHIVE_URL"] = "s3://archive?region=x", "s3://archive?region=x"
	want["query"]["CORREX_INGEST_URL"] = "http://correx-correx-sessions-ingest.sessions.svc:9000"
	check(render(t, "minimal.yaml", "--set", "eventsRetention=720h", "--set", "retainClosed=168h",
		"--set-string", "archiveUrl=s3://archive?region=x", "--set", "ingest.service.port=9000"))
}

// TestNetworkPolicyLetsActionsThrough: with networkPolicy.enabled, the query
// pods may reach the ingest pods' http port and the ingest pods let them in,
// so that the console's forwarded actions pass.
func TestNetworkPolicyLetsActionsThrough(t *testing.T) {
	t.Parallel()
	m := render(t, "minimal.yaml", "--set", "networkPolicy.enabled=true")
	ws := m.workloads()
	component := func(sel map[string]string) string {
		for comp, w := range ws {
			match := len(sel) > 0
			for k, v := range sel {
				match = match && w.template.Labels[k] == v
			}
			if match {
				return comp
			}
		}
		return ""
	}
	var egress, ingress bool
	for _, np := range m.networkPolicies {
		switch component(np.Spec.PodSelector.MatchLabels) {
		case "query":
			for _, r := range np.Spec.Egress {
				for _, to := range r.To {
					if to.PodSelector != nil && component(to.PodSelector.MatchLabels) == "ingest" && len(r.Ports) == 1 && r.Ports[0].Port.String() == "http" {
						egress = true
					}
				}
			}
		case "ingest":
			for _, r := range np.Spec.Ingress {
				for _, from := range r.From {
					if from.PodSelector != nil && component(from.PodSelector.MatchLabels) == "query" {
						ingress = true
					}
				}
			}
		}
	}
	if !egress || !ingress {
		t.Errorf("query to ingest: egress %v, ingress %v; want both", egress, ingress)
	}
}
