{{/*
Shape envoy-ratelimit: Sluice as envoyproxy/ratelimit (docs/envoy-gateway.md).
The container runs the image's /bin/ratelimit (`sluice envoy-ratelimit`),
configured by upstream's environment variables (envoyRatelimit.env), on
upstream's three ports.
*/}}

{{/* sluice.upstreamVar: envoyproxy/ratelimit's variable as the server
reads it: its value in the environment (list ENV NAME DEFAULT), the default
when the variable is not there (an empty value is a value, as envconfig's). */}}
{{- define "sluice.upstreamVar" -}}
{{- $env := index . 0 -}}
{{- $name := index . 1 -}}
{{- if hasKey $env $name -}}
{{- toString (get $env $name) -}}
{{- else -}}
{{- index . 2 -}}
{{- end -}}
{{- end -}}

{{/* sluice.envoyRatelimitChartRedis: "true" when shape envoy-ratelimit
counts in the chart's own Redis: BACKEND_TYPE redis, no REDIS_URL, and
redis.deploy. */}}
{{- define "sluice.envoyRatelimitChartRedis" -}}
{{- $env := (.Values.envoyRatelimit | default dict).env | default dict -}}
{{- $backend := lower (include "sluice.upstreamVar" (list $env "BACKEND_TYPE" "redis")) -}}
{{- if and (eq .Values.shape "envoy-ratelimit") .Values.redis.deploy (eq $backend "redis") (not (hasKey $env "REDIS_URL")) -}}
true
{{- end -}}
{{- end -}}

{{/*
sluice.envoyRatelimit renders the shape: the rules' ConfigMap (with
CONFIG_TYPE FILE), the Deployment, its Service (grpc, http, debug) and
PodDisruptionBudget. It fails, naming the value to change, for what
`sluice envoy-ratelimit` would refuse at start (BACKEND_TYPE memcache,
REDIS_PERSECOND, GRPC_UDS, a CONFIG_TYPE
other than FILE and GRPC_XDS_SOTW), and for what could not work in a pod:
ports that clash or are not ports, listeners on loopback (neither probes
nor the Service reach them), rules from files without files (or with
GRPC_XDS_SOTW beside them), an xDS control plane at upstream's default
localhost:18000, Redis on a unix socket given as HOST:PORT, no Redis,
TLS or a password for the chart's own Redis, counters in memory on more
than one replica, and a password as a value in the Deployment.
*/}}
{{- define "sluice.envoyRatelimit" -}}
{{- $v := .Values -}}
{{- $e := $v.envoyRatelimit | default dict -}}
{{- $env := $e.env | default dict -}}
{{- $secretEnv := $e.secretEnv | default dict -}}
{{- $name := include "sluice.fullname" . -}}
{{- $labels := include "sluice.labels" (dict "root" . "name" $name) -}}
{{- $selector := include "sluice.selectorLabels" (dict "root" . "name" $name) -}}
{{- $truthy := list "1" "t" "T" "TRUE" "true" "True" -}}
{{- $replicas := int ($e.replicas | default 1) -}}
{{- /* The environment as strings, as the container gets it. */ -}}
{{- $str := dict -}}
{{- range $k, $val := $env }}{{ $_ := set $str $k (toString $val) }}{{ end -}}
{{- $var := dict -}}
{{- range $k, $def := dict "BACKEND_TYPE" "redis" "CONFIG_TYPE" "FILE" "REDIS_TYPE" "SINGLE" "REDIS_SOCKET_TYPE" "unix"
    "RUNTIME_ROOT" "/srv/runtime_data/current" "RUNTIME_SUBDIRECTORY" "" "RUNTIME_APPDIRECTORY" "config"
    "GRPC_PORT" "8081" "PORT" "8080" "DEBUG_PORT" "6070" "GRPC_HOST" "0.0.0.0" "HOST" "0.0.0.0" "DEBUG_HOST" "0.0.0.0" }}
{{- $_ := set $var $k (include "sluice.upstreamVar" (list $str $k $def)) }}
{{- end -}}

{{- include "sluice.checkRuleFiles" . -}}
{{- range $k, $_ := merge (dict) $env $secretEnv }}
{{- if not (regexMatch "^[A-Za-z_][A-Za-z0-9_]*$" $k) }}
{{- fail (printf "envoyRatelimit.env or secretEnv: %q is not a variable's name" $k) }}
{{- end }}
{{- end }}

{{- /* Secrets come from Secrets. */ -}}
{{- range $k := list "REDIS_AUTH" "REDIS_SENTINEL_AUTH" "REDIS_PERSECOND_AUTH" }}
{{- if hasKey $env $k }}
{{- fail (printf "envoyRatelimit.env.%s: a password as a value in the Deployment; give it from a Secret's key: envoyRatelimit.secretEnv.%s: {name: SECRET, key: KEY}" $k $k) }}
{{- end }}
{{- end }}
{{- range $k, $ref := $secretEnv }}
{{- if hasKey $env $k }}
{{- fail (printf "envoyRatelimit.env.%s and envoyRatelimit.secretEnv.%s: give one" $k $k) }}
{{- end }}
{{- if not (and $ref $ref.name $ref.key) }}
{{- fail (printf "envoyRatelimit.secretEnv.%s: give the Secret's name and key ({name: SECRET, key: KEY})" $k) }}
{{- end }}
{{- end }}

{{- /* What sluice envoy-ratelimit refuses at start. */ -}}
{{- $backend := lower $var.BACKEND_TYPE -}}
{{- if eq $backend "memcache" }}
{{- fail "envoyRatelimit.env.BACKEND_TYPE: memcache is not supported: use redis (the default), or memory for one replica" }}
{{- else if not (has $backend (list "redis" "memory")) }}
{{- fail (printf "envoyRatelimit.env.BACKEND_TYPE: %q, want redis or memory" $var.BACKEND_TYPE) }}
{{- end }}
{{- if has (get $str "REDIS_PERSECOND") $truthy }}
{{- fail "envoyRatelimit.env.REDIS_PERSECOND: a second Redis for per-second limits is not supported: Sluice keeps every limit in one Redis (or Redis Cluster)" }}
{{- end }}
{{- if get $str "GRPC_UDS" }}
{{- fail "envoyRatelimit.env.GRPC_UDS: gRPC on a Unix socket is not supported (nor reachable through the Service): use GRPC_PORT" }}
{{- end }}
{{- $configType := upper $var.CONFIG_TYPE -}}
{{- if not (has $configType (list "FILE" "GRPC_XDS_SOTW")) }}
{{- fail (printf "envoyRatelimit.env.CONFIG_TYPE: %q, want FILE or GRPC_XDS_SOTW" $var.CONFIG_TYPE) }}
{{- end }}

{{- /* The three listeners: ports, distinct, reachable from outside the pod. */ -}}
{{- $ports := dict -}}
{{- range $k := list "GRPC_PORT" "PORT" "DEBUG_PORT" }}
{{- $p := get $var $k }}
{{- if or (not (regexMatch "^[0-9]+$" $p)) (lt (atoi $p) 1) (gt (atoi $p) 65535) }}
{{- fail (printf "envoyRatelimit.env.%s: %q, want a port, 1 to 65535" $k $p) }}
{{- end }}
{{- $_ := set $ports $k (atoi $p) }}
{{- end }}
{{- range $pair := list (list "GRPC_PORT" "PORT") (list "GRPC_PORT" "DEBUG_PORT") (list "PORT" "DEBUG_PORT") }}
{{- if eq (get $ports (index $pair 0)) (get $ports (index $pair 1)) }}
{{- fail (printf "envoyRatelimit.env.%s and envoyRatelimit.env.%s: both %d; each listener needs its own port" (index $pair 0) (index $pair 1) (get $ports (index $pair 0))) }}
{{- end }}
{{- end }}
{{- range $k := list "GRPC_HOST" "HOST" "DEBUG_HOST" }}
{{- $h := get $var $k }}
{{- if regexMatch "^(127\\.|localhost$|::1$|\\[::1\\]$)" $h }}
{{- fail (printf "envoyRatelimit.env.%s: %q is loopback: neither the probes nor the Service would reach it (leave it out: 0.0.0.0)" $k $h) }}
{{- end }}
{{- end }}

{{- /* The rules: files mounted where RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/
RUNTIME_APPDIRECTORY points, or an xDS control plane. */ -}}
{{- if not (isAbs $var.RUNTIME_ROOT) }}
{{- fail (printf "envoyRatelimit.env.RUNTIME_ROOT: %q, want an absolute path (the rules' ConfigMap is mounted under it)" $var.RUNTIME_ROOT) }}
{{- end }}
{{- $dir := clean (printf "%s/%s/%s" $var.RUNTIME_ROOT $var.RUNTIME_SUBDIRECTORY $var.RUNTIME_APPDIRECTORY) -}}
{{- $rules := $v.envoyRatelimitConfig | default dict -}}
{{- $ownMount := false -}}
{{- range $v.extraVolumeMounts }}
{{- if eq (clean (toString .mountPath)) $dir }}{{ $ownMount = true }}{{ end }}
{{- end }}
{{- if eq $configType "FILE" }}
{{- if and $rules $ownMount }}
{{- fail (printf "envoyRatelimitConfig and an extraVolumeMounts entry both at %s (RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY): give one" $dir) }}
{{- end }}
{{- if not (or $rules $ownMount) }}
{{- fail (printf "shape envoy-ratelimit reads envoyproxy/ratelimit's rules from files (envoyRatelimit.env.CONFIG_TYPE FILE, upstream's default): give them as envoyRatelimitConfig (mounted at %s), or set envoyRatelimit.env.CONFIG_TYPE: GRPC_XDS_SOTW with CONFIG_GRPC_XDS_SERVER_URL" $dir) }}
{{- end }}
{{- else }}
{{- if $rules }}
{{- fail "envoyRatelimitConfig with envoyRatelimit.env.CONFIG_TYPE GRPC_XDS_SOTW: the rules come from the xDS control plane; give one" }}
{{- end }}
{{- if not (get $str "CONFIG_GRPC_XDS_SERVER_URL") }}
{{- fail "envoyRatelimit.env.CONFIG_GRPC_XDS_SERVER_URL: needed with CONFIG_TYPE GRPC_XDS_SOTW (upstream's default, localhost:18000, is nothing in this pod)" }}
{{- end }}
{{- end }}

{{- /* Redis: upstream's variables, or the chart's for trying it. */ -}}
{{- $r := $v.redis -}}
{{- $given := list -}}
{{- range $value, $set := dict "redis.url" $r.url "redis.cluster" $r.cluster "redis.sentinel" $r.sentinel
    "redis.sentinelSecret" ($r.sentinelSecret | default dict).name "redis.passwordSecret" ($r.passwordSecret | default dict).name
    "redis.tls" (($r.tls | default dict).enabled) "redis.keyPrefix" $r.keyPrefix }}
{{- if $set }}{{ $given = append $given $value }}{{ end }}
{{- end }}
{{- if $given }}
{{- fail (printf "%s: shape envoy-ratelimit reaches Redis by envoyproxy/ratelimit's variables: envoyRatelimit.env.REDIS_URL, REDIS_SOCKET_TYPE, REDIS_TYPE, REDIS_TLS, CACHE_KEY_PREFIX, and envoyRatelimit.secretEnv.REDIS_AUTH" (join ", " (sortAlpha $given))) }}
{{- end }}
{{- $chartRedis := include "sluice.envoyRatelimitChartRedis" . -}}
{{- if eq $backend "memory" }}
{{- if gt $replicas 1 }}
{{- fail (printf "envoyRatelimit.replicas: %d with envoyRatelimit.env.BACKEND_TYPE memory: each replica would count alone; set replicas: 1, or count in Redis" $replicas) }}
{{- end }}
{{- else }}
{{- $redisType := lower $var.REDIS_TYPE -}}
{{- if not (has $redisType (list "single" "cluster" "sentinel")) }}
{{- fail (printf "envoyRatelimit.env.REDIS_TYPE: %q, want single, cluster or sentinel" $var.REDIS_TYPE) }}
{{- end }}
{{- if $chartRedis }}
{{- $own := list -}}
{{- if hasKey $env "REDIS_SOCKET_TYPE" }}{{ if ne (lower $var.REDIS_SOCKET_TYPE) "tcp" }}{{ $own = append $own "envoyRatelimit.env.REDIS_SOCKET_TYPE" }}{{ end }}{{ end }}
{{- if ne $redisType "single" }}{{ $own = append $own "envoyRatelimit.env.REDIS_TYPE" }}{{ end }}
{{- if has (get $str "REDIS_TLS") $truthy }}{{ $own = append $own "envoyRatelimit.env.REDIS_TLS" }}{{ end }}
{{- if hasKey $secretEnv "REDIS_AUTH" }}{{ $own = append $own "envoyRatelimit.secretEnv.REDIS_AUTH" }}{{ end }}
{{- if $own }}
{{- fail (printf "%s: for your own Redis (envoyRatelimit.env.REDIS_URL): the chart's Redis (redis.deploy) is one node over TCP, without TLS or a password" (join ", " $own)) }}
{{- end }}
{{- $_ := set $str "REDIS_SOCKET_TYPE" "tcp" }}
{{- $_ := set $str "REDIS_URL" (printf "%s-redis:6379" $name) }}
{{- else if not (hasKey $env "REDIS_URL") }}
{{- fail "shape envoy-ratelimit with BACKEND_TYPE redis (upstream's default) needs Redis: set envoyRatelimit.env.REDIS_URL (with REDIS_SOCKET_TYPE: tcp), or redis.deploy: true (the chart's Redis, for trying it), or envoyRatelimit.env.BACKEND_TYPE: memory (one replica)" }}
{{- else if and (eq $redisType "single") (eq (lower $var.REDIS_SOCKET_TYPE) "unix") (not (hasPrefix "/" (get $str "REDIS_URL"))) }}
{{- fail (printf "envoyRatelimit.env.REDIS_URL: %q is not a socket's path, and REDIS_SOCKET_TYPE is unix (upstream's default): set envoyRatelimit.env.REDIS_SOCKET_TYPE: tcp" (get $str "REDIS_URL")) }}
{{- end }}
{{- end }}

{{- /* The logs: the chart's logLevel and logFormat unless env gives them. */ -}}
{{- if not (hasKey $str "LOG_LEVEL") }}{{ $_ := set $str "LOG_LEVEL" $v.logLevel }}{{ end }}
{{- if not (hasKey $str "LOG_FORMAT") }}{{ $_ := set $str "LOG_FORMAT" $v.logFormat }}{{ end }}

{{- /* The budget: with Redis, minAvailable, below the replicas (else a
node drain could never evict one); in memory, one replica that a drain may
take (maxUnavailable: 1), as one-server. */ -}}
{{- $budget := dict "maxUnavailable" 1 -}}
{{- $strategy := dict "type" "Recreate" -}}
{{- if ne $backend "memory" }}
{{- $budget = dict "minAvailable" $e.minAvailable }}
{{- $strategy = dict "type" "RollingUpdate" "rollingUpdate" (dict "maxUnavailable" 1 "maxSurge" 1) }}
{{- if and (or (kindIs "float64" $e.minAvailable) (kindIs "int64" $e.minAvailable) (kindIs "int" $e.minAvailable)) (ge (int $e.minAvailable) $replicas) }}
{{- fail (printf "envoyRatelimit.minAvailable: %d of envoyRatelimit.replicas %d: a node drain could never evict one; keep it below the replicas" (int $e.minAvailable) $replicas) }}
{{- end }}
{{- end }}
{{- if and (eq $configType "FILE") $rules }}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ $name }}-envoy-ratelimit
  labels:
    {{- $labels | nindent 4 }}
    app.kubernetes.io/component: ratelimit
data:
  {{- range $file, $content := $rules }}
  {{ $file }}: |
    {{- $content | nindent 4 }}
  {{- end }}
{{- end }}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ $name }}
  labels:
    {{- $labels | nindent 4 }}
    app.kubernetes.io/component: ratelimit
spec:
  replicas: {{ $replicas }}
  strategy:
    {{- toYaml $strategy | nindent 4 }}
  selector:
    matchLabels:
      {{- $selector | nindent 6 }}
  template:
    metadata:
      labels:
        {{- $labels | nindent 8 }}
        app.kubernetes.io/component: ratelimit
        {{- with $v.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- if or $v.metrics.scrapeAnnotations $v.podAnnotations }}
      annotations:
        {{- if $v.metrics.scrapeAnnotations }}
        prometheus.io/scrape: "true"
        prometheus.io/port: {{ $ports.DEBUG_PORT | quote }}
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
        - name: ratelimit
          image: {{ printf "%s:%s" $v.image.repository (toString $v.image.tag) | quote }}
          imagePullPolicy: {{ $v.image.pullPolicy }}
          command: [/bin/ratelimit]
          {{- with $v.extraArgs }}
          args:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          env:
            {{- range $k, $val := $str }}
            - {name: {{ $k }}, value: {{ $val | quote }}}
            {{- end }}
            {{- range $k, $ref := $secretEnv }}
            - name: {{ $k }}
              valueFrom:
                secretKeyRef: {name: {{ $ref.name }}, key: {{ $ref.key | quote }}}
            {{- end }}
            {{- with $v.extraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          {{- with $e.envFrom }}
          envFrom:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          ports:
            - {name: grpc, containerPort: {{ $ports.GRPC_PORT }}}
            - {name: http, containerPort: {{ $ports.PORT }}}
            - {name: debug, containerPort: {{ $ports.DEBUG_PORT }}}
          readinessProbe:
            {{- toYaml $e.readinessProbe | nindent 12 }}
          livenessProbe:
            {{- toYaml $e.livenessProbe | nindent 12 }}
          resources:
            {{- toYaml $v.resources | nindent 12 }}
          securityContext:
            {{- toYaml $v.securityContext | nindent 12 }}
          {{- if or (and (eq $configType "FILE") $rules) $v.extraVolumeMounts }}
          volumeMounts:
            {{- if and (eq $configType "FILE") $rules }}
            - {name: envoy-ratelimit, mountPath: {{ $dir | quote }}, readOnly: true}
            {{- end }}
            {{- with $v.extraVolumeMounts }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          {{- end }}
      {{- if or (and (eq $configType "FILE") $rules) $v.extraVolumes }}
      volumes:
        {{- if and (eq $configType "FILE") $rules }}
        - name: envoy-ratelimit
          configMap: {name: {{ $name }}-envoy-ratelimit}
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
  name: {{ $name }}
  labels:
    {{- $labels | nindent 4 }}
    app.kubernetes.io/component: ratelimit
  {{- with $v.service.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  type: {{ $v.service.type }}
  selector:
    {{- $selector | nindent 4 }}
  ports:
    - {name: grpc, port: {{ $ports.GRPC_PORT }}, targetPort: grpc, appProtocol: grpc}
    - {name: http, port: {{ $ports.PORT }}, targetPort: http, appProtocol: http}
    - {name: debug, port: {{ $ports.DEBUG_PORT }}, targetPort: debug, appProtocol: http}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ $name }}
  labels:
    {{- $labels | nindent 4 }}
    app.kubernetes.io/component: ratelimit
spec:
  {{- toYaml $budget | nindent 2 }}
  selector:
    matchLabels:
      {{- $selector | nindent 6 }}
{{- end -}}
