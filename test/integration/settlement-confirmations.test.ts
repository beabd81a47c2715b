// The chain-truth sweep and the refund gate on a real database (PGlite), with the chain's answers
// scripted per settlement: what a recorded settlement becomes when the chain confirms it, drops it
// and takes it back, or drops it for good; that the domain hears of each move exactly once; that
// the ledger tells the story append-only; and that a refund is signed only against confirmed
// settlements, never above what they brought in or what the wallet holds, and never once its
// payment was reversed.
import t from 'tap'
import type { Test } from 'tap'
import type { Hex } from 'viem'
import { openDb, type Db, type Queryable } from '../../src/platform/db/index.ts'
import { migrate } from '../../src/platform/db/migrate.ts'
import { createLogger } from '../../src/platform/logger.ts'
import { createSettlementConfirmations, type ChainTruth } from '../../src/payments/confirmations.ts'
import { createPaymentOutcomes } from '../../src/payments/outcomes.ts'
import { createRefunds, type RefundChain } from '../../src/payments/refunds.ts'
import { throwawayDatabase } from '../helpers/servers.ts'

const logger = createLogger('silent')
const EFFECT = 'test.work'
const PAYER = '0x00000000000000000000000000000000000000b1'
const WALLET = '0x000000000000000000000000000000000000bE4c'

async function setup(opened?: Db) {
  const db = opened ?? (await openDb({ kind: 'pglite', dataDir: 'memory://' }))
  await migrate(db)
  const heard: string[] = []
  const outcomes = createPaymentOutcomes({ db, logger })
  outcomes.register(EFFECT, {
    settled: async () => undefined,
    failed: async () => undefined,
    async reversed(_tx, key) {
      heard.push(`reversed ${key}`)
      return undefined
    },
    async confirmed(_tx, key) {
      heard.push(`confirmed ${key}`)
      return undefined
    },
  })
  /** What the chain says next about each settlement (the last answer repeats). */
  const script = new Map<string, ChainTruth[]>()
  let reads = 0
  const confirmations = createSettlementConfirmations({
    db,
    outcomes,
    logger,
    readers: {
      x402: async (row) => {
        reads += 1
        const answers = script.get(row.replayKey) ?? [{ status: 'unknown' }]
        const next = answers.length > 1 ? (answers.shift() as ChainTruth) : (answers[0] as ChainTruth)
        if (next.status === 'unknown' && answers.length === 0) throw new Error('RPC down')
        return next
      },
    },
  })
  const settle = async (key: string, amount = 1_000n) => {
    await db.query(
      `insert into payment_reservations (replay_key, protocol, protocol_version, payer, amount_micros, operation_id, state, reference, effect, detail, decided_at)
       values ($1, 'x402', 2, $2, $3, 'op', 'settled', '0xfirst', $4, '{}', now())`,
      [key, PAYER, amount, EFFECT],
    )
  }
  const row = async (key: string) =>
    (
      await db.query<{ state: string; reference: string | null; confirmed_at: Date | null; block_number: bigint | null }>(
        `select state, reference, confirmed_at, block_number from payment_reservations where replay_key = $1`,
        [key],
      )
    )[0]
  const events = async (key: string) =>
    (await db.query<{ event: string; reference: string | null }>(`select event, reference from payments_ledger where replay_key = $1 order by id`, [key])).map(
      (r) => `${r.event}:${r.reference ?? ''}`,
    )
  return { db, outcomes, confirmations, script, settle, row, events, heard, reads: () => reads }
}

t.test('a settlement the chain confirms: provisional until deep enough, then confirmed once', async (t) => {
  const w = await setup()
  t.teardown(() => w.db.close())
  await w.settle('k1')
  w.script.set('k1', [
    { status: 'included', reference: '0xfirst', blockNumber: 7n },
    { status: 'confirmed', reference: '0xfirst', blockNumber: 7n },
  ])
  t.equal(await w.confirmations.sweep(), 0, 'one block deep: nothing moves')
  t.match(await w.row('k1'), { state: 'settled', confirmed_at: null, block_number: 7n })
  t.equal(await w.confirmations.sweep(), 1)
  t.match(await w.row('k1'), { state: 'settled', confirmed_at: Date, block_number: 7n })
  t.equal(await w.confirmations.sweep(), 0, 'a confirmed settlement is not looked at again')
  t.same(w.heard, ['confirmed k1'], 'the domain heard it once')
  t.same(await w.events('k1'), [], 'no ledger row: confirmation is not a money event')
})

t.test('dropped, then re-landed by a new broadcast: reorged → resettled → confirmed', async (t) => {
  const w = await setup()
  t.teardown(() => w.db.close())
  await w.settle('k2')
  w.script.set('k2', [
    { status: 'missing', reference: '0xsecond' },
    { status: 'included', reference: '0xsecond', blockNumber: 9n },
    { status: 'confirmed', reference: '0xsecond', blockNumber: 9n },
  ])
  await w.confirmations.sweep()
  t.match(await w.row('k2'), { state: 'reorged', reference: '0xsecond', confirmed_at: null })
  t.same((await w.outcomes.decide('k2', { status: 'failed', reason: 'late' }, 'reconciler')).status, 'settled', 'the work stays bought while it is re-landed')
  await w.confirmations.sweep()
  t.match(await w.row('k2'), { state: 'settled', reference: '0xsecond', confirmed_at: null })
  await w.confirmations.sweep()
  t.match(await w.row('k2'), { state: 'settled', confirmed_at: Date })
  t.same(await w.events('k2'), ['reorged:0xfirst', 'resettled:0xsecond'])
  t.same(w.heard, ['confirmed k2'])
})

t.test('dropped for good: reorged → reversed, the work is taken back once, and it stays decided', async (t) => {
  const w = await setup()
  t.teardown(() => w.db.close())
  await w.settle('k3')
  w.script.set('k3', [{ status: 'dead', reason: 'expired unused' }])
  await Promise.all([w.confirmations.sweep(), w.confirmations.sweep(['k3']), w.confirmations.sweep()])
  t.match(await w.row('k3'), { state: 'reversed' })
  t.same(w.heard, ['reversed k3'], 'three sweeps at once: reversed exactly once')
  t.same(await w.events('k3'), ['reorged:0xfirst', 'reversed:'])
  t.match(await w.outcomes.decide('k3', { status: 'settled', reference: '0xlate' }, 'reconciler'), { status: 'failed' }, 'a reversed payment is final')
  await t.rejects(w.db.query(`update payments_ledger set event = 'settled' where replay_key = 'k3'`), /append-only/, 'the ledger cannot be rewritten')
})

t.test('settlements asked for one by one are checked together, and none is left behind', async (t) => {
  const w = await setup()
  t.teardown(() => w.db.close())
  const keys = ['s1', 's2', 's3', 's4']
  for (const key of keys) {
    await w.settle(key)
    w.script.set(key, [{ status: 'confirmed', reference: '0xfirst', blockNumber: 2n }])
  }
  for (const key of keys) w.confirmations.soon(key)
  for (let i = 0; i < 200 && (await w.db.query(`select 1 from payment_reservations where confirmed_at is null`)).length > 0; i += 1) {
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
  for (const key of keys) t.match(await w.row(key), { confirmed_at: Date }, `${key} confirmed`)
  t.equal(w.reads(), keys.length, 'each was asked of the chain once')
  t.same(w.heard.sort(), keys.map((key) => `confirmed ${key}`).sort())
})

// Every replica sweeps the one table: a lost settlement re-broadcast by two of them at once is
// refused to all but one ("authorization is used"). Each pass claims the rows it asks about.
async function replicasAtOnce(t: Test, db: Db) {
  const w = await setup(db)
  t.teardown(() => w.db.close())
  const readsOf = new Map<string, string[]>()
  const replica = (name: string) =>
    createSettlementConfirmations({
      db: w.db,
      outcomes: w.outcomes,
      logger,
      readers: {
        x402: async (row) => {
          readsOf.set(row.replayKey, [...(readsOf.get(row.replayKey) ?? []), name])
          // The re-broadcast takes a while: long enough for the other replica's pass to start.
          await new Promise((resolve) => setTimeout(resolve, 20))
          return { status: 'missing' }
        },
      },
    })
  const keys = ['r1', 'r2', 'r3', 'r4', 'r5', 'r6']
  for (const key of keys) await w.settle(key)
  const [a, b] = [replica('a'), replica('b')]
  await Promise.all([a.sweep(), b.sweep()])
  for (const key of keys) t.equal(readsOf.get(key)?.length, 1, `${key} asked of the chain by one pass (${readsOf.get(key)?.join(', ')})`)
  readsOf.clear()
  await b.sweep()
  t.same([...readsOf.keys()].sort(), keys, 'released when the pass ended: the next pass of any replica asks again')
  // The claim of a pass whose process died lapses.
  await w.db.query(`update payment_reservations set checking_until = now() + interval '1 hour' where replay_key = 'r1'`)
  readsOf.clear()
  await a.sweep()
  t.notOk(readsOf.has('r1'), 'held by a pass still running (or dead, until its claim lapses)')
  await w.db.query(`update payment_reservations set checking_until = now() - interval '1 second' where replay_key = 'r1'`)
  readsOf.clear()
  await a.sweep()
  t.ok(readsOf.has('r1'), 'a lapsed claim is taken')
}

t.test('replicas sweeping at once: each settlement is asked of the chain by one pass at a time', async (t) => {
  await t.test('on PGlite', async (t) => replicasAtOnce(t, await openDb({ kind: 'pglite', dataDir: 'memory://' })))
  await t.test('on a throw-away Postgres database', async (t) => {
    const url = await throwawayDatabase(t)
    if (url) await replicasAtOnce(t, await openDb({ kind: 'postgres', url }))
  })
})

t.test('a chain that cannot answer leaves the settlement as it was', async (t) => {
  const w = await setup()
  t.teardown(() => w.db.close())
  await w.settle('k4')
  t.equal(await w.confirmations.sweep(), 0)
  t.ok(w.reads() > 0, 'the chain was asked')
  t.match(await w.row('k4'), { state: 'settled', reference: '0xfirst', confirmed_at: null })
})

t.test('refunds are signed only against confirmed settlements, within what they brought and what the wallet holds', async (t) => {
  const w = await setup()
  t.teardown(() => w.db.close())
  // The media outbox: each refund names the payment it returns by its spend key.
  const signed: bigint[] = []
  let wallet = 10_000n
  const chain: RefundChain = {
    serviceAddress: WALLET,
    async transfer(_to, amount, options) {
      const hash = `0x${(signed.length + 1).toString(16).padStart(64, '0')}` as Hex
      await options?.onSigned?.({ hash, nonce: signed.length, raw: '0x02' })
      signed.push(amount)
      wallet -= amount
      return { status: 'confirmed', txHash: hash, blockNumber: 1n }
    },
    resend: async () => ({ status: 'superseded' }),
    inclusion: async () => ({ status: 'included', blockNumber: 1n, blockHash: '0x00', matched: true, final: true }),
    balanceOf: async () => wallet,
  }
  const refunds = createRefunds({
    db: w.db,
    chain,
    logger,
    outbox: { table: 'media_refunds', key: 'replay_key' },
    source: { of: async (_q: Queryable, key: string) => ({ replayKeys: [key], refundedElsewhereMicros: 0n }) },
    confirm: (keys) => w.confirmations.sweep(keys),
  })
  const owe = async (key: string, amount: bigint) => {
    await w.db.query(
      `insert into media_sales (replay_key, operation_id, payer, ordered_units, delivered_units, paid_micros, charged_micros, result_url, state)
       select replay_key, 'op', payer, 2, 1, greatest(amount_micros, $2), greatest(amount_micros, $2) - $2, 'https://x', 'settled' from payment_reservations where replay_key = $1`,
      [key, amount],
    )
    await w.db.query(`insert into media_refunds (replay_key, to_address, amount_micros, state) values ($1, $2, $3, 'pending')`, [key, PAYER, amount])
  }
  const due = () => w.db.query(`update media_refunds set next_attempt_at = now()`)
  const refundRow = async (key: string) =>
    (await w.db.query<{ state: string; error: string | null; tx_hash: string | null }>(`select state, error, tx_hash from media_refunds where replay_key = $1`, [key]))[0]

  await w.settle('r1', 1_000n)
  await owe('r1', 400n)
  w.script.set('r1', [{ status: 'included', reference: '0xfirst', blockNumber: 3n }])
  t.equal(await refunds.send('r1'), 'waiting')
  t.match(await refundRow('r1'), { state: 'waiting', error: /to be confirmed on-chain/, tx_hash: null }, 'not signed while its payment is unconfirmed')
  w.script.set('r1', [{ status: 'confirmed', reference: '0xfirst', blockNumber: 3n }])
  await due()
  t.equal(await refunds.send('r1'), 'confirmed', 'asked the chain itself, then signed')
  t.same(signed, [400n])

  await w.settle('r2', 100n)
  await owe('r2', 300n)
  w.script.set('r2', [{ status: 'confirmed', reference: '0xfirst', blockNumber: 4n }])
  t.equal(await refunds.send('r2'), 'waiting')
  t.match(await refundRow('r2'), { error: /exceed what the chain confirms was received \(100 micros\)/ })

  await w.settle('r3', 50_000n)
  await owe('r3', 20_000n)
  w.script.set('r3', [{ status: 'confirmed', reference: '0xfirst', blockNumber: 5n }])
  t.equal(await refunds.send('r3'), 'waiting')
  t.match(await refundRow('r3'), { error: /refund wallet holds 9600 micros, this refund needs 20000/ }, 'a short wallet waits instead of failing on-chain')

  await w.settle('r4', 1_000n)
  await owe('r4', 600n)
  w.script.set('r4', [{ status: 'dead', reason: 'expired unused' }])
  t.equal(await refunds.send('r4'), 'waiting')
  t.match(await w.row('r4'), { state: 'reversed' })
  await w.db.transaction((tx) => refunds.reduce(tx, 'r4'))
  await due()
  t.equal(await refunds.send('r4'), undefined, 'a cancelled refund is never sent')
  t.match(await refundRow('r4'), { state: 'cancelled', tx_hash: null })
  t.same(signed, [400n], 'only the confirmed, covered, affordable refund was ever signed')
  t.match(await refunds.standing(), { outstanding: 2, waiting: 2 }, 'the waiting ones show, the cancelled one does not')
})
