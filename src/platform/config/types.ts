// The shape of the loaded configuration: what loadConfig (../config.ts) returns and what the
// roles depend on. Each field's variable, default and meaning are in ./variables.ts.

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
