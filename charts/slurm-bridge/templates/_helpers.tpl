{{- define "slurm-bridge.fullname" -}}
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

{{- define "slurm-bridge.hooksName" -}}{{ include "slurm-bridge.fullname" . }}-hooks{{- end -}}
{{- define "slurm-bridge.syncName" -}}{{ include "slurm-bridge.fullname" . }}-slurm-sync{{- end -}}
{{- define "slurm-bridge.tlsSecret" -}}{{ include "slurm-bridge.fullname" . }}-admission-tls{{- end -}}

{{- define "slurm-bridge.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/part-of: slurm-bridge
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{- define "slurm-bridge.selector" -}}
app.kubernetes.io/name: {{ .component }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- end -}}

{{- define "slurm-bridge.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* cert-manager issues the serving certificate when asked to and the cluster serves it. */}}
{{- define "slurm-bridge.useCertManager" -}}
{{- if and .Values.certManager.enabled (.Capabilities.APIVersions.Has "cert-manager.io/v1") }}true{{ end -}}
{{- end -}}

{{/* The managed namespaces as a namespaceSelector (a list becomes kubernetes.io/metadata.name In [...]). */}}
{{- define "slurm-bridge.namespaceSelector" -}}
{{- if .Values.admission.managedNamespaceSelector -}}
{{- toJson .Values.admission.managedNamespaceSelector -}}
{{- else if .Values.admission.managedNamespaces -}}
{{- toJson (dict "matchExpressions" (list (dict "key" "kubernetes.io/metadata.name" "operator" "In" "values" .Values.admission.managedNamespaces))) -}}
{{- else -}}
{{- fail "admission: set managedNamespaces or managedNamespaceSelector (an empty selector would hand every pod of the cluster to Slurm)" -}}
{{- end -}}
{{- end -}}

{{/* The namespace of the Slurm JWT Secret (sharedConfig.slurmJwtSecretNamespace; "" = the release's). */}}
{{- define "slurm-bridge.tokenNamespace" -}}
{{- .Values.sharedConfig.slurmJwtSecretNamespace | default .Release.Namespace -}}
{{- end -}}

{{/* "true" when that Secret is in another namespace: slurm_sync reads it through the API, not as a file. */}}
{{- define "slurm-bridge.tokenElsewhere" -}}
{{- if ne (include "slurm-bridge.tokenNamespace" .) .Release.Namespace }}true{{ end -}}
{{- end -}}
