{{/*
Helpers of correx-sessions. Helpers that concern one component take a dict
(dict "root" $ "component" "ingest"|"query"|"projector").
*/}}

{{- define "correx.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The resource name prefix. It is cut to 40 characters so that "<prefix>-projector"
stays within 52, the longest StatefulSet name whose pods' controller-revision-hash
label still fits in 63 characters.
*/}}
{{- define "correx.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "correx.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Name of a component's resources: <fullname>-<component>. */}}
{{- define "correx.componentName" -}}
{{- printf "%s-%s" (include "correx.fullname" .root) .component }}
{{- end }}

{{/*
Name of a component's Service: <fullname>-<component>, and the projector's
headless one <fullname>-projector-headless. The ServiceMonitor's scrapes take
it as their job label, which the PrometheusRule and the dashboard select by.
*/}}
{{- define "correx.serviceName" -}}
{{- include "correx.componentName" . }}{{ if eq .component "projector" }}-headless{{ end }}
{{- end }}

{{- define "correx.labels" -}}
helm.sh/chart: {{ include "correx.chart" . }}
app.kubernetes.io/name: {{ include "correx.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: correx-sessions
{{- end }}

{{- define "correx.componentLabels" -}}
{{ include "correx.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Selector labels never change across upgrades: selectors are immutable. */}}
{{- define "correx.selectorLabels" -}}
app.kubernetes.io/name: {{ include "correx.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "correx.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "correx.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "correx.image" -}}
{{- $v := index .root.Values .component }}
{{- $repo := $v.image.repository }}
{{- with .root.Values.image.registry }}
{{- $repo = printf "%s/%s" (trimSuffix "/" .) $repo }}
{{- end }}
{{- if $v.image.digest }}
{{- printf "%s@%s" $repo $v.image.digest }}
{{- else }}
{{- printf "%s:%s" $repo (default .root.Chart.AppVersion $v.image.tag) }}
{{- end }}
{{- end }}

{{/* kafka.brokers as one comma-separated string, from a list or a string. */}}
{{- define "correx.brokers" -}}
{{- if kindIs "slice" .Values.kafka.brokers }}
{{- join "," .Values.kafka.brokers }}
{{- else }}
{{- .Values.kafka.brokers }}
{{- end }}
{{- end }}

{{- define "correx.scheme" -}}
{{- if .Values.tls.enabled }}HTTPS{{ else }}HTTP{{ end }}
{{- end }}

{{/* The services that take bearer tokens. */}}
{{- define "correx.hasAuth" -}}
{{- if has .component (list "ingest" "query") }}true{{ end }}
{{- end }}

{{/*
Where secret files are mounted. Every path below is inside the projected volume
"secrets" built by correx.secretSources; nothing else is mounted there.
*/}}
{{- define "correx.secretsDir" -}}/etc/correx/secrets{{- end }}

{{/*
The non-secret settings of one component, as the data of its ConfigMap. Secrets
appear here only as file paths. The pod template hashes this output
(checksum/config), so any change here rolls that component's pods.
*/}}
{{- define "correx.configData" -}}
{{- $root := .root }}
{{- $c := .component }}
{{- $v := index $root.Values $c }}
{{- $dir := include "correx.secretsDir" . }}
{{- $d := dict }}
{{- $_ := set $d "CORREX_KAFKA_BROKERS" (include "correx.brokers" $root) }}
{{- $_ = set $d "CORREX_TOPIC" $root.Values.kafka.topic }}
{{- $_ = set $d "CORREX_PARTITIONS" ($root.Values.kafka.partitions | int64 | toString) }}
{{- if not $root.Values.redis.existingSecret }}
{{- $_ = set $d "CORREX_REDIS_URL" $root.Values.redis.url }}
{{- end }}
{{- $_ = set $d "CORREX_REDIS_PREFIX" $root.Values.redis.prefix }}
{{- $_ = set $d "CORREX_REDIS_CLUSTER" (toString $root.Values.redis.cluster) }}
{{- $_ = set $d "CORREX_HTTP_ADDR" (printf ":%d" ($v.port | int)) }}
{{- if eq $c "projector" }}
{{- $_ = set $d "CORREX_GROUP" $v.group }}
{{- $_ = set $d "CORREX_FLUSH_INTERVAL" $v.flushInterval }}
{{- $_ = set $d "CORREX_CACHE_SIZE" ($v.cacheSize | int64 | toString) }}
{{- $_ = set $d "CORREX_CACHE_BYTES" ($v.cacheBytes | int64 | toString) }}
{{- $_ = set $d "CORREX_CHANGE_FEED" (toString $v.changeFeed) }}
{{- $_ = set $d "CORREX_VERIFY_RATE" (toString $v.verifyRate) }}
{{- $_ = set $d "CORREX_VERIFY_REPAIR" (toString $v.verifyRepair) }}
{{- $_ = set $d "CORREX_REDIS_WAIT_REPLICAS" ($root.Values.redis.waitReplicas | int64 | toString) }}
{{- $_ = set $d "CORREX_REDIS_WAIT_TIMEOUT" $root.Values.redis.waitTimeout }}
{{- end }}
{{- if ne $c "query" }}
{{- $_ = set $d "CORREX_EVENTS_RETENTION" $root.Values.eventsRetention }}
{{- end }}
{{- if eq $c "projector" }}
{{- $_ = set $d "CORREX_RETAIN_CLOSED" $root.Values.retainClosed }}
{{- if $root.Values.systemKey.existingSecret }}
{{- $_ = set $d "CORREX_SYSTEM_KEY_FILE" (printf "%s/system/keys" $dir) }}
{{- end }}
{{- end }}
{{- if and $root.Values.archiveUrl (ne $c "ingest") }}
{{- $_ = set $d "CORREX_ARCHIVE_URL" $root.Values.archiveUrl }}
{{- $_ = set $d "CORREX_ARCHIVE_TIMEOUT" $root.Values.archiveTimeout }}
{{- end }}
{{- if eq $c "query" }}
{{- /* The console's actions go to the chart's ingest Service. */}}
{{- $ingest := dict "root" $root "component" "ingest" }}
{{- $scheme := ternary "https" "http" $root.Values.tls.enabled }}
{{- $_ = set $d "CORREX_INGEST_URL" (printf "%s://%s.%s.svc:%d" $scheme (include "correx.componentName" $ingest) $root.Release.Namespace ($root.Values.ingest.service.port | int)) }}
{{- end }}
{{- if eq $c "ingest" }}
{{- $_ = set $d "CORREX_PRODUCE_TIMEOUT" $v.produceTimeout }}
{{- else }}
{{- range $kind := list "execution" "inactivity" "approval" "recovery" "cancellation" }}
{{- $_ = set $d (printf "CORREX_TIMEOUT_%s" (upper $kind)) (index $root.Values.timeouts $kind | default "0s") }}
{{- end }}
{{- end }}
{{- if include "correx.hasAuth" . }}
{{- $_ = set $d "CORREX_RATE_LIMIT" (toString $v.rateLimit.requestsPerSecond) }}
{{- $_ = set $d "CORREX_RATE_BURST" ($v.rateLimit.burst | int64 | toString) }}
{{- if $root.Values.auth.enabled }}
{{- $_ = set $d "CORREX_AUTH_TOKENS_FILE" (printf "%s/auth/tokens" $dir) }}
{{- else }}
{{- $_ = set $d "CORREX_AUTH_DISABLED" "true" }}
{{- end }}
{{- end }}
{{- if $root.Values.tls.enabled }}
{{- $_ = set $d "CORREX_TLS_CERT_FILE" (printf "%s/http/tls.crt" $dir) }}
{{- $_ = set $d "CORREX_TLS_KEY_FILE" (printf "%s/http/tls.key" $dir) }}
{{- if $root.Values.tls.clientCA.existingSecret }}
{{- $_ = set $d "CORREX_TLS_CLIENT_CA_FILE" (printf "%s/http/client-ca.crt" $dir) }}
{{- end }}
{{- end }}
{{- with $root.Values.kafka.tls }}
{{- if .enabled }}
{{- $_ = set $d "CORREX_KAFKA_TLS" "true" }}
{{- if .caSecret }}
{{- $_ = set $d "CORREX_KAFKA_TLS_CA_FILE" (printf "%s/kafka/ca.crt" $dir) }}
{{- end }}
{{- if .clientCertSecret }}
{{- $_ = set $d "CORREX_KAFKA_TLS_CERT_FILE" (printf "%s/kafka/tls.crt" $dir) }}
{{- $_ = set $d "CORREX_KAFKA_TLS_KEY_FILE" (printf "%s/kafka/tls.key" $dir) }}
{{- end }}
{{- end }}
{{- end }}
{{- with $root.Values.kafka.sasl }}
{{- if .mechanism }}
{{- $_ = set $d "CORREX_KAFKA_SASL_MECHANISM" .mechanism }}
{{- if not .usernameKey }}
{{- $_ = set $d "CORREX_KAFKA_SASL_USERNAME" .username }}
{{- end }}
{{- $_ = set $d "CORREX_KAFKA_SASL_PASSWORD_FILE" (printf "%s/kafka/sasl-password" $dir) }}
{{- end }}
{{- end }}
{{- if $root.Values.redis.tls.caSecret }}
{{- $_ = set $d "CORREX_REDIS_TLS_CA_FILE" (printf "%s/redis/ca.crt" $dir) }}
{{- end }}
{{- if $root.Values.redis.passwordSecret }}
{{- $_ = set $d "CORREX_REDIS_PASSWORD_FILE" (printf "%s/redis/password" $dir) }}
{{- end }}
{{- with $root.Values.otel }}
{{- $_ = set $d "OTEL_SERVICE_NAME" $v.otelServiceName }}
{{- $_ = set $d "OTEL_TRACES_EXPORTER" .tracesExporter }}
{{- $_ = set $d "OTEL_METRICS_EXPORTER" .metricsExporter }}
{{- $_ = set $d "OTEL_EXPORTER_OTLP_PROTOCOL" .protocol }}
{{- $_ = set $d "OTEL_TRACES_SAMPLER" .sampler }}
{{- with .endpoint }}
{{- $_ = set $d "OTEL_EXPORTER_OTLP_ENDPOINT" . }}
{{- end }}
{{- with .samplerArg }}
{{- $_ = set $d "OTEL_TRACES_SAMPLER_ARG" (toString .) }}
{{- end }}
{{- end }}
{{- toYaml $d }}
{{- end }}

{{/*
The Secret sources of one component's projected "secrets" volume, as a YAML list;
empty when the component needs no secret file. Paths match correx.configData.
*/}}
{{- define "correx.secretSources" -}}
{{- $root := .root }}
{{- $v := $root.Values }}
{{- if and (eq .component "projector") $v.systemKey.existingSecret }}
- secret:
    name: {{ $v.systemKey.existingSecret }}
    items:
      - key: {{ $v.systemKey.key }}
        path: system/keys
{{- end }}
{{- if and (include "correx.hasAuth" .) $v.auth.enabled }}
- secret:
    name: {{ $v.auth.existingSecret }}
    items:
      - key: {{ $v.auth.tokensKey }}
        path: auth/tokens
{{- end }}
{{- if $v.tls.enabled }}
- secret:
    name: {{ $v.tls.existingSecret }}
    items:
      - key: tls.crt
        path: http/tls.crt
      - key: tls.key
        path: http/tls.key
{{- with $v.tls.clientCA.existingSecret }}
- secret:
    name: {{ . }}
    items:
      - key: {{ $v.tls.clientCA.key }}
        path: http/client-ca.crt
{{- end }}
{{- end }}
{{- if $v.kafka.tls.enabled }}
{{- with $v.kafka.tls.caSecret }}
- secret:
    name: {{ . }}
    items:
      - key: {{ $v.kafka.tls.caKey }}
        path: kafka/ca.crt
{{- end }}
{{- with $v.kafka.tls.clientCertSecret }}
- secret:
    name: {{ . }}
    items:
      - key: tls.crt
        path: kafka/tls.crt
      - key: tls.key
        path: kafka/tls.key
{{- end }}
{{- end }}
{{- if $v.kafka.sasl.mechanism }}
- secret:
    name: {{ $v.kafka.sasl.existingSecret }}
    items:
      - key: {{ $v.kafka.sasl.passwordKey }}
        path: kafka/sasl-password
{{- end }}
{{- with $v.redis.tls.caSecret }}
- secret:
    name: {{ . }}
    items:
      - key: {{ $v.redis.tls.caKey }}
        path: redis/ca.crt
{{- end }}
{{- with $v.redis.passwordSecret }}
- secret:
    name: {{ . }}
    items:
      - key: {{ $v.redis.passwordKey }}
        path: redis/password
{{- end }}
{{- end }}

{{/*
Environment entries that a ConfigMap cannot carry: values from the pod itself,
values from Secrets, and OTEL_RESOURCE_ATTRIBUTES, which refers to the pod name.
*/}}
{{- define "correx.env" -}}
{{- $root := .root }}
{{- $c := .component }}
{{- $v := index $root.Values $c -}}
- name: K8S_POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
{{- if eq $c "projector" }}
# The static group instance id (KIP-345): the StatefulSet pod name, stable across
# restarts, so a restarted pod gets its partitions back without a rebalance.
- name: CORREX_INSTANCE_ID
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
{{- end }}
{{- with $root.Values.redis.existingSecret }}
- name: CORREX_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: {{ $root.Values.redis.existingSecretKey }}
{{- end }}
{{- if and $root.Values.kafka.sasl.mechanism $root.Values.kafka.sasl.usernameKey }}
- name: CORREX_KAFKA_SASL_USERNAME
  valueFrom:
    secretKeyRef:
      name: {{ $root.Values.kafka.sasl.existingSecret }}
      key: {{ $root.Values.kafka.sasl.usernameKey }}
{{- end }}
{{- $attrs := list (printf "k8s.namespace.name=%s" $root.Release.Namespace) "k8s.pod.name=$(K8S_POD_NAME)" }}
{{- range $k, $val := $root.Values.otel.resourceAttributes }}
{{- $attrs = append $attrs (printf "%s=%v" $k $val) }}
{{- end }}
- name: OTEL_RESOURCE_ATTRIBUTES
  value: {{ join "," $attrs | quote }}
{{- with $v.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
The pod template of one component, shared by the Deployments and the StatefulSet.
*/}}
{{- define "correx.podTemplate" -}}
{{- $root := .root }}
{{- $c := .component }}
{{- $v := index $root.Values $c }}
{{- $sources := include "correx.secretSources" . | trim -}}
metadata:
  labels:
    {{- include "correx.componentLabels" . | nindent 4 }}
    {{- with $v.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    checksum/config: {{ include "correx.configData" . | sha256sum }}
    {{- with $v.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  serviceAccountName: {{ include "correx.serviceAccountName" $root }}
  # No component calls the Kubernetes API.
  automountServiceAccountToken: false
  # Service links would inject variables such as <RELEASE>_..._SERVICE_HOST, which
  # for a release named "correx..." land in the services' CORREX_ namespace.
  enableServiceLinks: false
  terminationGracePeriodSeconds: {{ $v.terminationGracePeriodSeconds }}
  {{- with $root.Values.image.pullSecrets }}
  imagePullSecrets:
    {{- range . }}
    - name: {{ . }}
    {{- end }}
  {{- end }}
  {{- with $v.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  securityContext:
    runAsNonRoot: true
    runAsUser: 65532
    runAsGroup: 65532
    fsGroup: 65532
    seccompProfile:
      type: RuntimeDefault
  containers:
    - name: {{ $c }}
      image: {{ include "correx.image" . }}
      imagePullPolicy: {{ $root.Values.image.pullPolicy }}
      ports:
        - name: http
          containerPort: {{ $v.port }}
          protocol: TCP
      envFrom:
        - configMapRef:
            name: {{ include "correx.componentName" . }}
      env:
        {{- include "correx.env" . | nindent 8 }}
      livenessProbe:
        httpGet:
          path: /healthz
          port: http
          scheme: {{ include "correx.scheme" $root }}
        {{- toYaml $v.livenessProbe | nindent 8 }}
      readinessProbe:
        httpGet:
          path: /readyz
          port: http
          scheme: {{ include "correx.scheme" $root }}
        {{- toYaml $v.readinessProbe | nindent 8 }}
      {{- if and (ne $c "projector") $v.preStopSleepSeconds }}
      lifecycle:
        preStop:
          sleep:
            seconds: {{ $v.preStopSleepSeconds }}
      {{- end }}
      resources:
        {{- toYaml $v.resources | nindent 8 }}
      securityContext:
        runAsNonRoot: true
        runAsUser: 65532
        runAsGroup: 65532
        readOnlyRootFilesystem: true
        allowPrivilegeEscalation: false
        privileged: false
        capabilities:
          drop:
            - ALL
        seccompProfile:
          type: RuntimeDefault
      volumeMounts:
        - name: tmp
          mountPath: /tmp
        {{- if $sources }}
        - name: secrets
          mountPath: {{ include "correx.secretsDir" . }}
          readOnly: true
        {{- end }}
  volumes:
    - name: tmp
      emptyDir:
        sizeLimit: {{ $root.Values.tmpSizeLimit }}
    {{- if $sources }}
    - name: secrets
      projected:
        # 0440: readable by the container's group (fsGroup 65532), by nobody else.
        defaultMode: 288
        sources:
          {{- $sources | nindent 10 }}
    {{- end }}
  {{- with $v.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.topologySpreadConstraints }}
  topologySpreadConstraints:
    {{- range . }}
    - {{ toYaml (merge (deepCopy .) (dict "labelSelector" (dict "matchLabels" (include "correx.selectorLabels" $ | fromYaml)))) | indent 6 | trim }}
    {{- end }}
  {{- end }}
{{- end }}

{{/*
Rules that span several values, which values.schema.json (draft-07) cannot state.
Each failure names the values to change.
*/}}
{{- define "correx.validate" -}}
{{- $v := .Values }}
{{- $replicas := $v.projector.replicas | int64 }}
{{- $partitions := $v.kafka.partitions | int64 }}
{{- if gt $replicas $partitions }}
{{- fail (printf "projector.replicas (%d) must not exceed kafka.partitions (%d): a consumer group gives each partition to one member, so the extra projectors would sit idle. Lower projector.replicas (adding partitions to an existing topic moves sessions to other partitions and breaks their order: that is a migration, not a scaling step)." $replicas $partitions) }}
{{- end }}
{{- if and (not $v.redis.existingSecret) (or (regexMatch "^rediss?://[^/@]*:[^/@]*@" $v.redis.url) (regexMatch "[?&][a-z_]*password=" $v.redis.url)) }}
{{- fail "redis.url contains a password, which would land in a ConfigMap: put the URL in a Secret and set redis.existingSecret, or put the password alone in a Secret and set redis.passwordSecret." }}
{{- end }}
{{- if and $v.redis.tls.caSecret (not $v.redis.existingSecret) (not (hasPrefix "rediss://" $v.redis.url)) }}
{{- fail "redis.tls.caSecret is set but redis.url is not a rediss:// URL: TLS to Redis is chosen by the rediss:// scheme." }}
{{- end }}
{{- if $v.kafka.sasl.mechanism }}
{{- if not $v.kafka.sasl.existingSecret }}
{{- fail (printf "kafka.sasl.mechanism is %s but kafka.sasl.existingSecret is empty: name the Secret that holds the SASL password." $v.kafka.sasl.mechanism) }}
{{- end }}
{{- if and (not $v.kafka.sasl.username) (not $v.kafka.sasl.usernameKey) }}
{{- fail (printf "kafka.sasl.mechanism is %s but neither kafka.sasl.username nor kafka.sasl.usernameKey is set." $v.kafka.sasl.mechanism) }}
{{- end }}
{{- if and (eq $v.kafka.sasl.mechanism "PLAIN") (not $v.kafka.tls.enabled) }}
{{- fail "kafka.sasl.mechanism PLAIN sends the password in clear text: set kafka.tls.enabled=true as well." }}
{{- end }}
{{- end }}
{{- if and (or $v.kafka.tls.caSecret $v.kafka.tls.clientCertSecret) (not $v.kafka.tls.enabled) }}
{{- fail "kafka.tls.caSecret or kafka.tls.clientCertSecret is set but kafka.tls.enabled is false." }}
{{- end }}
{{- if and $v.auth.enabled (not $v.auth.existingSecret) }}
{{- fail "auth.enabled is true but auth.existingSecret is empty: name the Secret that holds the hashed bearer tokens." }}
{{- end }}
{{- if and $v.tls.enabled (not $v.tls.existingSecret) }}
{{- fail "tls.enabled is true but tls.existingSecret is empty: name the kubernetes.io/tls Secret with the serving certificate." }}
{{- end }}
{{- if and $v.tls.clientCA.existingSecret (not $v.tls.enabled) }}
{{- fail "tls.clientCA.existingSecret is set but tls.enabled is false: client certificates are verified only over HTTPS." }}
{{- end }}
{{- range $c := list "ingest" "query" }}
{{- $a := (index $v $c).autoscaling }}
{{- if and $a.enabled (gt ($a.minReplicas | int64) ($a.maxReplicas | int64)) }}
{{- fail (printf "%s.autoscaling.minReplicas (%d) is greater than %s.autoscaling.maxReplicas (%d)." $c ($a.minReplicas | int64) $c ($a.maxReplicas | int64)) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The events a counter counted in the last window, for an alert on them
(takes dict "metric" "sel" "window"): increase() over the window, or, where
the process started less than the window ago, the counter's value.
increase() alone sees nothing of what a process counted before its first
scrape, and a restore over a gap, or a verifier's first cycle, happens right
after a projector starts. process_start_time_seconds (Prometheus' process
collector, on every service's /metrics) tells a young process from a series
Prometheus itself missed samples of.
*/}}
{{- define "correx.counterIncrease" -}}
(increase({{ .metric }}{ {{- .sel -}} }[{{ .window }}]) > 0 or ({{ .metric }}{ {{- .sel -}} } > 0 and on (namespace, pod) (time() - process_start_time_seconds{ {{- .sel -}} } < {{ include "correx.seconds" .window }})))
{{- end }}

{{/* The seconds of a window of one unit (values.schema.json's promWindow): 15m is 900. */}}
{{- define "correx.seconds" -}}
{{- $units := dict "s" 1 "m" 60 "h" 3600 "d" 86400 "w" 604800 }}
{{- mul (regexReplaceAll "[a-z]$" . "" | int64) (get $units (regexReplaceAll "^[0-9]+" . "")) }}
{{- end }}
