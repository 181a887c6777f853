{{/*
hcp-ingress helpers for a k0rdent hosted-control-plane ClusterTemplate.
Copy this file into the template chart and include what you need.
*/}}

{{/* The CAPI Cluster name: k0rdent names the release after the ClusterDeployment. */}}
{{- define "hcp-ingress.clusterName" -}}
{{- .Release.Name -}}
{{- end -}}

{{/*
The control plane Service the hosted-cp templates get from k0smotron:
K0smotronControlPlane "<release>-cp" → kmc-<release>-cp[-lb|-nodeport].
*/}}
{{- define "hcp-ingress.backendServiceName" -}}
{{- $override := (.Values.hcpIngress.backend | default dict).serviceName -}}
{{- if $override -}}
{{- $override -}}
{{- else -}}
{{- $type := ((.Values.k0smotron | default dict).service | default dict).type | default "LoadBalancer" -}}
{{- $suffix := get (dict "LoadBalancer" "-lb" "NodePort" "-nodeport" "ClusterIP" "") $type -}}
{{- $name := printf "kmc-%s-cp%s" .Release.Name $suffix -}}
{{- if gt (len $name) 63 -}}
{{- fail (printf "hcp-ingress: Service name %s is longer than 63 characters (k0smotron shortens it): set hcpIngress.backend.serviceName" $name) -}}
{{- end -}}
{{- $name -}}
{{- end -}}
{{- end -}}

{{/*
The ControlPlaneIngress spec.ingress (the shape of K0smotronControlPlane
spec.ingress), from the values' ingress block.
*/}}
{{- define "hcp-ingress.ingress" -}}
{{- $in := .Values.ingress -}}
{{- if not (and $in.apiHost $in.konnectivityHost) -}}
{{- fail "hcp-ingress: ingress.apiHost and ingress.konnectivityHost are required when ingress.enabled is true" -}}
{{- end }}
apiHost: {{ $in.apiHost | quote }}
konnectivityHost: {{ $in.konnectivityHost | quote }}
{{- with $in.className }}
className: {{ . | quote }}
{{- end }}
port: {{ $in.port | default 443 | int }}
deploy: {{ if kindIs "bool" $in.deploy }}{{ $in.deploy }}{{ else }}true{{ end }}
{{- with $in.annotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
The K0smotronControlPlane spec.ingress: the same block, `deploy` included.
k0smotron puts both hosts into the API server's SANs, turns the endpoint
reconciler off and ships its node proxy; with `deploy: true` it also makes the
Ingress, with `deploy: false` hcp-ingress makes the route (any flavor).
hcp-ingress reads the same values from the ClusterDeployment and never makes
a second route or node proxy.
Use, in the template's K0smotronControlPlane spec:
  {{- if .Values.ingress.enabled }}
  ingress: {{- include "hcp-ingress.k0smotronIngress" . | nindent 4 }}
  {{- end }}
*/}}
{{- define "hcp-ingress.k0smotronIngress" -}}
{{- include "hcp-ingress.ingress" . -}}
{{- end -}}

{{/*
Environment for the cloud-controller-manager when it must reach the API
through the shared ingress by name (the --cloud-provider=external deadlock).
hcp-ingress sets it itself (spec.ccm); use this in the CCM chart values of
the template when the controller's CCM override is off.
Use: `env: {{- include "hcp-ingress.ccmEnv" . | nindent 2 }}`
*/}}
{{- define "hcp-ingress.ccmEnv" -}}
{{- if .Values.ingress.enabled }}
- name: KUBERNETES_SERVICE_HOST
  value: {{ .Values.ingress.apiHost | quote }}
- name: KUBERNETES_SERVICE_PORT
  value: {{ .Values.ingress.port | default 443 | int | toString | quote }}
{{- else -}}
[]
{{- end }}
{{- end -}}
