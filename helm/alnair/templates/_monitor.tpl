{{/* What the ServiceMonitor's endpoint and the PodMonitor's podMetricsEndpoint share. honorLabels: the
exporter's pod, namespace and container labels name workloads, and must win over the target's. The first
relabeling drops the target labels the operator adds (pod, namespace, container, service, endpoint), so the
series carry job and instance only, as dashboards/ and its rules expect. */}}
{{- define "alnair.monitorEndpoint" -}}
{{- $root := .root -}}
{{- $s := $root.Values.scrape -}}
port: metrics
path: {{ $root.Values.web.telemetryPath }}
scheme: {{ $s.scheme }}
interval: {{ $s.interval }}
scrapeTimeout: {{ $s.scrapeTimeout }}
honorLabels: true
{{- if eq $s.scheme "https" }}
tlsConfig:
  {{- with $s.tls.caSecret.name }}
  ca:
    secret:
      name: {{ . }}
      key: {{ $s.tls.caSecret.key }}
  {{- end }}
  {{- with $s.tls.serverName }}
  serverName: {{ . }}
  {{- end }}
  insecureSkipVerify: {{ $s.tls.insecureSkipVerify }}
{{- end }}
{{- with $s.basicAuth.secretName }}
basicAuth:
  username:
    name: {{ . }}
    key: {{ $s.basicAuth.usernameKey }}
  password:
    name: {{ . }}
    key: {{ $s.basicAuth.passwordKey }}
{{- end }}
relabelings:
  - action: labeldrop
    regex: (pod|namespace|container|service|endpoint)
  {{- with .monitor.relabelings }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with .monitor.metricRelabelings }}
metricRelabelings:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
