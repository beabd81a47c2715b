// The payment-identifier store on PGlite and on a real Postgres (migration 0012): one claim per id
// under concurrency, in-progress and conflict answers, a failed attempt frees the id, a live
// claim renews its lease while a dead request's claim is taken over after it, completed answers are sealed (AES-GCM, not
// readable in the table), survive until expiry, and expired rows are swept or taken over.
import t from 'tap'
import type { Test } from 'tap'
import { openDb, type Db } from '../../src/platform/db/index.ts'
import { migrate } from '../../src/platform/db/migrate.ts'
import { createPaymentIdentifiers, type ClaimOutcome } from '../../src/payments/x402/payment-identifier.ts'
import { throwawayDatabase } from '../helpers/servers.ts'

const PAYER = '0x00000000000000000000000000000000000000b1'
const OTHER = '0x00000000000000000000000000000000000000b2'
const answer = { status: 200, headers: { 'payment-response': 'eyJzdWNjZXNzIjp0cnVlfQ==', 'cache-control': 'private' }, body: '{"accessToken":"agw_secret"}' }

function claimed(t: Test, outcome: ClaimOutcome): Extract<ClaimOutcome, { kind: 'claimed' }> {
  if (outcome.kind !== 'claimed') throw new Error(`expected a claim, got ${outcome.kind}`)
  t.pass('claimed')
  return outcome
}

async function suite(t: Test, db: Db): Promise<void> {
  t.teardown(() => db.close())
  await migrate(db)
  const ids = createPaymentIdentifiers({ db, secret: 'a'.repeat(32), leaseMs: 300 })
  const input = (id: string, fingerprint = 'f1', payer = PAYER) => ({ id, fingerprint, payer, operationId: 'purchasePlan' })

  await t.test('one claim among concurrent ones; the others are in progress', async (t) => {
    const outcomes = await Promise.all(Array.from({ length: 20 }, () => ids.claim(input('pay_concurrent_000001'))))
    t.equal(outcomes.filter((o) => o.kind === 'claimed').length, 1)
    t.equal(outcomes.filter((o) => o.kind === 'in_progress').length, 19)
    t.match(await ids.claim(input('pay_concurrent_000001', 'f2')), { kind: 'conflict', reason: 'other_request' })
    t.match(await ids.claim(input('pay_concurrent_000001', 'f1', OTHER)), { kind: 'conflict', reason: 'other_payer' })
  })

  await t.test('completed: replayed to the same request and payer, sealed at rest', async (t) => {
    const claim = claimed(t, await ids.claim(input('pay_completed_0000001')))
    await claim.complete(answer)
    t.same(await ids.claim(input('pay_completed_0000001')), { kind: 'replay', response: answer })
    t.match(await ids.claim(input('pay_completed_0000001', 'f2')), { kind: 'conflict' })
    const [row] = await db.query<{ response: string; state: string }>(`select response, state from payment_identifiers where payment_id = 'pay_completed_0000001'`)
    t.equal(row?.state, 'completed')
    t.notMatch(Buffer.from(row?.response ?? '', 'base64').toString('latin1'), /agw_secret/, 'the answer is not stored in the clear')
    const rotated = createPaymentIdentifiers({ db, secret: 'b'.repeat(32) })
    t.same(
      await rotated.claim(input('pay_completed_0000001')),
      { kind: 'replay', response: { status: 0, headers: {}, body: null } },
      'unreadable after a key change, never re-sold',
    )
  })

  await t.test('an answer given while the settlement was pending is forgotten when the payment fails', async (t) => {
    await db.query(
      `insert into payment_reservations (replay_key, protocol, payer, amount_micros, operation_id, state) values ('x402:pending-then-failed', 'x402', $1, 1, 'purchasePlan', 'pending')`,
      [PAYER],
    )
    const claim = claimed(t, await ids.claim(input('pay_pending_000000001')))
    await claim.complete({ ...answer, headers: { 'x-payment-status': 'pending' } }, 'x402:pending-then-failed')
    t.match(await ids.claim(input('pay_pending_000000001')), { kind: 'replay' }, 'replayed while undecided')
    await db.query(`update payment_reservations set state = 'released' where replay_key = 'x402:pending-then-failed'`)
    claimed(t, await ids.claim(input('pay_pending_000000001')))
  })

  await t.test('an answer whose settled payment the chain later dropped for good is forgotten', async (t) => {
    await db.query(
      `insert into payment_reservations (replay_key, protocol, payer, amount_micros, operation_id, state) values ('x402:settled-then-reversed', 'x402', $1, 1, 'purchasePlan', 'settled')`,
      [PAYER],
    )
    const claim = claimed(t, await ids.claim(input('pay_reversed_00000001')))
    await claim.complete(answer, 'x402:settled-then-reversed')
    t.match(await ids.claim(input('pay_reversed_00000001')), { kind: 'replay' }, 'replayed while settled')
    await db.query(`update payment_reservations set state = 'reversed' where replay_key = 'x402:settled-then-reversed'`)
    claimed(t, await ids.claim(input('pay_reversed_00000001')))
  })

  await t.test('a failed attempt frees the id', async (t) => {
    const claim = claimed(t, await ids.claim(input('pay_released_00000001')))
    await claim.release()
    claimed(t, await ids.claim(input('pay_released_00000001', 'f2')))
  })

  await t.test('a running claim renews its lease: no takeover while its request lives', async (t) => {
    const live = claimed(t, await ids.claim(input('pay_renewed_000000001')))
    await new Promise((resolve) => setTimeout(resolve, 700))
    t.match(await ids.claim(input('pay_renewed_000000001')), { kind: 'in_progress' }, 'still held after twice the lease')
    await live.release()
  })

  await t.test('a dead claim is taken over after its lease, by the same request only; the old holder cannot complete', async (t) => {
    // The dead process: its lease renewals no longer reach the database.
    let alive = true
    const dying = new Proxy(db, {
      get(target, property) {
        if (property === 'query') return (...args: Parameters<Db['query']>) => (alive ? target.query(...args) : Promise.reject(new Error('process died')))
        const value = Reflect.get(target, property) as unknown
        return typeof value === 'function' ? value.bind(target) : value
      },
    })
    const dead = claimed(t, await createPaymentIdentifiers({ db: dying, secret: 'a'.repeat(32), leaseMs: 300 }).claim(input('pay_leased_0000000001')))
    alive = false
    t.match(await ids.claim(input('pay_leased_0000000001')), { kind: 'in_progress' })
    await new Promise((resolve) => setTimeout(resolve, 400))
    t.match(await ids.claim(input('pay_leased_0000000001', 'f2')), { kind: 'conflict' }, 'another request still conflicts')
    const next = claimed(t, await ids.claim(input('pay_leased_0000000001')))
    alive = true
    await dead.complete({ ...answer, body: '"stale"' })
    await next.complete(answer)
    t.same(await ids.claim(input('pay_leased_0000000001')), { kind: 'replay', response: answer }, "the live holder's answer")
  })

  await t.test('expired rows are swept, and taken over by a new claim', async (t) => {
    const claim = claimed(t, await ids.claim(input('pay_expired_000000001')))
    await claim.complete(answer)
    await db.query(`update payment_identifiers set expires_at = now() - interval '1 second' where payment_id = 'pay_expired_000000001'`)
    claimed(t, await ids.claim(input('pay_expired_000000001', 'f9')))
    await db.query(`update payment_identifiers set expires_at = now() - interval '1 second'`)
    t.ok((await ids.sweep()) >= 1)
    t.same(await db.query(`select payment_id from payment_identifiers`), [])
  })
}

t.test('on PGlite (memory://)', async (t) => {
  await suite(t, await openDb({ kind: 'pglite', dataDir: 'memory://' }))
})

t.test('on a throw-away Postgres database', async (t) => {
  const url = await throwawayDatabase(t)
  if (!url) return
  await suite(t, await openDb({ kind: 'postgres', url }))
})
