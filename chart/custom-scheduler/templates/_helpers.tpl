{{/* Names and labels shared by every template. */}}

{{- define "custom-scheduler.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release name when it already contains the chart name (so the default release
"custom-scheduler" gives the same object names as manifests/). */}}
{{- define "custom-scheduler.fullname" -}}
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

{{/* What selects the pods (immutable in a Deployment: never add a version to it). */}}
{{- define "custom-scheduler.selectorLabels" -}}
app.kubernetes.io/name: {{ include "custom-scheduler.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: scheduler
{{- end }}

{{- define "custom-scheduler.labels" -}}
{{ include "custom-scheduler.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{- define "custom-scheduler.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/* The HTTPS port: healthzBindAddress's, so probes, Service and NetworkPolicy follow the config. */}}
{{- define "custom-scheduler.port" -}}
{{- $addr := default "0.0.0.0:10259" .Values.config.healthzBindAddress }}
{{- splitList ":" $addr | last | int }}
{{- end }}

{{/* The Secret holding the serving pair, or "" for the self-signed certificate. */}}
{{- define "custom-scheduler.tlsSecret" -}}
{{- if .Values.tls.existingSecret }}
{{- .Values.tls.existingSecret }}
{{- else if .Values.tls.certManager.enabled }}
{{- printf "%s-tls" (include "custom-scheduler.fullname" .) }}
{{- end }}
{{- end }}

{{- define "custom-scheduler.leaseNamespace" -}}
{{- default .Release.Namespace .Values.config.leaderElection.resourceNamespace }}
{{- end }}

{{- define "custom-scheduler.tokenSecret" -}}
{{- default (printf "%s-prometheus-token" (include "custom-scheduler.fullname" .)) .Values.serviceMonitor.tokenSecret.name }}
{{- end }}
