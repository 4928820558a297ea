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

{{/* The namespace of every namespaced object: Slinky's namespaceOverride, else the release's. */}}
{{- define "slurm-operator.namespace" -}}
{{- .Values.namespaceOverride | default .Release.Namespace -}}
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

{{/* The image pull policy of both Deployments: image.pullPolicy, else Slinky's operator.imagePullPolicy, else
its global imagePullPolicy. */}}
{{- define "slurm-operator.pullPolicy" -}}
{{- $operator := .Values.operator | default dict -}}
{{- $policy := .Values.image.pullPolicy | default $operator.imagePullPolicy | default .Values.imagePullPolicy | default "IfNotPresent" -}}
{{- if not (has $policy (list "Always" "IfNotPresent" "Never")) -}}
{{- fail (printf "image.pullPolicy (or imagePullPolicy, operator.imagePullPolicy) must be Always, IfNotPresent or Never, got %q" (toString $policy)) -}}
{{- end -}}
{{- $policy -}}
{{- end -}}

{{/* The Node condition types slurm_sync turns into drain reasons, as a JSON list: Slinky's top-level
propagatedNodeConditions (a list, or a comma-separated string) followed by slurmSync.propagatedNodeConditions. */}}
{{- define "slurm-operator.propagatedNodeConditions" -}}
{{- $slinky := .Values.propagatedNodeConditions | default list -}}
{{- if kindIs "string" $slinky -}}
{{- $slinky = splitList "," $slinky -}}
{{- end -}}
{{- $types := list -}}
{{- range concat $slinky (.Values.slurmSync.propagatedNodeConditions | default list) -}}
{{- with toString . | trim -}}{{ $types = append $types . }}{{- end -}}
{{- end -}}
{{- $types | uniq | toJson -}}
{{- end -}}

{{/* The hook Service as Metacontroller's webhook.service. */}}
{{- define "slurm-operator.hookService" -}}
{{- dict "name" (include "slurm-operator.hooksName" .) "namespace" (include "slurm-operator.namespace" .) "port" (int .Values.hooks.port) "protocol" "http" | toJson -}}
{{- end -}}
