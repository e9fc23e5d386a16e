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

{{/* The Secret holding the stages' kafka-password-<user> (none with plaintext Kafka). Without
kafka.existingSecret the chart makes it: from kafka.passwords, else generated for a trial. */}}
{{- define "faultline.kafkaSecret" -}}
{{- if .Values.kafka.existingSecret -}}
{{ .Values.kafka.existingSecret }}
{{- else if eq (include "faultline.sasl" .) "true" -}}
{{ include "faultline.fullname" . }}-kafka
{{- end -}}
{{- end -}}

{{/* The Secret holding kafka-password-admin, which only the topics init container mounts (never an env
variable, never in a stage container): kafka.existingSecret's key, else a Secret of its own. */}}
{{- define "faultline.kafkaAdminSecret" -}}
{{- .Values.kafka.existingSecret | default (printf "%s-kafka-admin" (include "faultline.fullname" .)) -}}
{{- end -}}

{{/* A password the chart makes for a trial: .root, .secret, .key, .given (a value, or empty). The given one,
else the live Secret's (helm upgrade keeps it: `lookup`), else 32 random characters. */}}
{{- define "faultline.devPassword" -}}
{{- $old := lookup "v1" "Secret" .root.Release.Namespace .secret -}}
{{- if .given -}}
{{ .given }}
{{- else if and $old $old.data (hasKey $old.data .key) -}}
{{ index $old.data .key | b64dec }}
{{- else -}}
{{ randAlphaNum 32 }}
{{- end -}}
{{- end -}}

{{/* The secrets the chart generates (nothing given for them): a list, empty in production. */}}
{{- define "faultline.generatedSecrets" -}}
{{- $made := list -}}
{{- if and (eq (include "faultline.sasl" .) "true") (not .Values.kafka.existingSecret) -}}
{{- range $user, $name := .Values.kafka.users -}}
{{- if not (index $.Values.kafka.passwords $user) -}}{{- $made = append $made (printf "Kafka password of %s" $name) -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- if not (or .Values.clickhouse.existingSecret .Values.clickhouse.password) -}}
{{- $made = append $made (printf "ClickHouse password of %s" .Values.clickhouse.user) -}}
{{- end -}}
{{- toJson $made -}}
{{- end -}}

{{- define "faultline.keysSecret" -}}
{{- .Values.keys.existingSecret | default (printf "%s-keys" (include "faultline.fullname" .)) -}}
{{- end -}}

{{- define "faultline.clickhouseSecret" -}}
{{- .Values.clickhouse.existingSecret | default (printf "%s-clickhouse" (include "faultline.fullname" .)) -}}
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

{{/* The `topics apply` init container: .root, .component. It alone has the Kafka admin's password, as a
file from a volume of its own (faultline.topicsVolume) that no stage container mounts. */}}
{{- define "faultline.topicsInit" -}}
{{- if .root.Values.topicsInitContainer -}}
initContainers:
  - name: topics
    image: {{ include "faultline.image" .root }}
    imagePullPolicy: {{ .root.Values.image.pullPolicy }}
    command: ["faultline", "topics", "apply"]
    envFrom:
      - configMapRef: {name: {{ include "faultline.fullname" .root }}-config}
    {{- if eq (include "faultline.sasl" .root) "true" }}
    env:
      - name: FAULTLINE_KAFKA_USERNAME
        value: {{ .root.Values.kafka.users.admin | quote }}
      - name: FAULTLINE_KAFKA_PASSWORD_FILE
        value: /run/secrets/kafka-admin/password
    volumeMounts:
      - {name: kafka-admin, mountPath: /run/secrets/kafka-admin, readOnly: true}
    {{- end }}
    resources:
      requests: {cpu: 50m, memory: 128Mi}
      limits: {cpu: 500m, memory: 256Mi}
    securityContext:
      {{- include "faultline.containerSecurity" . | nindent 6 }}
{{- end }}
{{- end -}}

{{/* The topics init container's volume (an item of the pod's volumes): the admin's key only. */}}
{{- define "faultline.topicsVolume" -}}
{{- if and .Values.topicsInitContainer (eq (include "faultline.sasl" .) "true") -}}
- name: kafka-admin
  secret:
    secretName: {{ include "faultline.kafkaAdminSecret" . }}
    items: [{key: kafka-password-admin, path: password}]
    defaultMode: 0440
{{- end -}}
{{- end -}}

{{/* Prometheus annotations of a pod template: .port */}}
{{- define "faultline.scrape" -}}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .port | quote }}
prometheus.io/path: /metrics
{{- end -}}

{{/* Every stage's probes. Live: it serves /metrics (a stage that fails exits: crash-only). Ready: it
serves /metrics too, which a stage starts only after its settings are checked and its broker answered
(the executor and sink, faultline/commands/stages.py), so a rollout waits for the new pod and
`kubectl get pods` shows READY 0/1 for one that cannot start. */}}
{{- define "faultline.probes" -}}
livenessProbe:
  httpGet: {path: /metrics, port: metrics}
  initialDelaySeconds: 30
  periodSeconds: 10
  failureThreshold: 6
readinessProbe:
  httpGet: {path: /metrics, port: metrics}
  periodSeconds: 5
  failureThreshold: 3
{{- end -}}
