{{/*
Names, labels and the one pod template every gpupool process shares.
*/}}

{{- define "gpupool.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name, at most 50 characters so that "-scheduler" etc. still fit 63. */}}
{{- define "gpupool.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" }}
{{- else if contains (include "gpupool.name" .) .Release.Name }}
{{- .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "gpupool.name" .) | trunc 50 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "gpupool.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpupool.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "gpupool.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "gpupool.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Labels of one component; call with (dict "root" $ "component" "web"). */}}
{{- define "gpupool.componentLabels" -}}
{{ include "gpupool.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "gpupool.componentSelector" -}}
{{ include "gpupool.selectorLabels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "gpupool.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "gpupool.secretName" -}}
{{- default (include "gpupool.fullname" .) .Values.existingSecret }}
{{- end }}

{{- define "gpupool.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "gpupool.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "gpupool.webServiceName" -}}
{{- printf "%s-web" (include "gpupool.fullname" .) }}
{{- end }}

{{/* Every setting that is a secret: none of them may be given through `env`. */}}
{{- define "gpupool.allSecretKeys" -}}
{{- list "SECRET_KEY" "GPUPOOL_FERNET_KEY" "DATABASE_URL" "REDIS_URL" "REDIS_PASSWORD" "REDIS_SENTINEL_PASSWORD" | toJson }}
{{- end }}

{{/*
The secret settings this release's pods read, from files (core/env.py honours NAME_FILE): REDIS_URL
for one Redis server; for a Sentinel group, the passwords it has (none, one or both), since the
application refuses REDIS_URL beside REDIS_SENTINELS.
*/}}
{{- define "gpupool.secretKeys" -}}
{{- $keys := list "SECRET_KEY" "GPUPOOL_FERNET_KEY" "DATABASE_URL" }}
{{- $sentinel := .Values.redis.sentinel }}
{{- if not $sentinel.hosts }}
{{- $keys = append $keys "REDIS_URL" }}
{{- else if .Values.existingSecret }}
{{- range $sentinel.existingSecretKeys }}
{{- if not (has . (list "REDIS_PASSWORD" "REDIS_SENTINEL_PASSWORD")) }}
{{- fail (printf "redis.sentinel.existingSecretKeys: %s is not REDIS_PASSWORD or REDIS_SENTINEL_PASSWORD" .) }}
{{- end }}
{{- end }}
{{- $keys = concat $keys ($sentinel.existingSecretKeys | uniq) }}
{{- else }}
{{- if $sentinel.password }}{{ $keys = append $keys "REDIS_PASSWORD" }}{{ end }}
{{- if $sentinel.sentinelPassword }}{{ $keys = append $keys "REDIS_SENTINEL_PASSWORD" }}{{ end }}
{{- end }}
{{- $keys | toJson }}
{{- end }}

{{/*
The Celery processes' liveness (core/liveness.py): the container fields (probes) and the variable
naming the heartbeat file, as a dict with "container" (YAML) and "env" (list). Empty when off.
*/}}
{{- define "gpupool.celeryLiveness" -}}
{{- $live := .Values.celeryLiveness }}
{{- if $live.enabled }}
{{- $exec := dict "command" (list "python" "-m" "core.liveness" "--max-age" (toString $live.maxAgeSeconds)) }}
{{- $probes := dict "livenessProbe" (merge (dict "exec" $exec) (deepCopy $live.livenessProbe))
      "startupProbe" (merge (dict "exec" (deepCopy $exec)) (deepCopy $live.startupProbe)) }}
{{- dict "container" (toYaml $probes) "env" (list (dict "name" "GPUPOOL_ALIVE_FILE" "value" "/tmp/gpupool-alive")) | toJson }}
{{- else }}
{{- dict | toJson }}
{{- end }}
{{- end }}

{{/*
Spread a component's replicas over nodes and zones (values topologySpread), unless the component
names its own constraints. Call with (dict "root" $ "component" "web" "cfg" its values).
*/}}
{{- define "gpupool.topologySpread" -}}
{{- $spread := .root.Values.topologySpread }}
{{- if .cfg.topologySpreadConstraints }}
{{- toYaml .cfg.topologySpreadConstraints }}
{{- else if $spread.enabled }}
{{- range $spread.topologyKeys }}
- maxSkew: {{ $spread.maxSkew }}
  topologyKey: {{ . }}
  whenUnsatisfiable: {{ $spread.whenUnsatisfiable }}
  labelSelector:
    matchLabels:
      {{- include "gpupool.componentSelector" (dict "root" $.root "component" $.component) | nindent 6 }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The pod template of one process. Call with a dict:
  root: $, component: "web", cfg: its values, command: list,
  token: mount the ServiceAccount token (workers only), container: extra container YAML (ports,
  probes), env: extra variables, volumes / volumeMounts: extra lists.
*/}}
{{- define "gpupool.podTemplate" -}}
{{- $root := .root -}}
metadata:
  labels:
    {{- include "gpupool.componentLabels" (dict "root" $root "component" .component) | nindent 4 }}
  annotations:
    # A changed setting rolls the pods: they read the environment only at start.
    checksum/config: {{ include (print $root.Template.BasePath "/configmap.yaml") $root | sha256sum }}
    checksum/secret: {{ include (print $root.Template.BasePath "/secret.yaml") $root | sha256sum }}
    {{- with .cfg.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  serviceAccountName: {{ include "gpupool.serviceAccountName" $root }}
  automountServiceAccountToken: {{ and .token $root.Values.rbac.create }}
  {{- with $root.Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- toYaml $root.Values.podSecurityContext | nindent 4 }}
  {{- if .restartPolicy }}
  restartPolicy: {{ .restartPolicy }}
  {{- end }}
  containers:
    - name: {{ .component }}
      image: {{ include "gpupool.image" $root }}
      imagePullPolicy: {{ $root.Values.image.pullPolicy }}
      command:
        {{- toYaml .command | nindent 8 }}
      envFrom:
        - configMapRef:
            name: {{ include "gpupool.fullname" $root }}
      env:
        {{- range include "gpupool.secretKeys" $root | fromJsonArray }}
        - name: {{ . }}_FILE
          value: /etc/gpupool/secrets/{{ . }}
        {{- end }}
        {{- with .env }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- with .container }}
      {{- . | nindent 6 }}
      {{- end }}
      resources:
        {{- toYaml .cfg.resources | nindent 8 }}
      securityContext:
        {{- toYaml $root.Values.securityContext | nindent 8 }}
      volumeMounts:
        - {name: tmp, mountPath: /tmp}
        - {name: var, mountPath: /var/lib/gpupool}
        - {name: secrets, mountPath: /etc/gpupool/secrets, readOnly: true}
        {{- with .volumeMounts }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
  volumes:
    - name: tmp
      emptyDir: {}
    - name: var
      emptyDir: {}
    - name: secrets
      secret:
        secretName: {{ include "gpupool.secretName" $root }}
        defaultMode: 0440
        items:
          {{- range include "gpupool.secretKeys" $root | fromJsonArray }}
          - {key: {{ . }}, path: {{ . }}}
          {{- end }}
    {{- with .volumes }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with .cfg.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .cfg.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .cfg.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- if ne .component "migrate" }}
  {{- with include "gpupool.topologySpread" (dict "root" $root "component" .component "cfg" .cfg) }}
  topologySpreadConstraints:
    {{- . | nindent 4 }}
  {{- end }}
  {{- end }}
{{- end }}
