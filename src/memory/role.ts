// The memory role, assembled: the key ring and owner keys, the embedder the configuration names
// (upstream, a local ONNX model directory, or the model-free lexical default), the service, its
// money (deposits, withdrawals, per-call write decisions), dreaming on the job queue, and the
// listener's dependencies. src/roles/memory.ts starts it and stops it.
import type { Config } from '../platform/config.ts'
import type { Db } from '../platform/db/index.ts'
import type { Logger } from '../platform/logger.ts'
import type { Clock } from '../platform/clock.ts'
import type { Payments } from '../payments/index.ts'
import { findService } from '../catalog/registry.ts'
import { ensureEmbeddedKeyRing, fileKeyRing } from './crypto/keyring.ts'
import { activeKekId, createOwnerKeyStore, kekOf } from './crypto/owner-keys.ts'
import { createLexicalEmbedder } from './embeddings/lexical.ts'
import { countTokens } from './embeddings/tokens.ts'
import type { Embedder, KeyRing } from './types.ts'
import { createMemoryService, type MemoryService } from './service.ts'
import { registerMemoryMoney, type MemoryMoney } from './deposits.ts'
import { createDreamHost } from './dream-host.ts'
import { createChatModel } from './dreaming/chat.ts'
import { createDreamer, DREAM_DISABLED_REASON, type Dreamer } from './dreaming/dreamer.ts'
import type { JobQueue } from '../platform/jobs.ts'

export interface MemoryRole {
  service: MemoryService
  money: MemoryMoney
  embedder: Embedder
  /** Undefined when dreaming is off (no MEMORY_DREAM_URL). */
  dreamer: Dreamer | undefined
  /** /readyz detail: the embedder and dreaming modes. */
  describe(): Record<string, unknown>
  stop(): Promise<void>
}

/** The key ring: MEMORY_KEY_FILE, or the embedded default's generated file under DATA_DIR. */
export async function openKeyRing(config: Pick<Config, 'memoryKeyFile' | 'dataDir'>): Promise<KeyRing> {
  return config.memoryKeyFile ? fileKeyRing(config.memoryKeyFile) : ensureEmbeddedKeyRing(config.dataDir)
}

/** The embedder the configuration names; an upstream without configured dimensions is probed once. */
export async function openEmbedder(config: Config, logger: Logger): Promise<Embedder> {
  if (config.memoryEmbeddingsUrl) {
    const { createUpstreamEmbedder } = await import('./embeddings/upstream.ts')
    const embedder = createUpstreamEmbedder({
      url: config.memoryEmbeddingsUrl,
      apiKey: config.memoryEmbeddingsApiKey,
      model: config.memoryEmbeddingsModel,
      dimensions: config.memoryEmbeddingsDimensions,
      timeoutMs: config.memoryUpstreamTimeoutMs,
      retries: 2,
    })
    if (embedder.knownDims === undefined) {
      const dims = await embedder.probe()
      logger.info({ model: config.memoryEmbeddingsModel, dims }, 'memory: embeddings upstream probed')
    }
    return embedder
  }
  if (config.memoryEmbeddingsModelDir) {
    const { createLocalModelEmbedder } = await import('./embeddings/onnx-local.ts')
    const embedder = await createLocalModelEmbedder({ dir: config.memoryEmbeddingsModelDir })
    logger.info({ dir: embedder.dir, dims: embedder.dims, loadMs: Math.round(embedder.loadMs) }, 'memory: local embedding model loaded')
    return embedder
  }
  return createLexicalEmbedder()
}

export async function openMemoryRole(deps: {
  config: Config
  db: Db
  clock: Clock
  logger: Logger
  payments: Payments
  /** The process's one job queue, opened on the first call (only with dreaming on) and stopped by its owner. */
  jobs: () => Promise<JobQueue>
}): Promise<MemoryRole> {
  const { config, db, logger, payments } = deps
  const ring = await openKeyRing(config)
  // Refuse to start with a ring that lacks the key every replica wraps new data keys under.
  await kekOf(ring, await activeKekId(db, ring))
  const embedder = await openEmbedder(config, logger)
  const keys = createOwnerKeyStore({ ring })
  const spec = findService('memory')
  if (spec === undefined || spec.meter === undefined) throw new Error('the registry has no memory service with a meter')
  // Dreaming runs on the Postgres-backed job queue: one sweep per cron slot across replicas, one
  // job per owner at a time. Without a model it is off, says so, and no queue is asked for (its
  // pollers would only compete with requests for the embedded database).
  let dreamer: Dreamer | undefined
  if (config.memoryDreamUrl) {
    const queue = await deps.jobs()
    const chat = createChatModel({
      url: config.memoryDreamUrl,
      apiKey: config.memoryDreamApiKey,
      model: config.memoryDreamModel,
      size: config.memoryDreamModelSize,
      timeoutMs: config.memoryUpstreamTimeoutMs,
      retries: 2,
    })
    dreamer = createDreamer({ host: createDreamHost({ db, keys, embedder, countTokens }), model: chat, queue, logger, cron: config.memoryDreamCron })
  }
  const dreaming = () => {
    const status = dreamer?.status()
    return status?.enabled
      ? { enabled: true, detail: `on: ${status.model} (${status.size} model prices), sweep ${config.memoryDreamCron}`, ...(status.model ? { model: status.model } : {}) }
      : { enabled: false, detail: status?.reason ?? DREAM_DISABLED_REASON }
  }
  const service = createMemoryService({
    db,
    clock: deps.clock,
    logger,
    keys,
    embedder,
    countTokens,
    plans: spec.plans.filter((plan) => plan.covers.includes('memory')),
    unitPriceMicros: spec.meter.unitPriceMicros,
    cacheBytes: config.memoryCacheBytes,
    dreaming,
    publicUrl: config.publicMemoryUrl,
  })
  const money = registerMemoryMoney({ db, logger, payments })
  await dreamer?.start()
  if (embedder.mode === 'lexical') {
    logger.info('memory: no embedding model configured; recall runs in the lexical mode (stemmed BM25 over the blind index + hashed character n-gram vectors)')
  }
  return {
    service,
    money,
    embedder,
    dreamer,
    describe: () => ({
      embeddings: { mode: embedder.mode, model: embedder.id, dims: embedder.dims, detail: embedder.description },
      dreaming: dreaming(),
      cache: service.cache.stats(),
    }),
    async stop() {
      await embedder.close?.()
    },
  }
}
