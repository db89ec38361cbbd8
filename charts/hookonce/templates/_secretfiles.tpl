{{/*
The Secret as files (secrets.files), shared by the webhook and the relay Deployments: the volume,
its mount, the optional reloader sidecar, and the file references the render-time checks look at.
The Secret is mounted as a whole directory, never with subPath: Kubernetes updates a Secret
volume in place (it writes the new files into a fresh directory and swaps the `..data` link), but
never a subPath mount, which would keep the old secret until the pod restarts.
*/}}

{{/* The mount path without a trailing slash. */}}
{{- define "hookonce.secretFilesPath" -}}
{{- trimSuffix "/" .Values.secrets.files.mountPath }}
{{- end }}

{{/*
Every secret file the daemon is told to read, one "WHERE PATH" line each: the sources'
secrets_files and the "file:" references of sources, the console's tokens and relay routes.
*/}}
{{- define "hookonce.secretFileRefs" -}}
{{- range $source, $settings := .Values.sources }}
{{- range $path := ($settings.secrets_files | default list) }}
{{ printf "sources.%s.secrets_files %s" $source $path }}
{{- end }}
{{- range $secret := ($settings.secrets | default list) }}
{{- if hasPrefix "file:" $secret }}
{{ printf "sources.%s.secrets %s" $source (trimPrefix "file:" $secret) }}
{{- end }}
{{- end }}
{{- end }}
{{- if .Values.console.enabled }}
{{- range $list := list "viewer_tokens" "operator_tokens" }}
{{- range $i, $token := (get $.Values.console $list | default list) }}
{{- if hasPrefix "file:" (toString $token) }}
{{ printf "console.%s[%d] %s" $list $i (trimPrefix "file:" $token) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- if .Values.relay.enabled }}
{{- range $route, $settings := .Values.relay.routes }}
{{- range $header, $value := ($settings.headers | default dict) }}
{{- if hasPrefix "file:" (toString $value) }}
{{ printf "relay.routes.%s.headers.%s %s" $route $header (trimPrefix "file:" $value) }}
{{- end }}
{{- end }}
{{- if hasPrefix "file:" (toString ($settings.signing_secret | default "")) }}
{{ printf "relay.routes.%s.signing_secret %s" $route (trimPrefix "file:" $settings.signing_secret) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Refuses what would leave the daemon without its files: a path in the mount while secrets.files
is off, a path below it that no Secret key can be (keys are file names, without "/"), a key the
chart's own Secret lacks, and a mount or reloader with nothing to mount.
*/}}
{{- define "hookonce.validateSecretFiles" -}}
{{- $mount := include "hookonce.secretFilesPath" . }}
{{- if and .Values.secrets.files.enabled (not (include "hookonce.secretName" .)) }}
{{- fail "hookonce: secrets.files.enabled needs a Secret to mount: secrets.existingSecret or secrets.data" }}
{{- end }}
{{- if and .Values.secrets.files.reloader.enabled (not .Values.secrets.files.enabled) }}
{{- fail "hookonce: secrets.files.reloader.enabled needs secrets.files.enabled (it watches the mounted Secret)" }}
{{- end }}
{{- range $line := splitList "\n" (include "hookonce.secretFileRefs" .) }}
{{- if $line }}
{{- $where := first (splitList " " $line) }}
{{- $path := trimPrefix (printf "%s " $where) $line }}
{{- if hasPrefix (printf "%s/" $mount) $path }}
{{- $key := trimPrefix (printf "%s/" $mount) $path }}
{{- if not $.Values.secrets.files.enabled }}
{{- fail (printf "hookonce: %s names %s, in secrets.files.mountPath, but secrets.files.enabled is false" $where $path) }}
{{- end }}
{{- if not (regexMatch "^[-._a-zA-Z0-9]+$" $key) }}
{{- fail (printf "hookonce: %s names %s: a file of the mounted Secret is %s/KEY, KEY a key of the Secret" $where $path $mount) }}
{{- end }}
{{- if and (not $.Values.secrets.existingSecret) (not (hasKey $.Values.secrets.data $key)) }}
{{- fail (printf "hookonce: %s names %s but secrets.data has no key %s (or set secrets.existingSecret)" $where $path $key) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
With the reloader, a change of the chart's own Secret reaches the pods as files and a SIGHUP, not
as a restart; but a key read as an environment variable (env:NAME, secrets.redisUrlKey) is fixed
at start, so the pods still roll when one of those changes: this is the checksum of their values.
*/}}
{{- define "hookonce.secretEnvChecksum" -}}
{{- $values := list }}
{{- range $name := append (splitList "\n" (include "hookonce.secretEnvNames" .)) .Values.secrets.redisUrlKey }}
{{- if $name }}
{{- $values = append $values (printf "%s=%v" $name (get $.Values.secrets.data $name)) }}
{{- end }}
{{- end }}
{{- $values | uniq | sortAlpha | join "\n" | sha256sum }}
{{- end }}

{{/* Pod-level: the reloader signals the daemon across containers, so they share one PID namespace. */}}
{{- define "hookonce.secretFilesPodSpec" -}}
{{- if .Values.secrets.files.reloader.enabled }}
shareProcessNamespace: true
{{- end }}
{{- end }}

{{- define "hookonce.secretFilesVolumeMount" -}}
{{- if .Values.secrets.files.enabled }}
- name: secret-files
  mountPath: {{ include "hookonce.secretFilesPath" . }}
  readOnly: true
{{- end }}
{{- end }}

{{- define "hookonce.secretFilesVolume" -}}
{{- if .Values.secrets.files.enabled }}
- name: secret-files
  secret:
    secretName: {{ include "hookonce.secretName" . }}
{{- end }}
{{- end }}

{{/*
The reloader's script, POSIX sh (busybox, dash): it fingerprints the names and content of the
files in WATCH_DIR every INTERVAL seconds and, when the fingerprint differs from the one the
daemon last read, sends SIGHUP to every process named PROCESS_NAME (/proc/PID/comm) that handles
SIGHUP (SigCgt in /proc/PID/status, where signal N is bit N-1: SIGHUP is the lowest bit). A
process that does not handle it yet (still starting, or a build without reload) is not
signalled, since SIGHUP would stop it; the change stays pending until it does. The first
fingerprint is taken when the sidecar starts, beside the daemon's own first read.
*/}}
{{- define "hookonce.reloaderScript" -}}
fingerprint() {
  for f in "$WATCH_DIR"/*; do
    if [ -f "$f" ]; then printf '%s\n' "${f##*/}"; cat "$f"; fi
  done | cksum
}
handles_hup() {
  mask=$(sed -n 's/^SigCgt:[[:space:]]*//p' "/proc/$1/status" 2>/dev/null)
  [ -n "$mask" ] || return 1
  last=${mask#"${mask%?}"}
  [ $((0x$last & 1)) -ne 0 ]
}
signal_all() {
  found=0
  for comm in /proc/[0-9]*/comm; do
    name=$(cat "$comm" 2>/dev/null) || continue
    [ "$name" = "$PROCESS_NAME" ] || continue
    pid=${comm#/proc/}
    pid=${pid%/comm}
    if ! handles_hup "$pid"; then
      echo "reloader: $PROCESS_NAME (pid $pid) does not handle SIGHUP yet; will retry"
      return 1
    fi
    kill -HUP "$pid" || return 1
    echo "reloader: $WATCH_DIR changed: SIGHUP sent to $PROCESS_NAME (pid $pid)"
    found=1
  done
  [ "$found" -eq 1 ] || { echo "reloader: no $PROCESS_NAME process to signal; will retry"; return 1; }
}
read_state=$(fingerprint)
echo "reloader: watching $WATCH_DIR every ${INTERVAL}s for $PROCESS_NAME"
while sleep "$INTERVAL"; do
  now=$(fingerprint)
  if [ "$now" != "$read_state" ] && signal_all; then
    read_state=$now
  fi
done
{{- end }}

{{- define "hookonce.reloaderImage" -}}
{{- $image := .Values.secrets.files.reloader.image }}
{{- if $image.digest }}
{{- printf "%s@%s" $image.repository $image.digest }}
{{- else }}
{{- printf "%s:%s" $image.repository $image.tag }}
{{- end }}
{{- end }}

{{/* The reloader sidecar, under the daemon's uid (the pod's securityContext) and without capabilities. */}}
{{- define "hookonce.reloaderContainer" -}}
{{- if .Values.secrets.files.reloader.enabled }}
- name: secrets-reloader
  image: {{ include "hookonce.reloaderImage" . | quote }}
  imagePullPolicy: {{ .Values.secrets.files.reloader.image.pullPolicy }}
  command: ["sh", "-c"]
  args:
    - |
      {{- include "hookonce.reloaderScript" . | nindent 6 }}
  env:
    - name: WATCH_DIR
      value: {{ include "hookonce.secretFilesPath" . | quote }}
    - name: INTERVAL
      value: {{ .Values.secrets.files.reloader.intervalSeconds | quote }}
    - name: PROCESS_NAME
      value: hookonce
  securityContext:
    {{- toYaml .Values.securityContext | nindent 4 }}
  resources:
    {{- toYaml .Values.secrets.files.reloader.resources | nindent 4 }}
  volumeMounts:
    - name: secret-files
      mountPath: {{ include "hookonce.secretFilesPath" . }}
      readOnly: true
{{- end }}
{{- end }}
