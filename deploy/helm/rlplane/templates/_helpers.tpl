{{- define "rlplane.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}{{ .Release.Name | trunc 50 | trimSuffix "-" }}{{- else -}}{{ printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" }}{{- end -}}
{{- end -}}

{{- define "rlplane.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "rlplane.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "rlplane.image" -}}
{{ .root.Values.image.registry }}/{{ .name }}:{{ .root.Values.image.tag | default .root.Chart.AppVersion }}
{{- end -}}

{{- define "rlplane.secretName" -}}
{{ .Values.existingSecret | default (printf "%s-secrets" (include "rlplane.fullname" .)) }}
{{- end -}}

{{- define "rlplane.claimName" -}}
{{ .Values.artifacts.persistence.existingClaim | default (printf "%s-artifacts" (include "rlplane.fullname" .)) }}
{{- end -}}

{{/* A value kept across upgrades: the given one, else the one in the release's Secret, else random. */}}
{{- define "rlplane.kept" -}}
{{- $secret := lookup "v1" "Secret" .root.Release.Namespace (printf "%s-secrets" (include "rlplane.fullname" .root)) -}}
{{- if .value -}}{{ .value }}{{- else if and $secret (index $secret.data .key) -}}{{ index $secret.data .key | b64dec }}{{- else -}}{{ randAlphaNum 48 }}{{- end -}}
{{- end -}}

{{/* RLPLANE_* settings shared by the API, the migration Job and the workers (the secrets come from the Secret). */}}
{{- define "rlplane.commonEnv" -}}
- name: RLPLANE_HOME
  value: /var/lib/rlplane
- name: RLPLANE_LOG_FORMAT
  value: {{ .Values.logFormat | quote }}
- name: RLPLANE_ARTIFACTS
  value: {{ .Values.artifacts.url | default "/var/lib/rlplane/artifacts" | quote }}
- name: RLPLANE_BROKER_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "rlplane.secretName" . }}
      key: RLPLANE_BROKER_URL
{{- end -}}

{{- define "rlplane.serverEnv" -}}
{{ include "rlplane.commonEnv" . }}
- name: RLPLANE_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "rlplane.secretName" . }}
      key: RLPLANE_DATABASE_URL
- name: RLPLANE_BOOTSTRAP_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "rlplane.secretName" . }}
      key: RLPLANE_BOOTSTRAP_TOKEN
{{- end -}}

{{- define "rlplane.envFrom" -}}
{{- if and .Values.artifacts.url .Values.artifacts.credentialsSecret }}
envFrom:
  - secretRef:
      name: {{ .Values.artifacts.credentialsSecret }}
{{- end }}
{{- end -}}

{{/* Writable paths under a read-only root: RLPLANE_HOME, /tmp, and the artifact volume. */}}
{{- define "rlplane.volumeMounts" -}}
- name: home
  mountPath: /var/lib/rlplane
- name: tmp
  mountPath: /tmp
{{- if not .Values.artifacts.url }}
- name: artifacts
  mountPath: /var/lib/rlplane/artifacts
{{- end }}
{{- end -}}

{{- define "rlplane.volumes" -}}
- name: home
  emptyDir: {}
- name: tmp
  emptyDir: {}
{{- if not .Values.artifacts.url }}
- name: artifacts
  persistentVolumeClaim:
    claimName: {{ include "rlplane.claimName" . }}
{{- end }}
{{- end -}}
