// The memory service's SQL, one operation per function over any Queryable, so callers compose them
// in their own transaction. Balance rule, once: an owner's balance = SUM(memory_ledger.amount_micros).
import type { Queryable } from '../platform/db/index.ts'
import type { OwnerId } from './types.ts'
import type { SealedRecord } from './records.ts'

export type RecordRail = 'direct' | 'marketplace' | 'payg' | 'dream'
export type OwnerRail = 'direct' | 'marketplace' | 'payg'

/** Creates the owner row if missing; the first rail that touches an owner stays its rail. */
export async function ensureOwner(q: Queryable, owner: OwnerId, rail: OwnerRail): Promise<void> {
  await q.query(`insert into memory_owners (owner, rail) values ($1, $2) on conflict (owner) do update set rail = coalesce(memory_owners.rail, excluded.rail)`, [owner, rail])
}

/** Locks the owner row (writes, balance checks and withdrawals of one owner serialise here). */
export async function lockOwner(q: Queryable, owner: OwnerId): Promise<{ version: bigint; dreamedSeq: bigint; rail: OwnerRail | null } | undefined> {
  const rows = await q.query<{ version: bigint; dreamed_seq: bigint; rail: OwnerRail | null }>(`select version, dreamed_seq, rail from memory_owners where owner = $1 for update`, [
    owner,
  ])
  const row = rows[0]
  return row === undefined ? undefined : { version: row.version, dreamedSeq: row.dreamed_seq, rail: row.rail }
}

/** The next per-owner seq: bumps the owner's version (call with the owner row locked). */
export async function nextSeq(q: Queryable, owner: OwnerId): Promise<bigint> {
  const rows = await q.query<{ version: bigint }>(`update memory_owners set version = version + 1 where owner = $1 returning version`, [owner])
  const version = rows[0]?.version
  if (version === undefined) throw new Error('nextSeq: no such owner')
  return version
}

export async function ownerVersion(q: Queryable, owner: OwnerId): Promise<bigint | undefined> {
  return (await q.query<{ version: bigint }>(`select version from memory_owners where owner = $1`, [owner]))[0]?.version
}

export interface NewRecord {
  id: string
  owner: OwnerId
  seq: bigint | null
  kind: 'raw' | 'derived'
  state: 'provisional' | 'active'
  rail: RecordRail
  sealed: SealedRecord
  derivedFrom: string[]
  embedder: string
  dims: number
  tokens: number
  chargedMicros: bigint
  replayKey: string | null
  idempotencyKey: string | null
  requestHash: string | null
  dreamBatch: string | null
}

export async function insertRecord(q: Queryable, r: NewRecord): Promise<Date> {
  const s = r.sealed
  const rows = await q.query<{ created_at: Date }>(
    `insert into memory_records (id, owner, seq, kind, state, rail, dek_version, content_ct, context_ct, tags_ct, metadata_ct, vector_ct,
                                 context_mac, tag_macs, blind_terms, doc_length, content_mac, derived_from, embedder, dims, tokens, charged_micros,
                                 replay_key, idempotency_key, request_hash, dream_batch)
     values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14::bytea[], $15, $16, $17, $18::uuid[], $19, $20, $21, $22, $23, $24, $25, $26)
     returning created_at`,
    [
      r.id,
      r.owner,
      r.seq,
      r.kind,
      r.state,
      r.rail,
      s.dek_version,
      s.content_ct,
      s.context_ct,
      s.tags_ct,
      s.metadata_ct,
      s.vector_ct,
      s.context_mac,
      s.tag_macs,
      s.blind_terms,
      s.doc_length,
      s.content_mac,
      r.derivedFrom,
      r.embedder,
      r.dims,
      r.tokens,
      r.chargedMicros,
      r.replayKey,
      r.idempotencyKey,
      r.requestHash,
      r.dreamBatch,
    ],
  )
  return rows[0]?.created_at as Date
}

/** Columns the recall index loads (no content). */
export interface IndexRow {
  [column: string]: unknown
  seq: bigint
  id: string
  kind: 'raw' | 'derived'
  context_mac: Buffer | null
  tag_macs: Buffer[]
  blind_terms: Buffer
  vector_ct: Buffer | null
  embedder: string
}

/** Visible records of an owner after `afterSeq`, in seq order, a page at a time. */
export async function indexRowsAfter(q: Queryable, owner: OwnerId, afterSeq: number, limit: number): Promise<IndexRow[]> {
  return q.query<IndexRow>(
    `select seq, id, kind, context_mac, tag_macs, blind_terms, vector_ct, embedder from memory_records
      where owner = $1 and seq > $2 and state = 'active' order by seq limit $3`,
    [owner, afterSeq, limit],
  )
}

export interface ContentRow {
  [column: string]: unknown
  id: string
  owner: string
  kind: 'raw' | 'derived'
  state: 'provisional' | 'active'
  rail: RecordRail
  content_ct: Buffer
  context_ct: Buffer | null
  tags_ct: Buffer | null
  metadata_ct: Buffer | null
  derived_from: string[]
  tokens: number
  charged_micros: bigint
  idempotency_key: string | null
  request_hash: string | null
  created_at: Date
}

const CONTENT_COLUMNS = `id, owner, kind, state, rail, content_ct, context_ct, tags_ct, metadata_ct, derived_from, tokens, charged_micros, idempotency_key, request_hash, created_at`

/** An owner's active records among `ids` (any order). */
export async function contentRows(q: Queryable, owner: OwnerId, ids: readonly string[]): Promise<ContentRow[]> {
  return q.query<ContentRow>(`select ${CONTENT_COLUMNS} from memory_records where owner = $1 and id = any($2::uuid[]) and state = 'active'`, [owner, ids])
}

/**
 * An owner's active records among `ids` and, in the same statement, the owner's version (so a
 * recall that searched a cached index learns whether newer records exist without a second trip).
 */
export async function contentRowsAndVersion(q: Queryable, owner: OwnerId, ids: readonly string[]): Promise<{ rows: ContentRow[]; version: bigint | undefined }> {
  const found = await q.query<ContentRow & { owner_version: bigint }>(
    `select o.version as owner_version, r.id, r.owner, r.kind, r.state, r.rail, r.content_ct, r.context_ct, r.tags_ct, r.metadata_ct, r.derived_from, r.tokens,
            r.charged_micros, r.idempotency_key, r.request_hash, r.created_at
       from memory_owners o left join memory_records r on r.owner = o.owner and r.id = any($2::uuid[]) and r.state = 'active'
      where o.owner = $1`,
    [owner, ids],
  )
  return { rows: found.filter((row) => row.id !== null), version: found[0]?.owner_version }
}

export async function recordByIdempotencyKey(q: Queryable, key: string): Promise<ContentRow | undefined> {
  return (await q.query<ContentRow>(`select ${CONTENT_COLUMNS} from memory_records where idempotency_key = $1`, [key]))[0]
}

// ------------------------------------------------------------------ the ledger

export type LedgerKind = 'deposit' | 'debit' | 'dream' | 'refund' | 'reversal'

export async function balanceOf(q: Queryable, owner: OwnerId): Promise<bigint> {
  return (await q.query<{ balance: bigint }>(`select coalesce(sum(amount_micros), 0)::int8 as balance from memory_ledger where owner = $1`, [owner]))[0]?.balance ?? 0n
}

export async function appendLedger(
  q: Queryable,
  row: {
    owner: OwnerId
    kind: LedgerKind
    amountMicros: bigint
    memoryId?: string | null
    dreamBatch?: string | null
    refundId?: string | null
    replayKey?: string | null
    txHash?: string | null
    tokensIn?: number | null
    tokensOut?: number | null
    model?: string | null
  },
): Promise<void> {
  await q.query(
    `insert into memory_ledger (owner, kind, amount_micros, memory_id, dream_batch, refund_id, replay_key, tx_hash, tokens_in, tokens_out, model)
     values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
    [
      row.owner,
      row.kind,
      row.amountMicros,
      row.memoryId ?? null,
      row.dreamBatch ?? null,
      row.refundId ?? null,
      row.replayKey ?? null,
      row.txHash ?? null,
      row.tokensIn ?? null,
      row.tokensOut ?? null,
      row.model ?? null,
    ],
  )
}

export interface AccountTotals {
  deposits: bigint
  debits: bigint
  dreams: bigint
  refunds: bigint
  pendingDeposits: bigint
  records: number
  derived: number
  rail: OwnerRail | null
}

export async function accountTotals(q: Queryable, owner: OwnerId): Promise<AccountTotals> {
  const rows = await q.query<{ deposits: bigint; debits: bigint; dreams: bigint; refunds: bigint; pending: bigint; records: bigint; derived: bigint; rail: OwnerRail | null }>(
    `select coalesce(sum(l.amount_micros) filter (where l.kind = 'deposit'), 0)::int8 as deposits,
            coalesce(-sum(l.amount_micros) filter (where l.kind = 'debit'), 0)::int8 as debits,
            coalesce(-sum(l.amount_micros) filter (where l.kind = 'dream'), 0)::int8 as dreams,
            coalesce(-sum(l.amount_micros) filter (where l.kind = 'refund'), 0)::int8 as refunds,
            (select coalesce(sum(amount_micros), 0)::int8 from memory_deposits d where d.owner = $1 and d.state = 'provisional') as pending,
            (select count(*)::int8 from memory_records r where r.owner = $1 and r.state = 'active') as records,
            (select count(*)::int8 from memory_records r where r.owner = $1 and r.state = 'active' and r.kind = 'derived') as derived,
            (select rail from memory_owners o where o.owner = $1) as rail
       from memory_ledger l where l.owner = $1`,
    [owner],
  )
  const row = rows[0]
  return {
    deposits: row?.deposits ?? 0n,
    debits: row?.debits ?? 0n,
    dreams: row?.dreams ?? 0n,
    refunds: row?.refunds ?? 0n,
    pendingDeposits: row?.pending ?? 0n,
    records: Number(row?.records ?? 0n),
    derived: Number(row?.derived ?? 0n),
    rail: row?.rail ?? null,
  }
}

export async function latestLedger(q: Queryable, owner: OwnerId, limit: number) {
  return q.query<{ kind: LedgerKind; amount_micros: bigint; memory_id: string | null; tx_hash: string | null; refund_tx: string | null; created_at: Date }>(
    `select l.kind, l.amount_micros, l.memory_id, l.tx_hash, r.tx_hash as refund_tx, l.created_at
       from memory_ledger l left join memory_refunds r on r.refund_id = l.refund_id
      where l.owner = $1 order by l.id desc limit $2`,
    [owner, limit],
  )
}
