// Dreaming: in the background, an owner's raw memories are consolidated by a chat model into
// derived memories (durable facts, preferences, decisions) that cite their sources.
//
// Flow: a cron job (`memory.dream.sweep`, one send per slot across replicas) asks the host which
// owners have raw records past their dreamed_seq and enqueues one `memory.dream.owner` job per
// owner. That queue is 'stately' with singletonKey = owner: at most one queued and one running job
// per owner, so two replicas never dream the same owner at once. An owner job then loops, at most
// maxBatchesPerJob times (the loop guard; the next sweep carries on):
//   budget → nextBatch → estimate ≤ budget? → model → parseDream → commitDream(actual cost)
//
// Decisions (see also the reviews, part A: hard budgets, idempotency, loop guards):
// - Over budget (the estimate — full prompt with a tokenizer margin, plus the whole max_tokens
//   allowance — exceeds what the owner can spend): no model call, no commit, no charge, and
//   dreamed_seq stays where it is, so the same batch is dreamed once the owner has funds. The
//   host is not called with a charge it would refuse: per the DreamHost contract that would store
//   the batch row, and a later real commit of the same batch would then be a 'duplicate'; and a
//   deposit landing in between would charge the estimate for nothing. A zero budget is checked
//   before the batch is even loaded (decrypted). An over-budget owner costs each sweep two reads.
// - The estimate bounds the whole charge: the model call and the embedding of the derived text
//   the host adds. The usage passed to commitDream is the actual model cost (the provider's token
//   counts, else ours) at DREAM_PRICES; the host may cap the charge at the budget, or refuse it
//   ('over_budget': nothing written, dreamed_seq kept). A refusal after a model call means the
//   estimate was too low for this batch: the amount is remembered (in this process, per owner and
//   batch) and the batch is not sent to the model again until the budget covers it — otherwise a
//   budget between the estimate and the real charge would buy a model call every sweep.
// - An answer that yields no valid memory (empty, prose, truncated JSON, only invalid entries)
//   still commits the batch, with no derived memory, at its actual cost ('empty'): the sources are
//   dreamed and never sent again, so a model that answers garbage costs one call per batch, never
//   a loop. Nothing is deleted or replaced by an empty result.
// - A failed call (upstream down, timeout, an answer that is not a chat completion) commits
//   nothing and fails the job: the queue retries it with back-off, then the next sweep again.
// - Idempotency: commitDream is once per (owner, batchKey); a 'duplicate' (another run committed
//   this batch first) writes nothing and the loop moves on. If the host hands the same batch out
//   again after committing it (it did not advance dreamed_seq), the loop stops ('stalled') rather
//   than call the model again.
// - Derived records are never sources: nextBatch returns raw records only (never re-ingest our
//   own output).
import type { JobLogger, JobQueue } from '../../platform/jobs.ts'
import { DREAM_BATCH_MAX, dreamCostMicros } from '../limits.ts'
import type { ChatModel, DreamHost, DreamOutcome, OwnerId } from '../types.ts'
import { dreamEmbeddingBoundMicros, dreamPrompt, estimateDreamCost, parseDreamAnswer } from './consolidate.ts'

export const DREAM_SWEEP_QUEUE = 'memory.dream.sweep'
export const DREAM_OWNER_QUEUE = 'memory.dream.owner'
export const DREAM_DISABLED_REASON = 'off: no MEMORY_DREAM_URL configured'

export interface DreamerOptions {
  host: DreamHost
  /** undefined: dreaming is off (status says why; start() schedules nothing). */
  model: ChatModel | undefined
  queue: JobQueue
  logger: JobLogger
  /** When the sweep runs (UTC, 5 fields; default every 15 minutes). */
  cron?: string
  /** Raw records per batch (1..DREAM_BATCH_MAX, default DREAM_BATCH_MAX). */
  batchMax?: number
  /** max_tokens of a model call, and the output side of the cost estimate (default 1500). */
  maxOutputTokens?: number
  /** Loop guard: batches one owner job may dream (default 5). */
  maxBatchesPerJob?: number
  /** Owners a sweep enqueues at most (default 100). */
  ownersPerSweep?: number
  /** Owner jobs this process works at once (default 2). */
  concurrency?: number
  /** Seconds between polls of an empty queue (default 2). */
  pollingIntervalSeconds?: number
  /** The owner job's retry policy (defaults: 3 retries from 60 s, doubling; expires after 30 min). */
  ownerJob?: { retryLimit?: number; retryDelay?: number; retryBackoff?: boolean; expireInSeconds?: number }
}

export type DreamStop =
  /** No batch left. */
  | 'caught_up'
  /** The next batch's estimate exceeds the owner's budget (or the host refused the charge). */
  | 'over_budget'
  /** maxBatchesPerJob batches dreamed; the next sweep continues. */
  | 'loop_guard'
  /** The host handed out a batch this run had already committed. */
  | 'stalled'
  /** No model configured. */
  | 'disabled'

export interface DreamBatchReport {
  batchKey: string
  sources: number
  /** Upper bound checked against the budget (raised to a charge the host refused for this batch before). */
  estimateMicros: bigint
  /** 'over_budget' here without a model call when the estimate exceeded the budget. */
  outcome: DreamOutcome
  /** Derived memories handed to commitDream when it answered 'written' (the host may skip ones the owner already holds). */
  derived: number
  inputTokens: number
  outputTokens: number
  costMicros: bigint
}

export interface DreamRun {
  owner: OwnerId
  batches: DreamBatchReport[]
  stopped: DreamStop
}

export interface DreamerStatus {
  enabled: boolean
  reason?: string
  model?: string
  size?: string
}

export interface Dreamer {
  /** Declares the queues, starts this process's workers and (re)schedules the sweep; when disabled, removes the schedule. */
  start(): Promise<void>
  status(): DreamerStatus
  /** Dreams one owner now, in this process (tests, the CLI); the same loop an owner job runs. */
  dreamOnce(owner: OwnerId, options?: { signal?: AbortSignal }): Promise<DreamRun>
  /** One sweep now: enqueues an owner job per owner to dream; resolves with the number enqueued. */
  sweep(): Promise<number>
}

const DEFAULT_CRON = '*/15 * * * *'
/** Refused charges remembered at most (oldest forgotten first). */
const REFUSED_MAX = 10_000

function positiveInteger(name: string, value: number, max = Number.MAX_SAFE_INTEGER): number {
  if (!(Number.isInteger(value) && value >= 1 && value <= max)) throw new RangeError(`${name} must be an integer in [1, ${max}], got ${value}`)
  return value
}

export function createDreamer(options: DreamerOptions): Dreamer {
  const { host, model, queue, logger } = options
  const cron = options.cron ?? DEFAULT_CRON
  const batchMax = positiveInteger('batchMax', options.batchMax ?? DREAM_BATCH_MAX, DREAM_BATCH_MAX)
  const maxOutputTokens = positiveInteger('maxOutputTokens', options.maxOutputTokens ?? 1500)
  const maxBatchesPerJob = positiveInteger('maxBatchesPerJob', options.maxBatchesPerJob ?? 5)
  const ownersPerSweep = positiveInteger('ownersPerSweep', options.ownersPerSweep ?? 100)
  const concurrency = positiveInteger('concurrency', options.concurrency ?? 2)
  const pollingIntervalSeconds = options.pollingIntervalSeconds ?? 2
  const ownerJob = { retryLimit: 3, retryDelay: 60, retryBackoff: true, expireInSeconds: 1800, ...options.ownerJob }
  /** owner \0 batchKey → the least budget the host will accept for it (learned from a refusal). */
  const refused = new Map<string, bigint>()
  const remember = (key: string, micros: bigint): void => {
    refused.delete(key)
    refused.set(key, micros)
    if (refused.size > REFUSED_MAX) refused.delete(refused.keys().next().value!)
  }

  let declared: Promise<void> | undefined
  const declare = (): Promise<void> => {
    declared ??= (async () => {
      await queue.declare(DREAM_SWEEP_QUEUE, { policy: 'short', retryLimit: 1, retryDelay: 30, expireInSeconds: 300 })
      await queue.declare(DREAM_OWNER_QUEUE, { policy: 'stately', ...ownerJob })
    })().catch((err) => {
      declared = undefined
      throw err
    })
    return declared
  }

  const dreamOwner = async (owner: OwnerId, signal: AbortSignal | undefined): Promise<DreamRun> => {
    const batches: DreamBatchReport[] = []
    if (model === undefined) return { owner, batches, stopped: 'disabled' }
    const committed = new Set<string>()
    for (let round = 0; round < maxBatchesPerJob; round++) {
      signal?.throwIfAborted()
      const budget = await host.budgetMicros(owner)
      if (budget !== null && budget <= 0n) {
        logger.info({ owner, budgetMicros: String(budget) }, 'dream: no budget left; nothing dreamed')
        return { owner, batches, stopped: 'over_budget' }
      }
      const batch = await host.nextBatch(owner, batchMax)
      if (batch === undefined || batch.sources.length === 0) return { owner, batches, stopped: 'caught_up' }
      if (batch.owner !== owner) throw new Error(`dream: nextBatch(${owner}) returned a batch of another owner`)
      if (batch.sources.length > batchMax) throw new Error(`dream: nextBatch returned ${batch.sources.length} sources, more than the ${batchMax} asked for`)
      if (committed.has(batch.batchKey)) {
        logger.error({ owner, batchKey: batch.batchKey }, 'dream: the host handed out a batch this run already committed (dreamed_seq did not advance); stopping')
        return { owner, batches, stopped: 'stalled' }
      }
      const refusedKey = `${owner}\0${batch.batchKey}`
      const learned = refused.get(refusedKey) ?? 0n
      const estimateMicros = estimateDreamCost(batch, model.size, maxOutputTokens)
      const needed = learned > estimateMicros ? learned : estimateMicros
      const report = { batchKey: batch.batchKey, sources: batch.sources.length, estimateMicros: needed }
      if (budget !== null && needed > budget) {
        logger.info(
          { owner, batchKey: batch.batchKey, estimateMicros: String(needed), budgetMicros: String(budget) },
          'dream: the next batch could cost more than the budget; not dreamed',
        )
        batches.push({ ...report, outcome: 'over_budget', derived: 0, inputTokens: 0, outputTokens: 0, costMicros: 0n })
        return { owner, batches, stopped: 'over_budget' }
      }
      const answer = await model.complete(dreamPrompt(batch), { maxTokens: maxOutputTokens, ...(signal ? { signal } : {}) })
      const parsed = parseDreamAnswer(answer.text, batch)
      if (!parsed.wellFormed)
        logger.warn(
          { owner, batchKey: batch.batchKey, chars: answer.text.length },
          'dream: the model answered without a {"memories": [...]} object; the batch is committed with nothing derived',
        )
      else if (parsed.dropped > 0) logger.info({ owner, batchKey: batch.batchKey, dropped: parsed.dropped }, 'dream: entries of the answer dropped')
      const costMicros = dreamCostMicros(model.size, answer.inputTokens, answer.outputTokens)
      const outcome = await host.commitDream(batch, parsed.memories, {
        model: model.id,
        size: model.size,
        inputTokens: answer.inputTokens,
        outputTokens: answer.outputTokens,
        costMicros,
      })
      committed.add(batch.batchKey)
      batches.push({
        ...report,
        outcome,
        derived: outcome === 'written' ? parsed.memories.length : 0,
        inputTokens: answer.inputTokens,
        outputTokens: answer.outputTokens,
        costMicros,
      })
      logger.info(
        {
          owner,
          batchKey: batch.batchKey,
          sources: batch.sources.length,
          derived: parsed.memories.length,
          outcome,
          inputTokens: answer.inputTokens,
          outputTokens: answer.outputTokens,
          costMicros: String(costMicros),
        },
        'dream: batch committed',
      )
      if (outcome === 'over_budget') {
        // The real charge was above the estimate and the budget: never again below what it needs.
        const need = costMicros + dreamEmbeddingBoundMicros(maxOutputTokens)
        remember(refusedKey, need > needed ? need : needed + 1n)
        logger.warn(
          { owner, batchKey: batch.batchKey, costMicros: String(costMicros), estimateMicros: String(estimateMicros) },
          'dream: the host refused the charge after the model call; the batch waits for a larger budget',
        )
        return { owner, batches, stopped: 'over_budget' }
      }
      refused.delete(refusedKey)
    }
    return { owner, batches, stopped: 'loop_guard' }
  }

  const sweep = async (): Promise<number> => {
    if (model === undefined) return 0
    await declare()
    const owners = await host.ownersToDream(ownersPerSweep)
    let enqueued = 0
    for (const owner of owners) {
      // stately + singletonKey: dropped (null) while this owner already has a job waiting.
      if ((await queue.send(DREAM_OWNER_QUEUE, { owner }, { singletonKey: owner })) !== null) enqueued++
    }
    logger.info({ owners: owners.length, enqueued }, 'dream: sweep')
    return enqueued
  }

  let started: Promise<void> | undefined
  const start = async (): Promise<void> => {
    if (model === undefined) {
      // Turning dreaming off also stops the sweep other replicas scheduled earlier.
      await queue.unschedule(DREAM_SWEEP_QUEUE)
      logger.info({}, `dreaming ${DREAM_DISABLED_REASON}`)
      return
    }
    await declare()
    for (let i = 0; i < concurrency; i++) {
      await queue.work<{ owner?: unknown }>(
        DREAM_OWNER_QUEUE,
        async (job) => {
          const owner = job.data?.owner
          if (typeof owner !== 'string' || owner === '') {
            logger.error({ jobId: job.id }, 'dream: owner job without an owner; dropped')
            return
          }
          const run = await dreamOwner(owner, job.signal)
          return { stopped: run.stopped, batches: run.batches.length }
        },
        { pollingIntervalSeconds },
      )
    }
    await queue.work(DREAM_SWEEP_QUEUE, async () => ({ enqueued: await sweep() }), { pollingIntervalSeconds })
    await queue.schedule(DREAM_SWEEP_QUEUE, cron, {}, { retryLimit: 1, expireInSeconds: 300 })
    logger.info({ cron, model: model.id, size: model.size, batchMax, maxOutputTokens }, 'dreaming on')
  }

  return {
    start() {
      started ??= start().catch((err) => {
        started = undefined
        throw err
      })
      return started
    },
    status() {
      if (model === undefined) return { enabled: false, reason: DREAM_DISABLED_REASON }
      return { enabled: true, model: model.id, size: model.size }
    },
    dreamOnce(owner, runOptions = {}) {
      return dreamOwner(owner, runOptions.signal)
    },
    sweep,
  }
}
