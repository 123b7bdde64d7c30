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

{{/* The secret settings, read by the application from files (core/env.py honours NAME_FILE). */}}
{{- define "gpupool.secretKeys" -}}
{{- list "SECRET_KEY" "GPUPOOL_FERNET_KEY" "DATABASE_URL" "REDIS_URL" | toJson }}
{{- end }}

{{/*
The pod template of one process. Call with a dict:
  root: $, component: "web", cfg: its values, command: list,
  token: mount the ServiceAccount token (workers only), container: extra container YAML (ports,
  probes), volumes / volumeMounts: extra lists.
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
{{- end }}
