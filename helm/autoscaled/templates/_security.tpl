{{/* TLS, mTLS and authorization wiring (docs/security.md). Empty when both are off. */}}

{{- define "autoscaled.probePort" -}}
{{- if .Values.tls.enabled }}{{ .Values.tls.healthPort }}{{ else }}{{ .Values.service.port }}{{ end -}}
{{- end }}

{{- define "autoscaled.securityEnv" -}}
{{- if .Values.tls.enabled }}
- name: AUTOSCALED_TLS_CERT
  value: /etc/autoscaled/tls/tls.crt
- name: AUTOSCALED_TLS_KEY
  value: /etc/autoscaled/tls/tls.key
- name: AUTOSCALED_HEALTH_LISTEN
  value: "0.0.0.0:{{ .Values.tls.healthPort }}"
{{- if .Values.tls.clientCA }}
- name: AUTOSCALED_TLS_CLIENT_CA
  value: /etc/autoscaled/tls/ca.crt
- name: AUTOSCALED_TLS_CLIENT_AUTH
  value: {{ .Values.tls.clientAuth | quote }}
{{- end }}
{{- end }}
{{- if .Values.authz.enabled }}
- name: AUTOSCALED_AUTHZ
  value: /etc/autoscaled/authz/authz.toml
{{- end }}
{{- end }}

{{- define "autoscaled.securityMounts" -}}
{{- if .Values.tls.enabled }}
- name: tls
  mountPath: /etc/autoscaled/tls
  readOnly: true
{{- end }}
{{- if .Values.authz.enabled }}
- name: authz
  mountPath: /etc/autoscaled/authz
  readOnly: true
{{- end }}
{{- end }}

{{- define "autoscaled.securityVolumes" -}}
{{- if .Values.tls.enabled }}
- name: tls
  secret:
    secretName: {{ required "tls.secretName is required when tls.enabled" .Values.tls.secretName }}
{{- end }}
{{- if .Values.authz.enabled }}
- name: authz
  configMap:
    name: {{ include "autoscaled.fullname" . }}-authz
{{- end }}
{{- end }}
