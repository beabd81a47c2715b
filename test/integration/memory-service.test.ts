// The memory service over the real database (PGlite, and Postgres when it answers): the direct
// rail never overdraws under concurrent writes and a withdrawal, idempotent retries are charged
// once, a per-call write exists only once its payment settled, two replicas see each other's writes
// at once, dreaming writes derived records within the budget, and the PGlite files hold none of
// the planted text.
import t from 'tap'
import type { Test } from 'tap'
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { randomUUID } from 'node:crypto'
import { openDb, type Db } from '../../src/platform/db/index.ts'
import { migrate, migrationsDir } from '../../src/platform/db/migrate.ts'
import { createLogger } from '../../src/platform/logger.ts'
import { loadConfig } from '../../src/platform/config.ts'
import { systemClock } from '../../src/platform/clock.ts'
import { openKeyValue } from '../../src/platform/kv/index.ts'
import { registry } from '../../src/catalog/registry.ts'
import { openPayments, type Payments } from '../../src/payments/index.ts'
import { openMemoryRole, type MemoryRole } from '../../src/memory/role.ts'
import { jobQueueOnDemand } from '../../src/roles/job-queue.ts'
import { memoryWriteOutcomes } from '../../src/memory/deposits.ts'
import { memoryChain, memoryUsdc } from '../helpers/memory-chain.ts'
import { throwawayDatabase } from '../helpers/servers.ts'
import { startScriptedUpstream } from '../helpers/scripted-upstream.ts'

const logger = createLogger('silent')
const wallet = () => `0x${randomUUID().replaceAll('-', '').padEnd(40, '0').slice(0, 40)}`

interface Node {
  role: MemoryRole
  payments: Payments
  close(): Promise<void>
}

/** One memory "replica" over `db`: its own payments, key cache, recall cache and job queue. */
async function node(t: Test, db: Db, dataDir: string, env: Record<string, string> = {}): Promise<Node> {
  const kv = await openKeyValue({ kind: 'memory' })
  const payments = await openPayments({
    db,
    kv,
    logger,
    clock: systemClock,
    registry,
    dataDir: '',
    payTo: '0x000000000000000000000000000000000000c0de',
    gatewayUrl: 'https://gw.test',
    chain: memoryChain(memoryUsdc()),
    reconcileEveryMs: 0,
  })
  const jobs = jobQueueOnDemand({ db, logger })
  const role = await openMemoryRole({ config: loadConfig({ DATA_DIR: dataDir, ...env }), db, clock: systemClock, logger, payments, jobs: () => jobs.get() })
  let closed = false
  const close = async () => {
    if (closed) return
    closed = true
    await role.stop()
    await jobs.stop()
    await payments.close()
    await kv.close()
  }
  t.teardown(close)
  return { role, payments, close }
}

async function deposit(db: Db, owner: string, micros: bigint): Promise<void> {
  await db.query(`insert into memory_owners (owner, rail) values ($1, 'direct') on conflict do nothing`, [owner])
  await db.query(`insert into memory_ledger (owner, kind, amount_micros, replay_key, tx_hash) values ($1, 'deposit', $2, $3, '0xtest')`, [owner, micros, `test-${randomUUID()}`])
}

async function balance(db: Db, owner: string): Promise<bigint> {
  return (await db.query<{ b: bigint }>(`select coalesce(sum(amount_micros), 0)::int8 as b from memory_ledger where owner = $1`, [owner]))[0]?.b ?? 0n
}

async function suite(t: Test, db: Db, dataDir: string): Promise<void> {
  await migrate(db, migrationsDir)
  const a = await node(t, db, dataDir)
  const b = await node(t, db, dataDir)
  const { service } = a.role

  await t.test('the direct rail never overdraws: 30 concurrent writes and a withdrawal against 12 micros', async (t) => {
    const owner = wallet()
    await deposit(db, owner, 12n)
    const prepared = await service.prepare({ content: 'short note' })
    t.equal(prepared.costMicros, 1n, 'a short write costs 1 micro')
    const writes = Array.from({ length: 30 }, () =>
      service.rememberOnDeposit(owner, prepared, undefined).then(
        () => 'ok',
        (error: { code?: string }) => error.code,
      ),
    )
    const withdrawal = a.role.money.withdraw(owner)
    const outcomes = await Promise.all(writes)
    const refund = await withdrawal
    const stored = outcomes.filter((outcome) => outcome === 'ok').length
    t.ok(
      outcomes.every((outcome) => outcome === 'ok' || outcome === 'insufficient_deposit'),
      'every refusal is insufficient_deposit',
    )
    t.equal(BigInt(stored) + BigInt(refund.refundedMicros), 12n, 'writes + refund = the deposit, to the micro')
    t.equal(await balance(db, owner), 0n)
    const rows = await db.query<{ n: bigint }>(`select count(*)::int8 as n from memory_records where owner = $1`, [owner])
    t.equal(Number(rows[0]?.n), stored, 'one record per debit')
  })

  await t.test('an idempotent retry is answered from the first write and charged once; another body is 409', async (t) => {
    const owner = wallet()
    await deposit(db, owner, 1_000n)
    const key = `idem-${randomUUID()}`
    const input = { content: 'the retried note', tags: ['x'] }
    const first = await service.rememberOnDeposit(owner, await service.prepare(input), key)
    const replay = await service.replayOf(key, input)
    t.equal(replay?.id, first.id)
    t.equal(await balance(db, owner), 1_000n - BigInt(first.chargedMicros), 'charged once')
    await t.rejects(service.replayOf(key, { content: 'another body' }), { code: 'idempotency_conflict' })
    // A per-call write whose payment is not decided: a retry is told to wait, not promised a write.
    const paidKey = `idem-${randomUUID()}`
    const pending = { content: 'paid, settling' }
    await service.rememberPaid(owner, await service.prepare(pending), { amountMicros: 1000n, replayKey: `rk-${randomUUID()}`, bind: async () => {} }, paidKey)
    await t.rejects(service.replayOf(paidKey, pending), { code: 'payment_settling' })
  })

  await t.test('a per-call write is invisible until its payment settles, and gone when it fails', async (t) => {
    const owner = wallet()
    const paid = await service.rememberPaid(
      owner,
      await service.prepare({ content: 'bought per call: lanterns' }),
      { amountMicros: 1000n, replayKey: `rk-${randomUUID()}`, bind: async () => {} },
      undefined,
    )
    const failed = await service.rememberPaid(
      owner,
      await service.prepare({ content: 'never paid: lanterns' }),
      { amountMicros: 1000n, replayKey: `rk-${randomUUID()}`, bind: async () => {} },
      undefined,
    )
    t.same((await service.recall(owner, { query: 'lanterns' })).results, [], 'provisional records are not recalled')
    const keyOf = async (id: string) => (await db.query<{ replay_key: string }>(`select replay_key from memory_records where id = $1`, [id]))[0]?.replay_key as string
    const paidKey = await keyOf(paid.id)
    const failedKey = await keyOf(failed.id)
    await db.transaction((tx) => memoryWriteOutcomes.settled(tx, paidKey, '0xsettled'))
    await db.transaction((tx) => memoryWriteOutcomes.failed(tx, failedKey))
    await db.transaction((tx) => memoryWriteOutcomes.settled(tx, paidKey, '0xsettled')) // decided twice: no second seq
    const recalled = await service.recall(owner, { query: 'lanterns' })
    t.same(
      recalled.results.map((hit) => hit.id),
      [paid.id],
      'the settled one is visible, the failed one gone',
    )
    t.equal((await db.query(`select 1 from memory_records where id = $1`, [failed.id])).length, 0, 'nothing stored for a failed payment')
  })

  await t.test('two replicas see each other’s writes at once (read after write)', async (t) => {
    const owner = `agent:${randomUUID()}`
    await db.query(`insert into memory_owners (owner, rail) values ($1, 'marketplace')`, [owner])
    await deposit(db, owner, 100n)
    t.equal((await b.role.service.recall(owner, { query: 'anything' })).results.length, 0)
    for (let i = 0; i < 5; i++) {
      const writer = i % 2 === 0 ? a : b
      const reader = i % 2 === 0 ? b : a
      const written = await writer.role.service.rememberOnDeposit(owner, await writer.role.service.prepare({ content: `replica note number ${i} about otters` }), undefined)
      const seen = await reader.role.service.recall(owner, { query: `note number ${i} otters`, limit: 10 })
      t.ok(
        seen.results.some((hit) => hit.id === written.id),
        `write ${i} is recalled on the other replica`,
      )
    }
  })

  await t.test('filters, ordering and hostile-but-valid text round-trip exactly', async (t) => {
    const owner = wallet()
    await deposit(db, owner, 1_000n)
    const tricky = 'זה טקסט ‮right-to-left‬ with zero\u200bwidth, e\u0301 and 👩‍👩‍👧 emoji'
    const stored = await service.rememberOnDeposit(owner, await service.prepare({ content: tricky, context: 'ctx/a', tags: ['rtl', 'emoji'] }), undefined)
    await service.rememberOnDeposit(owner, await service.prepare({ content: 'emoji and text elsewhere', context: 'ctx/b', tags: ['emoji'] }), undefined)
    const expanded = await service.expand(owner, [stored.id])
    t.equal(expanded.records[0]?.content, tricky, 'content comes back byte for byte')
    const inContext = await service.recall(owner, { query: 'emoji', context: 'ctx/a' })
    t.same(
      inContext.results.map((hit) => hit.id),
      [stored.id],
      'context filter',
    )
    const tagged = await service.recall(owner, { query: 'emoji text', tags: ['rtl', 'emoji'] })
    t.same(
      tagged.results.map((hit) => hit.id),
      [stored.id],
      'every tag must match',
    )
  })
}

t.test('PGlite', async (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'agw-memsvc-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const db = await openDb({ kind: 'pglite', dataDir: path.join(dir, 'pgdata') })
  t.teardown(() => db.close())
  await suite(t, db, dir)
})

t.test('Postgres', async (t) => {
  const url = await throwawayDatabase(t)
  if (url === undefined) return
  const dir = mkdtempSync(path.join(os.tmpdir(), 'agw-memsvc-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const db = await openDb({ kind: 'postgres', url })
  t.teardown(() => db.close())
  await suite(t, db, dir)
})

t.test('dreaming writes derived records linked to their sources, charged within the deposit', async (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'agw-dream-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const db = await openDb({ kind: 'pglite', dataDir: 'memory://' })
  t.teardown(() => db.close())
  await migrate(db, migrationsDir)
  const upstream = await startScriptedUpstream()
  t.teardown(() => upstream.close())
  const memory = await node(t, db, dir, { MEMORY_DREAM_URL: upstream.url, MEMORY_DREAM_MODEL: 'scripted-small', MEMORY_DREAM_MODEL_SIZE: 'small' })
  const { service } = memory.role
  const dreamer = memory.role.dreamer
  if (dreamer === undefined) throw new Error('dreaming is configured but off')
  t.equal(dreamer.status().enabled, true)

  const owner = wallet()
  await deposit(db, owner, 100_000n)
  const ids: string[] = []
  for (const content of ['Alice moved to Lisbon in May', 'Alice now works as a pediatric nurse', 'The weather was grey today']) {
    ids.push((await service.rememberOnDeposit(owner, await service.prepare({ content }), undefined)).id)
  }
  upstream.script({
    json: {
      choices: [{ message: { role: 'assistant', content: JSON.stringify({ memories: [{ content: 'Alice lives in Lisbon and works as a pediatric nurse', sources: [1, 2] }] }) } }],
      usage: { prompt_tokens: 1_000, completion_tokens: 100 },
    },
  })
  const before = await balance(db, owner)
  await dreamer.dreamOnce(owner)
  const derived = await db.query<{ id: string; derived_from: string[] }>(`select id, derived_from from memory_records where owner = $1 and kind = 'derived'`, [owner])
  t.equal(derived.length, 1, 'one derived record')
  t.same([...(derived[0]?.derived_from ?? [])].sort(), [ids[0], ids[1]].sort(), 'linked to its sources')
  const dreamRow = await db.query<{ amount_micros: bigint; tokens_in: number; tokens_out: number }>(
    `select amount_micros, tokens_in, tokens_out from memory_ledger where owner = $1 and kind = 'dream'`,
    [owner],
  )
  t.equal(dreamRow.length, 1)
  // small model: 1000 in × 100000/1e6 = 100, 100 out × 400000/1e6 = 40, plus the derived record's embedding (≥ 1).
  t.ok(-(dreamRow[0]?.amount_micros ?? 0n) >= 141n, 'the model tokens at the small price, plus the embedding')
  t.equal(await balance(db, owner), before + (dreamRow[0]?.amount_micros ?? 0n))
  const recalled = await service.recall(owner, { query: 'where does Alice live and work' })
  t.equal(recalled.results[0]?.kind, 'derived', 'the consolidated statement ranks first')
  const expanded = await service.expand(owner, [derived[0]?.id as string])
  t.same([...(expanded.records[0]?.derivedFrom ?? [])].sort(), [ids[0], ids[1]].sort())
  const calls = upstream.requests.length
  await dreamer.dreamOnce(owner)
  t.equal(upstream.requests.length, calls, 'nothing new to dream: no model call (derived records are never re-read)')
})

t.test('the PGlite files hold none of the planted phrases or their stems', async (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'agw-scan-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const db = await openDb({ kind: 'pglite', dataDir: path.join(dir, 'pgdata') })
  await migrate(db, migrationsDir)
  const memory = await node(t, db, dir)
  const owner = wallet()
  await deposit(db, owner, 10_000n)
  const planted = ['obsidian flamingo', 'saxophone quartermaster']
  for (const phrase of planted) {
    await memory.role.service.rememberOnDeposit(
      owner,
      await memory.role.service.prepare({ content: `remember the ${phrase}`, context: `ctx/${phrase.replace(' ', '-')}`, tags: [phrase], metadata: { note: phrase } }),
      undefined,
    )
  }
  t.equal((await memory.role.service.recall(owner, { query: 'obsidian flamingo' })).results[0]?.content, 'remember the obsidian flamingo', 'it is there, decrypted')
  await memory.close()
  await db.close()
  const needles = ['obsidian', 'flamingo', 'saxophon', 'quartermast'].flatMap((word) => [Buffer.from(word), Buffer.from(word, 'utf16le')])
  let files = 0
  const walk = (at: string) => {
    for (const entry of readdirSync(at)) {
      const full = path.join(at, entry)
      if (statSync(full).isDirectory()) walk(full)
      else {
        files += 1
        const bytes = readFileSync(full)
        for (const needle of needles) if (bytes.includes(needle)) t.fail(`${needle.toString()} found in ${path.relative(dir, full)}`)
      }
    }
  }
  walk(path.join(dir, 'pgdata'))
  t.ok(files > 10, `scanned ${files} PGlite files`)
})
