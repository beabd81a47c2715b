// The one typed configuration module, parsed once at start-up from the environment. This module
// holds loadConfig and the rules that tie variables together, and is the only one importers use;
// ./config/ holds the Config type (types.ts), every variable with its default and documentation
// (variables.ts: the README table and `agent-gateway config` are printed from it, so they cannot
// drift) and the single-variable parsers (readers.ts).
import os from 'node:os'
import path from 'node:path'
import { isBlobKey } from './blobs.ts'
import { ConfigError, type Env, isCron, readBoolean, readBoundedInt, readHeaders, readPort, readPositiveInt, readUpstreamUrl, readUrl, stripSlash } from './config/readers.ts'
import type { Config, LogFormat, LogLevel } from './config/types.ts'

export { ConfigError } from './config/readers.ts'
export type { Config, LogFormat, LogLevel } from './config/types.ts'
export { configTable, configVariables } from './config/variables.ts'
import { DEFAULT_DREAM_CRON } from './config/variables.ts'

const LOG_LEVELS: readonly LogLevel[] = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']

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

/** The memory role's settings (keys, embeddings, dreaming, cache). */
function readMemory(env: Env, cwd: string) {
  const size = env.MEMORY_DREAM_MODEL_SIZE || 'small'
  if (size !== 'small' && size !== 'large') throw new ConfigError('MEMORY_DREAM_MODEL_SIZE', `must be small or large, got "${size}"`)
  // Only a given expression is parsed: the cron parser (and its time-zone library) is not loaded
  // at every start for the default.
  const cron = env.MEMORY_DREAM_CRON || DEFAULT_DREAM_CRON
  if (env.MEMORY_DREAM_CRON && (cron.trim().split(/\s+/).length !== 5 || !isCron(cron))) {
    throw new ConfigError('MEMORY_DREAM_CRON', `must be a five-field cron expression, got "${cron}"`)
  }
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
