import t from 'tap'
import { AppError } from '../../src/platform/errors.ts'
import {
  LedgerCorruption,
  chargeEntry,
  closeEscrow,
  finalizeRun,
  fund,
  invariantViolations,
  reserveForRun,
  summarize,
  type LedgerEntry,
  type Reservation,
} from '../../src/scheduler/domain/escrow.ts'
import { DEFAULT_RATES } from '../../src/scheduler/domain/rates.ts'
import { initialTransition, isTerminal, transition, type Effect, type RunTrigger, type TaskEvent, type TaskState } from '../../src/scheduler/domain/states.ts'

const MIN = DEFAULT_RATES.min_refund_micros
const sum = (rows: readonly LedgerEntry[]) => rows.reduce((a, r) => a + r.amount_micros, 0n)

t.test('summary of a lifecycle: charge, top-up, run costs, refund', async (t) => {
  const rows: LedgerEntry[] = [chargeEntry(100_000n), ...fund([chargeEntry(100_000n)], 50_000n)]
  t.same(rows, [
    { kind: 'charge', amount_micros: 100_000n, run_id: null },
    { kind: 'charge', amount_micros: 50_000n, run_id: null },
  ])
  const r1 = reserveForRun(rows, [], 'run-1', 40_000n)
  t.same(summarize(rows, [r1]), {
    funded_micros: 150_000n,
    cumulative_cost_micros: 0n,
    refunded_micros: 0n,
    forfeited_micros: 0n,
    balance_micros: 150_000n,
    reserved_micros: 40_000n,
    available_micros: 110_000n,
    closed: false,
  })
  const f1 = finalizeRun(r1, 12_345n)
  t.same(f1.rows, [{ kind: 'run_cost', amount_micros: -12_345n, run_id: 'run-1' }])
  rows.push(...f1.rows)
  t.equal(sum(rows), 150_000n - 12_345n, 'SUM = max_amount (+ top-ups) - cumulative cost')
  t.same(invariantViolations(rows), [])
  const close = closeEscrow(rows, [], { rail: 'direct', minRefundMicros: MIN })
  t.same(close, [{ kind: 'refund', amount_micros: -137_655n, run_id: null }])
  rows.push(...close)
  t.equal(sum(rows), 0n, 'collapses to 0 on a terminal task')
  t.match(summarize(rows), { closed: true, refunded_micros: 137_655n, cumulative_cost_micros: 12_345n, balance_micros: 0n })
  t.same(closeEscrow(rows, [], { rail: 'direct', minRefundMicros: MIN }), [], 'closing twice moves nothing')
  t.same(invariantViolations(rows), [])
})

t.test('reserve, finalize, close edge cases', async (t) => {
  const rows = [chargeEntry(10_000n)]
  t.throws(() => reserveForRun(rows, [], 'r', 10_001n), { code: 'TASK_PAUSED_INSUFFICIENT_FUNDS', extensions: { shortfall_micros: '1' } })
  const r = reserveForRun(rows, [], 'r', 10_000n)
  t.throws(() => reserveForRun(rows, [r], 'r2', 1n), { code: 'TASK_PAUSED_INSUFFICIENT_FUNDS' }, 'reservations count against available')
  t.throws(() => reserveForRun(rows, [r], 'r', 0n), LedgerCorruption, 'one reservation per run')
  t.throws(() => reserveForRun(rows, [], 'r', -1n), RangeError)
  t.same(finalizeRun(r, 0n), { rows: [], charged_micros: 0n, absorbed_micros: 0n, released: r }, 'a free run writes no row')
  t.match(finalizeRun(r, 12_000n), { charged_micros: 10_000n, absorbed_micros: 2_000n, rows: [{ amount_micros: -10_000n }] }, 'never above the reservation')
  t.throws(() => finalizeRun(r, -1n), RangeError)
  t.throws(() => closeEscrow(rows, [r], { rail: 'direct', minRefundMicros: MIN }), LedgerCorruption, 'not while a run holds a reservation')
  t.same(closeEscrow([chargeEntry(9_999n)], [], { rail: 'direct', minRefundMicros: MIN }), [{ kind: 'dust_forfeit', amount_micros: -9_999n, run_id: null }])
  t.same(closeEscrow([chargeEntry(10_000n)], [], { rail: 'direct', minRefundMicros: MIN }), [{ kind: 'refund', amount_micros: -10_000n, run_id: null }], 'min refund is inclusive')
  t.same(closeEscrow([chargeEntry(5n), { kind: 'run_cost', amount_micros: -5n, run_id: 'x' }], [], { rail: 'direct', minRefundMicros: MIN }), [], 'nothing left')
  t.same(closeEscrow(rows, [], { rail: 'marketplace', minRefundMicros: MIN }), [], 'marketplace refunds nothing')
  t.throws(() => chargeEntry(0n), { code: 'INSUFFICIENT_FUND_AMOUNT' })
  const closed = [chargeEntry(20_000n), { kind: 'refund', amount_micros: -20_000n, run_id: null } as const]
  t.throws(() => fund(closed, 5n), { code: 'TASK_DELETED' })
  t.throws(() => reserveForRun(closed, [], 'r', 0n), { code: 'TASK_DELETED' })
})

t.test('corrupt ledgers are detected', async (t) => {
  const bad: Array<[string, LedgerEntry[], Reservation[]?]> = [
    ['positive run_cost', [chargeEntry(5n), { kind: 'run_cost', amount_micros: 1n, run_id: 'r' }]],
    ['negative charge', [{ kind: 'charge', amount_micros: -1n, run_id: null }]],
    ['zero refund', [chargeEntry(5n), { kind: 'refund', amount_micros: 0n, run_id: null }]],
    ['overdraft', [chargeEntry(5n), { kind: 'run_cost', amount_micros: -6n, run_id: 'r' }]],
    ['partial refund closes', [chargeEntry(5n), { kind: 'refund', amount_micros: -4n, run_id: null }]],
    ['row after close', [chargeEntry(5n), { kind: 'refund', amount_micros: -5n, run_id: null }, chargeEntry(1n)]],
    ['negative reservation', [chargeEntry(5n)], [{ run_id: 'r', amount_micros: -1n }]],
  ]
  for (const [name, rows, reservations] of bad) {
    t.throws(() => summarize(rows, reservations ?? []), LedgerCorruption, name)
    t.not(invariantViolations(rows, reservations ?? []).length, 0, name)
  }
  t.same(invariantViolations([chargeEntry(5n)], [{ run_id: 'r', amount_micros: 6n }]), ['reservations exceed the balance'])
})

// ---------------------------------------------------------------- property test

/** mulberry32: small, seedable, good enough to drive sequences. */
function prng(seed: number) {
  let a = seed >>> 0
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0
    let x = Math.imul(a ^ (a >>> 15), 1 | a)
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296
  }
  const int = (lo: number, hi: number) => lo + Math.floor(next() * (hi - lo + 1))
  const big = (lo: bigint, hi: bigint) => lo + (BigInt(Math.floor(next() * 2 ** 32)) * (hi - lo + 1n)) / 2n ** 32n
  const pick = <T>(items: readonly T[]): T => items[int(0, items.length - 1)] as T
  return { next, int, big, pick }
}

const TRIGGERS: readonly RunTrigger[] = ['schedule', 'trigger', 'manual', 'webhook', 'continuation']

t.test('property: money is never created or lost (2000 seeded sequences)', async (t) => {
  let failures = 0
  let steps = 0
  let runsFinalized = 0
  let refunds = 0
  let forfeits = 0
  const statusesSeen = new Set<TaskState>()
  for (let seq = 0; seq < 2000 && failures < 5; seq++) {
    const rnd = prng(0x5eed + seq)
    const rail = rnd.next() < 0.85 ? 'direct' : 'marketplace'
    let ceiling = rnd.big(1n, 60_000n)
    const maxAmount = rnd.big(1n, ceiling * 6n)
    let now = new Date('2026-06-01T00:00:00Z')
    const endAt = rnd.next() < 0.3 ? new Date(now.getTime() + rnd.int(1, 200) * 60_000).toISOString() : null
    const scheduled = endAt !== null || rnd.next() < 0.8

    // independent model of the outside world
    let paidIn = 0n // wallet -> escrow
    let paidCost = 0n // escrow -> service (run costs)
    let refunded = 0n // escrow -> wallet
    let forfeited = 0n // escrow -> service (dust)
    const rows: LedgerEntry[] = []
    let reservations: Reservation[] = []
    let pendingClose = false
    let runCounter = 0

    const append = (entries: readonly LedgerEntry[]) => {
      for (const e of entries) {
        rows.push(e)
        if (e.kind === 'charge') paidIn += e.amount_micros
        if (e.kind === 'run_cost') paidCost -= e.amount_micros
        if (e.kind === 'refund') {
          refunded -= e.amount_micros
          refunds++
        }
        if (e.kind === 'dust_forfeit') {
          forfeited -= e.amount_micros
          forfeits++
        }
      }
    }
    append([chargeEntry(maxAmount)])
    let status: TaskState = initialTransition({ rail, scheduled, end_at: endAt }, { ceiling_micros: ceiling, available_micros: maxAmount }).next

    const apply = (effects: readonly Effect[]) => {
      for (const effect of effects) {
        switch (effect.type) {
          case 'record_top_up':
            append([chargeEntry(effect.amount_micros)])
            break
          case 'start_run':
            reservations = [...reservations, reserveForRun(rows, reservations, `run-${++runCounter}`, effect.reserve_micros)]
            break
          case 'close_escrow':
            if (effect.when === 'after_in_flight_run') pendingClose = true
            else append(closeEscrow(rows, reservations, { rail, minRefundMicros: MIN }))
            break
          default:
            break
        }
      }
    }
    const check = (label: string) => {
      steps++
      statusesSeen.add(status)
      const problems = invariantViolations(rows, reservations)
      const s = summarize(rows, reservations)
      if (sum(rows) !== paidIn - paidCost - refunded - forfeited) problems.push('ledger sum != outside model')
      if (paidIn !== paidCost + refunded + forfeited + s.balance_micros) problems.push('money created or lost')
      if (s.balance_micros < 0n || s.available_micros < 0n) problems.push('negative balance/available')
      if (reservations.length > 1) problems.push('two runs in flight')
      if (refunded + forfeited > 0n && !isTerminal(status)) problems.push('refund on a live task')
      if (rail === 'marketplace' && refunded + forfeited > 0n) problems.push('marketplace refunded')
      if (isTerminal(status) && reservations.length === 0 && !pendingClose && rail === 'direct' && sum(rows) !== 0n) problems.push('terminal direct task does not sum to 0')
      if (problems.length > 0) {
        failures++
        t.fail(`seed ${seq} after ${label}: ${problems.join('; ')}`)
      }
    }
    check('create')

    const stepCount = rnd.int(1, 40)
    for (let i = 0; i < stepCount; i++) {
      now = new Date(now.getTime() + rnd.int(0, 30) * 60_000)
      const snapshot = { id: 'tsk', status, rail, scheduled, end_at: endAt } as const
      const facts = () => ({ now, ceiling_micros: ceiling, available_micros: summarize(rows, reservations).available_micros, run_in_flight: reservations.length > 0 })
      const roll = rnd.next()
      let label: string
      if (roll < 0.25 && reservations.length > 0) {
        // the in-flight run ends: succeed or fail with a random cost, sometimes an overrun
        const reservation = reservations[0] as Reservation
        const cap = reservation.amount_micros
        const cost = rnd.next() < 0.1 ? cap + rnd.big(1n, 5_000n) : rnd.next() < 0.15 ? 0n : rnd.big(0n, cap)
        const done = finalizeRun(reservation, cost)
        if (done.charged_micros > cap || done.charged_micros + done.absorbed_micros !== cost) {
          failures++
          t.fail(`seed ${seq}: finalize charged ${done.charged_micros} of ${cost} with ${cap} reserved`)
        }
        append(done.rows)
        reservations = reservations.filter((r) => r.run_id !== reservation.run_id)
        runsFinalized++
        const outcome = rnd.pick(['succeeded', 'failed', 'timed_out', 'infra_error'] as const)
        const result = transition({ ...snapshot }, { type: 'run_finished', outcome, consecutive_infra_failures: outcome === 'infra_error' ? rnd.int(1, 6) : 0 }, facts())
        status = result.next
        if (pendingClose && result.effects.some((e) => e.type === 'close_escrow' && e.when === 'now')) pendingClose = false
        apply(result.effects)
        label = `finish(${outcome}, ${cost})`
      } else {
        const event: TaskEvent = rnd.pick<TaskEvent>([
          { type: 'dispatch', trigger: rnd.pick(TRIGGERS) },
          { type: 'dispatch', trigger: 'schedule' },
          { type: 'fund', amount_micros: rnd.big(0n, ceiling * 2n) },
          { type: 'pause' },
          { type: 'resume' },
          { type: 'trigger' },
          { type: 'tick' },
          { type: 'delete' },
          { type: 'terminate', reason: 'operator' },
        ])
        if (event.type === 'delete' && rnd.next() < 0.6) continue // keep most sequences alive longer
        if (event.type === 'terminate' && rnd.next() < 0.8) continue
        if (rnd.next() < 0.05) ceiling += rnd.big(1n, 10_000n) // PATCH raised max_runtime_sec
        const before = rows.length
        try {
          const result = transition(snapshot, event, facts())
          status = result.next
          apply(result.effects)
        } catch (error) {
          if (!(error instanceof AppError)) throw error
          if (rows.length !== before) {
            failures++
            t.fail(`seed ${seq}: refused ${event.type} still moved money`)
          }
        }
        label = event.type
      }
      check(label)
    }

    // wind down: finish any run, delete, and the books must close
    if (reservations.length > 0) {
      const reservation = reservations[0] as Reservation
      append(finalizeRun(reservation, rnd.big(0n, reservation.amount_micros)).rows)
      reservations = []
      const r = transition(
        { id: 'tsk', status, rail, scheduled, end_at: endAt },
        { type: 'run_finished', outcome: 'succeeded', consecutive_infra_failures: 0 },
        {
          now,
          ceiling_micros: ceiling,
          available_micros: summarize(rows).available_micros,
          run_in_flight: false,
        },
      )
      status = r.next
      if (pendingClose && r.effects.some((e) => e.type === 'close_escrow')) pendingClose = false
      apply(r.effects)
    }
    const del = transition(
      { id: 'tsk', status, rail, scheduled, end_at: endAt },
      { type: 'delete' },
      {
        now,
        ceiling_micros: ceiling,
        available_micros: summarize(rows).available_micros,
        run_in_flight: false,
      },
    )
    status = del.next
    apply(del.effects)
    check('final delete')
    const final = summarize(rows)
    if (rail === 'direct' && (sum(rows) !== 0n || paidIn !== paidCost + refunded + forfeited)) {
      failures++
      t.fail(`seed ${seq}: books do not close (sum ${sum(rows)})`)
    }
    if (rail === 'marketplace' && sum(rows) !== final.funded_micros - final.cumulative_cost_micros) {
      failures++
      t.fail(`seed ${seq}: marketplace audit sum != cap - usage`)
    }
  }
  t.equal(failures, 0, `${steps} steps checked`)
  t.ok(runsFinalized > 1000, `${runsFinalized} runs finalized`)
  t.ok(refunds > 100 && forfeits > 10, `${refunds} refunds, ${forfeits} dust forfeits`)
  t.same([...statusesSeen].sort(), ['active', 'completed', 'deleted', 'paused', 'paused_insufficient_funds', 'terminated'], 'every status reached')
})
