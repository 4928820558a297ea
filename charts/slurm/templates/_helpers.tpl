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

{{/* The cluster name Slurm will use: the value when set, else what the operator derives from the
Controller (<namespace>_<name>), as Slinky's operator does. Only the NOTES print it; the Controller
carries clusterName only when the value is set. */}}
{{- define "slurm.clusterName" -}}
{{- .Values.clusterName | default (printf "%s_%s" (include "slurm.namespace" .) (include "slurm.fullname" .)) -}}
{{- end -}}

{{/* A CR's metadata as in Slinky's chart: the component's own labels and annotations (from
`<component>.metadata`, which also go on its pod template) with the chart's labels. (dict "root" $ "name" .. "metadata" ..) */}}
{{- define "slurm.crMetadata" -}}
{{- $user := .metadata | default dict -}}
{{- $meta := dict "name" .name "namespace" (include "slurm.namespace" .root) -}}
{{- $_ := set $meta "labels" (merge (deepCopy ($user.labels | default dict)) (fromYaml (include "slurm.labels" .root))) -}}
{{- with $user.annotations }}{{ $_ := set $meta "annotations" . }}{{ end -}}
{{- toYaml $meta -}}
{{- end -}}

{{- define "slurm.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/part-of: slurm
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* An image in either of Slinky's forms: a string as given, or an object giving repository:tag
(repository@digest when a digest is given). */}}
{{- define "slurm.image" -}}
{{- if kindIs "string" . -}}
{{ required "an image must not be empty" . }}
{{- else if .digest -}}
{{ required "image.repository is required" .repository }}@{{ .digest }}
{{- else -}}
{{ required "image.repository is required" .repository }}:{{ required "image.tag (or image.digest) is required" .tag }}
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

{{/* Slinky's rule for a raw string and its map form (extraConf/extraConfMap, config/configMap):
the string when it is set, else the map as Key=Value entries (lists joined by commas, empty values
left out), joined by `sep`. (dict "raw" .. "map" .. "sep" ..) */}}
{{- define "slurm.confEntries" -}}
{{- if .raw -}}
{{- trim .raw -}}
{{- else -}}
{{- $entries := list -}}
{{- range $k, $v := .map -}}
{{- if $v }}{{ $entries = append $entries (printf "%s=%s" $k (join "," $v)) }}{{ end -}}
{{- end -}}
{{- join .sep $entries -}}
{{- end -}}
{{- end -}}

{{/* A container override as Slinky passes it: every field the values give (empty ones left out), the
image in either form, and imagePullPolicy from the container or else the global value. (dict "c" .. "root" $) */}}
{{- define "slurm.container" -}}
{{- $c := dict -}}
{{- range $field, $v := omit .c "image" -}}
{{- if $v }}{{ $_ := set $c $field $v }}{{ end -}}
{{- end -}}
{{- $_ := set $c "image" (include "slurm.image" .c.image) -}}
{{- with .c.imagePullPolicy | default .root.Values.imagePullPolicy }}{{ $_ := set $c "imagePullPolicy" . }}{{ end -}}
{{- toJson $c -}}
{{- end -}}

{{/* Pod template: metadata and podSpec of a component; the podSpec's own pull secrets come before the
global ones and its own priorityClassName wins over the chart's. (dict "root" $ "metadata" .. "podSpec" ..) */}}
{{- define "slurm.template" -}}
{{- $spec := dict -}}
{{- range $k, $v := .podSpec -}}
{{- if $v }}{{ $_ := set $spec $k $v }}{{ end -}}
{{- end -}}
{{- with concat ($spec.imagePullSecrets | default list) (.root.Values.imagePullSecrets | default list) -}}
{{- $_ := set $spec "imagePullSecrets" . -}}
{{- end -}}
{{- if and .root.Values.priorityClass.enabled (not $spec.priorityClassName) -}}
{{- $_ := set $spec "priorityClassName" .root.Values.priorityClass.name -}}
{{- end -}}
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

{{/* Script ConfigMap references in Slinky's order: for prolog the chart's own ConfigMap (if it has
scripts) then the user's, for the other three the user's first. A reference is an object
({name: x}, Slinky's form) or a plain ConfigMap name. */}}
{{- define "slurm.scriptRefs" -}}
{{- $own := list -}}
{{- if .scripts }}{{ $own = list (dict "name" .name) }}{{ end -}}
{{- $user := list -}}
{{- range .refs }}{{ $user = append $user (ternary (dict "name" .) . (kindIs "string" .)) }}{{ end -}}
{{- toJson (ternary (concat $own $user) (concat $user $own) .ownFirst) -}}
{{- end -}}

{{/* True when the sssd Secret is needed: any enabled LoginSet or ssh-enabled NodeSet. */}}
{{- define "slurm.needsSssd" -}}
{{- $need := false -}}
{{- range $key, $ls := .Values.loginsets -}}
{{- if (mergeOverwrite (deepCopy $.Values.loginsetDefaults) ($ls | default dict)).enabled }}{{ $need = true }}{{ end -}}
{{- end -}}
{{- range $key, $ns := .Values.nodesets -}}
{{- $n := mergeOverwrite (deepCopy $.Values.nodesetDefaults) ($ns | default dict) -}}
{{- if and $n.enabled ($n.ssh | default dict).enabled }}{{ $need = true }}{{ end -}}
{{- end -}}
{{- if $need }}true{{ end -}}
{{- end -}}
