{{/* Chart name (app.kubernetes.io/name). */}}
{{- define "agent-gateway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Prefix of every resource name: the release name, cut so "-runner-job-template" still fits in 63. */}}
{{- define "agent-gateway.fullname" -}}
{{- default .Release.Name .Values.fullnameOverride | trunc 43 | trimSuffix "-" -}}
{{- end -}}

{{- define "agent-gateway.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "agent-gateway.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/*
The roles of the one binary. key: section of values.yaml; port: the listener the role serves alone
(probes and /metrics on every one); portEnv: the variable naming it; service: Service name suffix;
public: reached through the ingress controller (media: its /media hosting on the gateway host).
reviewsPort (gateway only): the second listener, the isolated origin of review sites (REVIEWS_PORT,
container port "reviews", Service "<fullname>-reviews"); no probes or metrics there.
*/}}
{{- define "agent-gateway.roles" -}}
gateway:       { key: gateway,      port: 4020, portEnv: GATEWAY_PORT,    service: gateway,    public: true, reviewsPort: 4025 }
scheduler-api: { key: schedulerApi, port: 4021, portEnv: SCHEDULER_PORT,  service: scheduler,  public: true }
memory:        { key: memory,       port: 4022, portEnv: MEMORY_PORT,     service: memory,     public: true }
media:         { key: media,        port: 4023, portEnv: MEDIA_PORT,      service: media,      public: true }
controller:    { key: controller,   port: 4024, portEnv: CONTROLLER_PORT, service: controller, public: false }
{{- end -}}

{{/* Labels of the release's objects; include with (dict "ctx" $ "component" "gateway"). */}}
{{- define "agent-gateway.labels" -}}
helm.sh/chart: {{ include "agent-gateway.chart" .ctx }}
{{ include "agent-gateway.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: agent-gateway
{{- end -}}

{{- define "agent-gateway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "agent-gateway.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
{{- with .component }}
app.kubernetes.io/component: {{ . }}
{{- end }}
{{- end -}}

{{/* Labels of every pod of the release's services (no component): the NetworkPolicy peer "our own pods". */}}
{{- define "agent-gateway.releasePodLabels" -}}
app.kubernetes.io/name: {{ include "agent-gateway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "agent-gateway.serviceAccountName" -}}
{{- printf "%s-%s" (include "agent-gateway.fullname" .ctx) .component -}}
{{- end -}}

{{/* Restricted Pod Security: pod level, for the service pods (uid 10001 of the image). */}}
{{- define "agent-gateway.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* Restricted Pod Security: container level, for every container of the chart. */}}
{{- define "agent-gateway.containerSecurityContext" -}}
allowPrivilegeEscalation: false
privileged: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{- define "agent-gateway.scheme" -}}
{{- $host := .host -}}
{{- $tls := false -}}
{{- range .ctx.Values.ingress.tls }}{{ if has $host .hosts }}{{ $tls = true }}{{ end }}{{ end -}}
{{- ternary "https" "http" $tls -}}
{{- end -}}

{{/* Public URL of a service: the value, else the ingress host, else the in-cluster Service. */}}
{{- define "agent-gateway.publicUrl" -}}
{{- $ctx := .ctx -}}
{{- $explicit := index $ctx.Values.config.publicUrls .name -}}
{{- $host := index $ctx.Values.ingress.hosts .name -}}
{{- if $explicit -}}
{{- $explicit -}}
{{- else if and $ctx.Values.ingress.enabled $host -}}
{{- printf "%s://%s" (include "agent-gateway.scheme" (dict "ctx" $ctx "host" $host)) $host -}}
{{- else -}}
{{- printf "http://%s-%s.%s.svc:%v" (include "agent-gateway.fullname" $ctx) .name $ctx.Release.Namespace .port -}}
{{- end -}}
{{- end -}}

{{/*
PUBLIC_MEDIA_URL: the value; else the gateway's ingress URL (the ingress routes /media on the
gateway host to the media Service); else the media Service.
*/}}
{{- define "agent-gateway.publicMediaUrl" -}}
{{- $v := .Values -}}
{{- if $v.config.publicUrls.media -}}
{{- $v.config.publicUrls.media -}}
{{- else if and $v.ingress.enabled $v.ingress.hosts.gateway -}}
{{- printf "%s://%s" (include "agent-gateway.scheme" (dict "ctx" . "host" $v.ingress.hosts.gateway)) $v.ingress.hosts.gateway -}}
{{- else -}}
{{- include "agent-gateway.mediaInternalUrl" . -}}
{{- end -}}
{{- end -}}

{{/*
PUBLIC_REVIEWS_URL: reviews.publicUrl; else, with the ingress enabled, <scheme>://{site}.<suffix>
from the wildcard host ingress.hosts.reviews "*.<suffix>" (https when ingress.tls lists that host,
as for the other public URLs); else "" (the variable stays unset; NOTES.txt warns). Fails when the
ingress is given a reviews host that is not a wildcard: each review's site has a host of its own.
*/}}
{{- define "agent-gateway.publicReviewsUrl" -}}
{{- $v := .Values -}}
{{- $host := $v.ingress.hosts.reviews -}}
{{- if and $v.ingress.enabled $host (not (hasPrefix "*." $host)) -}}
{{- fail (printf "ingress.hosts.reviews must be a wildcard host such as *.reviews.example.com, got %q: every review site is served at an origin of its own, https://<label>.<suffix> (PUBLIC_REVIEWS_URL https://{site}.<suffix>), so the Ingress rule, the DNS name and the TLS certificate must cover *.<suffix>. Set ingress.hosts.reviews to \"*.<suffix>\", or leave it empty and set reviews.publicUrl when the reviews Service is exposed another way." $host) -}}
{{- end -}}
{{- if $v.reviews.publicUrl -}}
{{- $v.reviews.publicUrl -}}
{{- else if and $v.ingress.enabled $host -}}
{{- printf "%s://{site}.%s" (include "agent-gateway.scheme" (dict "ctx" . "host" $host)) (trimPrefix "*." $host) -}}
{{- end -}}
{{- end -}}

{{/* MEDIA_URL of the gateway: the media Service. */}}
{{- define "agent-gateway.mediaInternalUrl" -}}
{{- printf "http://%s-media.%s.svc:4023" (include "agent-gateway.fullname" .) .Release.Namespace -}}
{{- end -}}

{{/* The Secret and key of MEDIA_INTERNAL_TOKEN: media.internalToken.existingSecret, else the chart's generated one. */}}
{{- define "agent-gateway.mediaTokenSecret" -}}
{{- with .Values.media.internalToken.existingSecret -}}
name: {{ . }}
key: {{ $.Values.media.internalToken.key }}
{{- else -}}
name: {{ include "agent-gateway.fullname" . }}-media-token
key: MEDIA_INTERNAL_TOKEN
{{- end -}}
{{- end -}}

{{/*
The memory key ring (MEMORY_KEY_FILE): memory.keyRing.existingSecret and its secretKey, else the
chart's generated "<fullname>-memory-keys" (templates/memory-keys.yaml), key memory-keys.json.
*/}}
{{- define "agent-gateway.memoryKeysSecret" -}}
{{- with .Values.memory.keyRing.existingSecret -}}
name: {{ . }}
key: {{ $.Values.memory.keyRing.secretKey }}
{{- else -}}
name: {{ include "agent-gateway.fullname" . }}-memory-keys
key: memory-keys.json
{{- end -}}
{{- end -}}

{{/* Where the memory pods see the key ring (a read-only Secret volume, refreshed by the kubelet). */}}
{{- define "agent-gateway.memoryKeysDir" -}}
/etc/agent-gateway/memory-keys
{{- end -}}

{{/*
The local embedding model of memory.embeddings.localModel: "claim", "image" or "" (none). Fails on
the combinations the service refuses (MEMORY_EMBEDDINGS_URL with MEMORY_EMBEDDINGS_MODEL_DIR).
*/}}
{{- define "agent-gateway.memoryLocalModel" -}}
{{- $e := .Values.memory.embeddings -}}
{{- $lm := $e.localModel -}}
{{- if and $lm.existingClaim $lm.image.reference -}}
{{- fail "memory.embeddings.localModel: set existingClaim or image.reference, not both (one directory holds the model)." -}}
{{- end -}}
{{- if and $e.url (or $lm.existingClaim $lm.image.reference) -}}
{{- fail "memory.embeddings.url and memory.embeddings.localModel are mutually exclusive: the memory role uses one embedder (MEMORY_EMBEDDINGS_URL or MEMORY_EMBEDDINGS_MODEL_DIR). Clear memory.embeddings.url to use the local model, or clear localModel.existingClaim/image.reference to use the upstream." -}}
{{- end -}}
{{- if $lm.existingClaim -}}claim{{- else if $lm.image.reference -}}image{{- end -}}
{{- end -}}

{{- define "agent-gateway.schedulerInternalUrl" -}}
{{- .Values.config.schedulerInternalUrl | default (printf "http://%s-scheduler.%s.svc:4021" (include "agent-gateway.fullname" .) .Release.Namespace) -}}
{{- end -}}

{{- define "agent-gateway.databaseSecret" -}}
{{- if .Values.postgresql.enabled -}}
name: {{ include "agent-gateway.fullname" . }}-postgresql
key: DATABASE_URL
{{- else -}}
name: {{ .Values.externalDatabase.existingSecret }}
key: {{ .Values.externalDatabase.key }}
{{- end -}}
{{- end -}}

{{- define "agent-gateway.redisSecret" -}}
{{- if .Values.redis.enabled -}}
name: {{ include "agent-gateway.fullname" . }}-redis
key: REDIS_URL
{{- else -}}
name: {{ .Values.externalRedis.existingSecret }}
key: {{ .Values.externalRedis.key }}
{{- end -}}
{{- end -}}

{{/*
Which variables of secrets.existingSecret each role reads (least privilege). The S3 keys go to the
roles that keep blobs (the gateway: review sites), and only with blobStore.type s3; the facilitator's
X402_FACILITATOR_HEADERS only with config.x402Facilitator.url. Media takes no payments, so it reads
no chain, facilitator or mail secret. MEDIA_INTERNAL_TOKEN and REVIEWS_SECRET_KEY have
Secrets of their own (agent-gateway.mediaTokenSecret, reviews.secretKey).
*/}}
{{- define "agent-gateway.secretEnvByRole" -}}
{{- $s3 := ternary (list "S3_ACCESS_KEY_ID" "S3_SECRET_ACCESS_KEY") (list) (eq .Values.blobStore.type "s3") -}}
{{- $fac := ternary (list "X402_FACILITATOR_HEADERS") (list) (not (empty .Values.config.x402Facilitator.url)) -}}
gateway: {{ concat (list "SETTLER_PRIVATE_KEY" "MPP_SECRET_KEY" "SMTP_URL") $fac $s3 | toJson }}
scheduler-api: {{ concat (list "SETTLER_PRIVATE_KEY" "MPP_SECRET_KEY" "SCHEDULER_SECRET_KEY" "LLM_API_KEY" "SMTP_URL" "MARKETPLACE_PAYER_PRIVATE_KEY") $fac $s3 | toJson }}
controller: {{ concat (list "SETTLER_PRIVATE_KEY" "MPP_SECRET_KEY" "SCHEDULER_SECRET_KEY" "SMTP_URL") $fac $s3 | toJson }}
memory: {{ concat (list "SETTLER_PRIVATE_KEY" "MPP_SECRET_KEY" "SMTP_URL") $fac | toJson }}
media: {{ concat (list "SONG_UPSTREAM_API_KEY" "SPEECH_UPSTREAM_API_KEY") $s3 | toJson }}
migrate: []
{{- end -}}

{{/* BLOB_STORE and its settings, for the roles that keep blobs (gateway, scheduler-api, controller, media). */}}
{{- define "agent-gateway.blobEnv" -}}
{{- $b := .Values.blobStore -}}
- name: BLOB_DIR
  value: /var/lib/agent-gateway/blobs
{{- if eq $b.type "s3" }}
- name: BLOB_STORE
  value: s3
- name: S3_BUCKET
  value: {{ $b.s3.bucket | quote }}
- name: S3_REGION
  value: {{ $b.s3.region | quote }}
{{- with $b.s3.endpoint }}
- name: S3_ENDPOINT
  value: {{ . | quote }}
{{- end }}
{{- with $b.s3.prefix }}
- name: S3_PREFIX
  value: {{ . | quote }}
{{- end }}
- name: S3_FORCE_PATH_STYLE
  value: {{ $b.s3.forcePathStyle | toString | quote }}
{{- end }}
{{- end -}}

{{/*
Environment of a role's container; include with (dict "ctx" $ "role" "gateway").
The variables are the ones src/platform/config.ts reads (README "Configuration").
*/}}
{{- define "agent-gateway.env" -}}
{{- $ctx := .ctx -}}
{{- $v := $ctx.Values -}}
{{- $role := .role -}}
- name: HOST
  value: "0.0.0.0"
{{- if and $v.config.allowedHosts (ne $role "migrate") }}
{{- /* The role's own Service name too: in-cluster callers (the gateway calling media) send it as Host. "*" is the guard off. */}}
{{- $hosts := $v.config.allowedHosts }}
{{- if not (has "*" $hosts) }}
{{- $service := (index (include "agent-gateway.roles" $ctx | fromYaml) $role).service }}
{{- $hosts = append $hosts (printf "%s-%s.%s.svc" (include "agent-gateway.fullname" $ctx) $service $ctx.Release.Namespace) | uniq }}
{{- end }}
- name: ALLOWED_HOSTS
  value: {{ join "," $hosts | quote }}
{{- end }}
- name: DATA_DIR
  value: /var/lib/agent-gateway
- name: LOG_LEVEL
  value: {{ $v.config.logLevel | quote }}
- name: PUBLIC_BASE_URL
  value: {{ include "agent-gateway.publicUrl" (dict "ctx" $ctx "name" "gateway" "port" 4020) | quote }}
- name: PUBLIC_SCHEDULER_URL
  value: {{ include "agent-gateway.publicUrl" (dict "ctx" $ctx "name" "scheduler" "port" 4021) | quote }}
- name: PUBLIC_MEMORY_URL
  value: {{ include "agent-gateway.publicUrl" (dict "ctx" $ctx "name" "memory" "port" 4022) | quote }}
- name: PUBLIC_MEDIA_URL
  value: {{ include "agent-gateway.publicMediaUrl" $ctx | quote }}
- name: BODY_LIMIT_BYTES
  value: {{ $v.config.bodyLimitBytes | int64 | quote }}
- name: SHUTDOWN_GRACE_MS
  value: {{ $v.config.shutdownGraceMs | int64 | quote }}
- name: OTEL_SERVICE_NAME
  value: {{ $v.config.otel.serviceName | quote }}
{{- with $v.config.otel.endpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ . | quote }}
{{- end }}
{{- if has $role (list "gateway" "scheduler-api" "controller" "memory") }}
{{- /* Only the roles that take payments get the chain and the facilitator: each decides the settlements of the work it sells. */}}
{{- with $v.config.payToAddress }}
- name: PAY_TO_ADDRESS
  value: {{ . | quote }}
{{- end }}
{{- with $v.config.chainRpcUrl }}
- name: CHAIN_RPC_URL
  value: {{ . | quote }}
{{- end }}
{{- with $v.config.chainConfirmations }}
- name: CHAIN_CONFIRMATIONS
  value: {{ . | int64 | quote }}
{{- end }}
{{- with $v.config.x402Facilitator.url }}
- name: X402_FACILITATOR_URL
  value: {{ . | quote }}
- name: X402_FACILITATOR_TIMEOUT_MS
  value: {{ $v.config.x402Facilitator.timeoutMs | int64 | quote }}
{{- end }}
{{- with $v.config.tempoRpcUrl }}
- name: TEMPO_RPC_URL
  value: {{ . | quote }}
{{- end }}
{{- end }}
{{- with $v.config.mailFrom }}
- name: MAIL_FROM
  value: {{ . | quote }}
{{- end }}
- name: DATABASE_URL
  valueFrom:
    secretKeyRef:
      {{- include "agent-gateway.databaseSecret" $ctx | nindent 6 }}
{{- if ne $role "migrate" }}
- name: REDIS_URL
  valueFrom:
    secretKeyRef:
      {{- include "agent-gateway.redisSecret" $ctx | nindent 6 }}
{{- end }}
{{- if has $role (list "scheduler-api" "controller") }}
- name: SCHEDULER_EXECUTOR
  value: kubernetes
- name: KUBE_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: SCHEDULER_INTERNAL_URL
  value: {{ include "agent-gateway.schedulerInternalUrl" $ctx | quote }}
{{- end }}
{{- if has $role (list "gateway" "scheduler-api" "controller" "media") }}
{{ include "agent-gateway.blobEnv" $ctx }}
{{- end }}
{{- if has $role (list "gateway" "media") }}
{{- /* The gateway calls the media Service with this bearer; media accepts only it. */}}
- name: MEDIA_INTERNAL_TOKEN
  valueFrom:
    secretKeyRef:
      {{- include "agent-gateway.mediaTokenSecret" $ctx | nindent 6 }}
{{- end }}
{{- if eq $role "gateway" }}
- name: MEDIA_URL
  value: {{ include "agent-gateway.mediaInternalUrl" $ctx | quote }}
{{- /* Review sites: the second listener, its public origin template, its secret and callbacks. */}}
{{- $r := $v.reviews }}
- name: REVIEWS_PORT
  value: {{ (index (include "agent-gateway.roles" $ctx | fromYaml) "gateway").reviewsPort | int64 | quote }}
{{- with include "agent-gateway.publicReviewsUrl" $ctx }}
- name: PUBLIC_REVIEWS_URL
  value: {{ . | quote }}
{{- end }}
{{- with $r.secretKey.existingSecret }}
- name: REVIEWS_SECRET_KEY
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: {{ $r.secretKey.key }}
{{- end }}
{{- with $r.egressAllow }}
- name: REVIEWS_EGRESS_ALLOW
  value: {{ join "," . | quote }}
{{- end }}
- name: REVIEWS_CALLBACK_RETRY_LIMIT
  value: {{ $r.callbackRetry.limit | int64 | quote }}
- name: REVIEWS_CALLBACK_RETRY_DELAY_SEC
  value: {{ $r.callbackRetry.delaySeconds | int64 | quote }}
- name: REVIEWS_RETENTION_DAYS
  value: {{ $r.retentionDays | int64 | quote }}
{{- end }}
{{- if eq $role "media" }}
{{- $m := $v.media }}
- name: MEDIA_CONCURRENCY
  value: {{ $m.concurrency | int64 | quote }}
- name: MEDIA_ANALYSIS_THREADS
  value: {{ $m.analysisThreads | int64 | quote }}
- name: MEDIA_UPSTREAM_TIMEOUT_MS
  value: {{ $m.upstreamTimeoutMs | int64 | quote }}
- name: MEDIA_UPSTREAM_RETRIES
  value: {{ $m.upstreamRetries | int64 | quote }}
{{- with $m.song.upstreamUrl }}
- name: SONG_UPSTREAM_URL
  value: {{ . | quote }}
{{- end }}
{{- with $m.song.model }}
- name: SONG_UPSTREAM_MODEL
  value: {{ . | quote }}
{{- end }}
{{- with $m.speech.upstreamUrl }}
- name: SPEECH_UPSTREAM_URL
  value: {{ . | quote }}
{{- end }}
{{- with $m.speech.model }}
- name: SPEECH_UPSTREAM_MODEL
  value: {{ . | quote }}
{{- end }}
{{- end }}
{{- if eq $role "memory" }}
{{- $mem := $v.memory }}
{{- $e := $mem.embeddings }}
{{- $d := $mem.dreaming }}
- name: MEMORY_KEY_FILE
  value: {{ printf "%s/memory-keys.json" (include "agent-gateway.memoryKeysDir" $ctx) | quote }}
- name: MEMORY_CACHE_MB
  value: {{ $mem.cacheMb | int64 | quote }}
- name: MEMORY_UPSTREAM_TIMEOUT_MS
  value: {{ $mem.upstreamTimeoutMs | int64 | quote }}
{{- /* One embedder: the upstream, a local model directory, or (neither) the lexical default. */}}
{{- if $e.url }}
- name: MEMORY_EMBEDDINGS_URL
  value: {{ $e.url | quote }}
{{- with $e.model }}
- name: MEMORY_EMBEDDINGS_MODEL
  value: {{ . | quote }}
{{- end }}
{{- if $e.dimensions }}
- name: MEMORY_EMBEDDINGS_DIMENSIONS
  value: {{ $e.dimensions | int64 | quote }}
{{- end }}
{{- with $e.apiKeySecret.name }}
- name: MEMORY_EMBEDDINGS_API_KEY
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: {{ $e.apiKeySecret.key }}
{{- end }}
{{- else if include "agent-gateway.memoryLocalModel" $ctx }}
- name: MEMORY_EMBEDDINGS_MODEL_DIR
  value: {{ $e.localModel.mountPath | quote }}
{{- end }}
{{- /* Dreaming is off without a chat upstream; its other settings then mean nothing. */}}
{{- if $d.url }}
- name: MEMORY_DREAM_URL
  value: {{ $d.url | quote }}
{{- with $d.model }}
- name: MEMORY_DREAM_MODEL
  value: {{ . | quote }}
{{- end }}
- name: MEMORY_DREAM_MODEL_SIZE
  value: {{ $d.modelSize | quote }}
- name: MEMORY_DREAM_CRON
  value: {{ $d.cron | quote }}
{{- with $d.apiKeySecret.name }}
- name: MEMORY_DREAM_API_KEY
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: {{ $d.apiKeySecret.key }}
{{- end }}
{{- end }}
{{- end }}
{{- if eq $role "scheduler-api" }}
{{- with $v.config.llmBaseUrl }}
- name: LLM_BASE_URL
  value: {{ . | quote }}
{{- end }}
{{- end }}
{{- if eq $role "controller" }}
- name: RUNNER_JOB_TEMPLATE_FILE
  value: /etc/agent-gateway/job-template.yaml
- name: RUNNER_IMAGE_PYTHON
  value: {{ printf "%s:%s" $v.runner.images.python.repository $v.runner.images.python.tag | quote }}
- name: RUNNER_IMAGE_NODE
  value: {{ printf "%s:%s" $v.runner.images.node.repository $v.runner.images.node.tag | quote }}
- name: SANDBOX_MAX_PARALLEL
  value: {{ $v.controller.sandboxMaxParallel | int64 | quote }}
{{- with $v.config.npmRegistry }}
- name: NPM_REGISTRY
  value: {{ . | quote }}
{{- end }}
{{- with $v.config.pipIndexUrl }}
- name: PIP_INDEX_URL
  value: {{ . | quote }}
{{- end }}
{{- end }}
{{- if $v.secrets.existingSecret }}
{{- range (index (include "agent-gateway.secretEnvByRole" $ctx | fromYaml) $role) }}
- name: {{ . }}
  valueFrom:
    secretKeyRef:
      name: {{ $v.secrets.existingSecret }}
      key: {{ . }}
      {{- /* The settler key is mandatory with a real chain and no facilitator (config.ts refuses to start without it). */}}
      optional: {{ not (or (has . $v.secrets.required) (and (eq . "SETTLER_PRIVATE_KEY") $v.config.chainRpcUrl (not $v.config.x402Facilitator.url))) }}
{{- end }}
{{- end }}
{{- with $v.config.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- if ne $role "migrate" }}
{{- with (index $v (index (include "agent-gateway.roles" $ctx | fromYaml) $role).key).extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}
{{- end -}}
