// Dreaming's view of the memory service (the DreamHost port): which owners have new raw records,
// their next batch (raw records only: dreaming never reads its own output back as input), what
// they may spend, and the batch's commit — derived records, the charge and the owner's progress
// in one transaction, once per (owner, batch).
import { createHash, randomUUID } from 'node:crypto'
import type { Db } from '../platform/db/index.ts'
import { embeddingCostMicros } from './limits.ts'
import type { DerivedMemory, DreamBatch, DreamHost, Embedder, OwnerId, OwnerKeyStore } from './types.ts'
import { contentMac, openRecord, sealRecord } from './records.ts'
import { appendLedger, balanceOf, insertRecord, lockOwner, nextSeq } from './store.ts'

const minBig = (a: bigint, b: bigint) => (a < b ? a : b)

export function createDreamHost(deps: { db: Db; keys: OwnerKeyStore; embedder: Embedder; countTokens: (text: string) => number }): DreamHost {
  const { db, keys, embedder } = deps
  /** Plan holders' dreaming is included in their memory-ops units; wallets pay from their deposit. */
  const metered = (owner: OwnerId) => !owner.startsWith('agent:')

  return {
    async ownersToDream(limit) {
      const rows = await db.query<{ owner: string }>(
        `select o.owner from memory_owners o
          where exists (select 1 from memory_records r where r.owner = o.owner and r.kind = 'raw' and r.state = 'active' and r.seq > o.dreamed_seq)
          order by o.owner limit $1`,
        [limit],
      )
      return rows.map((row) => row.owner)
    },

    async nextBatch(owner, max): Promise<DreamBatch | undefined> {
      const ownerKeys = await keys.keysOf(db, owner)
      if (ownerKeys === undefined) return undefined
      const rows = await db.query<{ id: string; seq: bigint; content_ct: Buffer; context_ct: Buffer | null; tags_ct: Buffer | null; metadata_ct: Buffer | null; created_at: Date }>(
        `select r.id, r.seq, r.content_ct, r.context_ct, r.tags_ct, r.metadata_ct, r.created_at from memory_records r join memory_owners o on o.owner = r.owner
          where r.owner = $1 and r.kind = 'raw' and r.state = 'active' and r.seq > o.dreamed_seq order by r.seq limit $2`,
        [owner, max],
      )
      if (rows.length === 0) return undefined
      const ids = rows.map((row) => row.id)
      return {
        owner,
        batchKey: createHash('sha256').update(ids.join(',')).digest('hex').slice(0, 32),
        uptoSeq: Number(rows[rows.length - 1]?.seq ?? 0n),
        sources: rows.map((row) => ({ id: row.id, content: openRecord(ownerKeys, row).content, createdAt: row.created_at })),
      }
    },

    async budgetMicros(owner) {
      return metered(owner) ? balanceOf(db, owner) : null
    },

    async commitDream(batch, derived, usage) {
      const ownerKeys = await keys.keysOf(db, batch.owner)
      if (ownerKeys === undefined) return 'empty'
      const sources = new Set(batch.sources.map((source) => source.id))
      const kept: DerivedMemory[] = derived.filter((entry) => entry.content.trim() !== '' && entry.derivedFrom.length > 0 && entry.derivedFrom.every((id) => sources.has(id)))
      // Embedded before the transaction (an upstream call); their embedding is part of the dream's charge.
      const vectors = kept.length === 0 ? [] : (await embedder.embed(kept.map((entry) => entry.content))).vectors
      const embedTokens = kept.reduce((sum, entry) => sum + deps.countTokens(entry.content), 0)
      const cost = usage.costMicros + embeddingCostMicros(embedTokens)
      return db.transaction(async (tx) => {
        await lockOwner(tx, batch.owner)
        const done = await tx.query(`select 1 from memory_dreams where owner = $1 and batch_key = $2 and state in ('written', 'empty')`, [batch.owner, batch.batchKey])
        if (done.length > 0) return 'duplicate'
        // The dreamer checked its estimate against the budget before the model call; if the
        // balance fell meanwhile (a write, a withdrawal), the charge stops at what is left: the
        // model was paid for already, and a deposit never goes below zero.
        const charge = metered(batch.owner) ? minBig(cost, await balanceOf(tx, batch.owner)) : 0n
        let written = 0
        for (const [i, entry] of kept.entries()) {
          // A statement the owner already holds (same normalised text) is not written twice.
          const mac = contentMac(ownerKeys, entry.content)
          if ((await tx.query(`select 1 from memory_records where owner = $1 and content_mac = $2 limit 1`, [batch.owner, mac])).length > 0) continue
          const id = randomUUID()
          await insertRecord(tx, {
            id,
            owner: batch.owner,
            seq: await nextSeq(tx, batch.owner),
            kind: 'derived',
            state: 'active',
            rail: 'dream',
            sealed: sealRecord(ownerKeys, id, { content: entry.content }, vectors[i] ?? null),
            derivedFrom: entry.derivedFrom,
            embedder: embedder.id,
            dims: embedder.dims,
            tokens: deps.countTokens(entry.content),
            chargedMicros: 0n,
            replayKey: null,
            idempotencyKey: null,
            requestHash: null,
            dreamBatch: batch.batchKey,
          })
          written += 1
        }
        if (charge > 0n) {
          await appendLedger(tx, {
            owner: batch.owner,
            kind: 'dream',
            amountMicros: -charge,
            dreamBatch: batch.batchKey,
            tokensIn: usage.inputTokens,
            tokensOut: usage.outputTokens,
            model: usage.model,
          })
        }
        await tx.query(`update memory_owners set dreamed_seq = greatest(dreamed_seq, $2) where owner = $1`, [batch.owner, batch.uptoSeq])
        const state = written === 0 ? 'empty' : 'written'
        await tx.query(
          `insert into memory_dreams (owner, batch_key, state, model, model_size, tokens_in, tokens_out, cost_micros, derived) values ($1, $2, $3, $4, $5, $6, $7, $8, $9)
           on conflict (owner, batch_key) do update set state = excluded.state, tokens_in = excluded.tokens_in, tokens_out = excluded.tokens_out,
             cost_micros = excluded.cost_micros, derived = excluded.derived, created_at = now()`,
          [batch.owner, batch.batchKey, state, usage.model, usage.size, usage.inputTokens, usage.outputTokens, charge, written],
        )
        return state
      })
    },
  }
}
