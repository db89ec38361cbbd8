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
Every NAME of an "env:NAME" secret reference, sorted and unique, one per line.
*/}}
{{- define "hookonce.secretEnvNames" -}}
{{- $names := list }}
{{- range $source, $settings := .Values.sources }}
{{- range $secret := ($settings.secrets | default list) }}
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
{{- range $name, $proxy := .Values.proxies }}
{{- $port := toString (int $proxy.port) }}
{{- if hasKey $ports $port }}
{{- fail (printf "hookonce: proxies.%s.port %s is already used by %s" $name $port (get $ports $port)) }}
{{- end }}
{{- $_ := set $ports $port (printf "proxies.%s.port" $name) }}
{{- end }}
{{- if and (eq .Values.config.store.backend "redis") (not .Values.redis.enabled) (not .Values.config.store.redis_url) (not .Values.secrets.redisUrlKey) }}
{{- fail "hookonce: set config.store.redis_url, or secrets.redisUrlKey, or (dev only) redis.enabled=true" }}
{{- end }}
{{- if and .Values.secrets.existingSecret .Values.secrets.data }}
{{- fail "hookonce: secrets.existingSecret and secrets.data are exclusive" }}
{{- end }}
{{- if not .Values.secrets.existingSecret }}
{{- range $name := splitList "\n" (include "hookonce.secretEnvNames" .) }}
{{- if and $name (not (hasKey $.Values.secrets.data $name)) }}
{{- fail (printf "hookonce: a source references env:%s but secrets.data has no key %s (or set secrets.existingSecret)" $name $name) }}
{{- end }}
{{- end }}
{{- if and .Values.secrets.redisUrlKey (not (hasKey .Values.secrets.data .Values.secrets.redisUrlKey)) }}
{{- fail (printf "hookonce: secrets.redisUrlKey is %s but secrets.data has no such key" .Values.secrets.redisUrlKey) }}
{{- end }}
{{- end }}
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
