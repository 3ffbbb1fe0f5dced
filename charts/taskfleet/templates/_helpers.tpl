{{/* The chart's name ("taskfleet" unless nameOverride). */}}
{{- define "taskfleet.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The prefix of every object's name: a release named "taskfleet" gives the names of
manifests/ (taskfleet-operator); another release "<release>-taskfleet". */}}
{{- define "taskfleet.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "taskfleet.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "taskfleet.operatorName" -}}
{{- include "taskfleet.fullname" . }}-operator
{{- end -}}

{{- define "taskfleet.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "taskfleet.operatorName" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "taskfleet.peeringName" -}}
{{- default (include "taskfleet.fullname" .) .Values.operator.peeringName -}}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "taskfleet.labels" -}}
app.kubernetes.io/part-of: taskfleet
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The operator pods' selector: stable across upgrades (a Deployment's selector is immutable). */}}
{{- define "taskfleet.operatorSelector" -}}
app.kubernetes.io/name: taskfleet-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "taskfleet.dashboardSelector" -}}
app.kubernetes.io/name: taskfleet-dashboard
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "taskfleet.redisSelector" -}}
app.kubernetes.io/name: redis
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* An image reference from {registry, repository, tag, digest}: the digest, when set,
pins it (the tag is then left out); an empty tag means the chart's appVersion.
Call with (dict "image" .Values.image "root" $). */}}
{{- define "taskfleet.image" -}}
{{- $image := .image -}}
{{- $repo := $image.repository -}}
{{- if $image.registry }}{{ $repo = printf "%s/%s" (trimSuffix "/" $image.registry) $image.repository }}{{ end -}}
{{- if $image.digest -}}
{{- printf "%s@%s" $repo $image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo (toString (default .root.Chart.AppVersion $image.tag)) -}}
{{- end -}}
{{- end -}}

{{/* Whether the namespaces to serve are all exact names (then RBAC is namespaced). */}}
{{- define "taskfleet.namespaced" -}}
{{- $exact := true -}}
{{- range .Values.watchNamespaces -}}
{{- if regexMatch "[*?\\[\\]!]" . }}{{ $exact = false }}{{ end -}}
{{- end -}}
{{- if and .Values.watchNamespaces $exact }}true{{ end -}}
{{- end -}}

{{/* Whether the admission policy is rendered: "auto" asks the cluster. */}}
{{- define "taskfleet.admissionPolicy" -}}
{{- $mode := .Values.admissionPolicy.enabled -}}
{{- if eq (toString $mode) "auto" -}}
{{- if .Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy" }}true{{ end -}}
{{- else if $mode -}}
true
{{- end -}}
{{- end -}}
