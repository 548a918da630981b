{{/* Chart name, overridable. */}}
{{- define "exec-server.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified app name, at most 63 characters (DNS label limit). */}}
{{- define "exec-server.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Chart name and version, for the helm.sh/chart label. */}}
{{- define "exec-server.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Common labels. */}}
{{- define "exec-server.labels" -}}
helm.sh/chart: {{ include "exec-server.chart" . }}
{{ include "exec-server.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: exec-server
{{- end }}

{{/* Selector labels (immutable on a Deployment: never add to these). */}}
{{- define "exec-server.selectorLabels" -}}
app.kubernetes.io/name: {{ include "exec-server.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Service account to use. */}}
{{- define "exec-server.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "exec-server.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Instance id (EXEC_SERVER_INSTANCE_ID): labels every session container; a restarted server with
the same id re-adopts its running sessions. Stable per release, never the pod name.
*/}}
{{- define "exec-server.instanceId" -}}
{{- default (include "exec-server.fullname" .) .Values.instanceId }}
{{- end }}

{{/* Secret holding the tokens file. */}}
{{- define "exec-server.secretName" -}}
{{- default (printf "%s-tokens" (include "exec-server.fullname" .)) .Values.auth.existingSecret }}
{{- end }}

{{/* Secret and key of the bearer token the ServiceMonitor presents on /metrics. */}}
{{- define "exec-server.metricsTokenSecretName" -}}
{{- default (include "exec-server.secretName" .) .Values.serviceMonitor.tokenSecret.name }}
{{- end }}

{{/* True ("true") when the chart generates the metrics tenant's token in its own Secret. */}}
{{- define "exec-server.managesMetricsToken" -}}
{{- if and .Values.serviceMonitor.enabled (not .Values.auth.existingSecret) (not .Values.serviceMonitor.tokenSecret.name) }}true{{ end }}
{{- end }}

{{/* Directory of the dind engine's socket, an emptyDir shared by the two containers. */}}
{{- define "exec-server.dockerSocketDir" -}}
/run/docker
{{- end }}

{{/* Engine address(es) the server uses: the dind socket, every engine of the StatefulSet, or docker.host. */}}
{{- define "exec-server.dockerHost" -}}
{{- if eq .Values.docker.mode "dind" }}
{{- printf "unix://%s/docker.sock" (include "exec-server.dockerSocketDir" .) }}
{{- else if eq .Values.docker.mode "engines" }}
{{- $name := include "exec-server.engineName" . }}
{{- $hosts := list }}
{{- range $i := until (.Values.engines.replicas | int) }}
{{- $hosts = append $hosts (printf "tcp://%s-%d.%s.%s.svc:%d" $name $i $name $.Release.Namespace ($.Values.engines.port | int)) }}
{{- end }}
{{- join "," $hosts }}
{{- else }}
{{- required "docker.host is required when docker.mode is external (tcp://HOST:PORT or https://HOST:PORT, comma-separated for several)" .Values.docker.host }}
{{- end }}
{{- end }}

{{/* True ("true") when the replicas form a fleet: they share engines (engines, external), not one dind each. */}}
{{- define "exec-server.fleet" -}}
{{- if ne .Values.docker.mode "dind" }}true{{ end }}
{{- end }}

{{/*
Labels of the engine pods. Their own app.kubernetes.io/name: the server's Deployment, Service and
policies select the server's labels, which must never match an engine pod.
*/}}
{{- define "exec-server.engineSelectorLabels" -}}
app.kubernetes.io/name: {{ include "exec-server.name" . }}-engine
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "exec-server.engineLabels" -}}
helm.sh/chart: {{ include "exec-server.chart" . }}
{{ include "exec-server.engineSelectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: engine
{{- end }}

{{/* The engines' StatefulSet and its headless Service. */}}
{{- define "exec-server.engineName" -}}
{{- printf "%s-engine" (include "exec-server.fullname" . | trunc 56 | trimSuffix "-") }}
{{- end }}

{{/* Secret of the TLS between the server and the engines ("" for external engines without TLS). */}}
{{- define "exec-server.tlsSecretName" -}}
{{- if .Values.docker.tls.secretName }}{{ .Values.docker.tls.secretName }}
{{- else if eq .Values.docker.mode "engines" }}{{ include "exec-server.engineName" . }}-tls
{{- end }}
{{- end }}

{{/* Seconds the server needs for its graceful shutdown, rounded up. */}}
{{- define "exec-server.shutdownGraceSeconds" -}}
{{- div (add (.Values.server.shutdownGraceMs | int64) 999) 1000 }}
{{- end }}

{{/* terminationGracePeriodSeconds: explicit, or the preStop pause and the shutdown grace plus 20 s. */}}
{{- define "exec-server.terminationGracePeriodSeconds" -}}
{{- $grace := add (include "exec-server.shutdownGraceSeconds" . | int64) (.Values.server.preStopSeconds | int64) }}
{{- if kindIs "invalid" .Values.terminationGracePeriodSeconds }}
{{- add $grace 20 }}
{{- else }}
{{- $t := .Values.terminationGracePeriodSeconds | int64 }}
{{- if le $t $grace }}
{{- fail (printf "terminationGracePeriodSeconds (%d) must exceed server.preStopSeconds plus server.shutdownGraceMs (%d s)" $t $grace) }}
{{- end }}
{{- $t }}
{{- end }}
{{- end }}

{{/*
The Docker-in-Docker engine. The only privileged container of the chart.
- args start with `dockerd`: given only flags, the docker:dind entrypoint prepends its own
  `--host=tcp://0.0.0.0:2375` (plaintext without TLS certs), which every process in the pod and
  every session container could reach through the bridge gateway. With `dockerd` first it adds
  nothing, so the engine listens only on the unix socket in the shared emptyDir.
- DOCKER_TLS_CERTDIR="": no certificate generation (no TCP listener to protect).
- --exec-root keeps dockerd's runtime state (containerd socket, netns) out of the shared dir.
*/}}
{{- define "exec-server.dindContainer" -}}
- name: dind
  image: "{{ .Values.dind.image.repository }}:{{ .Values.dind.image.tag }}"
  imagePullPolicy: {{ .Values.dind.image.pullPolicy }}
  {{- if .Values.docker.nativeSidecar }}
  restartPolicy: Always
  {{- end }}
  args:
    - dockerd
    - --host=unix://{{ include "exec-server.dockerSocketDir" . }}/docker.sock
    - --group={{ .Values.docker.socketGid | int64 }}
    - --exec-root=/run/dind
    {{- range .Values.dind.extraArgs }}
    - {{ . | quote }}
    {{- end }}
  env:
    - name: DOCKER_TLS_CERTDIR
      value: ""
    - name: DOCKER_HOST
      value: unix://{{ include "exec-server.dockerSocketDir" . }}/docker.sock
  securityContext:
    privileged: true
    runAsUser: 0
    runAsNonRoot: false
  startupProbe:
    exec:
      command: ["docker", "info"]
    periodSeconds: 2
    timeoutSeconds: 5
    failureThreshold: 90
  {{- if not .Values.docker.nativeSidecar }}
  lifecycle:
    preStop:
      exec:
        # A regular container gets SIGTERM together with the server: keep the engine up while
        # the server removes its session containers.
        command: ["sleep", "{{ add (include "exec-server.shutdownGraceSeconds" . | int64) 5 }}"]
  {{- end }}
  resources:
    {{- toYaml .Values.dind.resources | nindent 4 }}
  volumeMounts:
    - name: docker-socket
      mountPath: {{ include "exec-server.dockerSocketDir" . }}
    - name: docker-storage
      mountPath: /var/lib/docker
    - name: agent-sockets
      mountPath: /run/exec-server-agents
{{- end }}
