// The one typed configuration module. Parsed once at start-up from the environment; every
// variable is declared here with its default and documentation (the README table and
// `agent-gateway config` are printed from this list, so they cannot drift).
import os from 'node:os'
import path from 'node:path'
import { CronExpressionParser } from 'cron-parser'
import { isBlobKey } from './blobs.ts'
import { parseHeaderList } from './header-list.ts'

export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent'
/** How log lines are written: pino's JSON lines, or readable lines for a person at a terminal. */
export type LogFormat = 'json' | 'pretty'

export interface Config {
  host: string
  /** ALLOWED_HOSTS: extra hosts the listeners answer (exact or `*.suffix`; `*` = any); undefined = unset. */
  allowedHosts: string[] | undefined
  gatewayPort: number
  schedulerPort: number
  memoryPort: number
  mediaPort: number
  controllerPort: number
  dataDir: string
  databaseUrl: string | undefined
  /** Postgres pool size per process. */
  databasePoolMax: number
  redisUrl: string | undefined
  publicBaseUrl: string
  publicSchedulerUrl: string
  publicMemoryUrl: string
  /** Base URL hosted audio is served under (`<publicMediaUrl>/media/audio/<sha256>.<ext>`). */
  publicMediaUrl: string
  bodyLimitBytes: number
  logLevel: LogLevel
  /** LOG_FORMAT; unset = pretty when stdout is a terminal, JSON otherwise (src/platform/logger.ts). */
  logFormat: LogFormat | undefined
  otlpEndpoint: string | undefined
  serviceName: string
  shutdownGraceMs: number
  /** Pay-to address for x402 / MPP. */
  payTo: string
  /** EVM RPC for settlement and refunds; unset = the embedded local dev chain. */
  chainRpcUrl: string | undefined
  /** Hot wallet that submits settlements and pays refunds (required with CHAIN_RPC_URL). */
  settlerPrivateKey: string | undefined
  /** CHAIN_CONFIRMATIONS: blocks a settlement needs before money leaves against it; unset = the network's default (payments/networks.ts). */
  chainConfirmations: number | undefined
  /** X402_FACILITATOR_URL: x402 proofs verified and settled by this facilitator; unset = our own wallet settles. */
  x402FacilitatorUrl: string | undefined
  /** X402_FACILITATOR_HEADERS: headers sent with every facilitator call (its API key); empty when unset. */
  x402FacilitatorHeaders: Record<string, string>
  x402FacilitatorTimeoutMs: number
  tempoRpcUrl: string | undefined
  /** HMAC key of MPP challenges; unset = generated once and kept in the database. */
  mppSecretKey: string | undefined
  /** OFFER_RECEIPT_SIGNING_KEY: x402 offer/receipt signing keys, active first; unset = generated once and kept in the database. */
  offerReceiptSigningKeys: `0x${string}`[] | undefined
  smtpUrl: string | undefined
  mailFrom: string
  /** Where scheduled runs execute: a local bubblewrap sandbox, or Kubernetes Jobs. */
  schedulerExecutor: 'local' | 'kubernetes'
  kubeNamespace: string
  /** Base URL run sandboxes use to reach the scheduler's helper endpoint. */
  schedulerInternalUrl: string
  /** Key that encrypts task env at rest; unset = generated once and kept in the database. */
  schedulerSecretKey: string | undefined
  /** Runs executing at once per controller (local sandbox executor). */
  sandboxMaxParallel: number
  /** Seconds before a cron slot its Run is created and dispatched (0 = at the slot; < 60 so one slot ahead at most). */
  dispatchAheadSec: number
  /** Directory of the local blob store (run logs, artifacts, sibling files). */
  blobDir: string
  /** Which blob store this process opens: the local directory (blobDir) or S3. */
  blobStore: 'local' | 's3'
  /** Bucket of the S3 blob store (set when blobStore is s3). */
  s3Bucket: string | undefined
  /** S3-compatible endpoint (MinIO, R2, …); unset = AWS S3. */
  s3Endpoint: string | undefined
  s3Region: string
  /** Key prefix of every object, without leading or trailing `/`; unset = the bucket root. */
  s3Prefix: string | undefined
  s3ForcePathStyle: boolean
  /** Static S3 credentials (both or neither); unset = the SDK's default chain. */
  s3AccessKeyId: string | undefined
  s3SecretAccessKey: string | undefined
  /** OpenAI-compatible upstream of generate_text; unset = generate_text answers 503. */
  llmBaseUrl: string | undefined
  llmApiKey: string | undefined
  /** Wallet that pays marketplace capabilities for call(...); unset = paid capabilities refused. */
  marketplacePayerKey: string | undefined
  runnerJobTemplateFile: string | undefined
  runnerImagePython: string
  runnerImageNode: string
  /** Package sources for task dependencies (reached through the egress proxy). */
  npmRegistry: string | undefined
  pipIndexUrl: string | undefined
  /** Internal base URL of a media role running in another process; unset = media runs in-process. */
  mediaUrl: string | undefined
  /** Bearer shared by the gateway and the media role (required with MEDIA_URL). */
  mediaInternalToken: string | undefined
  /** Song generation upstream; unset = the offline composer. */
  songUpstreamUrl: string | undefined
  songUpstreamApiKey: string | undefined
  songUpstreamModel: string | undefined
  /** Speech upstream; unset = espeak-ng. */
  speechUpstreamUrl: string | undefined
  speechUpstreamApiKey: string | undefined
  speechUpstreamModel: string | undefined
  mediaUpstreamTimeoutMs: number
  /** Retries of a failed upstream generation (0 = one attempt). */
  mediaUpstreamRetries: number
  /** Generations running at once per media process. */
  mediaConcurrency: number
  /** Worker threads of audio analysis per media process. */
  mediaAnalysisThreads: number
  /** General MIDI soundfont of the offline composer (fluidsynth). */
  soundfontPath: string
  /** Key ring of the memory service's key-encryption keys; unset = DATA_DIR/memory-keys.json (generated, 0600). */
  memoryKeyFile: string | undefined
  /** OpenAI-compatible embeddings upstream; unset with no model dir = the lexical default. */
  memoryEmbeddingsUrl: string | undefined
  memoryEmbeddingsApiKey: string | undefined
  memoryEmbeddingsModel: string
  memoryEmbeddingsDimensions: number | undefined
  /** Directory of an ONNX sentence-embedding model (config.json, tokenizer.json, tokenizer_config.json, onnx/model.onnx). */
  memoryEmbeddingsModelDir: string | undefined
  memoryUpstreamTimeoutMs: number
  /** Dreaming's OpenAI-compatible chat upstream; unset = dreaming off. */
  memoryDreamUrl: string | undefined
  memoryDreamApiKey: string | undefined
  memoryDreamModel: string
  memoryDreamModelSize: 'large' | 'small'
  memoryDreamCron: string
  /** Bytes of decrypted recall indexes kept per process (least recently used owners are dropped). */
  memoryCacheBytes: number
  /** Port of the isolated origin that hosts review sites and proxies live pages. */
  reviewsPort: number
  /** Origin template of review sites; `{site}` is each review's own first host label. */
  publicReviewsUrl: string
  /** REVIEWS_SECRET_KEY: active secret first, older ones after it; unset = generated once and kept in the database. */
  reviewsSecretKeys: string[] | undefined
  /** `host:port` pairs review pages and callbacks may reach although private (tests, an operator's internal site). */
  reviewsEgressAllow: string[]
  /** Callback retries after the first attempt, and the base delay that doubles (with jitter) per retry. */
  reviewsCallbackRetryLimit: number
  reviewsCallbackRetryDelaySec: number
  /** Days a review session lives (from its creation); then its site is deleted and it answers 410. */
  reviewsRetentionDays: number
  /** Chromium of screenshots (review snapshots, the screenshot helper). */
  chromiumPath: string
}

export class ConfigError extends Error {
  readonly variable: string
  constructor(variable: string, message: string) {
    super(`Invalid configuration: ${variable} ${message}`)
    this.name = 'ConfigError'
    this.variable = variable
  }
}

type Env = Record<string, string | undefined>

interface Variable {
  name: string
  default: string
  doc: string
}

/** Every variable the service reads, in README order. `default` is documentation text. */
export const configVariables: readonly Variable[] = [
  { name: 'HOST', default: '127.0.0.1', doc: 'Interface every listener binds to (0.0.0.0 in a container).' },
  {
    name: 'ALLOWED_HOSTS',
    default: '(unset)',
    doc: 'Hosts the listeners answer beside those of the configured URLs, loopback names and IP literals: comma-separated names or *.suffix, * for any. The check (DNS rebinding, cross-site writes) is on when HOST is loopback or this is set.',
  },
  { name: 'GATEWAY_PORT', default: '4020', doc: 'Port of the gateway ({base_url}).' },
  { name: 'SCHEDULER_PORT', default: '4021', doc: 'Port of the scheduler API ({scheduler_url}).' },
  { name: 'MEMORY_PORT', default: '4022', doc: 'Port of the memory service.' },
  { name: 'MEDIA_PORT', default: '4023', doc: 'Port of the media role when it runs on its own (internal).' },
  { name: 'CONTROLLER_PORT', default: '4024', doc: 'Health/metrics port of the controller role when it runs on its own.' },
  { name: 'DATA_DIR', default: './.agent-gateway', doc: 'Embedded-default data directory (PGlite files, blobs).' },
  { name: 'DATABASE_URL', default: '(unset: PGlite in DATA_DIR)', doc: 'Postgres connection string; unset = embedded PGlite.' },
  { name: 'DATABASE_POOL_MAX', default: '20', doc: 'Postgres connections per process (with DATABASE_URL); the run controller dispatches through them in parallel.' },
  { name: 'REDIS_URL', default: '(unset: in-process)', doc: 'Redis connection string; unset = in-process substitute.' },
  { name: 'PUBLIC_BASE_URL', default: 'http://HOST:GATEWAY_PORT', doc: 'Public URL of the gateway, used in documents and links.' },
  { name: 'PUBLIC_SCHEDULER_URL', default: 'http://HOST:SCHEDULER_PORT', doc: 'Public URL of the scheduler API.' },
  { name: 'PUBLIC_MEMORY_URL', default: 'http://HOST:MEMORY_PORT', doc: 'Public URL of the memory service.' },
  {
    name: 'PUBLIC_MEDIA_URL',
    default: 'PUBLIC_BASE_URL',
    doc: 'Base URL under which hosted audio is served (…/media/audio/{sha256}.mp3); the gateway serves /media in-process, the Helm chart routes /media to the media Service.',
  },
  { name: 'BODY_LIMIT_BYTES', default: '16777216', doc: 'Largest accepted request body; larger bodies get 413.' },
  { name: 'LOG_LEVEL', default: 'info', doc: 'pino level: fatal, error, warn, info, debug, trace, silent.' },
  {
    name: 'LOG_FORMAT',
    default: '(unset: pretty on a terminal, else json)',
    doc: 'json (one JSON object per line, for log shippers) or pretty (readable lines: time, level, message, fields); unset = pretty when stdout is a terminal.',
  },
  { name: 'OTEL_EXPORTER_OTLP_ENDPOINT', default: '(unset: tracing off)', doc: 'OTLP/HTTP endpoint; tracing is on only when set.' },
  { name: 'OTEL_SERVICE_NAME', default: 'agent-gateway', doc: 'service.name of exported spans.' },
  { name: 'SHUTDOWN_GRACE_MS', default: '10000', doc: 'How long SIGTERM waits for in-flight requests before closing.' },
  {
    name: 'PAY_TO_ADDRESS',
    default: '0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266',
    doc: 'EVM address that receives x402/MPP payments (default: the local dev chain account #0; set your own in production).',
  },
  {
    name: 'CHAIN_RPC_URL',
    default: '(unset: local dev chain)',
    doc: 'EVM JSON-RPC (Base mainnet or any EVM) for settlement and refunds; unset = anvil started under DATA_DIR with a test USDC.',
  },
  {
    name: 'SETTLER_PRIVATE_KEY',
    default: '(required with CHAIN_RPC_URL, unless X402_FACILITATOR_URL)',
    doc: 'Hot wallet that submits x402 settlements and pays refunds (needs gas, not USDC); with X402_FACILITATOR_URL it only pays refunds (without it, refunds wait).',
  },
  {
    name: 'CHAIN_CONFIRMATIONS',
    default: '(per network: Base 10, Base Sepolia 5, other chains 12; dev chain 1, once saved to disk)',
    doc: 'Blocks a settlement needs (its own included) before refunds and withdrawals may draw on it; work starts on the first receipt either way.',
  },
  {
    name: 'X402_FACILITATOR_URL',
    default: '(unset: settled by SETTLER_PRIVATE_KEY)',
    doc: 'x402 facilitator (http/https; POST /verify, POST /settle, GET /supported) that verifies and settles every x402 payment; needs CHAIN_RPC_URL, read only, to decide settlements whose answer was lost. See docs/payments.md "Facilitator mode".',
  },
  {
    name: 'X402_FACILITATOR_HEADERS',
    default: '(unset)',
    doc: 'Headers sent with every facilitator call, e.g. its API key: a JSON object {"Authorization": "Bearer …"} or Name: value lines (one per line).',
  },
  {
    name: 'X402_FACILITATOR_TIMEOUT_MS',
    default: '30000',
    doc: 'How long one facilitator call may take; a /settle that times out is left pending and decided from the chain, never failed.',
  },
  {
    name: 'TEMPO_RPC_URL',
    default: '(unset: MPP charges not offered)',
    doc: 'Tempo JSON-RPC used to verify and broadcast MPP tempo/charge payments; unset, priced 402s carry no MPP challenge ($0 MPP proofs are verified locally and need none).',
  },
  { name: 'MPP_SECRET_KEY', default: '(generated, kept in the database)', doc: 'HMAC key (≥ 32 bytes) that signs MPP challenges; share it across replicas.' },
  {
    name: 'OFFER_RECEIPT_SIGNING_KEY',
    default: '(generated, kept in the database)',
    doc: 'secp256k1 private key (0x + 64 hex) that signs x402 offer-receipt offers and receipts (EIP-712); new,old (comma-separated) during a rotation: the first signs, every address is published. Share it across replicas.',
  },
  {
    name: 'SMTP_URL',
    default: '(unset: dev outbox)',
    doc: 'SMTP URL for e-mail (claims, notifications); unset = messages kept in memory and shown at GET /dev/outbox on the local dev chain only (with CHAIN_RPC_URL, mail is not delivered).',
  },
  { name: 'MAIL_FROM', default: 'agent-gateway@localhost', doc: 'From address of outgoing e-mail.' },
  { name: 'SCHEDULER_EXECUTOR', default: 'local', doc: 'Where task runs execute: local (a bubblewrap sandbox per run) or kubernetes (a sandboxed Job per run).' },
  { name: 'KUBE_NAMESPACE', default: 'default', doc: 'Namespace of the Task/Run resources and run Jobs (kubernetes executor).' },
  { name: 'SCHEDULER_INTERNAL_URL', default: 'PUBLIC_SCHEDULER_URL', doc: 'Base URL run sandboxes use to reach the helper endpoint (e.g. the in-cluster Service).' },
  { name: 'SCHEDULER_SECRET_KEY', default: '(generated, kept in the database)', doc: 'Key that encrypts task env at rest and signs log URLs; share it across replicas.' },
  { name: 'SANDBOX_MAX_PARALLEL', default: '4', doc: 'Runs executing at once per controller process.' },
  {
    name: 'SCHEDULER_DISPATCH_AHEAD_SEC',
    default: '15',
    doc: 'How long before a cron slot its Run is created and dispatched (escrow reserved), so it starts on the slot; 0 = at the slot.',
  },
  { name: 'BLOB_DIR', default: 'DATA_DIR/blobs', doc: 'Directory of the local blob store (run logs, artifacts, sibling files).' },
  { name: 'BLOB_STORE', default: 'local', doc: 'Blob store: local (BLOB_DIR; one host) or s3 (S3 or an S3-compatible store, shared by every replica).' },
  { name: 'S3_BUCKET', default: '(required with BLOB_STORE=s3)', doc: 'Bucket of the S3 blob store.' },
  { name: 'S3_ENDPOINT', default: '(unset: AWS S3)', doc: 'Endpoint of an S3-compatible store (MinIO, Cloudflare R2, Ceph).' },
  { name: 'S3_REGION', default: 'us-east-1', doc: 'Region of the bucket (R2: auto).' },
  { name: 'S3_PREFIX', default: '(unset: bucket root)', doc: 'Key prefix of every object, e.g. agent-gateway/ (segments of [A-Za-z0-9._-]).' },
  { name: 'S3_FORCE_PATH_STYLE', default: 'false', doc: 'true = path-style URLs (endpoint/bucket/key), which MinIO needs.' },
  {
    name: 'S3_ACCESS_KEY_ID',
    default: "(unset: the SDK's default chain)",
    doc: 'Static S3 access key (with S3_SECRET_ACCESS_KEY); unset = environment, web identity (IRSA) or instance role.',
  },
  { name: 'S3_SECRET_ACCESS_KEY', default: '(unset)', doc: 'Secret of S3_ACCESS_KEY_ID.' },
  { name: 'LLM_BASE_URL', default: '(unset: generate_text answers 503)', doc: 'OpenAI-compatible API base (…/v1) behind the generate_text helper.' },
  { name: 'LLM_API_KEY', default: '(unset)', doc: 'Bearer key of the LLM upstream.' },
  {
    name: 'MARKETPLACE_PAYER_PRIVATE_KEY',
    default: '(unset: paid capabilities refused)',
    doc: 'Wallet that pays x402/MPP marketplace capabilities called from tasks (charged to the task budget).',
  },
  { name: 'RUNNER_JOB_TEMPLATE_FILE', default: '(unset: built-in template)', doc: 'Job template (YAML) for run pods (kubernetes executor); the Helm chart mounts one.' },
  { name: 'RUNNER_IMAGE_PYTHON', default: 'ghcr.io/agent-gateway/runner-python:0.1.0', doc: 'Runner image for python tasks (kubernetes executor).' },
  { name: 'RUNNER_IMAGE_NODE', default: 'ghcr.io/agent-gateway/runner-node:0.1.0', doc: 'Runner image for node tasks (kubernetes executor).' },
  { name: 'NPM_REGISTRY', default: '(unset: npm default)', doc: 'npm registry for node task dependencies.' },
  { name: 'PIP_INDEX_URL', default: '(unset: pip default)', doc: 'Package index (PEP 503) for python task dependencies.' },
  {
    name: 'MEDIA_URL',
    default: '(unset: media in-process)',
    doc: 'Internal base URL of the media role when it runs in another process (e.g. http://agw-media:4023); the gateway calls it over HTTP.',
  },
  { name: 'MEDIA_INTERNAL_TOKEN', default: '(required with MEDIA_URL)', doc: 'Bearer (≥ 32 characters) the gateway presents to the media role; the same value on both.' },
  { name: 'SONG_UPSTREAM_URL', default: '(unset: offline composer)', doc: 'Song generation upstream; unset = the embedded composer (fluidsynth).' },
  { name: 'SONG_UPSTREAM_API_KEY', default: '(unset)', doc: 'Bearer key of the song upstream.' },
  { name: 'SONG_UPSTREAM_MODEL', default: "(unset: the upstream's default)", doc: 'Model asked of the song upstream.' },
  { name: 'SPEECH_UPSTREAM_URL', default: '(unset: espeak-ng)', doc: 'Speech synthesis upstream; unset = espeak-ng.' },
  { name: 'SPEECH_UPSTREAM_API_KEY', default: '(unset)', doc: 'Bearer key of the speech upstream.' },
  { name: 'SPEECH_UPSTREAM_MODEL', default: "(unset: the upstream's default)", doc: 'Model asked of the speech upstream.' },
  { name: 'MEDIA_UPSTREAM_TIMEOUT_MS', default: '120000', doc: 'Time one upstream generation may take before it counts as failed.' },
  { name: 'MEDIA_UPSTREAM_RETRIES', default: '2', doc: 'Retries of a failed upstream generation (0 = a single attempt).' },
  { name: 'MEDIA_CONCURRENCY', default: '2', doc: 'Generations running at once per media process; more wait their turn.' },
  { name: 'MEDIA_ANALYSIS_THREADS', default: '(available cores)', doc: 'Worker threads of audio analysis per media process (set it to the CPU given to a container).' },
  { name: 'SOUNDFONT_PATH', default: '/usr/share/sounds/sf2/FluidR3_GM.sf2', doc: 'General MIDI soundfont of the offline composer (Debian fluid-soundfont-gm).' },
  {
    name: 'MEMORY_KEY_FILE',
    default: '(unset: DATA_DIR/memory-keys.json, generated 0600)',
    doc: 'Key ring of the memory key-encryption keys: JSON {"active": id, "keys": {id: base64 of 32 bytes}} (a mounted Secret in the chart). See docs/memory.md "Keys".',
  },
  {
    name: 'MEMORY_EMBEDDINGS_URL',
    default: '(unset: local model or lexical default)',
    doc: 'OpenAI-compatible embeddings API base (…/v1/embeddings is called); its usage tokens are billed.',
  },
  { name: 'MEMORY_EMBEDDINGS_API_KEY', default: '(unset)', doc: 'Bearer key of the embeddings upstream.' },
  { name: 'MEMORY_EMBEDDINGS_MODEL', default: 'text-embedding-3-small', doc: 'Model asked of the embeddings upstream.' },
  { name: 'MEMORY_EMBEDDINGS_DIMENSIONS', default: "(unset: the model's own)", doc: 'dimensions asked of the embeddings upstream (e.g. 384 or 512).' },
  {
    name: 'MEMORY_EMBEDDINGS_MODEL_DIR',
    default: '(unset)',
    doc: 'Directory of a local ONNX sentence-embedding model (config.json, tokenizer.json, tokenizer_config.json, onnx/model.onnx); never downloaded at run time.',
  },
  { name: 'MEMORY_UPSTREAM_TIMEOUT_MS', default: '30000', doc: 'Time one embeddings or dreaming upstream call may take.' },
  { name: 'MEMORY_DREAM_URL', default: '(unset: dreaming off)', doc: 'OpenAI-compatible chat API base used by dreaming (background consolidation).' },
  { name: 'MEMORY_DREAM_API_KEY', default: '(unset)', doc: 'Bearer key of the dreaming upstream.' },
  { name: 'MEMORY_DREAM_MODEL', default: 'gpt-4o-mini', doc: 'Chat model asked by dreaming.' },
  { name: 'MEMORY_DREAM_MODEL_SIZE', default: 'small', doc: 'Price tier of the dreaming model: small (0.10/0.40 USD per M tokens in/out) or large (0.30/2.50).' },
  { name: 'MEMORY_DREAM_CRON', default: '*/15 * * * *', doc: 'When the dreaming sweep runs (one sweep per slot across replicas).' },
  { name: 'MEMORY_CACHE_MB', default: '512', doc: 'Decrypted recall indexes kept in memory per process, in MiB (least recently used owners are dropped).' },
  { name: 'REVIEWS_PORT', default: '4025', doc: 'Port of the isolated origin that hosts review sites and proxies live pages (never the gateway origin).' },
  {
    name: 'PUBLIC_REVIEWS_URL',
    default: 'http://{site}.localhost:REVIEWS_PORT',
    doc: 'Origin of review sites; {site} (the first host label) becomes each review’s own label, so every site has its own origin. Cluster: https://{site}.reviews.example.com behind a wildcard DNS name and certificate.',
  },
  {
    name: 'REVIEWS_SECRET_KEY',
    default: '(generated, kept in the database)',
    doc: 'Secret (≥ 32 bytes) deriving reviewer capabilities and callback signing secrets; new,old (comma-separated) during a rotation. Share it across replicas.',
  },
  {
    name: 'REVIEWS_EGRESS_ALLOW',
    default: '(unset)',
    doc: 'Comma-separated host:port pairs live pages and callbacks may reach although private (tests; an internal site of yours).',
  },
  { name: 'REVIEWS_CALLBACK_RETRY_LIMIT', default: '15', doc: 'Callback retries after the first attempt (with the default delay: 16 attempts over 27 to 55 hours).' },
  { name: 'REVIEWS_CALLBACK_RETRY_DELAY_SEC', default: '3', doc: 'Base delay of callback retries, doubled per retry with jitter.' },
  {
    name: 'REVIEWS_RETENTION_DAYS',
    default: '30',
    doc: 'Days (1-3650) a review session lives from its creation; then its site and bundle are deleted and its links answer 410 (a submitted review stays readable by its agent).',
  },
  { name: 'CHROMIUM_PATH', default: '/usr/bin/chromium', doc: 'Chromium binary of screenshots (review snapshots, the screenshot helper).' },
]

const LOG_LEVELS: readonly LogLevel[] = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']

function readPort(env: Env, name: string, fallback: number): number {
  const raw = env[name]
  if (raw === undefined || raw === '') return fallback
  if (!/^\d+$/.test(raw)) throw new ConfigError(name, `must be a port number (0-65535), got "${raw}"`)
  const port = Number(raw)
  if (port > 65535) throw new ConfigError(name, `must be a port number (0-65535), got "${raw}"`)
  return port
}

function readPositiveInt(env: Env, name: string, fallback: number): number {
  const raw = env[name]
  if (raw === undefined || raw === '') return fallback
  if (!/^\d+$/.test(raw) || Number(raw) <= 0 || !Number.isSafeInteger(Number(raw))) {
    throw new ConfigError(name, `must be a positive integer, got "${raw}"`)
  }
  return Number(raw)
}

function readBoundedInt(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = env[name]
  if (raw === undefined || raw === '') return fallback
  if (!/^\d+$/.test(raw) || Number(raw) < min || Number(raw) > max) {
    throw new ConfigError(name, `must be an integer from ${min} to ${max}, got "${raw}"`)
  }
  return Number(raw)
}

function readUrl(env: Env, name: string, protocols: readonly string[]): string | undefined {
  const raw = env[name]
  if (raw === undefined || raw === '') return undefined
  let parsed: URL
  try {
    parsed = new URL(raw)
  } catch {
    throw new ConfigError(name, 'must be an absolute URL')
  }
  if (!protocols.includes(parsed.protocol)) {
    throw new ConfigError(name, `must use ${protocols.join(' or ')}, got "${parsed.protocol}"`)
  }
  return raw
}

function readBoolean(env: Env, name: string, fallback: boolean): boolean {
  const raw = env[name]
  if (raw === undefined || raw === '') return fallback
  if (raw === 'true') return true
  if (raw === 'false') return false
  throw new ConfigError(name, `must be true or false, got "${raw}"`)
}

/** The S3 settings; the bucket is required with BLOB_STORE=s3 only. */
function readS3(env: Env, blobStore: 'local' | 's3') {
  const bucket = env.S3_BUCKET || undefined
  if (blobStore === 's3' && bucket === undefined) throw new ConfigError('S3_BUCKET', 'is required when BLOB_STORE is s3')
  // Bucket rules of S3 and its compatibles, loosely (legacy buckets may hold capitals or underscores).
  if (bucket !== undefined && !/^[A-Za-z0-9][A-Za-z0-9._-]{1,254}$/.test(bucket)) throw new ConfigError('S3_BUCKET', `is not a bucket name: "${bucket}"`)
  const region = env.S3_REGION || 'us-east-1'
  if (!/^[a-z0-9][a-z0-9-]{0,62}$/.test(region)) throw new ConfigError('S3_REGION', `must be a region name such as us-east-1, got "${region}"`)
  const prefix = (env.S3_PREFIX ?? '').replace(/^\/+|\/+$/g, '')
  if (prefix !== '' && !isBlobKey(prefix)) throw new ConfigError('S3_PREFIX', 'must be /-separated segments of [A-Za-z0-9._-], each starting with a letter or digit')
  const accessKeyId = env.S3_ACCESS_KEY_ID || undefined
  const secretAccessKey = env.S3_SECRET_ACCESS_KEY || undefined
  if (accessKeyId !== undefined && secretAccessKey === undefined) throw new ConfigError('S3_SECRET_ACCESS_KEY', 'is required when S3_ACCESS_KEY_ID is set')
  if (secretAccessKey !== undefined && accessKeyId === undefined) throw new ConfigError('S3_ACCESS_KEY_ID', 'is required when S3_SECRET_ACCESS_KEY is set')
  return {
    s3Bucket: bucket,
    s3Endpoint: readUrl(env, 'S3_ENDPOINT', ['http:', 'https:']),
    s3Region: region,
    s3Prefix: prefix === '' ? undefined : prefix,
    s3ForcePathStyle: readBoolean(env, 'S3_FORCE_PATH_STYLE', false),
    s3AccessKeyId: accessKeyId,
    s3SecretAccessKey: secretAccessKey,
  }
}

/**
 * An upstream URL that must not carry credentials: user:password in a URL ends up in error
 * messages and logs (fetch echoes the URL); keys go in the *_API_KEY variables instead.
 */
function readUpstreamUrl(env: Env, name: string): string | undefined {
  const url = readUrl(env, name, ['http:', 'https:'])
  if (url === undefined) return undefined
  const parsed = new URL(url)
  if (parsed.username !== '' || parsed.password !== '') throw new ConfigError(name, 'must not contain a user name or password; put the key in the matching *_API_KEY variable')
  return url
}

/** The media role's settings (MEDIA_*, the song and speech upstreams, the soundfont). */
function readMedia(env: Env, cwd: string) {
  const http = ['http:', 'https:']
  const mediaUrl = readUrl(env, 'MEDIA_URL', http)
  const token = env.MEDIA_INTERNAL_TOKEN || undefined
  if (token !== undefined && !/^[\x21-\x7e]{32,512}$/.test(token)) {
    throw new ConfigError('MEDIA_INTERNAL_TOKEN', 'must be 32 to 512 printable ASCII characters without spaces (it is sent as a bearer token)')
  }
  if (mediaUrl !== undefined && token === undefined) throw new ConfigError('MEDIA_INTERNAL_TOKEN', 'is required when MEDIA_URL is set')
  return {
    mediaUrl: mediaUrl === undefined ? undefined : stripSlash(mediaUrl),
    mediaInternalToken: token,
    songUpstreamUrl: readUpstreamUrl(env, 'SONG_UPSTREAM_URL'),
    songUpstreamApiKey: env.SONG_UPSTREAM_API_KEY || undefined,
    songUpstreamModel: env.SONG_UPSTREAM_MODEL || undefined,
    speechUpstreamUrl: readUpstreamUrl(env, 'SPEECH_UPSTREAM_URL'),
    speechUpstreamApiKey: env.SPEECH_UPSTREAM_API_KEY || undefined,
    speechUpstreamModel: env.SPEECH_UPSTREAM_MODEL || undefined,
    mediaUpstreamTimeoutMs: readBoundedInt(env, 'MEDIA_UPSTREAM_TIMEOUT_MS', 120_000, 1, 3_600_000),
    mediaUpstreamRetries: readBoundedInt(env, 'MEDIA_UPSTREAM_RETRIES', 2, 0, 10),
    mediaConcurrency: readBoundedInt(env, 'MEDIA_CONCURRENCY', 2, 1, 64),
    mediaAnalysisThreads: readBoundedInt(env, 'MEDIA_ANALYSIS_THREADS', Math.max(1, os.availableParallelism()), 1, 256),
    soundfontPath: path.resolve(cwd, env.SOUNDFONT_PATH || '/usr/share/sounds/sf2/FluidR3_GM.sf2'),
  }
}

/** A header list variable (header-list.ts); errors name the variable, never a value. */
function readHeaders(env: Env, name: string): Record<string, string> {
  try {
    return parseHeaderList(env[name] ?? '')
  } catch (error) {
    throw new ConfigError(name, (error as Error).message)
  }
}

function stripSlash(url: string): string {
  return url.endsWith('/') ? url.slice(0, -1) : url
}

export function loadConfig(env: Env = process.env, cwd: string = process.cwd()): Config {
  const host = env.HOST || '127.0.0.1'
  const gatewayPort = readPort(env, 'GATEWAY_PORT', 4020)
  const schedulerPort = readPort(env, 'SCHEDULER_PORT', 4021)
  const memoryPort = readPort(env, 'MEMORY_PORT', 4022)
  const mediaPort = readPort(env, 'MEDIA_PORT', 4023)
  const controllerPort = readPort(env, 'CONTROLLER_PORT', 4024)
  const logLevel = (env.LOG_LEVEL || 'info') as LogLevel
  if (!LOG_LEVELS.includes(logLevel)) throw new ConfigError('LOG_LEVEL', `must be one of ${LOG_LEVELS.join(', ')}`)
  const logFormat = (env.LOG_FORMAT || undefined) as LogFormat | undefined
  if (logFormat !== undefined && logFormat !== 'json' && logFormat !== 'pretty') throw new ConfigError('LOG_FORMAT', `must be json or pretty, got "${logFormat}"`)
  const payTo = env.PAY_TO_ADDRESS || '0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266'
  if (!/^0x[0-9a-fA-F]{40}$/.test(payTo)) throw new ConfigError('PAY_TO_ADDRESS', 'must be a 0x-prefixed 20-byte hex address')
  const chainRpcUrl = readUrl(env, 'CHAIN_RPC_URL', ['http:', 'https:', 'ws:', 'wss:'])
  const settlerPrivateKey = env.SETTLER_PRIVATE_KEY || undefined
  if (settlerPrivateKey !== undefined && !/^0x[0-9a-fA-F]{64}$/.test(settlerPrivateKey)) {
    throw new ConfigError('SETTLER_PRIVATE_KEY', 'must be a 0x-prefixed 32-byte hex private key')
  }
  const x402FacilitatorUrl = readUrl(env, 'X402_FACILITATOR_URL', ['http:', 'https:'])
  if (x402FacilitatorUrl && new URL(x402FacilitatorUrl).username + new URL(x402FacilitatorUrl).password !== '') {
    throw new ConfigError('X402_FACILITATOR_URL', 'must not contain a user name or password; put credentials in X402_FACILITATOR_HEADERS')
  }
  if (x402FacilitatorUrl && !chainRpcUrl) {
    throw new ConfigError('CHAIN_RPC_URL', 'is required when X402_FACILITATOR_URL is set (settlements whose answer was lost are decided from the chain)')
  }
  if (chainRpcUrl && !settlerPrivateKey && !x402FacilitatorUrl) throw new ConfigError('SETTLER_PRIVATE_KEY', 'is required when CHAIN_RPC_URL is set')
  if (chainRpcUrl && !env.PAY_TO_ADDRESS) throw new ConfigError('PAY_TO_ADDRESS', 'is required when CHAIN_RPC_URL is set (the default is a dev-chain account)')
  const mppSecretKey = env.MPP_SECRET_KEY || undefined
  const offerReceiptSigningKeys = env.OFFER_RECEIPT_SIGNING_KEY ? env.OFFER_RECEIPT_SIGNING_KEY.split(',').map((key) => key.trim()) : undefined
  if (offerReceiptSigningKeys?.some((key) => !/^0x[0-9a-fA-F]{64}$/.test(key))) {
    throw new ConfigError('OFFER_RECEIPT_SIGNING_KEY', 'must be one or more comma-separated 0x-prefixed 32-byte hex private keys')
  }
  if (mppSecretKey !== undefined && Buffer.byteLength(mppSecretKey) < 32) throw new ConfigError('MPP_SECRET_KEY', 'must be at least 32 bytes')
  const linkHost = host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host
  const schedulerExecutor = env.SCHEDULER_EXECUTOR || 'local'
  if (schedulerExecutor !== 'local' && schedulerExecutor !== 'kubernetes') throw new ConfigError('SCHEDULER_EXECUTOR', 'must be local or kubernetes')
  const marketplacePayerKey = env.MARKETPLACE_PAYER_PRIVATE_KEY || undefined
  if (marketplacePayerKey !== undefined && !/^0x[0-9a-fA-F]{64}$/.test(marketplacePayerKey)) {
    throw new ConfigError('MARKETPLACE_PAYER_PRIVATE_KEY', 'must be a 0x-prefixed 32-byte hex private key')
  }
  const schedulerSecretKey = env.SCHEDULER_SECRET_KEY || undefined
  if (schedulerSecretKey !== undefined && Buffer.byteLength(schedulerSecretKey) < 32) throw new ConfigError('SCHEDULER_SECRET_KEY', 'must be at least 32 bytes')
  const dataDir = path.resolve(cwd, env.DATA_DIR || './.agent-gateway')
  const http = ['http:', 'https:']
  const blobStore = env.BLOB_STORE || 'local'
  if (blobStore !== 'local' && blobStore !== 's3') throw new ConfigError('BLOB_STORE', `must be local or s3, got "${blobStore}"`)
  const publicBaseUrl = stripSlash(readUrl(env, 'PUBLIC_BASE_URL', http) ?? `http://${linkHost}:${gatewayPort}`)
  const allowedHosts =
    env.ALLOWED_HOSTS === undefined || env.ALLOWED_HOSTS.trim() === ''
      ? undefined
      : env.ALLOWED_HOSTS.split(',')
          .map((entry) => entry.trim())
          .filter(Boolean)
  const badHost = allowedHosts?.find((entry) => entry !== '*' && !/^(\*\.)?[A-Za-z0-9.:[\]-]{1,253}$/.test(entry))
  if (badHost !== undefined) throw new ConfigError('ALLOWED_HOSTS', `must be comma-separated host names, *.suffix or *, got "${badHost.slice(0, 100)}"`)
  return {
    host,
    allowedHosts,
    gatewayPort,
    schedulerPort,
    memoryPort,
    mediaPort,
    controllerPort,
    dataDir,
    databaseUrl: readUrl(env, 'DATABASE_URL', ['postgres:', 'postgresql:']),
    databasePoolMax: readBoundedInt(env, 'DATABASE_POOL_MAX', 20, 1, 1000),
    redisUrl: readUrl(env, 'REDIS_URL', ['redis:', 'rediss:']),
    publicBaseUrl,
    publicSchedulerUrl: stripSlash(readUrl(env, 'PUBLIC_SCHEDULER_URL', http) ?? `http://${linkHost}:${schedulerPort}`),
    publicMemoryUrl: stripSlash(readUrl(env, 'PUBLIC_MEMORY_URL', http) ?? `http://${linkHost}:${memoryPort}`),
    publicMediaUrl: stripSlash(readUrl(env, 'PUBLIC_MEDIA_URL', http) ?? publicBaseUrl),
    bodyLimitBytes: readPositiveInt(env, 'BODY_LIMIT_BYTES', 16 * 1024 * 1024),
    logLevel,
    logFormat,
    otlpEndpoint: readUrl(env, 'OTEL_EXPORTER_OTLP_ENDPOINT', http),
    serviceName: env.OTEL_SERVICE_NAME || 'agent-gateway',
    shutdownGraceMs: readPositiveInt(env, 'SHUTDOWN_GRACE_MS', 10_000),
    payTo,
    chainRpcUrl,
    settlerPrivateKey,
    chainConfirmations: env.CHAIN_CONFIRMATIONS ? readBoundedInt(env, 'CHAIN_CONFIRMATIONS', 1, 1, 1000) : undefined,
    x402FacilitatorUrl,
    x402FacilitatorHeaders: readHeaders(env, 'X402_FACILITATOR_HEADERS'),
    x402FacilitatorTimeoutMs: readBoundedInt(env, 'X402_FACILITATOR_TIMEOUT_MS', 30_000, 100, 600_000),
    tempoRpcUrl: readUrl(env, 'TEMPO_RPC_URL', http),
    mppSecretKey,
    offerReceiptSigningKeys: offerReceiptSigningKeys as `0x${string}`[] | undefined,
    smtpUrl: readUrl(env, 'SMTP_URL', ['smtp:', 'smtps:']),
    mailFrom: env.MAIL_FROM || 'agent-gateway@localhost',
    schedulerExecutor,
    kubeNamespace: env.KUBE_NAMESPACE || 'default',
    schedulerInternalUrl: stripSlash(readUrl(env, 'SCHEDULER_INTERNAL_URL', http) ?? readUrl(env, 'PUBLIC_SCHEDULER_URL', http) ?? `http://${linkHost}:${schedulerPort}`),
    schedulerSecretKey,
    sandboxMaxParallel: readPositiveInt(env, 'SANDBOX_MAX_PARALLEL', 4),
    dispatchAheadSec: readBoundedInt(env, 'SCHEDULER_DISPATCH_AHEAD_SEC', 15, 0, 50),
    blobDir: path.resolve(cwd, env.BLOB_DIR || path.join(dataDir, 'blobs')),
    blobStore,
    ...readS3(env, blobStore),
    llmBaseUrl: readUpstreamUrl(env, 'LLM_BASE_URL'),
    llmApiKey: env.LLM_API_KEY || undefined,
    marketplacePayerKey,
    runnerJobTemplateFile: env.RUNNER_JOB_TEMPLATE_FILE || undefined,
    runnerImagePython: env.RUNNER_IMAGE_PYTHON || 'ghcr.io/agent-gateway/runner-python:0.1.0',
    runnerImageNode: env.RUNNER_IMAGE_NODE || 'ghcr.io/agent-gateway/runner-node:0.1.0',
    npmRegistry: readUrl(env, 'NPM_REGISTRY', http),
    pipIndexUrl: readUrl(env, 'PIP_INDEX_URL', http),
    ...readMedia(env, cwd),
    ...readMemory(env, cwd),
    ...readReviews(env),
  }
}

/** The review sessions' settings: the isolated origin, the secret, callbacks. */
function readReviews(env: Env) {
  const reviewsPort = readPort(env, 'REVIEWS_PORT', 4025)
  const template = env.PUBLIC_REVIEWS_URL || `http://{site}.localhost:${reviewsPort}`
  let parsed: URL
  try {
    parsed = new URL(template.replace('{site}', 'site-label'))
  } catch {
    throw new ConfigError('PUBLIC_REVIEWS_URL', 'must be an absolute URL with {site} as its first host label')
  }
  if (!/^https?:\/\/\{site\}\.[^/]+\/?$/.test(template) || (parsed.protocol !== 'http:' && parsed.protocol !== 'https:')) {
    throw new ConfigError('PUBLIC_REVIEWS_URL', `must be http(s)://{site}.<host>[:port] with {site} as its first host label and no path, got "${template}"`)
  }
  const secrets = env.REVIEWS_SECRET_KEY ? env.REVIEWS_SECRET_KEY.split(',').map((secret) => secret.trim()) : undefined
  if (secrets?.some((secret) => Buffer.byteLength(secret) < 32))
    throw new ConfigError('REVIEWS_SECRET_KEY', 'must be one or more comma-separated secrets of at least 32 bytes each')
  const allow = (env.REVIEWS_EGRESS_ALLOW ?? '')
    .split(',')
    .map((entry) => entry.trim())
    .filter((entry) => entry !== '')
  for (const entry of allow) {
    if (!/^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):\d{1,5}$/.test(entry)) throw new ConfigError('REVIEWS_EGRESS_ALLOW', `entries must be host:port, got "${entry}"`)
  }
  return {
    reviewsPort,
    publicReviewsUrl: stripSlash(template),
    reviewsSecretKeys: secrets,
    reviewsEgressAllow: allow,
    reviewsCallbackRetryLimit: readBoundedInt(env, 'REVIEWS_CALLBACK_RETRY_LIMIT', 15, 0, 30),
    reviewsCallbackRetryDelaySec: readBoundedInt(env, 'REVIEWS_CALLBACK_RETRY_DELAY_SEC', 3, 1, 3600),
    reviewsRetentionDays: readBoundedInt(env, 'REVIEWS_RETENTION_DAYS', 30, 1, 3650),
    chromiumPath: env.CHROMIUM_PATH || '/usr/bin/chromium',
  }
}

function isCron(expression: string): boolean {
  try {
    CronExpressionParser.parse(expression)
    return true
  } catch {
    return false
  }
}

/** The memory role's settings (keys, embeddings, dreaming, cache). */
function readMemory(env: Env, cwd: string) {
  const size = env.MEMORY_DREAM_MODEL_SIZE || 'small'
  if (size !== 'small' && size !== 'large') throw new ConfigError('MEMORY_DREAM_MODEL_SIZE', `must be small or large, got "${size}"`)
  const cron = env.MEMORY_DREAM_CRON || '*/15 * * * *'
  if (cron.trim().split(/\s+/).length !== 5 || !isCron(cron)) throw new ConfigError('MEMORY_DREAM_CRON', `must be a five-field cron expression, got "${cron}"`)
  const embeddingsUrl = readUpstreamUrl(env, 'MEMORY_EMBEDDINGS_URL')
  const modelDir = env.MEMORY_EMBEDDINGS_MODEL_DIR ? path.resolve(cwd, env.MEMORY_EMBEDDINGS_MODEL_DIR) : undefined
  if (embeddingsUrl !== undefined && modelDir !== undefined) {
    throw new ConfigError('MEMORY_EMBEDDINGS_MODEL_DIR', 'cannot be set together with MEMORY_EMBEDDINGS_URL (choose one embedder)')
  }
  return {
    memoryKeyFile: env.MEMORY_KEY_FILE ? path.resolve(cwd, env.MEMORY_KEY_FILE) : undefined,
    memoryEmbeddingsUrl: embeddingsUrl === undefined ? undefined : stripSlash(embeddingsUrl),
    memoryEmbeddingsApiKey: env.MEMORY_EMBEDDINGS_API_KEY || undefined,
    memoryEmbeddingsModel: env.MEMORY_EMBEDDINGS_MODEL || 'text-embedding-3-small',
    memoryEmbeddingsDimensions: env.MEMORY_EMBEDDINGS_DIMENSIONS ? readBoundedInt(env, 'MEMORY_EMBEDDINGS_DIMENSIONS', 0, 8, 4096) : undefined,
    memoryEmbeddingsModelDir: modelDir,
    memoryUpstreamTimeoutMs: readBoundedInt(env, 'MEMORY_UPSTREAM_TIMEOUT_MS', 30_000, 1, 600_000),
    memoryDreamUrl: readUpstreamUrl(env, 'MEMORY_DREAM_URL'),
    memoryDreamApiKey: env.MEMORY_DREAM_API_KEY || undefined,
    memoryDreamModel: env.MEMORY_DREAM_MODEL || 'gpt-4o-mini',
    memoryDreamModelSize: size as 'large' | 'small',
    memoryDreamCron: cron,
    memoryCacheBytes: readBoundedInt(env, 'MEMORY_CACHE_MB', 512, 1, 1_048_576) * 1024 * 1024,
  }
}

/** Markdown table of the variables (README, --help). */
export function configTable(): string {
  const rows = configVariables.map((v) => `| \`${v.name}\` | \`${v.default}\` | ${v.doc} |`)
  return ['| Variable | Default | Meaning |', '|---|---|---|', ...rows].join('\n')
}
