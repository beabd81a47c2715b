// The memory service: remember on three rails, free recall / expand / account, over the sealed
// records (records.ts), the ledger (store.ts) and the recall cache. Embedding happens before any
// transaction (it may call an upstream); each write then commits its record, its seq and its charge
// together, so a crash leaves either all of them or none.
//
// Rails of a write (the app picks one per request, see app.ts):
// - marketplace: a plan holder's token; one memory-ops unit is debited from the plan in the
//   record's transaction (payments/agents.ts debitPlanIn); owner `agent:<agentId>`.
// - direct: a wallet proven by SIGN-IN-WITH-X with a deposit; the embedding cost is debited from
//   the deposit in the record's transaction, under the owner lock (never an overdraft).
// - payg: paid per call (x402/MPP); the record is written provisional and bound to the payment;
//   its decision activates it (seq given then) or deletes it (deposits.ts has the handlers). When
//   the payer's deposit covers the write, it is a direct-rail write instead and the payment is
//   forgone in the same transaction (consumed, never settled).
import { randomUUID } from 'node:crypto'
import type { Db, Queryable } from '../platform/db/index.ts'
import type { Clock } from '../platform/clock.ts'
import type { Logger } from '../platform/logger.ts'
import { AppError } from '../platform/errors.ts'
import { memberDepthError } from '../platform/json-depth.ts'
import { formatUsd } from '../platform/money.ts'
import type { PlanSpec } from '../catalog/types.ts'
import { debitPlanIn, type PlanStanding } from '../payments/agents.ts'
import { embeddingCostMicros } from './limits.ts'
import type { Embedder, EmbeddingMode, OwnerId, OwnerKeyStore } from './types.ts'
import { filterMacs, openRecord, queryTerms, requestMac, sealRecord, type RecordInput } from './records.ts'
import {
  accountTotals,
  balanceOf,
  contentRows,
  contentRowsAndVersion,
  ensureOwner,
  insertRecord,
  latestLedger,
  lockOwner,
  nextSeq,
  recordByIdempotencyKey,
  type ContentRow,
  type RecordRail,
} from './store.ts'
import { createRecallCache, type RecallCache } from './recall-cache.ts'

/** payment_reservations.effect of a per-call paid write. */
export const MEMORY_WRITE_EFFECT = 'memory.write'
/** payment_reservations.effect of a paid write drawn on the payer's deposit (the proof consumed, never settled). */
export const MEMORY_DEPOSIT_DRAW_EFFECT = 'memory.deposit-draw'
/** plan_credit_ledger.operation_id of marketplace writes. */
export const MEMORY_PLAN_OPERATION = 'rememberMemory'

export interface MemoryServiceDeps {
  db: Db
  clock: Clock
  logger: Logger
  keys: OwnerKeyStore
  embedder: Embedder
  countTokens: (text: string) => number
  /** Plans covering memory and the memory-ops unit price (marketplace rail). */
  plans: readonly PlanSpec[]
  unitPriceMicros: bigint
  cacheBytes: number
  /** Dreaming's state for the account view. */
  dreaming: () => { enabled: boolean; detail: string; model?: string }
  /** Public base of the memory service (links in errors). */
  publicUrl: string
}

/** An embedded write, ready to store (no transaction held while embedding). */
export interface PreparedWrite {
  input: RecordInput
  vector: Float32Array | null
  tokens: number
  costMicros: bigint
  canonical: string
}

/** The payment of a per-call write (access.ts PaymentContext). */
export interface PaidWrite {
  amountMicros: bigint
  replayKey: string
  bind: (tx: Queryable, effect: string) => Promise<void>
  /** Present when the proof can be left unsettled: the write may then draw on the payer's deposit. */
  forgo?: ((tx: Queryable, effect: string) => Promise<void>) | undefined
}

export interface RememberView {
  id: string
  context: string | null
  tags: string[]
  createdAt: string
  tokens: number
  rail: 'direct' | 'marketplace' | 'payg'
  chargedMicros: string
  balanceMicros?: string
}

/** Maps an embedder failure to the memory error catalogue (nothing was stored or charged). */
function embeddingFailure(error: unknown): AppError {
  const kind = (error as { kind?: string } | undefined)?.kind
  const message = error instanceof Error ? error.message : String(error)
  if (kind === 'timeout') return new AppError('embedding_timeout', `The embedding upstream timed out: ${message}. Nothing was stored or charged.`)
  return new AppError('embedding_failed', `Embedding failed: ${message}. Nothing was stored or charged.`)
}

/**
 * The body a write is idempotent over (key order fixed). Metadata nested past the body's depth
 * bound is refused here too (JSON.stringify recurses): the HTTP parser refuses it first, this
 * covers callers that did not come through it.
 */
export function canonicalBody(input: RecordInput): string {
  const tooDeep = memberDepthError(input.metadata, 'body.metadata')
  if (tooDeep !== undefined) throw tooDeep
  return JSON.stringify([input.content, input.context ?? null, input.tags ?? [], input.metadata ?? null])
}

export function createMemoryService(deps: MemoryServiceDeps) {
  const { db, clock, keys, embedder } = deps
  const cache: RecallCache = createRecallCache({ db, embedder, maxBytes: deps.cacheBytes, logger: deps.logger })

  async function embedOne(text: string, signal?: AbortSignal): Promise<{ vector: Float32Array | null; tokens: number | undefined }> {
    try {
      const result = await embedder.embed([text], signal ? { signal } : {})
      return { vector: result.vectors[0] ?? null, tokens: result.tokens }
    } catch (error) {
      if (error instanceof AppError) throw error
      throw embeddingFailure(error)
    }
  }

  async function prepare(input: RecordInput, signal?: AbortSignal): Promise<PreparedWrite> {
    const embedded = await embedOne(input.content, signal)
    // Billing tokens: the upstream's usage when it reports one, else cl100k_base.
    const tokens = embedded.tokens ?? deps.countTokens(input.content)
    return { input, vector: embedded.vector, tokens, costMicros: embeddingCostMicros(tokens), canonical: canonicalBody(input) }
  }

  function view(
    row: Pick<ContentRow, 'id' | 'rail' | 'tokens' | 'charged_micros' | 'created_at'>,
    input: { context: string | null; tags: string[] },
    balance?: bigint,
  ): RememberView {
    return {
      id: row.id,
      context: input.context,
      tags: input.tags,
      createdAt: row.created_at.toISOString(),
      tokens: row.tokens,
      rail: row.rail === 'dream' ? 'direct' : row.rail,
      chargedMicros: row.charged_micros.toString(),
      ...(balance === undefined ? {} : { balanceMicros: balance.toString() }),
    }
  }

  /**
   * A retried write (same Idempotency-Key): its original answer, or 409 when the body differs.
   * Undefined when the key is new. Asked before any payment, so a retry is never charged twice.
   */
  async function replayOf(idempotencyKey: string, input: RecordInput): Promise<RememberView | undefined> {
    const row = await recordByIdempotencyKey(db, idempotencyKey)
    if (row === undefined) return undefined
    const ownerKeys = await keys.keysOf(db, row.owner)
    if (ownerKeys === undefined || row.request_hash !== requestMac(ownerKeys, canonicalBody(input))) {
      throw new AppError('idempotency_conflict', 'This Idempotency-Key was used for another write; use a new key for new content', { field: 'header.idempotency-key' })
    }
    if (row.state === 'provisional') {
      // Its payment is not decided yet: answering 201 would promise a write that may still be
      // undone. A failed payment deletes the record and frees the key for a paid retry.
      throw new AppError('payment_settling', 'The write with this Idempotency-Key is waiting for its payment to settle; retry in a few seconds', {
        field: 'header.idempotency-key',
        headers: { 'retry-after': '5' },
      })
    }
    const opened = openRecord(ownerKeys, row)
    return view(row, opened, row.rail === 'direct' ? await balanceOf(db, row.owner) : undefined)
  }

  /** Inserts the sealed record; `seq` null = provisional (payg, until its payment is decided). */
  async function insert(
    tx: Queryable,
    owner: OwnerId,
    prepared: PreparedWrite,
    options: { rail: RecordRail; visible: boolean; chargedMicros: bigint; replayKey?: string; idempotencyKey?: string | undefined; id?: string },
  ) {
    const ownerKeys = await keys.keysOf(tx, owner, { create: true })
    if (ownerKeys === undefined) throw new Error('owner keys were not created')
    const id = options.id ?? randomUUID()
    const seq = options.visible ? await nextSeq(tx, owner) : null
    const createdAt = await insertRecord(tx, {
      id,
      owner,
      seq,
      kind: 'raw',
      state: options.visible ? 'active' : 'provisional',
      rail: options.rail,
      sealed: sealRecord(ownerKeys, id, prepared.input, prepared.vector),
      derivedFrom: [],
      embedder: embedder.id,
      dims: embedder.dims,
      tokens: prepared.tokens,
      chargedMicros: options.chargedMicros,
      replayKey: options.replayKey ?? null,
      idempotencyKey: options.idempotencyKey ?? null,
      requestHash: options.idempotencyKey === undefined ? null : requestMac(ownerKeys, prepared.canonical),
      dreamBatch: null,
    })
    return { id, createdAt }
  }

  const inputView = (input: RecordInput) => ({ context: input.context ?? null, tags: input.tags ?? [] })

  /** A direct-rail record and its debit (call with the owner locked and `balance` read under it). */
  async function debitWrite(
    tx: Queryable,
    owner: OwnerId,
    prepared: PreparedWrite,
    balance: bigint,
    idempotencyKey: string | undefined,
    replayKey?: string,
  ): Promise<RememberView> {
    const { id, createdAt } = await insert(tx, owner, prepared, { rail: 'direct', visible: true, chargedMicros: prepared.costMicros, idempotencyKey })
    if (prepared.costMicros > 0n) {
      // replay_key names the forgone payment proof of a paid write drawn on the deposit (audit).
      await tx.query(`insert into memory_ledger (owner, kind, amount_micros, memory_id, tokens_in, model, replay_key) values ($1, 'debit', $2, $3, $4, $5, $6)`, [
        owner,
        -prepared.costMicros,
        id,
        prepared.tokens,
        embedder.id,
        replayKey ?? null,
      ])
    }
    return view(
      { id, rail: 'direct', tokens: prepared.tokens, charged_micros: prepared.costMicros, created_at: createdAt },
      inputView(prepared.input),
      balance - prepared.costMicros,
    )
  }

  return {
    embedder,
    cache,
    prepare,
    replayOf,

    /** Marketplace rail: one memory-ops unit from the holder's plan, in the record's transaction. */
    async rememberOnPlan(agentId: string, prepared: PreparedWrite, idempotencyKey: string | undefined): Promise<{ view: RememberView; standing: PlanStanding }> {
      const owner = `agent:${agentId}`
      const cost = deps.unitPriceMicros
      return db.transaction(async (tx) => {
        const id = randomUUID()
        const debit = await debitPlanIn(tx, clock.now(), {
          agentId,
          service: 'memory',
          plans: deps.plans,
          costMicros: cost,
          operationId: MEMORY_PLAN_OPERATION,
          requestId: `memory:${id}`,
        })
        if (debit === undefined) {
          throw new AppError('plan_required', `No active plan of yours covers a memory write (${formatUsd(cost)} USD of plan credit); buy memory-credit-5 on the gateway`, {
            extensions: { plans: deps.plans.map((plan) => ({ id: plan.id, kind: plan.kind, title: plan.title, price: { amountMicros: plan.priceMicros.toString() } })) },
          })
        }
        await ensureOwner(tx, owner, 'marketplace')
        await lockOwner(tx, owner)
        const { createdAt } = await insert(tx, owner, prepared, { rail: 'marketplace', visible: true, chargedMicros: cost, idempotencyKey, id })
        return {
          view: view({ id, rail: 'marketplace', tokens: prepared.tokens, charged_micros: cost, created_at: createdAt }, inputView(prepared.input)),
          standing: debit.standing,
        }
      })
    },

    /** Direct rail: the embedding cost from the owner's deposit, under the owner lock. */
    async rememberOnDeposit(owner: OwnerId, prepared: PreparedWrite, idempotencyKey: string | undefined): Promise<RememberView> {
      return db.transaction(async (tx) => {
        const locked = await lockOwner(tx, owner)
        const balance = locked === undefined ? 0n : await balanceOf(tx, owner)
        if (balance < prepared.costMicros) {
          throw new AppError(
            'insufficient_deposit',
            `Your memory deposit holds ${balance} micro-USDC; this write costs ${prepared.costMicros} (${prepared.tokens} tokens at 100000 micro-USDC per million). ` +
              'Deposit more (POST /api/v1/deposits) or pay this write per call (send it without SIGN-IN-WITH-X to get the 402).',
            { extensions: { balanceMicros: balance.toString(), costMicros: prepared.costMicros.toString(), deposit: `${deps.publicUrl}/api/v1/deposits` } },
          )
        }
        return debitWrite(tx, owner, prepared, balance, idempotencyKey)
      })
    },

    /**
     * Per-call rail, or the direct rail when the payer's deposit covers the write: in one
     * transaction under the owner lock, either the deposit is debited and the payment forgone
     * (never settled), or the record is written provisional and bound to the payment. A proof that
     * cannot be forgone (no `forgo`: already on-chain) always pays per call.
     */
    async rememberPaid(payer: OwnerId, prepared: PreparedWrite, payment: PaidWrite, idempotencyKey: string | undefined): Promise<{ id: string; view: RememberView }> {
      return db.transaction(async (tx) => {
        const forgo = payment.forgo
        if (forgo !== undefined && (await lockOwner(tx, payer)) !== undefined) {
          const balance = await balanceOf(tx, payer)
          if (balance > 0n && balance >= prepared.costMicros) {
            await forgo(tx, MEMORY_DEPOSIT_DRAW_EFFECT)
            const drawn = await debitWrite(tx, payer, prepared, balance, idempotencyKey, payment.replayKey)
            return { id: drawn.id, view: drawn }
          }
        }
        await ensureOwner(tx, payer, 'payg')
        const { id, createdAt } = await insert(tx, payer, prepared, {
          rail: 'payg',
          visible: false,
          chargedMicros: payment.amountMicros,
          replayKey: payment.replayKey,
          idempotencyKey,
        })
        await payment.bind(tx, MEMORY_WRITE_EFFECT)
        return { id, view: view({ id, rail: 'payg', tokens: prepared.tokens, charged_micros: payment.amountMicros, created_at: createdAt }, inputView(prepared.input)) }
      })
    },

    /** True when the owner has a settled deposit balance (the direct rail applies to its writes). */
    async hasDeposit(owner: OwnerId): Promise<boolean> {
      return (await balanceOf(db, owner)) > 0n
    },

    async recall(owner: OwnerId, request: { query: string; context?: string; tags?: string[]; limit?: number }, signal?: AbortSignal) {
      const mode: EmbeddingMode = embedder.mode
      const ownerKeys = await keys.keysOf(db, owner)
      if (ownerKeys === undefined) return { results: [], embeddings: mode }
      // A held index is searched at once and its currency checked with the content read (one
      // round trip); an owner not held yet is loaded first.
      let index = cache.peek(owner) ?? (await cache.indexOf(owner, ownerKeys))
      if (index === undefined) return { results: [], embeddings: mode }
      const { vector } = await embedOne(request.query, signal)
      const query = { terms: queryTerms(ownerKeys, request.query), vector, ...filterMacs(ownerKeys, request), limit: request.limit ?? 10 }
      let hits = index.search(query)
      let read = await contentRowsAndVersion(
        db,
        owner,
        hits.map((hit) => hit.id),
      )
      if (read.version !== undefined && read.version > BigInt(index.maxSeq)) {
        // Records written since (here or on another replica): load them and search again.
        index = (await cache.indexOf(owner, ownerKeys)) ?? index
        hits = index.search(query)
        read = await contentRowsAndVersion(
          db,
          owner,
          hits.map((hit) => hit.id),
        )
      }
      const rows = new Map(read.rows.map((row) => [row.id, row]))
      const results = []
      for (const hit of hits) {
        const row = rows.get(hit.id)
        if (row === undefined) continue
        const opened = openRecord(ownerKeys, row)
        results.push({ id: row.id, content: opened.content, score: hit.score, createdAt: row.created_at.toISOString(), tags: opened.tags, context: opened.context, kind: row.kind })
      }
      return { results, embeddings: mode }
    },

    async expand(owner: OwnerId, ids: string[]) {
      const ownerKeys = await keys.keysOf(db, owner)
      const rows = ownerKeys === undefined ? [] : await contentRows(db, owner, ids)
      const byId = new Map(rows.map((row) => [row.id, row]))
      const records = []
      const missing: string[] = []
      for (const id of ids) {
        const row = byId.get(id.toLowerCase())
        if (row === undefined || ownerKeys === undefined) {
          missing.push(id)
          continue
        }
        const opened = openRecord(ownerKeys, row)
        records.push({
          id: row.id,
          kind: row.kind,
          content: opened.content,
          context: opened.context,
          tags: opened.tags,
          metadata: opened.metadata,
          derivedFrom: row.derived_from,
          createdAt: row.created_at.toISOString(),
        })
      }
      return { records, missing }
    },

    async account(owner: OwnerId) {
      const totals = await accountTotals(db, owner)
      const ledger = await latestLedger(db, owner, 50)
      const balance = totals.deposits - totals.debits - totals.dreams - totals.refunds
      const dreaming = deps.dreaming()
      return {
        owner,
        rail: totals.rail,
        depositMicros: totals.deposits.toString(),
        spentMicros: (totals.debits + totals.dreams).toString(),
        refundedMicros: totals.refunds.toString(),
        balanceMicros: balance.toString(),
        pendingDepositMicros: totals.pendingDeposits.toString(),
        records: totals.records,
        derivedRecords: totals.derived,
        embeddings: { mode: embedder.mode, model: embedder.id, dims: embedder.dims },
        dreaming: { enabled: dreaming.enabled, detail: dreaming.detail, ...(dreaming.model ? { model: dreaming.model } : {}) },
        ledger: ledger.map((row) => ({
          kind: row.kind,
          amountMicros: row.amount_micros.toString(),
          memoryId: row.memory_id,
          txHash: row.tx_hash ?? row.refund_tx,
          createdAt: row.created_at.toISOString(),
        })),
      }
    },
  }
}

export type MemoryService = ReturnType<typeof createMemoryService>
