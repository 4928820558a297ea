{{/* Object name prefix: the release name, or "<release>-<chart>" when that does not contain the chart name. */}}
{{- define "slurm-operator.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "slurm-operator.hooksName" -}}{{ include "slurm-operator.fullname" . }}-hooks{{- end -}}
{{- define "slurm-operator.syncName" -}}{{ include "slurm-operator.fullname" . }}-slurm-sync{{- end -}}
{{/* The namespaces slurm_sync watches as a JSON list (slurmSync.namespaces plus slurmSync.namespace); [] = all. */}}
{{- define "slurm-operator.syncNamespaces" -}}
{{- $namespaces := concat (list) (.Values.slurmSync.namespaces | default list) -}}
{{- with .Values.slurmSync.namespace }}{{ $namespaces = append $namespaces . }}{{ end -}}
{{- $namespaces | uniq | toJson -}}
{{- end -}}
{{- define "slurm-operator.authSecret" -}}
{{- .Values.hooks.auth.existingSecret | default (printf "%s-hook-token" (include "slurm-operator.fullname" .)) -}}
{{- end -}}

{{- define "slurm-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/part-of: slurm-operator
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/* Selector labels of one component ($ctx = dict "root" $ "component" "hooks"). */}}
{{- define "slurm-operator.selector" -}}
app.kubernetes.io/name: {{ .component }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- end -}}

{{- define "slurm-operator.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* The hook Service as Metacontroller's webhook.service. */}}
{{- define "slurm-operator.hookService" -}}
{{- dict "name" (include "slurm-operator.hooksName" .) "namespace" .Release.Namespace "port" (int .Values.hooks.port) "protocol" "http" | toJson -}}
{{- end -}}
