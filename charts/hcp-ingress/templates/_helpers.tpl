{{/* The release's full name: the release name when it already says hcp-ingress. */}}
{{- define "hcp-ingress.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Selector labels: the same as config/manager, so `kubectl get -l` works for either install. */}}
{{- define "hcp-ingress.selectorLabels" -}}
app.kubernetes.io/name: hcp-ingress
app.kubernetes.io/component: controller
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "hcp-ingress.labels" -}}
{{ include "hcp-ingress.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "hcp-ingress.serviceAccountName" -}}
{{- default (include "hcp-ingress.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "hcp-ingress.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/*
The node proxy image (HCP_INGRESS_IMAGE): proxyImage.repository, else Kamaji's
options.tcpProxyImage, else the controller image. Both set and different is
an error: one of them would be silently ignored.
*/}}
{{- define "hcp-ingress.proxyImage" -}}
{{- $controller := include "hcp-ingress.image" . -}}
{{- $own := "" -}}
{{- if .Values.proxyImage.repository -}}
{{- $own = printf "%s:%s" .Values.proxyImage.repository (default (default .Chart.AppVersion .Values.image.tag) .Values.proxyImage.tag) -}}
{{- end -}}
{{- $kamaji := .Values.options.tcpProxyImage -}}
{{- if and $own $kamaji (ne $own $kamaji) -}}
{{- fail (printf "values: proxyImage (%s) and options.tcpProxyImage (%s) name different node proxy images: set one of them" $own $kamaji) -}}
{{- end -}}
{{- coalesce $own $kamaji $controller -}}
{{- end -}}

{{- define "hcp-ingress.leaseNamespace" -}}
{{- default .Release.Namespace .Values.leaderElection.namespace -}}
{{- end -}}
