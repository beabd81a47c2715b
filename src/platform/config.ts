// The one typed configuration module. Parsed once at start-up from the environment; every
// variable is declared here with its default and documentation (the README table and
// `agent-gateway --help` are printed from this list, so they cannot drift).
import path from 'node:path'

export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent'

export interface Config {
  host: string
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
  bodyLimitBytes: number
  logLevel: LogLevel
  otlpEndpoint: string | undefined
  serviceName: string
  shutdownGraceMs: number
  /** Pay-to address for x402 / MPP. */
  payTo: string
  /** EVM RPC for settlement and refunds; unset = the embedded local dev chain. */
  chainRpcUrl: string | undefined
  /** Hot wallet that submits settlements and pays refunds (required with CHAIN_RPC_URL). */
  settlerPrivateKey: string | undefined
  tempoRpcUrl: string | undefined
  /** HMAC key of MPP challenges; unset = generated once and kept in the database. */
  mppSecretKey: string | undefined
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
  { name: 'BODY_LIMIT_BYTES', default: '16777216', doc: 'Largest accepted request body; larger bodies get 413.' },
  { name: 'LOG_LEVEL', default: 'info', doc: 'pino level: fatal, error, warn, info, debug, trace, silent.' },
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
  { name: 'SETTLER_PRIVATE_KEY', default: '(required with CHAIN_RPC_URL)', doc: 'Hot wallet that submits x402 settlements and pays refunds (needs gas, not USDC).' },
  { name: 'TEMPO_RPC_URL', default: '(unset: MPP charges refused)', doc: 'Tempo JSON-RPC used to verify and broadcast MPP tempo/charge payments ($0 proofs need none).' },
  { name: 'MPP_SECRET_KEY', default: '(generated, kept in the database)', doc: 'HMAC key (≥ 32 bytes) that signs MPP challenges; share it across replicas.' },
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
  const payTo = env.PAY_TO_ADDRESS || '0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266'
  if (!/^0x[0-9a-fA-F]{40}$/.test(payTo)) throw new ConfigError('PAY_TO_ADDRESS', 'must be a 0x-prefixed 20-byte hex address')
  const chainRpcUrl = readUrl(env, 'CHAIN_RPC_URL', ['http:', 'https:', 'ws:', 'wss:'])
  const settlerPrivateKey = env.SETTLER_PRIVATE_KEY || undefined
  if (settlerPrivateKey !== undefined && !/^0x[0-9a-fA-F]{64}$/.test(settlerPrivateKey)) {
    throw new ConfigError('SETTLER_PRIVATE_KEY', 'must be a 0x-prefixed 32-byte hex private key')
  }
  if (chainRpcUrl && !settlerPrivateKey) throw new ConfigError('SETTLER_PRIVATE_KEY', 'is required when CHAIN_RPC_URL is set')
  if (chainRpcUrl && !env.PAY_TO_ADDRESS) throw new ConfigError('PAY_TO_ADDRESS', 'is required when CHAIN_RPC_URL is set (the default is a dev-chain account)')
  const mppSecretKey = env.MPP_SECRET_KEY || undefined
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
  return {
    host,
    gatewayPort,
    schedulerPort,
    memoryPort,
    mediaPort,
    controllerPort,
    dataDir,
    databaseUrl: readUrl(env, 'DATABASE_URL', ['postgres:', 'postgresql:']),
    databasePoolMax: readBoundedInt(env, 'DATABASE_POOL_MAX', 20, 1, 1000),
    redisUrl: readUrl(env, 'REDIS_URL', ['redis:', 'rediss:']),
    publicBaseUrl: stripSlash(readUrl(env, 'PUBLIC_BASE_URL', http) ?? `http://${linkHost}:${gatewayPort}`),
    publicSchedulerUrl: stripSlash(readUrl(env, 'PUBLIC_SCHEDULER_URL', http) ?? `http://${linkHost}:${schedulerPort}`),
    publicMemoryUrl: stripSlash(readUrl(env, 'PUBLIC_MEMORY_URL', http) ?? `http://${linkHost}:${memoryPort}`),
    bodyLimitBytes: readPositiveInt(env, 'BODY_LIMIT_BYTES', 16 * 1024 * 1024),
    logLevel,
    otlpEndpoint: readUrl(env, 'OTEL_EXPORTER_OTLP_ENDPOINT', http),
    serviceName: env.OTEL_SERVICE_NAME || 'agent-gateway',
    shutdownGraceMs: readPositiveInt(env, 'SHUTDOWN_GRACE_MS', 10_000),
    payTo,
    chainRpcUrl,
    settlerPrivateKey,
    tempoRpcUrl: readUrl(env, 'TEMPO_RPC_URL', http),
    mppSecretKey,
    smtpUrl: readUrl(env, 'SMTP_URL', ['smtp:', 'smtps:']),
    mailFrom: env.MAIL_FROM || 'agent-gateway@localhost',
    schedulerExecutor,
    kubeNamespace: env.KUBE_NAMESPACE || 'default',
    schedulerInternalUrl: stripSlash(readUrl(env, 'SCHEDULER_INTERNAL_URL', http) ?? readUrl(env, 'PUBLIC_SCHEDULER_URL', http) ?? `http://${linkHost}:${schedulerPort}`),
    schedulerSecretKey,
    sandboxMaxParallel: readPositiveInt(env, 'SANDBOX_MAX_PARALLEL', 4),
    dispatchAheadSec: readBoundedInt(env, 'SCHEDULER_DISPATCH_AHEAD_SEC', 15, 0, 50),
    blobDir: path.resolve(cwd, env.BLOB_DIR || path.join(dataDir, 'blobs')),
    llmBaseUrl: readUrl(env, 'LLM_BASE_URL', http),
    llmApiKey: env.LLM_API_KEY || undefined,
    marketplacePayerKey,
    runnerJobTemplateFile: env.RUNNER_JOB_TEMPLATE_FILE || undefined,
    runnerImagePython: env.RUNNER_IMAGE_PYTHON || 'ghcr.io/agent-gateway/runner-python:0.1.0',
    runnerImageNode: env.RUNNER_IMAGE_NODE || 'ghcr.io/agent-gateway/runner-node:0.1.0',
    npmRegistry: readUrl(env, 'NPM_REGISTRY', http),
    pipIndexUrl: readUrl(env, 'PIP_INDEX_URL', http),
  }
}

/** Markdown table of the variables (README, --help). */
export function configTable(): string {
  const rows = configVariables.map((v) => `| \`${v.name}\` | \`${v.default}\` | ${v.doc} |`)
  return ['| Variable | Default | Meaning |', '|---|---|---|', ...rows].join('\n')
}
