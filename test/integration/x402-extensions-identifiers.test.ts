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

  await t.test('a failed attempt whose payment is still being decided keeps the id until it is known', async (t) => {
    // A request answered 503 after its payment began settling (the database lost mid-request):
    // the reconciler may still land that payment, so a retry must not buy again.
    await db.query(
      `insert into payment_reservations (replay_key, protocol, payer, amount_micros, operation_id, state) values ('x402:failed-while-settling', 'x402', $1, 1, 'purchasePlan', 'settling')`,
      [PAYER],
    )
    const claim = claimed(t, await ids.claim(input('pay_failed_settling01')))
    t.equal(await claim.link('x402:failed-while-settling'), true)
    await claim.release()
    t.same(await ids.claim(input('pay_failed_settling01')), { kind: 'in_progress', deciding: true }, 'the retry waits for the reconciler')
    await db.query(`update payment_reservations set state = 'settled' where replay_key = 'x402:failed-while-settling'`)
    t.same(await ids.claim(input('pay_failed_settling01')), { kind: 'replay', response: { status: 0, headers: {}, body: null } }, 'landed: bought, not bought again')
    await db.query(
      `insert into payment_reservations (replay_key, protocol, payer, amount_micros, operation_id, state) values ('x402:failed-then-released', 'x402', $1, 1, 'purchasePlan', 'released')`,
      [PAYER],
    )
    const again = claimed(t, await ids.claim(input('pay_failed_released01')))
    t.equal(await again.link('x402:failed-then-released'), true)
    await again.release()
    claimed(t, await ids.claim(input('pay_failed_released01')))
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

  // A request that died after its payment was reserved: the retry asks that payment before it may
  // pay again (a takeover that did not is how one delivery was charged twice).
  const reservation = async (key: string, state: string) =>
    db.query(`insert into payment_reservations (replay_key, protocol, payer, amount_micros, operation_id, state) values ($1, 'x402', $2, 1, 'generateSongs', $3)`, [
      key,
      PAYER,
      state,
    ])
  const dies = async (id: string, key: string, prepared?: typeof answer) => {
    const dead = claimed(t, await ids.claim(input(id)))
    t.equal(await dead.link(key), true, 'linked to its payment')
    if (prepared) await dead.prepare(prepared)
    // It dies: no renewals, no completion; its lease lapses.
    await db.query(`update payment_identifiers set lease_until = now() - interval '1 second' where payment_id = $1`, [id])
    return dead
  }
  const stateOf = async (key: string) => (await db.query<{ state: string }>(`select state from payment_reservations where replay_key = $1`, [key]))[0]?.state

  await t.test('a dead claim whose payment settled replays the answer it prepared, and never claims again', async (t) => {
    await reservation('x402:dead-settled', 'settling')
    await dies('pay_dead_settled_0001', 'x402:dead-settled', answer)
    t.same(await ids.claim(input('pay_dead_settled_0001')), { kind: 'in_progress', deciding: true }, 'its payment is being decided')
    await db.query(`update payment_reservations set state = 'settled' where replay_key = 'x402:dead-settled'`)
    t.same(await ids.claim(input('pay_dead_settled_0001')), { kind: 'replay', response: answer }, 'decided paid: the prepared answer')
    t.same(await ids.claim(input('pay_dead_settled_0001')), { kind: 'replay', response: answer }, 'and again, as a completed id')
    t.match(await ids.claim(input('pay_dead_settled_0001', 'f2')), { kind: 'conflict' })
  })

  await t.test('a dead claim paid before it prepared an answer says so, and never claims again', async (t) => {
    await reservation('x402:dead-unprepared', 'settled')
    await dies('pay_dead_unprepared01', 'x402:dead-unprepared')
    t.same(await ids.claim(input('pay_dead_unprepared01')), { kind: 'replay', response: { status: 0, headers: {}, body: null } })
  })

  await t.test('a dead claim whose payment failed or never left is free again', async (t) => {
    await reservation('x402:dead-released', 'released')
    await dies('pay_dead_released_001', 'x402:dead-released', answer)
    claimed(t, await ids.claim(input('pay_dead_released_001')))
    await reservation('x402:dead-reserved', 'reserved')
    await dies('pay_dead_reserved_001', 'x402:dead-reserved')
    const next = claimed(t, await ids.claim(input('pay_dead_reserved_001')))
    t.equal(await stateOf('x402:dead-reserved'), 'released', 'the dead request can no longer bind work to its payment')
    t.equal(await next.link('x402:retry-payment'), true)
  })

  await t.test('a request whose claim was taken over cannot link, prepare or complete', async (t) => {
    await reservation('x402:slow-reserved', 'reserved')
    const slow = await dies('pay_taken_over_00001', 'x402:slow-reserved')
    const next = claimed(t, await ids.claim(input('pay_taken_over_00001')))
    t.equal(await slow.link('x402:slow-second'), false)
    await slow.prepare({ ...answer, body: '"stale"' })
    await slow.complete({ ...answer, body: '"stale"' })
    await next.complete(answer)
    t.same(await ids.claim(input('pay_taken_over_00001')), { kind: 'replay', response: answer })
  })

  await t.test('claims of requests known dead (before the data-dir lock was taken) lapse at once', async (t) => {
    const before = claimed(t, await ids.claim(input('pay_orphaned_00000001')))
    const restartedAt = new Date(Date.now() + 1_000)
    const fresh = claimed(t, await ids.claim(input('pay_after_start_00001')))
    const live = createPaymentIdentifiers({ db, secret: 'a'.repeat(32) })
    await db.query(`update payment_identifiers set lease_until = now() + interval '30 seconds' where payment_id = 'pay_orphaned_00000001'`)
    await db.query(`update payment_identifiers set lease_until = now() + interval '40 seconds' where payment_id = 'pay_after_start_00001'`)
    await live.sweep({ orphanedBefore: new Date(restartedAt.getTime() + 5_000) })
    claimed(t, await live.claim(input('pay_orphaned_00000001')))
    t.match(await live.claim(input('pay_after_start_00001')), { kind: 'in_progress' }, 'renewed after the start: alive')
    await before.release()
    await fresh.release()
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
