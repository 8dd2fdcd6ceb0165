{{/* The image reference. */}}
{{- define "slackline.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* Labels of every object: the standard app.kubernetes.io set. */}}
{{- define "slackline.labels" -}}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: slackline
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{/* The coordinator's in-cluster URL (its Service: a follower names the leader). */}}
{{- define "slackline.coordinatorURL" -}}
https://slackline-coordinator.{{ .Release.Namespace }}.svc:5050
{{- end -}}
