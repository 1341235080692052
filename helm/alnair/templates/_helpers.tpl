{{/* Names, labels and the values every template derives. Nothing here reads the clock, a random source or
the cluster (lookup): the same values always render the same objects. */}}

{{- define "alnair.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "alnair.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A component's name: <fullname>-<component>, at most 63 characters. */}}
{{- define "alnair.componentName" -}}
{{- printf "%s-%s" (include "alnair.fullname" .root | trunc (int (sub 62 (len .component))) | trimSuffix "-") .component -}}
{{- end -}}

{{- define "alnair.selectorLabels" -}}
app.kubernetes.io/name: {{ include "alnair.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "alnair.labels" -}}
{{ include "alnair.selectorLabels" . }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: alnair
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "alnair.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "alnair.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "alnair.version" -}}
{{- .Values.image.tag | default .Chart.AppVersion -}}
{{- end -}}

{{/* The exporter's (and webhook's, and test's) image: the digest pins it when given. */}}
{{- define "alnair.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (include "alnair.version" .) -}}
{{- end -}}
{{- end -}}

{{- define "alnair.installerImage" -}}
{{- printf "%s:%s%s" .Values.image.repository (include "alnair.version" .) .Values.installer.tagSuffix -}}
{{- end -}}

{{/* The node directory of the installed version, as workloads mount it. */}}
{{- define "alnair.libraryVersionPath" -}}
{{- printf "%s/%s" (trimSuffix "/" .Values.hostPaths.library) (.Values.installer.version | default .Chart.AppVersion) -}}
{{- end -}}

{{/* The Redis servers the cache collector reads, as the value of ALNAIR_COLLECTOR_CACHE_REDIS_URL: the plain
URLs, the chart's Redis (its password through $(ALNAIR_REDIS_PASSWORD)) and the secret's URLs
($(ALNAIR_REDIS_URLS)), comma-separated; Kubernetes expands the $(VAR) references from the variables before. */}}
{{- define "alnair.redisUrls" -}}
{{- $urls := list -}}
{{- range .Values.exporter.collectors.cache.redisUrls }}{{ $urls = append $urls . }}{{ end -}}
{{- if .Values.redis.enabled -}}
{{- $auth := ternary ":$(ALNAIR_REDIS_PASSWORD)@" "" (ne .Values.redis.auth.existingSecret "") -}}
{{- $urls = append $urls (printf "redis://%s%s.%s.svc:%d/0" $auth (include "alnair.componentName" (dict "root" . "component" "redis")) .Release.Namespace (int .Values.redis.port)) -}}
{{- end -}}
{{- if .Values.exporter.collectors.cache.redisUrlSecret.name -}}
{{- $urls = append $urls "$(ALNAIR_REDIS_URLS)" -}}
{{- end -}}
{{- join "," $urls -}}
{{- end -}}

{{/* Bytes from a size of values.schema.json's form: 768Mi is 805306368. */}}
{{- define "alnair.bytes" -}}
{{- $unit := regexFind "(Ki|Mi|Gi|Ti|k|M|G|T)$" . -}}
{{- $units := dict "" 1 "k" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 -}}
{{- mul (trimSuffix $unit . | int64) (get $units $unit) -}}
{{- end -}}

{{/* The space policy's caps as the hash alnair:policy holds them (abi/cache_keys.py's fields), field value ...; empty
     when redis.cachePolicy.capacity is "" (the policy off). */}}
{{- define "alnair.cachePolicyFields" -}}
{{- $p := .Values.redis.cachePolicy -}}
{{- if $p.capacity -}}
{{- $fields := list "capacity_bytes" (include "alnair.bytes" $p.capacity) "margin" $p.margin "idle_seconds" $p.idleSeconds "window_seconds" $p.windowSeconds -}}
{{- if $p.jobQuota }}{{ $fields = concat $fields (list "job_quota_bytes" (include "alnair.bytes" $p.jobQuota)) }}{{ end -}}
{{- if $p.namespaceQuota }}{{ $fields = concat $fields (list "namespace_quota_bytes" (include "alnair.bytes" $p.namespaceQuota)) }}{{ end -}}
{{- if ne (toString $p.maxPriority) "" }}{{ $fields = concat $fields (list "max_priority" $p.maxPriority) }}{{ end -}}
{{- range $namespace, $caps := $p.namespaces -}}
{{- if $caps.quota }}{{ $fields = concat $fields (list (printf "namespace_quota_bytes:%s" $namespace) (include "alnair.bytes" $caps.quota)) }}{{ end -}}
{{- if ne (toString $caps.maxPriority) "" }}{{ $fields = concat $fields (list (printf "max_priority:%s" $namespace) $caps.maxPriority) }}{{ end -}}
{{- end -}}
{{- join " " $fields -}}
{{- end -}}
{{- end -}}

{{- define "alnair.cacheEnabled" -}}
{{- $c := .Values.exporter.collectors.cache -}}
{{- if or $c.enabled .Values.redis.enabled $c.redisUrls $c.redisUrlSecret.name -}}true{{- end -}}
{{- end -}}

{{/* Whether the probes may ask /healthz: not with basic auth (every path asks for credentials). */}}
{{- define "alnair.httpProbes" -}}
{{- $type := .Values.exporter.probes.type -}}
{{- if or (eq $type "httpGet") (and (eq $type "auto") (not .Values.scrape.basicAuth.secretName)) -}}true{{- end -}}
{{- end -}}

{{- define "alnair.webConfigSecret" -}}
{{- if .Values.web.existingSecret -}}
{{- .Values.web.existingSecret -}}
{{- else if .Values.web.config -}}
{{- include "alnair.componentName" (dict "root" . "component" "web-config") -}}
{{- end -}}
{{- end -}}

{{/* The restricted profile, for containers that need nothing more. */}}
{{- define "alnair.restrictedSecurityContext" -}}
allowPrivilegeEscalation: false
capabilities:
  drop: [ALL]
privileged: false
readOnlyRootFilesystem: true
runAsNonRoot: true
runAsUser: {{ .uid | default 65532 }}
runAsGroup: {{ .gid | default 65532 }}
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* A NetworkPolicy letting into a component's pods, to its port named .port, only the peers .from. */}}
{{- define "alnair.networkPolicy" -}}
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: {{ include "alnair.componentName" . }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "alnair.labels" . | nindent 4 }}
spec:
  podSelector:
    matchLabels:
      {{- include "alnair.selectorLabels" . | nindent 6 }}
  policyTypes: [Ingress]
  ingress:
    - from:
        {{- toYaml .from | nindent 8 }}
      ports:
        - {port: {{ .port }}, protocol: TCP}
{{- end -}}

{{/* Settings checked across values, which the schema cannot say; each fails the render with one line. */}}
{{- define "alnair.validate" -}}
{{- if and .Values.web.config .Values.web.existingSecret -}}
{{- fail "web.config and web.existingSecret: give the web config one way, not both" -}}
{{- end -}}
{{- if .Values.injector.enabled -}}
{{- $tls := .Values.injector.tls -}}
{{- if eq (ternary 1 0 (ne $tls.existingSecret "")) (ternary 1 0 $tls.certManager.enabled) -}}
{{- fail "injector.enabled: give its serving certificate one way: injector.tls.existingSecret (with injector.tls.caBundle) or injector.tls.certManager.enabled" -}}
{{- end -}}
{{- if and $tls.existingSecret (not $tls.caBundle) -}}
{{- fail "injector.tls.existingSecret needs injector.tls.caBundle: the base64 PEM of the CA that signed it, for the API server" -}}
{{- end -}}
{{- if and $tls.certManager.enabled $tls.caBundle -}}
{{- fail "injector.tls.caBundle: with cert-manager the CA is injected by cert-manager's cainjector; leave caBundle empty" -}}
{{- end -}}
{{- if and .Values.injector.networkPolicy.enabled (not .Values.injector.networkPolicy.from) -}}
{{- fail "injector.networkPolicy.enabled needs injector.networkPolicy.from: the addresses the API server calls the webhook from; with none, no review would reach it and pods would start uninjected" -}}
{{- end -}}
{{- if not (or .Values.injector.podLabel .Values.injector.namespaceLabels) -}}
{{- fail "injector: podLabel is false and namespaceLabels is empty, so no pod would ever be sent to the webhook" -}}
{{- end -}}
{{- end -}}
{{- if and .Values.exporter.networkPolicy.enabled (not .Values.exporter.networkPolicy.from) -}}
{{- fail "exporter.networkPolicy.enabled needs exporter.networkPolicy.from: the peers that scrape the exporter (your Prometheus); with none, nothing could" -}}
{{- end -}}
{{- if and (eq .Values.scrape.scheme "http") (or .Values.scrape.tls.caSecret.name .Values.scrape.tls.serverName .Values.scrape.tls.insecureSkipVerify) -}}
{{- fail "scrape.tls is set but scrape.scheme is http: set scrape.scheme: https" -}}
{{- end -}}
{{- end -}}
