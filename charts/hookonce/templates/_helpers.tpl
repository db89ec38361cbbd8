{{/* Names, labels and the derived values every template shares. */}}

{{- define "hookonce.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "hookonce.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "hookonce.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "hookonce.labels" -}}
helm.sh/chart: {{ include "hookonce.chart" . }}
{{ include "hookonce.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: hookonce
{{- end }}

{{- define "hookonce.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hookonce.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "hookonce.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "hookonce.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "hookonce.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/* The Secret the env:NAME references are read from, or "" when none is needed. */}}
{{- define "hookonce.secretName" -}}
{{- if .Values.secrets.existingSecret }}
{{- .Values.secrets.existingSecret }}
{{- else if or .Values.secrets.data .Values.secrets.redisUrlKey }}
{{- include "hookonce.fullname" . }}
{{- end }}
{{- end }}

{{/*
Every NAME of an "env:NAME" secret reference (the sources' secrets, the relay routes' header
values and signing secrets, the console's tokens, the Kafka sink's SASL password), sorted and unique,
one per line.
*/}}
{{- define "hookonce.secretEnvNames" -}}
{{- $names := list }}
{{- with .Values.config.sink.sasl_password }}
{{- if hasPrefix "env:" . }}
{{- $names = append $names (trimPrefix "env:" .) }}
{{- end }}
{{- end }}
{{- range $source, $settings := .Values.sources }}
{{- range $secret := ($settings.secrets | default list) }}
{{- if hasPrefix "env:" $secret }}
{{- $names = append $names (trimPrefix "env:" $secret) }}
{{- end }}
{{- end }}
{{- end }}
{{- if .Values.relay.enabled }}
{{- range $route, $settings := .Values.relay.routes }}
{{- range $secret := append (values ($settings.headers | default dict)) ($settings.signing_secret | default "") }}
{{- if hasPrefix "env:" $secret }}
{{- $names = append $names (trimPrefix "env:" $secret) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- if .Values.console.enabled }}
{{- range $secret := concat (.Values.console.viewer_tokens | default list) (.Values.console.operator_tokens | default list) }}
{{- if hasPrefix "env:" $secret }}
{{- $names = append $names (trimPrefix "env:" $secret) }}
{{- end }}
{{- end }}
{{- end }}
{{- range $names | uniq | sortAlpha }}
{{ . }}
{{- end }}
{{- end }}

{{- define "hookonce.redisFullname" -}}
{{- printf "%s-redis" (include "hookonce.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The Redis URL written into the TOML. */}}
{{- define "hookonce.redisUrl" -}}
{{- if .Values.redis.enabled }}
{{- printf "redis://%s:6379" (include "hookonce.redisFullname" .) }}
{{- else }}
{{- .Values.config.store.redis_url }}
{{- end }}
{{- end }}

{{/* Seconds between SIGTERM's predecessor (the preStop hook) and SIGKILL. */}}
{{- define "hookonce.terminationGracePeriodSeconds" -}}
{{- $drain := add (int .Values.preStopSleepSeconds) (int .Values.config.shutdownTimeoutSeconds) }}
{{- if kindIs "invalid" .Values.terminationGracePeriodSeconds }}
{{- add $drain 10 }}
{{- else if le (int .Values.terminationGracePeriodSeconds) $drain }}
{{- fail (printf "terminationGracePeriodSeconds (%d) must exceed preStopSleepSeconds + config.shutdownTimeoutSeconds (%d), or pods are killed while draining" (int .Values.terminationGracePeriodSeconds) $drain) }}
{{- else }}
{{- int .Values.terminationGracePeriodSeconds }}
{{- end }}
{{- end }}

{{/*
One TOML `key = value` line per entry of a map, keys sorted, null values left out. Scalars and
lists of scalars are written with toJson: JSON strings, numbers, booleans and arrays are valid TOML.
*/}}
{{- define "hookonce.tomlTable" -}}
{{- range $key, $value := . }}
{{- if not (kindIs "invalid" $value) }}
{{- if kindIs "map" $value }}
{{- fail (printf "config key %q: nested tables are not supported here" $key) }}
{{- end }}
{{ $key }} = {{ toJson $value }}
{{- end }}
{{- end }}
{{- end }}

{{/* Fails the render on values that would give the daemon a configuration it refuses. */}}
{{- define "hookonce.validate" -}}
{{- if not (or .Values.sources .Values.proxies) }}
{{- fail "hookonce: configure at least one webhook source under .Values.sources or one proxy under .Values.proxies (see values.yaml)" }}
{{- end }}
{{- $ports := dict (toString .Values.service.ports.http) "service.ports.http" (toString .Values.service.ports.metrics) "service.ports.metrics" }}
{{- if .Values.console.enabled }}
{{- include "hookonce.validateConsole" . }}
{{- $port := toString (int .Values.console.port) }}
{{- if hasKey $ports $port }}
{{- fail (printf "hookonce: console.port %s is already used by %s" $port (get $ports $port)) }}
{{- end }}
{{- $_ := set $ports $port "console.port" }}
{{- end }}
{{- range $name, $proxy := .Values.proxies }}
{{- $port := toString (int $proxy.port) }}
{{- if hasKey $ports $port }}
{{- fail (printf "hookonce: proxies.%s.port %s is already used by %s" $name $port (get $ports $port)) }}
{{- end }}
{{- $_ := set $ports $port (printf "proxies.%s.port" $name) }}
{{- end }}
{{- $topology := default "standalone" .Values.config.store.topology }}
{{- if and (eq .Values.config.store.backend "redis") (eq $topology "cluster") (not .Values.config.store.cluster_nodes) }}
{{- fail "hookonce: config.store.topology=cluster needs config.store.cluster_nodes (seed nodes)" }}
{{- end }}
{{- if and (eq .Values.config.store.backend "redis") (eq $topology "sentinel") (not (and .Values.config.store.sentinels .Values.config.store.sentinel_master)) }}
{{- fail "hookonce: config.store.topology=sentinel needs config.store.sentinels and config.store.sentinel_master" }}
{{- end }}
{{- if and (eq .Values.config.store.backend "redis") (eq $topology "standalone") (not .Values.redis.enabled) (not .Values.config.store.redis_url) (not .Values.secrets.redisUrlKey) }}
{{- fail "hookonce: set config.store.redis_url, or secrets.redisUrlKey, or (dev only) redis.enabled=true" }}
{{- end }}
{{- if .Values.relay.enabled }}
{{- if not .Values.relay.routes }}
{{- fail "hookonce: relay.enabled needs at least one route under relay.routes" }}
{{- end }}
{{- if ne .Values.config.store.backend "redis" }}
{{- fail "hookonce: the relay needs config.store.backend=redis (it reads the Redis Streams)" }}
{{- end }}
{{- end }}
{{- if and .Values.relay.deployment.enabled (not .Values.relay.enabled) }}
{{- fail "hookonce: relay.deployment.enabled needs relay.enabled" }}
{{- end }}
{{- if and .Values.secrets.existingSecret .Values.secrets.data }}
{{- fail "hookonce: secrets.existingSecret and secrets.data are exclusive" }}
{{- end }}
{{- if not .Values.secrets.existingSecret }}
{{- range $name := splitList "\n" (include "hookonce.secretEnvNames" .) }}
{{- if and $name (not (hasKey $.Values.secrets.data $name)) }}
{{- fail (printf "hookonce: a source, relay route or console token references env:%s but secrets.data has no key %s (or set secrets.existingSecret)" $name $name) }}
{{- end }}
{{- end }}
{{- if and .Values.secrets.redisUrlKey (not (hasKey .Values.secrets.data .Values.secrets.redisUrlKey)) }}
{{- fail (printf "hookonce: secrets.redisUrlKey is %s but secrets.data has no such key" .Values.secrets.redisUrlKey) }}
{{- end }}
{{- end }}
{{- include "hookonce.validateSecretFiles" . }}
{{- if and .Values.podDisruptionBudget.enabled (not (kindIs "invalid" .Values.podDisruptionBudget.minAvailable)) (not (kindIs "invalid" .Values.podDisruptionBudget.maxUnavailable)) }}
{{- fail "hookonce: set only one of podDisruptionBudget.minAvailable and podDisruptionBudget.maxUnavailable" }}
{{- end }}
{{- end }}

{{/*
The container and Service port name of a proxy: "px-" and its name with "_" as "-" (the schema
keeps names short enough for the 15-character limit of a port name).
*/}}
{{- define "hookonce.proxyPortName" -}}
{{- printf "px-%s" (replace "_" "-" .) }}
{{- end }}

{{/* The dev Redis has its own app name, so hookonce's selectors never match its pods. */}}
{{- define "hookonce.redisSelectorLabels" -}}
app.kubernetes.io/name: {{ include "hookonce.name" . }}-redis
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
The environment of the daemon's containers (webhook pods and relay pods): the log filter, every
"env:NAME" secret from the Secret, the Redis URL from the Secret, and extraEnv.
*/}}
{{- define "hookonce.env" -}}
{{- $secretName := include "hookonce.secretName" . }}
- name: RUST_LOG
  value: {{ .Values.config.logLevel | quote }}
{{- range $name := splitList "\n" (include "hookonce.secretEnvNames" .) }}
{{- if $name }}
- name: {{ $name }}
  valueFrom:
    secretKeyRef:
      name: {{ $secretName }}
      key: {{ $name }}
{{- end }}
{{- end }}
{{- with .Values.secrets.redisUrlKey }}
- name: HOOKONCE__STORE__REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ $secretName }}
      key: {{ . }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The relay Deployment's pods have an app name of their own, so the webhook Service never selects them. */}}
{{- define "hookonce.relaySelectorLabels" -}}
app.kubernetes.io/name: {{ include "hookonce.name" . }}-relay
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "hookonce.relayFullname" -}}
{{- printf "%s-relay" (include "hookonce.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The console (console.enabled): it listens off loopback, so it must authenticate its users, which
the daemon would otherwise refuse at start; its tokens must be secret references, as a literal
would be written into the ConfigMap (the messages never repeat a token).
*/}}
{{- define "hookonce.validateConsole" -}}
{{- $console := .Values.console }}
{{- if not (or $console.viewer_tokens $console.operator_tokens $console.identity_header) }}
{{- fail "hookonce: console.enabled needs console.operator_tokens, console.viewer_tokens or console.identity_header: the console listens on every address of the pod and would let anyone who reaches it replay and delete dead letters (see docs/deploy.md, \"Exposing the console safely\")" }}
{{- end }}
{{- range $list := list "viewer_tokens" "operator_tokens" }}
{{- range $i, $token := (get $console $list | default list) }}
{{- if not (or (hasPrefix "env:" (toString $token)) (hasPrefix "file:" (toString $token))) }}
{{- fail (printf "hookonce: console.%s[%d] is a literal token, which would be written into the ConfigMap: put it in the Secret and reference it as \"file:%s/KEY\" (secrets.files) or \"env:KEY\"" $list $i (include "hookonce.secretFilesPath" $)) }}
{{- end }}
{{- end }}
{{- end }}
{{- if and $console.identity_header (not $console.trusted_proxies) }}
{{- fail "hookonce: console.identity_header needs console.trusted_proxies, the authenticating proxy's addresses or ranges: from any other peer the header is ignored" }}
{{- end }}
{{- end }}

{{/* The fullname is cut first, so that a long one never gives the console Service the webhook Service's name. */}}
{{- define "hookonce.consoleFullname" -}}
{{- printf "%s-console" (include "hookonce.fullname" . | trunc 55 | trimSuffix "-") }}
{{- end }}
