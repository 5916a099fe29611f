package helm

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestLint runs `helm lint --strict` (warnings fail too) on the chart's
// defaults and on each values file that must be accepted.
func TestLint(t *testing.T) {
	for _, file := range []string{"", "minimal.yaml", "production.yaml", "https-mtls.yaml"} {
		name := file
		if name == "" {
			name = "defaults"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			args := []string{"lint", "--strict", chartDir, "--namespace", namespace}
			if file != "" {
				args = append(args, "-f", filepath.Join(valuesDir, file))
			}
			res := runHelm(t, args...)
			if res.err != nil {
				t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), res.err, res.output())
			}
			if !strings.Contains(res.stdout, "1 chart(s) linted, 0 chart(s) failed") {
				t.Errorf("lint did not report a clean chart:\n%s", res.output())
			}
			for _, line := range strings.Split(res.output(), "\n") {
				if strings.Contains(line, "[WARNING]") || strings.Contains(line, "[ERROR]") {
					t.Errorf("lint: %s", line)
				}
			}
		})
	}
}

// mustFail runs helm with args and checks that it fails and that what it
// printed names the problem: every string of want must appear.
func mustFail(t *testing.T, args []string, want ...string) {
	t.Helper()
	res := runHelm(t, args...)
	if res.err == nil {
		t.Fatalf("helm %s succeeded, want a failure naming %q", strings.Join(args, " "), want)
	}
	for _, w := range want {
		if !strings.Contains(res.output(), w) {
			t.Errorf("helm %s: output does not contain %q:\n%s", strings.Join(args, " "), w, res.output())
		}
	}
}

// TestBadValuesFilesFail renders the values files that must be refused.
func TestBadValuesFilesFail(t *testing.T) {
	tests := []struct {
		file string
		want []string
		// lintFails is false where the check is a template `fail`: helm lint
		// renders in lint mode, in which `fail` only logs (as [INFO] Fail: ...).
		lintFails bool
	}{
		{
			file: "bad-replicas.yaml",
			want: []string{"projector.replicas (13) must not exceed kafka.partitions (12)"},
		},
		{
			file:      "bad-sasl.yaml",
			want:      []string{"/kafka/sasl/mechanism", "value must be one of", "'SCRAM-SHA-512'"},
			lintFails: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			mustFail(t, templateArgs(tt.file), tt.want...)
			lint := []string{"lint", "--strict", chartDir, "-f", filepath.Join(valuesDir, tt.file)}
			if tt.lintFails {
				mustFail(t, lint, tt.want...)
			} else if res := runHelm(t, lint...); !strings.Contains(res.output(), tt.want[0]) {
				t.Errorf("helm lint does not mention %q:\n%s", tt.want[0], res.output())
			}
		})
	}
}

// TestSchemaRejects gives bad values with --set and expects values.schema.json
// to refuse them, naming the value.
func TestSchemaRejects(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"projector replicas below 1", []string{"--set", "projector.replicas=0"},
			[]string{"at '/projector/replicas'", "minimum"}},
		{"ingest replicas below 1", []string{"--set", "ingest.replicas=-1"},
			[]string{"at '/ingest/replicas'", "minimum"}},
		{"unknown SASL mechanism", []string{"--set", "kafka.sasl.mechanism=GSSAPI"},
			[]string{"at '/kafka/sasl/mechanism'", "value must be one of"}},
		{"flush interval not a duration", []string{"--set-string", "projector.flushInterval=fast"},
			[]string{"at '/projector/flushInterval'", "does not match pattern"}},
		{"flush interval without unit", []string{"--set-string", "projector.flushInterval=250"},
			[]string{"at '/projector/flushInterval'", "does not match pattern"}},
		{"produce timeout not a duration", []string{"--set-string", "ingest.produceTimeout=10 seconds"},
			[]string{"at '/ingest/produceTimeout'", "does not match pattern"}},
		{"brokers missing", []string{"--set", "kafka.brokers=null"},
			[]string{"at '/kafka'", "missing property 'brokers'"}},
		{"brokers empty", []string{"--set", "kafka.brokers="},
			[]string{"at '/kafka/brokers'"}},
		{"broker without port", []string{"--set", "kafka.brokers={kafka}"},
			[]string{"at '/kafka/brokers/0'", "does not match pattern"}},
		{"redis URL of another scheme", []string{"--set", "redis.url=http://redis:6379"},
			[]string{"at '/redis/url'", "does not match pattern"}},
		{"misspelt key", []string{"--set", "projector.replica=3"},
			[]string{"at '/projector'", "additional properties 'replica' not allowed"}},
		{"CORREX_ name in extraEnv", []string{"--set", "ingest.extraEnv[0].name=CORREX_TOPIC", "--set", "ingest.extraEnv[0].value=x"},
			[]string{"at '/ingest/extraEnv/0/name'"}},
		{"resource limits missing", []string{"--set", "query.resources.limits=null"},
			[]string{"at '/query/resources'", "missing property 'limits'"}},
		{"partitions below 1", []string{"--set", "kafka.partitions=0"},
			[]string{"at '/kafka/partitions'", "minimum"}},
		{"negative rate limit", []string{"--set", "ingest.rateLimit.requestsPerSecond=-1"},
			[]string{"at '/ingest/rateLimit/requestsPerSecond'", "minimum"}},
		{"rate burst below 1", []string{"--set", "query.rateLimit.burst=0"},
			[]string{"at '/query/rateLimit/burst'", "minimum"}},
		{"rate limit not a number", []string{"--set", "query.rateLimit.requestsPerSecond=fast"},
			[]string{"at '/query/rateLimit/requestsPerSecond'", "does not match pattern"}},
		{"alert for not a Prometheus duration", []string{"--set-string", "prometheusRule.alerts.partitionLag.for=1.5h"},
			[]string{"at '/prometheusRule/alerts/partitionLag/for'", "does not match pattern"}},
		{"alert window of zero", []string{"--set-string", "prometheusRule.alerts.deadLetters.window=0m"},
			[]string{"at '/prometheusRule/alerts/deadLetters/window'"}},
		{"alert window without unit", []string{"--set-string", "prometheusRule.alerts.verifyMismatch.window=15"},
			[]string{"at '/prometheusRule/alerts/verifyMismatch/window'", "does not match pattern"}},
		{"alert window of two units", []string{"--set-string", "prometheusRule.alerts.restoreGap.window=1h30m"},
			[]string{"at '/prometheusRule/alerts/restoreGap/window'", "does not match pattern"}},
		{"negative lag threshold", []string{"--set", "prometheusRule.alerts.partitionLag.threshold=-1"},
			[]string{"at '/prometheusRule/alerts/partitionLag/threshold'", "minimum"}},
		{"runbook URL with an anchor", []string{"--set", "prometheusRule.runbookUrl=https://example.com/alerts.md#top"},
			[]string{"at '/prometheusRule/runbookUrl'", "does not match pattern"}},
		{"misspelt alert", []string{"--set", "prometheusRule.alerts.partitionLagg.enabled=false"},
			[]string{"at '/prometheusRule/alerts'", "additional properties 'partitionLagg' not allowed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			want := append([]string{"values don't meet the specifications of the schema"}, tt.want...)
			mustFail(t, templateArgs("minimal.yaml", tt.args...), want...)
		})
	}
}

// TestTemplateRulesReject covers the rules that span several values, which the
// templates check because draft-07 JSON Schema cannot compare two values.
func TestTemplateRulesReject(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"replicas above partitions", []string{"--set", "kafka.partitions=4", "--set", "projector.replicas=5"},
			"projector.replicas (5) must not exceed kafka.partitions (4)"},
		{"password in the Redis URL", []string{"--set", "redis.url=redis://:hunter2@redis:6379/0"},
			"redis.url contains a password"},
		{"user and password in the Redis URL", []string{"--set", "redis.url=rediss://correx:hunter2@redis:6380"},
			"redis.url contains a password"},
		{"sentinel password in the Redis URL", []string{"--set-string", "redis.url=redis://s-0:26379/0?master_name=m&sentinel_password=hunter2"},
			"redis.url contains a password"},
		{"Redis CA without rediss", []string{"--set", "redis.tls.caSecret=redis-ca"},
			"redis.tls.caSecret is set but redis.url is not a rediss:// URL"},
		{"SASL without password Secret", []string{"--set", "kafka.sasl.mechanism=SCRAM-SHA-256", "--set", "kafka.sasl.username=u"},
			"kafka.sasl.existingSecret is empty"},
		{"SASL without user name", []string{"--set", "kafka.sasl.mechanism=SCRAM-SHA-256", "--set", "kafka.sasl.existingSecret=s"},
			"neither kafka.sasl.username nor kafka.sasl.usernameKey is set"},
		{"PLAIN without TLS", []string{"--set", "kafka.sasl.mechanism=PLAIN", "--set", "kafka.sasl.username=u", "--set", "kafka.sasl.existingSecret=s"},
			"PLAIN sends the password in clear text"},
		{"Kafka CA without TLS", []string{"--set", "kafka.tls.caSecret=ca"},
			"kafka.tls.enabled is false"},
		{"auth without tokens Secret", []string{"--set", "auth.enabled=true"},
			"auth.existingSecret is empty"},
		{"HTTPS without certificate Secret", []string{"--set", "tls.enabled=true"},
			"tls.existingSecret is empty"},
		{"client CA without HTTPS", []string{"--set", "tls.clientCA.existingSecret=ca"},
			"tls.enabled is false"},
		{"autoscaling min above max", []string{"--set", "query.autoscaling.enabled=true", "--set", "query.autoscaling.minReplicas=5", "--set", "query.autoscaling.maxReplicas=3"},
			"query.autoscaling.minReplicas (5) is greater than query.autoscaling.maxReplicas (3)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			mustFail(t, templateArgs("minimal.yaml", tt.args...), tt.want)
		})
	}
}
