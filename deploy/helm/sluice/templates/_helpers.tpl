{{/* sluice.fullname: the release's base name (the release name alone when it already names the chart). */}}
{{- define "sluice.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* sluice.labels: the common labels; call with (dict "root" $ "name" NAME). */}}
{{- define "sluice.labels" -}}
{{ include "sluice.selectorLabels" . }}
app.kubernetes.io/part-of: sluice
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{/* sluice.selectorLabels: what a workload's Service and budget select. */}}
{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- end -}}

{{/* sluice.etcdEndpoints: etcd.endpoints, or the chart's own etcd. */}}
{{- define "sluice.etcdEndpoints" -}}
{{- if .Values.etcd.endpoints -}}
{{- .Values.etcd.endpoints -}}
{{- else if .Values.etcd.deploy -}}
{{- printf "http://%s-etcd:2379" (include "sluice.fullname" .) -}}
{{- else -}}
{{- fail (printf "shape %s needs etcd: set etcd.endpoints, or etcd.deploy: true" .Values.shape) -}}
{{- end -}}
{{- end -}}

{{/* sluice.redisArgs: --redis or --redis-cluster, as a YAML list. */}}
{{- define "sluice.redisArgs" -}}
{{- if and .Values.redis.url .Values.redis.cluster -}}
{{- fail "redis.url and redis.cluster: give one" -}}
{{- else if .Values.redis.url -}}
- --redis
- {{ .Values.redis.url | quote }}
{{- else if .Values.redis.cluster -}}
- --redis-cluster
- {{ .Values.redis.cluster | quote }}
{{- else if .Values.redis.deploy -}}
- --redis
- {{ printf "redis://%s-redis:6379/0" (include "sluice.fullname" .) | quote }}
{{- else -}}
{{- fail "shape redis-fleet needs Redis: set redis.url or redis.cluster, or redis.deploy: true" -}}
{{- end -}}
{{- end -}}

{{/*
sluice.server renders one Sluice workload: its ConfigMaps (when it has a
configuration), Deployment, Service and PodDisruptionBudget. Call with a
dict:
  root       $
  name       the workload's name (= its Service's, its pods' app.kubernetes.io/name)
  component  server, fleet, root or intermediate
  replicas   tasks
  args       sluice server's flags beyond --listen, --config and the logs' (a list)
  config     true: mount the chart's config (and Envoy's rules) and pass --config
  advertise  true: --advertise $(POD_IP):PORT
  strategy   the Deployment's strategy (a dict)
  budget     the PodDisruptionBudget's spec beside its selector (a dict)
  resources  the container's resources
*/}}
{{- define "sluice.server" -}}
{{- $root := .root -}}
{{- $v := $root.Values -}}
{{- $labels := include "sluice.labels" (dict "root" $root "name" .name) -}}
{{- $selector := include "sluice.selectorLabels" (dict "root" $root "name" .name) -}}
{{- $envoy := and .config $v.envoyRatelimitConfig -}}
{{- if and .config $v.config }}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .name }}-config
  labels:
    {{- $labels | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
data:
  config.yaml: |
    {{- $v.config | nindent 4 }}
{{- end }}
{{- if $envoy }}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .name }}-envoy-ratelimit
  labels:
    {{- $labels | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
data:
  {{- range $file, $rules := $v.envoyRatelimitConfig }}
  {{ $file }}: |
    {{- $rules | nindent 4 }}
  {{- end }}
{{- end }}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .name }}
  labels:
    {{- $labels | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
spec:
  replicas: {{ .replicas }}
  strategy:
    {{- toYaml .strategy | nindent 4 }}
  selector:
    matchLabels:
      {{- $selector | nindent 6 }}
  template:
    metadata:
      labels:
        {{- $labels | nindent 8 }}
        app.kubernetes.io/component: {{ .component }}
        {{- with $v.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- if or $v.metrics.scrapeAnnotations $v.podAnnotations }}
      annotations:
        {{- if $v.metrics.scrapeAnnotations }}
        prometheus.io/scrape: "true"
        prometheus.io/port: {{ $v.port | quote }}
        prometheus.io/path: /metrics
        {{- end }}
        {{- with $v.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- end }}
    spec:
      terminationGracePeriodSeconds: {{ $v.terminationGracePeriodSeconds }}
      securityContext:
        {{- toYaml $v.podSecurityContext | nindent 8 }}
      {{- with $v.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      containers:
        - name: sluice
          image: {{ printf "%s:%s" $v.image.repository (toString $v.image.tag) | quote }}
          imagePullPolicy: {{ $v.image.pullPolicy }}
          args:
            - server
            - --listen
            - {{ printf "0.0.0.0:%v" $v.port | quote }}
            {{- if .advertise }}
            - --advertise
            - {{ printf "$(POD_IP):%v" $v.port | quote }}
            {{- end }}
            {{- if and .config $v.config }}
            - --config
            - /etc/sluice/config.yaml
            {{- end }}
            {{- if $envoy }}
            - --envoy-ratelimit-config
            - /etc/sluice-envoy
            {{- end }}
            {{- with .args }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
            - --log-format
            - {{ $v.logFormat }}
            - --log-level
            - {{ $v.logLevel }}
            {{- with $v.extraArgs }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          {{- if or .advertise $v.extraEnv }}
          env:
            {{- if .advertise }}
            - name: POD_IP
              valueFrom: {fieldRef: {fieldPath: status.podIP}}
            {{- end }}
            {{- with $v.extraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          {{- end }}
          ports:
            - {name: grpc, containerPort: {{ $v.port }}}
          readinessProbe:
            {{- toYaml $v.readinessProbe | nindent 12 }}
          livenessProbe:
            {{- toYaml $v.livenessProbe | nindent 12 }}
          resources:
            {{- toYaml .resources | nindent 12 }}
          securityContext:
            {{- toYaml $v.securityContext | nindent 12 }}
          {{- if or (and .config $v.config) $envoy $v.extraVolumeMounts }}
          volumeMounts:
            {{- if and .config $v.config }}
            - {name: config, mountPath: /etc/sluice, readOnly: true}
            {{- end }}
            {{- if $envoy }}
            - {name: envoy-ratelimit, mountPath: /etc/sluice-envoy, readOnly: true}
            {{- end }}
            {{- with $v.extraVolumeMounts }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          {{- end }}
      {{- if or (and .config $v.config) $envoy $v.extraVolumes }}
      volumes:
        {{- if and .config $v.config }}
        - name: config
          configMap: {name: {{ .name }}-config}
        {{- end }}
        {{- if $envoy }}
        - name: envoy-ratelimit
          configMap: {name: {{ .name }}-envoy-ratelimit}
        {{- end }}
        {{- with $v.extraVolumes }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- end }}
      {{- with $v.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.topologySpreadConstraints }}
      topologySpreadConstraints:
        {{- toYaml . | nindent 8 }}
      {{- end }}
---
apiVersion: v1
kind: Service
metadata:
  name: {{ .name }}
  labels:
    {{- $labels | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
  {{- with $v.service.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  type: {{ $v.service.type }}
  selector:
    {{- $selector | nindent 4 }}
  ports:
    - {name: grpc, port: {{ $v.port }}, targetPort: grpc, appProtocol: grpc}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ .name }}
  labels:
    {{- $labels | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
spec:
  {{- toYaml .budget | nindent 2 }}
  selector:
    matchLabels:
      {{- $selector | nindent 6 }}
{{- end -}}
