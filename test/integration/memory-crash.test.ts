// Money conservation of the memory service under crashes: the real memory role and listener, the
// real x402 client signing, the real SIGN-IN-WITH-X client, a real anvil chain, PGlite and
// Postgres. A process is killed at EVERY step of a deposit, a per-call write (paid, and by a broke
// buyer whose settlement fails) and a withdrawal (each statement, transaction commit and chain
// call, before it runs and after it ran but before its answer arrived: test/helpers/crashable.ts),
// then a fresh process on the same database, chain and DATA_DIR recovers as src/runtime.ts does
// (memory refunds left by the dead process resumed, open settlements decided from the chain,
// refunds due sent) and every buyer withdraws what is left of its deposit, owner-proven.
// Then, for every buyer, on-chain: balance = minted - the per-call writes it paid - the direct-rail
// debits (every micro deposited comes back less those), the service wallet gained exactly that,
// and the database agrees with the chain (a payment is settled in the database iff its
// authorization was used on-chain; a per-call record is visible iff its payment settled; no
// provisional record or deposit, unconfirmed refund or open reservation is left; every owner's
// ledger balance is >= 0 and equals its settled deposits - its debits - its refunds), and every
// active record reads back to its owner. As in payment-crash.test.ts the database outlives the
// processes (one PGlite instance, or one Postgres database, shared by the dead process and the
// restarted one); the restart takes every row of the dead process as an orphan (runtime.ts does so
// on PGlite; on Postgres it waits out the stale windows and refund leases, taken here as passed).
// The concurrent part kills a process in the middle of many requests at once, one of them a
// withdrawal racing a direct-rail write of the same owner.
import { mkdtempSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { randomBytes } from 'node:crypto'
import t from 'tap'
import type { Test } from 'tap'
import { generatePrivateKey, privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts'
import type { Address, Hex } from 'viem'
import type { Db } from '../../src/platform/db/index.ts'
import { migrate } from '../../src/platform/db/migrate.ts'
import type { Clock } from '../../src/platform/clock.ts'
import { startDevChain, ANVIL_ACCOUNT_0_KEY, type StartedDevChain } from '../../src/payments/chain/dev.ts'
import type { KillPoint } from '../helpers/crashable.ts'
import {
  bootMemory,
  depositCall,
  ownerProof,
  sendMemory,
  shutdownMemory,
  signPayment,
  withdrawCall,
  WRITE_PRICE,
  writeCall,
  type MemoryCall,
  type MemoryProc,
} from '../helpers/memory-process.ts'
import { onPgliteAndPostgres } from '../helpers/servers.ts'
import { releaseOrphanedClaims } from '../../src/payments/check-claims.ts'

// Every step of four requests killed and recovered (126 kill points per database, none sampled
// away), and the concurrent part: about 95 s for both databases on a 2-core machine; the limit
// leaves room for a slow or shared one.
t.setTimeout(20 * 60_000)

const MINTED = 2_000_000n
const DEPOSIT = 500_000n

/**
 * `broke-write`: the buyer signs but holds no USDC, so the settlement fails and the record is deleted.
 * `withdraw+direct` (the concurrent part): the withdrawal races a direct-rail write of the same owner.
 */
type Kind = 'deposit' | 'write' | 'broke-write' | 'withdraw' | 'withdraw+direct'

interface Scenario {
  kinds: Kind[]
  kill: KillPoint | undefined
}

interface Outcome {
  /** Steps the armed part took (to enumerate kill points). */
  steps: number
  killed: boolean
  trace: string[]
  /** The answers of the armed requests, per buyer (status, or the error's message). */
  answers: (number | string)[][]
}

interface Prepared {
  kind: Kind
  buyer: PrivateKeyAccount
  /** The armed requests of this buyer, sent at once, with their signed proofs. */
  calls: { call: MemoryCall; proof: Record<string, string> }[]
}

async function suite(t: Test, db: Db, dev: StartedDevChain): Promise<void> {
  await migrate(db)
  const settlerKey = ANVIL_ACCOUNT_0_KEY
  const payTo = privateKeyToAccount(settlerKey).address // payments land in the refunding wallet
  const balance = (who: Address) => dev.balanceOf(who)
  // Every process of this database shares one DATA_DIR: its key ring (the owners' keys survive a restart).
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'agw-memory-crash-'))
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }))
  let written = 0

  /** Setup of one request (unarmed): what it needs, and its signed proof. */
  async function prepare(proc: MemoryProc, kind: Kind, buyer: PrivateKeyAccount): Promise<Prepared> {
    if (kind === 'deposit') {
      const call = depositCall(DEPOSIT)
      return { kind, buyer, calls: [{ call, proof: await signPayment(proc, buyer, call) }] }
    }
    if (kind === 'write' || kind === 'broke-write') {
      written += 1
      const call = writeCall(`crash-${randomBytes(6).toString('hex')}`, `Crash drill note ${written}: the ${kind} of ${buyer.address}`)
      return { kind, buyer, calls: [{ call, proof: await signPayment(proc, buyer, call) }] }
    }
    // withdraw: a settled deposit, one direct-rail write debited from it, then the owner's proof for
    // DELETE (and, racing it, for another direct write).
    const deposit = depositCall(DEPOSIT)
    const deposited = await sendMemory(proc, deposit, await signPayment(proc, buyer, deposit))
    if (deposited.status !== 200 || typeof deposited.body.txHash !== 'string') throw new Error(`setup deposit answered ${deposited.status}: ${JSON.stringify(deposited.body)}`)
    written += 1
    const write = writeCall(`crash-setup-${randomBytes(6).toString('hex')}`, `Crash drill note ${written}: a direct write of ${buyer.address} on its deposit`)
    const direct = await sendMemory(proc, write, await ownerProof(proc, buyer, write))
    if (direct.status !== 201 || direct.body.rail !== 'direct') throw new Error(`setup direct write answered ${direct.status}: ${JSON.stringify(direct.body)}`)
    const call = withdrawCall()
    const calls = [{ call, proof: await ownerProof(proc, buyer, call) }]
    if (kind === 'withdraw+direct') {
      written += 1
      const racing = writeCall(`crash-racing-${randomBytes(6).toString('hex')}`, `Crash drill note ${written}: a direct write of ${buyer.address} racing its withdrawal`)
      calls.push({ call: racing, proof: await ownerProof(proc, buyer, racing) })
    }
    return { kind, buyer, calls }
  }

  /** Runs one scenario: setup, the armed requests (killed at `kill`), restart, recover, withdraw all, check. */
  async function run(t: Test, scenario: Scenario): Promise<Outcome> {
    const buyers = scenario.kinds.map(() => privateKeyToAccount(generatePrivateKey()))
    const minted = scenario.kinds.map((kind) => (kind.startsWith('broke-') ? 0n : MINTED))
    await Promise.all(buyers.map((buyer, i) => (minted[i] ? dev.mint(buyer.address, minted[i] as bigint) : undefined)))
    const serviceBefore = await balance(payTo)
    const first = await bootMemory(db, dev, settlerKey, payTo, dataDir)
    const prepared: Prepared[] = []
    for (const [i, kind] of scenario.kinds.entries()) prepared.push(await prepare(first, kind, buyers[i] as PrivateKeyAccount))

    // The armed part: every request at once; the process dies at the kill point.
    first.life.killAt = scenario.kill
    first.life.armed = true
    const answered = await Promise.all(prepared.map((p) => Promise.allSettled(p.calls.map(({ call, proof }) => sendMemory(first, call, proof)))))
    const outcome: Outcome = {
      steps: first.life.steps,
      killed: first.life.killed,
      trace: [...first.life.trace],
      answers: answered.map((settled) => settled.map((s) => (s.status === 'fulfilled' ? s.value.status : String((s.reason as Error)?.message ?? s.reason)))),
    }
    await shutdownMemory(first)

    // The restarted process, as src/runtime.ts starts one after a crash: the memory refunds the
    // dead process was sending are due now, then the open settlements are decided from the chain
    // (its stale windows taken as passed: every row before the restart is an orphan). Its clock
    // can jump past every authorization's validBefore: what is still open then (a settlement
    // that cannot complete: the buyer is broke) can never move and is decided failed.
    const restartedAt = new Date()
    let offsetMs = 0
    const clock: Clock = { now: () => new Date(Date.now() + offsetMs), nowMs: () => Date.now() + offsetMs }
    const second = await bootMemory(db, dev, settlerKey, payTo, dataDir, clock)
    const payers = buyers.map((b) => b.address.toLowerCase())
    const count = async (sql: string) => Number((await db.query<{ n: bigint }>(sql, [payers]))[0]?.n ?? 0n)
    const openPayments = () => count(`select count(*)::int8 as n from payment_reservations where payer = any($1::text[]) and state in ('reserved', 'settling', 'pending')`)
    const openRefunds = () => count(`select count(*)::int8 as n from memory_refunds where owner = any($1::text[]) and state <> 'confirmed'`)
    /** Sends every refund due until none is open (a failed attempt's back-off taken as passed). */
    const sendRefunds = async () => {
      for (let pass = 0; pass < 10; pass += 1) {
        if (pass > 0) await db.query(`update memory_refunds set next_attempt_at = now() where owner = any($1::text[]) and state <> 'confirmed'`, [payers])
        await second.role.money.refunds.retryDue()
        if ((await openRefunds()) === 0) return
      }
    }
    // The dead process's claims on settlements it was asking the chain about lapse (at once on
    // PGlite, where the start knows it; after CHECK_CLAIM_MS on Postgres).
    await releaseOrphanedClaims(db, restartedAt)
    await second.role.money.refunds.resumeOrphans(restartedAt)
    for (let pass = 0; pass < 10 && (await openPayments()) > 0; pass += 1) {
      if (pass === 3) offsetMs = 3_600_000
      await second.payments.reconcile({ orphanedBefore: restartedAt })
    }
    await sendRefunds()
    const problems: string[] = []
    const ledgerProblems = async (when: string, final: boolean) => {
      const owners = await db.query<{
        owner: string
        balance: bigint
        ledger_deposits: bigint
        ledger_debits: bigint
        ledger_refunds: bigint
        deposits: bigint
        debits: bigint
        refunds: bigint
      }>(
        `select o.owner,
                (select coalesce(sum(amount_micros), 0)::int8 from memory_ledger l where l.owner = o.owner) as balance,
                (select coalesce(sum(amount_micros), 0)::int8 from memory_ledger l where l.owner = o.owner and l.kind = 'deposit') as ledger_deposits,
                (select coalesce(-sum(amount_micros), 0)::int8 from memory_ledger l where l.owner = o.owner and l.kind in ('debit', 'dream')) as ledger_debits,
                (select coalesce(-sum(amount_micros), 0)::int8 from memory_ledger l where l.owner = o.owner and l.kind = 'refund') as ledger_refunds,
                (select coalesce(sum(amount_micros), 0)::int8 from memory_deposits d where d.owner = o.owner and d.state = 'settled') as deposits,
                (select coalesce(sum(charged_micros), 0)::int8 from memory_records r where r.owner = o.owner and r.rail = 'direct' and r.state = 'active') as debits,
                (select coalesce(sum(amount_micros), 0)::int8 from memory_refunds f where f.owner = o.owner) as refunds
           from memory_owners o where o.owner = any($1::text[])`,
        [payers],
      )
      for (const o of owners) {
        const say = (what: string) => problems.push(`${when}: ${o.owner} ${what}`)
        if (o.balance < 0n) say(`ledger balance ${o.balance} < 0`)
        if (o.ledger_deposits !== o.deposits) say(`ledger deposits ${o.ledger_deposits}, settled deposits ${o.deposits}`)
        if (o.ledger_debits !== o.debits) say(`ledger debits ${o.ledger_debits}, direct records charged ${o.debits}`)
        if (o.ledger_refunds !== o.refunds) say(`ledger refunds ${o.ledger_refunds}, refund outbox ${o.refunds}`)
        if (o.balance !== o.deposits - o.debits - o.refunds) say(`ledger balance ${o.balance} <> deposits ${o.deposits} - debits ${o.debits} - refunds ${o.refunds}`)
        if (final && o.balance !== 0n) say(`ledger balance ${o.balance} left after the withdrawal`)
      }
    }
    await ledgerProblems('after recovery', false)
    // Every record left is its owner's to read (the owner keys survived the restart): expand, owner-proven.
    const active = await db.query<{ owner: string; ids: string[] }>(
      `select owner, array_agg(id::text order by id) as ids from memory_records where owner = any($1::text[]) and state = 'active' group by owner`,
      [payers],
    )
    for (const row of active) {
      const buyer = buyers.find((b) => b.address.toLowerCase() === row.owner) as PrivateKeyAccount
      const call: MemoryCall = { method: 'POST', url: '/api/v1/contexts/expand', body: { ids: row.ids }, headers: {} }
      const answer = await sendMemory(second, call, await ownerProof(second, buyer, call))
      const read = ((answer.body.records ?? []) as { id: string }[]).map((record) => record.id).sort()
      if (answer.status !== 200 || JSON.stringify(read) !== JSON.stringify([...row.ids].sort())) {
        problems.push(`${row.owner} reads ${answer.status} ${JSON.stringify(read)} of its active records ${JSON.stringify(row.ids)}`)
      }
    }
    // Every buyer withdraws what is left (owner-proven: SIGN-IN-WITH-X), and every refund is sent.
    for (const buyer of buyers) {
      const call = withdrawCall()
      const answer = await sendMemory(second, call, await ownerProof(second, buyer, call))
      if (answer.status !== 200) problems.push(`withdrawal of ${buyer.address} answered ${answer.status}: ${JSON.stringify(answer.body)}`)
    }
    await sendRefunds()
    await shutdownMemory(second)

    // The checks.
    const where = `kill ${scenario.kill ? `${scenario.kill.when} step ${scenario.kill.step} (${outcome.trace[scenario.kill.step - 1] ?? 'beyond the last step'})` : 'none'} of ${scenario.kinds.join('+')}`
    if ((await openPayments()) > 0) problems.push('open reservations left')
    const leftovers = await db.query<{ what: string }>(
      `select 'provisional record' as what from memory_records where owner = any($1::text[]) and (state = 'provisional' or seq is null)
       union all select 'provisional deposit' from memory_deposits where owner = any($1::text[]) and state = 'provisional'
       union all select 'refund ' || state from memory_refunds where owner = any($1::text[]) and state <> 'confirmed'
       union all select 'refund confirmed without a transaction' from memory_refunds where owner = any($1::text[]) and state = 'confirmed' and coalesce(tx_hash, '') !~ '^0x[0-9a-f]{64}$'
       union all select 'deposit ' || d.state || ' but its payment ' || r.state from memory_deposits d join payment_reservations r on r.replay_key = d.replay_key
                  where d.owner = any($1::text[]) and not ((d.state = 'settled' and r.state = 'settled') or (d.state = 'reversed' and r.state = 'released'))
       union all select 'settled deposit without its settlement transaction' from memory_deposits where owner = any($1::text[]) and state = 'settled' and coalesce(tx_hash, '') !~ '^0x[0-9a-f]{64}$'
       union all select 'paid write ' || r.state || ' but its record ' || coalesce(m.state, 'absent') from payment_reservations r left join memory_records m on m.replay_key = r.replay_key
                  where r.payer = any($1::text[]) and r.operation_id = 'rememberMemory'
                    and not ((r.state = 'settled' and m.state = 'active' and m.seq is not null) or (r.state <> 'settled' and m.id is null))
       union all select 'per-call record without a settled payment' from memory_records m where m.owner = any($1::text[]) and m.rail = 'payg'
                  and not exists (select 1 from payment_reservations r where r.replay_key = m.replay_key and r.state = 'settled')`,
      [payers],
    )
    problems.push(...leftovers.map((row) => row.what))
    await ledgerProblems('after the withdrawals', true)
    // The database agrees with the chain about every payment.
    const reservations = await db.query<{ state: string; detail: { from: Hex; nonce: Hex } }>(`select state, detail from payment_reservations where payer = any($1::text[])`, [
      payers,
    ])
    for (const r of reservations) {
      const used = await dev.isAuthorizationUsed(r.detail.from, r.detail.nonce)
      if (used !== (r.state === 'settled')) problems.push(`reservation ${r.state} but authorization ${used ? 'used' : 'unused'} on-chain`)
    }
    // Conservation, per buyer and for the service wallet: what a buyer keeps paying for is its
    // settled per-call writes and its direct-rail debits; every other micro came back.
    const spent = await db.query<{ owner: string; writes: bigint; n: bigint; debits: bigint }>(
      `select o.owner,
              (select coalesce(sum(amount_micros), 0)::int8 from payment_reservations r where r.payer = o.owner and r.operation_id = 'rememberMemory' and r.state = 'settled') as writes,
              (select count(*)::int8 from payment_reservations r where r.payer = o.owner and r.operation_id = 'rememberMemory' and r.state = 'settled') as n,
              (select coalesce(-sum(amount_micros), 0)::int8 from memory_ledger l where l.owner = o.owner and l.kind in ('debit', 'dream')) as debits
         from memory_owners o where o.owner = any($1::text[])`,
      [payers],
    )
    const costs = new Map(spent.map((row) => [row.owner, row]))
    let kept = 0n
    for (const [i, buyer] of buyers.entries()) {
      const row = costs.get(buyer.address.toLowerCase())
      if (row && row.writes !== row.n * WRITE_PRICE) problems.push(`buyer ${buyer.address} paid ${row.writes} for ${row.n} per-call writes`)
      const cost = (row?.writes ?? 0n) + (row?.debits ?? 0n)
      kept += cost
      const actual = await balance(buyer.address)
      const expected = (minted[i] as bigint) - cost
      if (actual !== expected) problems.push(`buyer ${buyer.address} (${scenario.kinds[i]}) holds ${actual}, conservation says ${expected}`)
    }
    const serviceAfter = await balance(payTo)
    if (serviceAfter - serviceBefore !== kept) problems.push(`service wallet moved ${serviceAfter - serviceBefore}, conservation says ${kept}`)
    if (outcome.trace.some((label) => /pgboss/.test(label))) problems.push('a job-queue statement was counted as a step of the request')
    t.same(problems, [], where)
    return outcome
  }

  /**
   * What the uninterrupted requests of one buyer of each kind may answer (the direct write racing
   * a withdrawal: stored, or refused when the withdrawal took the deposit first).
   */
  const cleanAnswers: Record<Kind, (number | string)[][]> = {
    deposit: [[200]],
    write: [[201]],
    'broke-write': [[402]],
    withdraw: [[200]],
    'withdraw+direct': [
      [200, 201],
      [200, 402],
    ],
  }

  for (const kind of ['deposit', 'write', 'broke-write', 'withdraw'] as const) {
    await t.test(`${kind}: killed before and after every step`, async (t) => {
      const clean = await run(t, { kinds: [kind], kill: undefined })
      t.same(clean.answers, [cleanAnswers[kind][0]], `an uninterrupted ${kind} answers ${JSON.stringify(cleanAnswers[kind][0])}`)
      t.ok(clean.steps > 3, `an uninterrupted ${kind} takes ${clean.steps} steps: ${clean.trace.join(' | ')}`)
      for (let step = 1; step <= clean.steps; step += 1) {
        for (const when of ['before', 'after'] as const) {
          const outcome = await run(t, { kinds: [kind], kill: { step, when } })
          if (!outcome.killed) t.fail(`the kill at ${when} step ${step} never happened`)
        }
      }
    })
  }

  await t.test('deposits, writes and withdrawals (one racing a direct write) at once, killed in the middle (seeded)', async (t) => {
    let seed = 20261126
    const random = () => {
      seed = (seed * 48271) % 2147483647
      return seed / 2147483647
    }
    const kinds: Kind[] = ['deposit', 'deposit', 'write', 'write', 'write', 'broke-write', 'withdraw', 'withdraw+direct']
    const clean = await run(t, { kinds, kill: undefined })
    const unexpected = clean.answers.flatMap((answers, i) => {
      const kind = kinds[i] as Kind
      return cleanAnswers[kind].some((expected) => JSON.stringify(expected) === JSON.stringify(answers)) ? [] : [`${kind} answered ${JSON.stringify(answers)}`]
    })
    t.same(unexpected, [], 'uninterrupted, every request answers as it would alone')
    for (let round = 0; round < 6; round += 1) {
      const step = 1 + Math.floor(random() * clean.steps)
      await run(t, { kinds, kill: { step, when: random() < 0.5 ? 'before' : 'after' } })
    }
  })
}

const dev = await startDevChain({ logger: undefined })
t.teardown(() => dev.close())

onPgliteAndPostgres(t, (t, db) => suite(t, db, dev))
