{{/* Names: <release>-<component>, or <release>-faultline-<component> when the release name lacks "faultline". */}}
{{- define "faultline.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "faultline.labels" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/part-of: faultline
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{- define "faultline.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "faultline.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{- define "faultline.sasl" -}}
{{- hasPrefix "SASL" .Values.kafka.securityProtocol -}}
{{- end -}}

{{/* The Secret holding kafka-password-<user>. */}}
{{- define "faultline.kafkaSecret" -}}
{{- if .Values.kafka.existingSecret -}}
{{ .Values.kafka.existingSecret }}
{{- else if .Values.kafka.passwords -}}
{{ include "faultline.fullname" . }}-kafka
{{- else if eq (include "faultline.sasl" .) "true" -}}
{{- fail "kafka.securityProtocol is SASL_*: set kafka.existingSecret (a Secret with kafka-password-<user> keys) or, for development, kafka.passwords" -}}
{{- end -}}
{{- end -}}

{{- define "faultline.keysSecret" -}}
{{- .Values.keys.existingSecret | default (printf "%s-keys" (include "faultline.fullname" .)) -}}
{{- end -}}

{{- define "faultline.clickhouseSecret" -}}
{{- if .Values.clickhouse.existingSecret -}}
{{ .Values.clickhouse.existingSecret }}
{{- else if .Values.clickhouse.password -}}
{{ include "faultline.fullname" . }}-clickhouse
{{- else -}}
{{- fail "set clickhouse.existingSecret (a Secret with the key clickhouse-password) or, for development, clickhouse.password" -}}
{{- end -}}
{{- end -}}

{{/* Kafka identity of one stage: .root, .user (a key of kafka.users). Never on argv, never in a ConfigMap. */}}
{{- define "faultline.kafkaEnv" -}}
{{- if eq (include "faultline.sasl" .root) "true" -}}
- name: FAULTLINE_KAFKA_USERNAME
  value: {{ index .root.Values.kafka.users .user | quote }}
- name: FAULTLINE_KAFKA_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "faultline.kafkaSecret" .root }}
      key: kafka-password-{{ .user }}
{{- end }}
{{- end -}}

{{/* The command signing keys (correlator, executor). */}}
{{- define "faultline.signingEnv" -}}
- name: FAULTLINE_SIGNING_KEYS
  valueFrom:
    secretKeyRef:
      name: {{ include "faultline.keysSecret" . }}
      key: signing-keys
{{- end -}}

{{/* The operators' keys (approvals, operator actions) and the executors' result keys: correlator, executor. */}}
{{- define "faultline.operatorEnv" -}}
- name: FAULTLINE_OPERATOR_KEYS
  valueFrom:
    secretKeyRef:
      name: {{ include "faultline.keysSecret" . }}
      key: operator-keys
{{- end -}}

{{- define "faultline.executorKeysEnv" -}}
- name: FAULTLINE_EXECUTOR_KEYS
  valueFrom:
    secretKeyRef:
      name: {{ include "faultline.keysSecret" . }}
      key: executor-keys
{{- end -}}

{{- define "faultline.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities: {drop: [ALL]}
{{- end -}}

{{/* The `topics apply` init container: .root, .component */}}
{{- define "faultline.topicsInit" -}}
{{- if .root.Values.topicsInitContainer -}}
initContainers:
  - name: topics
    image: {{ include "faultline.image" .root }}
    imagePullPolicy: {{ .root.Values.image.pullPolicy }}
    command: ["faultline", "topics", "apply"]
    envFrom:
      - configMapRef: {name: {{ include "faultline.fullname" .root }}-config}
    {{- with include "faultline.kafkaEnv" (dict "root" .root "user" "admin") }}
    env: {{- . | nindent 6 }}
    {{- end }}
    resources:
      requests: {cpu: 50m, memory: 128Mi}
      limits: {cpu: 500m, memory: 256Mi}
    securityContext:
      {{- include "faultline.containerSecurity" . | nindent 6 }}
{{- end }}
{{- end -}}

{{/* Prometheus annotations of a pod template: .port */}}
{{- define "faultline.scrape" -}}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .port | quote }}
prometheus.io/path: /metrics
{{- end -}}

{{- define "faultline.liveness" -}}
livenessProbe:                 # a process that stops serving is restarted; a stage that fails exits (crash-only)
  httpGet: {path: /metrics, port: metrics}
  initialDelaySeconds: 30
  periodSeconds: 10
  failureThreshold: 6
{{- end -}}
