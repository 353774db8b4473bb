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

{{/*
sluice.redisArgs: the flags saying which Redis the fleet shares and how to
reach it (--redis, --redis-cluster or --redis-sentinel, TLS, the password
file, the key prefix), as a YAML list. It fails, naming the values to
change, for two Redis at once, for none, and for TLS or a password with
the chart's own Redis (which has neither). docs/redis.md.
*/}}
{{- define "sluice.redisArgs" -}}
{{- $r := .Values.redis -}}
{{- $tls := $r.tls | default dict -}}
{{- $ca := $tls.caSecret | default dict -}}
{{- $client := $tls.clientCertSecret | default dict -}}
{{- $password := $r.passwordSecret | default dict -}}
{{- $sentinelSecret := $r.sentinelSecret | default dict -}}
{{- $given := list -}}
{{- range $value, $set := dict "redis.url" $r.url "redis.cluster" $r.cluster "redis.sentinel" $r.sentinel "redis.sentinelSecret" $sentinelSecret.name -}}
{{- if $set }}{{ $given = append $given $value }}{{ end -}}
{{- end -}}
{{- $tlsFiles := or $ca.name $tls.caFile $client.name $tls.serverName -}}
{{- if gt (len $given) 1 -}}
{{- fail (printf "%s: give one" (join " and " (sortAlpha $given))) -}}
{{- end -}}
{{- if and (not $given) (not $r.deploy) -}}
{{- fail "shape redis-fleet needs Redis: set redis.url, redis.cluster or redis.sentinel, or redis.deploy: true" -}}
{{- end -}}
{{- if and (not $given) (or $tls.enabled $tlsFiles $password.name) -}}
{{- fail "redis.tls and redis.passwordSecret are for your own Redis (redis.url, redis.cluster or redis.sentinel): the chart's Redis (redis.deploy) has neither TLS nor a password" -}}
{{- end -}}
{{- if and $tlsFiles (not $tls.enabled) -}}
{{- fail "redis.tls.caSecret, caFile, clientCertSecret or serverName given: set redis.tls.enabled: true (and give Redis a rediss:// URL)" -}}
{{- end -}}
{{- if and $ca.name $tls.caFile -}}
{{- fail "redis.tls.caSecret and redis.tls.caFile: give one" -}}
{{- end -}}
{{- $list := and $r.cluster (not (contains "://" $r.cluster)) -}}
{{- if $tls.enabled -}}
{{- range $value, $url := dict "redis.url" $r.url "redis.cluster" $r.cluster "redis.sentinel" $r.sentinel -}}
{{- if and $url (contains "://" $url) (not (hasPrefix "rediss://" $url)) -}}
{{- fail (printf "redis.tls.enabled: %s is %q; TLS needs a rediss:// URL" $value $url) -}}
{{- end -}}
{{- end -}}
{{- if and $list (not $tlsFiles) -}}
{{- fail "redis.tls.enabled with redis.cluster as HOST:PORT,...: give redis.tls.caSecret, caFile, clientCertSecret or serverName (the list form speaks TLS with them), or give redis.cluster as one rediss:// URL" -}}
{{- end -}}
{{- end -}}
{{- if $r.url }}
- --redis
- {{ $r.url | quote }}
{{- else if $r.cluster }}
- --redis-cluster
- {{ $r.cluster | quote }}
{{- else if $r.sentinel }}
- --redis-sentinel
- {{ $r.sentinel | quote }}
{{- else if not $sentinelSecret.name }}
- --redis
- {{ printf "redis://%s-redis:6379/0" (include "sluice.fullname" .) | quote }}
{{- end }}
{{- if $tls.enabled }}
{{- if $ca.name }}
- --redis-tls-ca
- /etc/sluice-redis/ca/ca.crt
{{- else if $tls.caFile }}
- --redis-tls-ca
- {{ $tls.caFile | quote }}
{{- end }}
{{- if $client.name }}
- --redis-tls-cert
- /etc/sluice-redis/client/tls.crt
- --redis-tls-key
- /etc/sluice-redis/client/tls.key
{{- end }}
{{- if $tls.serverName }}
- --redis-tls-server-name
- {{ $tls.serverName | quote }}
{{- end }}
{{- end }}
{{- if $password.name }}
- --redis-password-file
- /etc/sluice-redis/password/password
{{- end }}
{{- with $r.keyPrefix }}
- --redis-key-prefix
- {{ . | quote }}
{{- end }}
{{- end -}}

{{/*
sluice.redisVolumes, sluice.redisVolumeMounts: the Secrets the Redis
flags name (sluice.redisArgs), mounted as files under /etc/sluice-redis/,
as YAML lists. Whole directories, never subPath, so that a rotated Secret
reaches the files (the password file is read again for every new
connection).
*/}}
{{- define "sluice.redisVolumes" -}}
{{- $r := .Values.redis -}}
{{- $tls := $r.tls | default dict -}}
{{- with $r.passwordSecret }}{{ if .name }}
- name: redis-password
  secret:
    secretName: {{ .name }}
    items: [{key: {{ .key | default "password" | quote }}, path: password}]
{{- end }}{{ end }}
{{- if $tls.enabled }}
{{- with $tls.caSecret }}{{ if .name }}
- name: redis-tls-ca
  secret:
    secretName: {{ .name }}
    items: [{key: {{ .key | default "ca.crt" | quote }}, path: ca.crt}]
{{- end }}{{ end }}
{{- with $tls.clientCertSecret }}{{ if .name }}
- name: redis-tls-client
  secret:
    secretName: {{ .name }}
    items:
      - {key: {{ .certKey | default "tls.crt" | quote }}, path: tls.crt}
      - {key: {{ .keyKey | default "tls.key" | quote }}, path: tls.key}
{{- end }}{{ end }}
{{- end }}
{{- end -}}

{{- define "sluice.redisVolumeMounts" -}}
{{- $r := .Values.redis -}}
{{- $tls := $r.tls | default dict -}}
{{- if ($r.passwordSecret | default dict).name }}
- {name: redis-password, mountPath: /etc/sluice-redis/password, readOnly: true}
{{- end }}
{{- if $tls.enabled }}
{{- if ($tls.caSecret | default dict).name }}
- {name: redis-tls-ca, mountPath: /etc/sluice-redis/ca, readOnly: true}
{{- end }}
{{- if ($tls.clientCertSecret | default dict).name }}
- {name: redis-tls-client, mountPath: /etc/sluice-redis/client, readOnly: true}
{{- end }}
{{- end }}
{{- end -}}

{{/*
sluice.redisEnv: SLUICE_REDIS_SENTINEL from redis.sentinelSecret (the
Sentinel URL carries the sentinels' password, which no file can), as a
YAML list.
*/}}
{{- define "sluice.redisEnv" -}}
{{- with .Values.redis.sentinelSecret }}{{ if .name }}
- name: SLUICE_REDIS_SENTINEL
  valueFrom:
    secretKeyRef: {name: {{ .name }}, key: {{ .key | default "url" | quote }}}
{{- end }}{{ end }}
{{- end -}}

{{/*
sluice.checkRuleFiles fails for a file of envoyRatelimitConfig that the
server would never read (it reads *.yaml and *.yml, never a dot file) or
that cannot be a ConfigMap's key, naming it.
*/}}
{{- define "sluice.checkRuleFiles" -}}
{{- range $file, $_ := .Values.envoyRatelimitConfig }}
{{- if not (regexMatch "^[-_a-zA-Z0-9][-._a-zA-Z0-9]*\\.ya?ml$" $file) }}
{{- fail (printf "envoyRatelimitConfig.%s: want a file name ending in .yaml or .yml (letters, digits, -, _ and .; not starting with a dot): only those are read" $file) }}
{{- end }}
{{- end }}
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
  env        more environment variables of the container (a list)
  volumes    more volumes of the pod (a list), mounted by volumeMounts (a list)
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
{{- include "sluice.checkRuleFiles" $root -}}
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
          {{- if or .advertise .env $v.extraEnv }}
          env:
            {{- if .advertise }}
            - name: POD_IP
              valueFrom: {fieldRef: {fieldPath: status.podIP}}
            {{- end }}
            {{- with .env }}
            {{- toYaml . | nindent 12 }}
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
          {{- if or (and .config $v.config) $envoy .volumeMounts $v.extraVolumeMounts }}
          volumeMounts:
            {{- if and .config $v.config }}
            - {name: config, mountPath: /etc/sluice, readOnly: true}
            {{- end }}
            {{- if $envoy }}
            - {name: envoy-ratelimit, mountPath: /etc/sluice-envoy, readOnly: true}
            {{- end }}
            {{- with .volumeMounts }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
            {{- with $v.extraVolumeMounts }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          {{- end }}
      {{- if or (and .config $v.config) $envoy .volumes $v.extraVolumes }}
      volumes:
        {{- if and .config $v.config }}
        - name: config
          configMap: {name: {{ .name }}-config}
        {{- end }}
        {{- if $envoy }}
        - name: envoy-ratelimit
          configMap: {name: {{ .name }}-envoy-ratelimit}
        {{- end }}
        {{- with .volumes }}
        {{- toYaml . | nindent 8 }}
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
