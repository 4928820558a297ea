{{- define "slurm.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Object name prefix, as in Slinky's chart (release name, or "<release>-slurm"). Short enough for
"<fullname>-worker-<key>" and the operator's suffixes. */}}
{{- define "slurm.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 30 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 30 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 30 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "slurm.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride -}}
{{- end -}}

{{- define "slurm.clusterName" -}}
{{- .Values.clusterName | default (include "slurm.fullname" .) | replace "-" "_" -}}
{{- end -}}

{{- define "slurm.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/part-of: slurm
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* repository:tag, or repository@digest when a digest is given. */}}
{{- define "slurm.image" -}}
{{- if .digest -}}
{{ .repository }}@{{ .digest }}
{{- else -}}
{{ .repository }}:{{ .tag }}
{{- end -}}
{{- end -}}

{{- define "slurm.slurmKeyName" -}}
{{- .Values.slurmKey.secretRef.name | default (printf "%s-auth-slurm" (include "slurm.fullname" .)) -}}
{{- end -}}
{{- define "slurm.jwtKeyName" -}}
{{- .Values.jwtKey.secretRef.name | default (printf "%s-auth-jwt" (include "slurm.fullname" .)) -}}
{{- end -}}
{{- define "slurm.sssdName" -}}
{{- .Values.sssd.secretRef.name | default (printf "%s-sssd-conf" (include "slurm.fullname" .)) -}}
{{- end -}}

{{/* The common key references of Controller and Accounting, as JSON. */}}
{{- define "slurm.keyRefs" -}}
{{- $refs := dict "slurmKeyRef" (dict "name" (include "slurm.slurmKeyName" .) "key" .Values.slurmKey.secretRef.key) "jwtKeyRef" (dict "name" (include "slurm.jwtKeyName" .) "key" .Values.jwtKey.secretRef.key) -}}
{{- if .Values.jwksKeys.enabled -}}
{{- $_ := set $refs "jwksKeyRef" (dict "name" (.Values.jwksKeys.configMapRef.name | default (printf "%s-auth-jwks" (include "slurm.fullname" .))) "key" .Values.jwksKeys.configMapRef.key) -}}
{{- end -}}
{{- toJson $refs -}}
{{- end -}}

{{/* extraConf (string) followed by extraConfMap as Key=Value lines (lists joined by commas). */}}
{{- define "slurm.extraConf" -}}
{{- $lines := list -}}
{{- with .extraConf }}{{ $lines = append $lines (trim .) }}{{ end -}}
{{- range $k, $v := .extraConfMap -}}
{{- if kindIs "slice" $v -}}
{{- $lines = append $lines (printf "%s=%s" $k (join "," $v)) -}}
{{- else -}}
{{- $lines = append $lines (printf "%s=%v" $k $v) -}}
{{- end -}}
{{- end -}}
{{- join "\n" $lines -}}
{{- end -}}

{{/* A container override: image (from the image dict) plus the non-empty optional fields. */}}
{{- define "slurm.container" -}}
{{- $c := dict "image" (include "slurm.image" .image) -}}
{{- range $field := list "args" "env" "resources" "volumeMounts" "securityContext" -}}
{{- with index $ $field -}}{{- $_ := set $c $field . -}}{{- end -}}
{{- end -}}
{{- toJson $c -}}
{{- end -}}

{{/* Pod template: metadata and podSpec of a component, with pull secrets and priority class. ($ctx: dict "root" $ "metadata" .. "podSpec" ..) */}}
{{- define "slurm.template" -}}
{{- $spec := dict -}}
{{- range $k, $v := .podSpec -}}
{{- if $v }}{{ $_ := set $spec $k $v }}{{ end -}}
{{- end -}}
{{- with .root.Values.imagePullSecrets }}{{ $_ := set $spec "imagePullSecrets" . }}{{ end -}}
{{- if .root.Values.priorityClass.enabled }}{{ $_ := set $spec "priorityClassName" .root.Values.priorityClass.name }}{{ end -}}
{{- $t := dict -}}
{{- if .metadata }}{{ $_ := set $t "metadata" .metadata }}{{ end -}}
{{- if $spec }}{{ $_ := set $t "spec" $spec }}{{ end -}}
{{- toJson $t -}}
{{- end -}}

{{/* Service override: only non-empty metadata/spec. */}}
{{- define "slurm.service" -}}
{{- $s := dict -}}
{{- range $k, $v := . }}{{ if $v }}{{ $_ := set $s $k $v }}{{ end }}{{ end -}}
{{- toJson $s -}}
{{- end -}}

{{/* Script ConfigMap references: the chart's own ConfigMap (if it has scripts) then the user's. */}}
{{- define "slurm.scriptRefs" -}}
{{- $refs := list -}}
{{- if .scripts }}{{ $refs = append $refs (dict "name" .name) }}{{ end -}}
{{- range .refs }}{{ $refs = append $refs (dict "name" .) }}{{ end -}}
{{- toJson $refs -}}
{{- end -}}

{{/* True when the sssd Secret is needed: any enabled LoginSet or ssh-enabled NodeSet. */}}
{{- define "slurm.needsSssd" -}}
{{- $need := false -}}
{{- range $key, $ls := .Values.loginsets -}}
{{- if (mergeOverwrite (deepCopy $.Values.loginsetDefaults) ($ls | default dict)).enabled }}{{ $need = true }}{{ end -}}
{{- end -}}
{{- range $key, $ns := .Values.nodesets -}}
{{- $n := mergeOverwrite (deepCopy $.Values.nodesetDefaults) ($ns | default dict) -}}
{{- if and $n.enabled $n.ssh.enabled }}{{ $need = true }}{{ end -}}
{{- end -}}
{{- if $need }}true{{ end -}}
{{- end -}}
