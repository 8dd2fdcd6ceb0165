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

{{/* The coordinators' in-cluster URLs for --coordinator: the Service with
one coordinator; every replica's name with several (a follower refuses
agents and frameworks, naming the leader, which clients follow only among
the URLs they were given). */}}
{{- define "slackline.coordinatorURL" -}}
{{- if gt (int .Values.coordinator.replicas) 1 -}}
{{- $urls := list -}}
{{- range $i := until (int .Values.coordinator.replicas) -}}
{{- $urls = append $urls (printf "https://slackline-coordinator-%d.slackline-coordinator-peers.%s.svc:5050" $i $.Release.Namespace) -}}
{{- end -}}
{{ join "," $urls }}
{{- else -}}
https://slackline-coordinator.{{ .Release.Namespace }}.svc:5050
{{- end -}}
{{- end -}}
