{{- define "fleetshare.name" -}}
{{- printf "%s-operator" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "fleetshare.labels" -}}
app.kubernetes.io/name: fleetshare-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "fleetshare.selector" -}}
app.kubernetes.io/name: fleetshare-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "fleetshare.webhookService" -}}
{{- printf "%s-webhook" (include "fleetshare.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "fleetshare.certSecret" -}}
{{- printf "%s-webhook-cert" (include "fleetshare.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
