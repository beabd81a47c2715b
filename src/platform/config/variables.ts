// The catalogue of every environment variable the service reads: name, documented default and
// meaning. The README table and `agent-gateway config` are printed from it, so they cannot drift;
// loadConfig (../config.ts) parses them.

export interface Variable {
  name: string
  default: string
  doc: string
}

/** The dreaming sweep's schedule when MEMORY_DREAM_CRON is unset (test/unit/config.test.ts parses it). */
export const DEFAULT_DREAM_CRON = '*/15 * * * *'

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
  { name: 'MEMORY_DREAM_CRON', default: DEFAULT_DREAM_CRON, doc: 'When the dreaming sweep runs (one sweep per slot across replicas).' },
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

/** Markdown table of the variables (README, --help). */
export function configTable(): string {
  const rows = configVariables.map((v) => `| \`${v.name}\` | \`${v.default}\` | ${v.doc} |`)
  return ['| Variable | Default | Meaning |', '|---|---|---|', ...rows].join('\n')
}
