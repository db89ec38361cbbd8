{{/*
The daemon's TOML configuration, rendered from .Values.config (its telemetry only with an otlp_endpoint), .Values.console (only when enabled), .Values.sources, .Values.relay and .Values.proxies. Its checksum
is a pod annotation, so any change here rolls the pods.
*/}}
{{- define "hookonce.toml" -}}
# Rendered by the hookonce Helm chart; edit the release's values, not this file.
# Secrets are referenced as env:NAME (the pod's environment, read at start) or as files (secrets_files,
# file:/path), read at start and again on SIGHUP.

[server]
listen = {{ printf "0.0.0.0:%d" (int .Values.service.ports.http) | quote }}
metrics_listen = {{ printf "0.0.0.0:%d" (int .Values.service.ports.metrics) | quote }}
shutdown_timeout = {{ printf "%ds" (int .Values.config.shutdownTimeoutSeconds) | quote }}
{{- include "hookonce.tomlTable" (omit .Values.config.server "listen" "metrics_listen" "shutdown_timeout") }}

[store]
{{- $store := omit .Values.config.store "redis_url" }}
{{- /* Left out when the URL comes from the Secret (HOOKONCE__STORE__REDIS_URL overrides it). */}}
{{- if and (eq .Values.config.store.backend "redis") (include "hookonce.redisUrl" .) }}
{{- $_ := set $store "redis_url" (include "hookonce.redisUrl" .) }}
{{- end }}
{{- include "hookonce.tomlTable" $store }}

[sink]
{{- include "hookonce.tomlTable" .Values.config.sink }}
{{- with .Values.config.telemetry }}
{{- if .otlp_endpoint }}

[telemetry]
{{- include "hookonce.tomlTable" . }}
{{- end }}
{{- end }}
{{- if .Values.console.enabled }}

[console]
listen = {{ printf "0.0.0.0:%d" (int .Values.console.port) | quote }}
{{- /* Empty lists are left out like nulls: the daemon's default is none. */}}
{{- $console := dict }}
{{- range $key, $value := omit .Values.console "enabled" "port" "service" "listen" }}
{{- if not (and (kindIs "slice" $value) (not $value)) }}
{{- $_ := set $console $key $value }}
{{- end }}
{{- end }}
{{- include "hookonce.tomlTable" $console }}
{{- end }}
{{- range $name, $source := .Values.sources }}

[sources.{{ $name }}]
{{- include "hookonce.tomlTable" $source }}
{{- end }}
{{- if .Values.relay.enabled }}

[relay]
{{- /* With a relay Deployment of its own, the webhook pods run none (`hookonce relay` ignores this). */}}
enabled = {{ not .Values.relay.deployment.enabled }}
{{- include "hookonce.tomlTable" (omit .Values.relay "enabled" "routes" "deployment") }}
{{- range $name, $route := .Values.relay.routes }}

[relay.routes.{{ $name }}]
{{- include "hookonce.tomlTable" (omit $route "headers") }}
{{- with $route.headers }}
headers = { {{- range $i, $header := keys . | sortAlpha }}{{ if $i }},{{ end }} {{ toJson $header }} = {{ toJson (get $route.headers $header) }}{{ end }} }
{{- end }}
{{- end }}
{{- end }}
{{- range $name, $proxy := .Values.proxies }}

[proxies.{{ $name }}]
listen = {{ printf "0.0.0.0:%d" (int $proxy.port) | quote }}
{{- include "hookonce.tomlTable" (omit $proxy "port" "listen") }}
{{- end }}
{{- end }}
