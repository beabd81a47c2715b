import t from 'tap'
import { TASK_STATES as TASK_STATUSES } from '../../src/scheduler/contract/index.ts'
import { AppError } from '../../src/platform/errors.ts'
import {
  assertWritable,
  type Effect,
  INFRA_FAILURE_LIMIT,
  initialTransition,
  type TaskEvent,
  type TaskSnapshot,
  type TaskState,
  transition,
  type TransitionFacts,
} from '../../src/scheduler/domain/states.ts'

const now = new Date('2026-06-01T12:00:00Z')
const task = (status: TaskState, patch: Partial<TaskSnapshot> = {}): TaskSnapshot => ({ id: 'tsk1', status, rail: 'direct', scheduled: true, end_at: null, ...patch })
const facts = (patch: Partial<TransitionFacts> = {}): TransitionFacts => ({ now, ceiling_micros: 10_000n, available_micros: 50_000n, run_in_flight: false, ...patch })
const types = (effects: readonly Effect[]) => effects.map((e) => e.type)
const find = <T extends Effect['type']>(effects: readonly Effect[], type: T) => effects.find((e): e is Extract<Effect, { type: T }> => e.type === type)

t.test('(creation): cap below the ceiling starts paused_insufficient_funds', async (t) => {
  const short = initialTransition({ id: 'tsk1', rail: 'direct', scheduled: true, end_at: null }, { ceiling_micros: 10_000n, available_micros: 9_999n })
  t.equal(short.next, 'paused_insufficient_funds')
  t.same(types(short.effects), ['clear_next_run', 'set_recovery_hint'])
  const hint = find(short.effects, 'set_recovery_hint')?.hint
  t.match(hint, { reason: 'insufficient_funds', shortfall_micros: 1n, action: 'POST /api/v1/tasks/tsk1/fund with top_up_amount_micros >= 1' })
  t.match(hint?.message, /0\.009999 USD\) is below the per-run ceiling \(0\.010000 USD\)/)
  const ok = initialTransition({ rail: 'direct', scheduled: true, end_at: null }, { ceiling_micros: 10_000n, available_micros: 10_000n })
  t.same(ok, { next: 'active', effects: [{ type: 'schedule_next' }] }, 'equal to the ceiling is enough')
  t.same(
    initialTransition({ rail: 'marketplace', scheduled: false, end_at: null }, { ceiling_micros: 1n, available_micros: 1n }),
    { next: 'active', effects: [] },
    'on-demand: nothing scheduled',
  )
  const market = initialTransition({ rail: 'marketplace', scheduled: true, end_at: null }, { ceiling_micros: 2n, available_micros: 1n })
  t.match(find(market.effects, 'set_recovery_hint')?.hint.message, /remaining cap/)
})

t.test('active -> dispatch: run, or pause with recovery_hint when escrow < ceiling', async (t) => {
  const run = transition(task('active'), { type: 'dispatch', trigger: 'schedule' }, facts())
  t.same(run, { next: 'active', effects: [{ type: 'start_run', trigger: 'schedule', reserve_micros: 10_000n }, { type: 'schedule_next' }] })
  const short = transition(task('active'), { type: 'dispatch', trigger: 'schedule' }, facts({ available_micros: 9_000n }))
  t.equal(short.next, 'paused_insufficient_funds')
  t.same(types(short.effects), ['skip_run', 'clear_next_run', 'set_recovery_hint'])
  t.match(find(short.effects, 'set_recovery_hint')?.hint, { reason: 'insufficient_funds', shortfall_micros: 1_000n })
  // synchronous runs pause too, and the caller answers 409
  const sync = transition(task('active'), { type: 'dispatch', trigger: 'manual' }, facts({ available_micros: 0n }))
  t.equal(sync.next, 'paused_insufficient_funds')
  const reject = find(sync.effects, 'reject')
  t.match(reject?.error, { code: 'TASK_PAUSED_INSUFFICIENT_FUNDS', status: 409, extensions: { shortfall_micros: '10000' } })
  // POST /runs and the webhook don't advance next_run_at; trigger does
  t.same(types(transition(task('active'), { type: 'dispatch', trigger: 'manual' }, facts()).effects), ['start_run'])
  t.same(types(transition(task('active'), { type: 'dispatch', trigger: 'webhook' }, facts()).effects), ['start_run'])
  t.same(types(transition(task('active'), { type: 'dispatch', trigger: 'continuation' }, facts()).effects), ['start_run'])
  t.same(types(transition(task('active'), { type: 'dispatch', trigger: 'trigger' }, facts()).effects), ['start_run', 'schedule_next'])
})

t.test('dispatch: one run at a time', async (t) => {
  const inFlight = facts({ run_in_flight: true })
  t.same(transition(task('active'), { type: 'dispatch', trigger: 'schedule' }, inFlight).effects, [{ type: 'skip_run', reason: 'run_in_flight' }, { type: 'schedule_next' }])
  t.same(transition(task('active'), { type: 'dispatch', trigger: 'trigger' }, inFlight).effects, [{ type: 'defer_run' }])
  t.same(transition(task('active'), { type: 'dispatch', trigger: 'continuation' }, inFlight).effects, [{ type: 'defer_run' }])
  t.throws(() => transition(task('active'), { type: 'dispatch', trigger: 'manual' }, inFlight), { code: 'RUN_IN_FLIGHT', status: 409 })
  t.throws(() => transition(task('active'), { type: 'dispatch', trigger: 'webhook' }, inFlight), { code: 'RATE_LIMIT', status: 429 })
})

t.test('dispatch on a non-active task: scheduled work is skipped, synchronous runs refused', async (t) => {
  for (const status of ['paused', 'paused_insufficient_funds', 'completed', 'terminated', 'deleted'] as const) {
    for (const trigger of ['schedule', 'trigger', 'continuation'] as const) {
      t.same(transition(task(status), { type: 'dispatch', trigger }, facts()), { next: status, effects: [{ type: 'skip_run', reason: 'not_active' }] }, `${status} ${trigger}`)
    }
  }
  const codes: Record<string, string> = {
    paused: 'TASK_PAUSED_MANUAL',
    paused_insufficient_funds: 'TASK_PAUSED_INSUFFICIENT_FUNDS',
    completed: 'TASK_COMPLETED',
    terminated: 'TASK_TERMINATED',
    deleted: 'TASK_DELETED',
  }
  for (const [status, code] of Object.entries(codes)) {
    for (const trigger of ['manual', 'webhook'] as const) {
      t.throws(() => transition(task(status as TaskState), { type: 'dispatch', trigger }, facts()), { code }, `${status} ${trigger}`)
    }
  }
  t.throws(() => transition(task('paused_insufficient_funds'), { type: 'dispatch', trigger: 'manual' }, facts({ available_micros: 4_000n })), {
    code: 'TASK_PAUSED_INSUFFICIENT_FUNDS',
    extensions: { shortfall_micros: '6000' },
  })
})

t.test('active -> pause -> paused (manual); future runs skipped', async (t) => {
  const r = transition(task('active'), { type: 'pause' }, facts())
  t.equal(r.next, 'paused')
  t.same(types(r.effects), ['clear_next_run', 'set_recovery_hint'])
  t.match(find(r.effects, 'set_recovery_hint')?.hint, { reason: 'paused_manually', action: 'POST /api/v1/tasks/tsk1/resume' })
  t.same(transition(task('paused'), { type: 'pause' }, facts()), { next: 'paused', effects: [] }, 'idempotent')
  t.equal(transition(task('paused_insufficient_funds'), { type: 'pause' }, facts()).next, 'paused', 'manual pause wins over a funds pause')
})

t.test('paused -> resume: active when balance >= ceiling, else 409', async (t) => {
  t.same(transition(task('paused'), { type: 'resume' }, facts({ available_micros: 10_000n })), {
    next: 'active',
    effects: [{ type: 'clear_recovery_hint' }, { type: 'schedule_next' }],
  })
  t.throws(() => transition(task('paused'), { type: 'resume' }, facts({ available_micros: 9_999n })), {
    code: 'TASK_PAUSED_INSUFFICIENT_FUNDS',
    status: 409,
    extensions: { shortfall_micros: '1', ceiling_micros: '10000', available_micros: '9999' },
  })
  t.equal(transition(task('paused_insufficient_funds'), { type: 'resume' }, facts()).next, 'active', 'allowed from a funds pause once covered')
  t.same(transition(task('active'), { type: 'resume' }, facts()), { next: 'active', effects: [] }, 'idempotent')
})

t.test('paused_insufficient_funds -> fund: resumes when the top-up covers the shortfall', async (t) => {
  const ev = (amount: bigint): TaskEvent => ({ type: 'fund', amount_micros: amount })
  const low = facts({ available_micros: 4_000n })
  t.same(transition(task('paused_insufficient_funds'), ev(6_000n), low), {
    next: 'active',
    effects: [{ type: 'record_top_up', amount_micros: 6_000n }, { type: 'clear_recovery_hint' }, { type: 'schedule_next' }],
  })
  t.throws(() => transition(task('paused_insufficient_funds'), ev(5_999n), low), {
    code: 'INSUFFICIENT_FUND_AMOUNT',
    status: 400,
    field: 'body.top_up_amount_micros',
    extensions: { shortfall_micros: '6000' },
  })
  t.same(transition(task('active'), ev(1n), low), { next: 'active', effects: [{ type: 'record_top_up', amount_micros: 1n }] }, 'any amount on active')
  t.same(transition(task('paused'), ev(1n), low), { next: 'paused', effects: [{ type: 'record_top_up', amount_micros: 1n }] }, 'manual pause stays paused')
  t.throws(() => transition(task('active'), ev(0n), low), { code: 'INSUFFICIENT_FUND_AMOUNT' })
  t.throws(() => transition(task('active'), ev(-5n), low), { code: 'INSUFFICIENT_FUND_AMOUNT' })
})

t.test('any -> DELETE -> deleted: runs cancelled, direct rail refunds, idempotent', async (t) => {
  for (const status of ['active', 'paused', 'paused_insufficient_funds'] as const) {
    t.same(
      transition(task(status), { type: 'delete' }, facts()),
      {
        next: 'deleted',
        effects: [{ type: 'clear_next_run' }, { type: 'clear_recovery_hint' }, { type: 'close_escrow', when: 'now', refund: true }],
      },
      status,
    )
  }
  t.same(
    transition(task('active', { rail: 'marketplace' }), { type: 'delete' }, facts()).effects.at(-1),
    { type: 'close_escrow', when: 'now', refund: false },
    'marketplace refunds nothing',
  )
  t.same(types(transition(task('active'), { type: 'delete' }, facts({ run_in_flight: true })).effects), [
    'clear_next_run',
    'clear_recovery_hint',
    'cancel_in_flight_run',
    'close_escrow',
  ])
  t.equal(find(transition(task('active'), { type: 'delete' }, facts({ run_in_flight: true })).effects, 'close_escrow')?.when, 'after_in_flight_run')
  t.same(transition(task('deleted'), { type: 'delete' }, facts()), { next: 'deleted', effects: [] }, 'idempotent')
  t.same(transition(task('completed'), { type: 'delete' }, facts()), { next: 'deleted', effects: [] }, 'completed already closed its escrow')
  t.same(transition(task('terminated'), { type: 'delete' }, facts()), { next: 'deleted', effects: [] })
  // the run that was in flight finalises after the delete: the escrow closes then
  t.same(transition(task('deleted'), { type: 'run_finished', outcome: 'cancelled', consecutive_infra_failures: 0 }, facts()), {
    next: 'deleted',
    effects: [{ type: 'close_escrow', when: 'now', refund: true }],
  })
})

t.test('trigger: queues on active, no-op elsewhere, TASK_DELETED on deleted', async (t) => {
  t.same(transition(task('active'), { type: 'trigger' }, facts()), { next: 'active', effects: [{ type: 'queue_run' }] })
  t.same(transition(task('active', { scheduled: false }), { type: 'trigger' }, facts()).effects, [{ type: 'queue_run' }], 'on-demand tasks can be triggered')
  for (const status of ['paused', 'paused_insufficient_funds', 'completed', 'terminated'] as const) {
    t.same(transition(task(status), { type: 'trigger' }, facts()), { next: status, effects: [] }, status)
  }
  t.throws(() => transition(task('deleted'), { type: 'trigger' }, facts()), { code: 'TASK_DELETED', status: 410 })
})

t.test('completed: end_at passed and nothing in flight', async (t) => {
  const ended = { end_at: '2026-06-01T11:00:00Z' }
  const closing = [{ type: 'clear_next_run' }, { type: 'clear_recovery_hint' }, { type: 'close_escrow', when: 'now', refund: true }]
  for (const status of ['active', 'paused', 'paused_insufficient_funds'] as const) {
    t.same(transition(task(status, ended), { type: 'tick' }, facts()), { next: 'completed', effects: closing }, status)
  }
  t.same(transition(task('active', ended), { type: 'tick' }, facts({ run_in_flight: true })), { next: 'active', effects: [] }, 'waits for the run')
  t.same(transition(task('active', { end_at: '2026-06-01T12:00:00Z' }), { type: 'tick' }, facts()).next, 'completed', 'end_at == now has passed')
  t.same(transition(task('active', { end_at: '2026-06-01T12:00:01Z' }), { type: 'tick' }, facts()).next, 'active')
  t.same(transition(task('active'), { type: 'tick' }, facts()).next, 'active', 'no end_at')
  t.same(transition(task('active', { scheduled: false, end_at: '2020-01-01T00:00:00Z' }), { type: 'tick' }, facts()).next, 'active', 'on-demand never completes')
  const last = transition(task('active', ended), { type: 'run_finished', outcome: 'succeeded', consecutive_infra_failures: 0 }, facts())
  t.same(last, { next: 'completed', effects: closing }, 'after the last run')
  const viaDispatch = transition(task('active', ended), { type: 'dispatch', trigger: 'schedule' }, facts())
  t.same(viaDispatch, { next: 'completed', effects: [{ type: 'skip_run', reason: 'schedule_ended' }, ...closing] })
  const manual = transition(task('active', ended), { type: 'dispatch', trigger: 'manual' }, facts())
  t.equal(manual.next, 'completed')
  t.match(find(manual.effects, 'reject')?.error, { code: 'TASK_COMPLETED' })
  t.same(transition(task('active', ended), { type: 'dispatch', trigger: 'schedule' }, facts({ run_in_flight: true })), {
    next: 'active',
    effects: [{ type: 'skip_run', reason: 'schedule_ended' }],
  })
  t.throws(() => transition(task('active', ended), { type: 'dispatch', trigger: 'manual' }, facts({ run_in_flight: true })), { code: 'RUN_IN_FLIGHT' })
})

t.test('terminated: operator/abuse, or repeated infrastructure failure', async (t) => {
  t.same(transition(task('paused'), { type: 'terminate', reason: 'abuse' }, facts()), {
    next: 'terminated',
    effects: [{ type: 'clear_next_run' }, { type: 'clear_recovery_hint' }, { type: 'close_escrow', when: 'now', refund: true }],
  })
  t.same(types(transition(task('active'), { type: 'terminate', reason: 'operator' }, facts({ run_in_flight: true })).effects), [
    'clear_next_run',
    'clear_recovery_hint',
    'cancel_in_flight_run',
    'close_escrow',
  ])
  t.same(transition(task('terminated'), { type: 'terminate', reason: 'operator' }, facts()), { next: 'terminated', effects: [] })
  t.same(transition(task('deleted'), { type: 'terminate', reason: 'operator' }, facts()), { next: 'deleted', effects: [] })
  const fin = (outcome: 'infra_error' | 'failed', n: number) => transition(task('active'), { type: 'run_finished', outcome, consecutive_infra_failures: n }, facts())
  t.equal(fin('infra_error', INFRA_FAILURE_LIMIT - 1).next, 'active')
  t.equal(fin('infra_error', INFRA_FAILURE_LIMIT).next, 'terminated')
  t.equal(find(fin('infra_error', INFRA_FAILURE_LIMIT).effects, 'close_escrow')?.when, 'now', 'the failing run has finished')
  t.equal(fin('failed', 99).next, 'active', 'script failures never terminate')
})

t.test('owner operations on terminal tasks', async (t) => {
  const codes = { deleted: ['TASK_DELETED', 410], completed: ['TASK_COMPLETED', 409], terminated: ['TASK_TERMINATED', 409] } as const
  for (const [status, [code, httpStatus]] of Object.entries(codes)) {
    for (const event of [{ type: 'pause' }, { type: 'resume' }, { type: 'fund', amount_micros: 5n }] as TaskEvent[]) {
      t.throws(() => transition(task(status as TaskState), event, facts()), { code, status: httpStatus }, `${status} ${event.type}`)
    }
    t.throws(() => assertWritable(status as TaskState), { code }, `${status} writes`)
  }
  for (const status of ['active', 'paused', 'paused_insufficient_funds'] as const) t.doesNotThrow(() => assertWritable(status))
})

t.test('every status x event either transitions to a known status or throws an AppError', async (t) => {
  const events: TaskEvent[] = [
    ...(['schedule', 'trigger', 'manual', 'webhook', 'continuation'] as const).map((trigger) => ({ type: 'dispatch', trigger }) as const),
    { type: 'pause' },
    { type: 'resume' },
    { type: 'fund', amount_micros: 1n },
    { type: 'fund', amount_micros: 1_000_000n },
    { type: 'delete' },
    { type: 'trigger' },
    { type: 'tick' },
    { type: 'run_finished', outcome: 'succeeded', consecutive_infra_failures: 0 },
    { type: 'run_finished', outcome: 'infra_error', consecutive_infra_failures: 9 },
    { type: 'terminate', reason: 'operator' },
  ]
  let checked = 0
  for (const status of TASK_STATUSES) {
    for (const event of events) {
      for (const f of [facts(), facts({ available_micros: 0n }), facts({ run_in_flight: true })]) {
        for (const end_at of [null, '2026-01-01T00:00:00Z']) {
          try {
            const r = transition(task(status, { end_at }), event, f)
            if (!(TASK_STATUSES as readonly string[]).includes(r.next)) t.fail(`${status} ${event.type} -> ${r.next}`)
            if (status === 'deleted' && r.next !== 'deleted') t.fail('deleted is final')
            if ((status === 'completed' || status === 'terminated') && !['completed', 'terminated', 'deleted'].includes(r.next)) t.fail(`${status} left the terminal set`)
          } catch (error) {
            if (!(error instanceof AppError)) t.fail(`${status} ${event.type} threw ${String(error)}`)
          }
          checked++
        }
      }
    }
  }
  t.equal(checked, TASK_STATUSES.length * events.length * 6)
})

t.test('payments still settling: runs wait for them, state counts them, escrows wait to close', async (t) => {
  const settling = facts({ available_micros: 0n, pending_micros: 10_000n })
  for (const trigger of ['schedule', 'trigger', 'continuation'] as const) {
    t.same(transition(task('active'), { type: 'dispatch', trigger }, settling), { next: 'active', effects: [{ type: 'defer_run' }] }, `${trigger}: deferred, not paused`)
  }
  for (const trigger of ['manual', 'webhook'] as const) {
    t.throws(() => transition(task('active'), { type: 'dispatch', trigger }, settling), { code: 'PAYMENT_SETTLING', headers: { 'retry-after': '5' } }, `${trigger}: 409, retry`)
  }
  t.equal(
    transition(task('active'), { type: 'dispatch', trigger: 'schedule' }, facts({ available_micros: 0n, pending_micros: 9_999n })).next,
    'paused_insufficient_funds',
    'not enough even with it: paused',
  )

  t.equal(transition(task('paused_insufficient_funds'), { type: 'resume' }, settling).next, 'active', 'resume counts it')
  t.equal(
    transition(task('paused_insufficient_funds'), { type: 'fund', amount_micros: 5_000n }, facts({ available_micros: 0n, pending_micros: 5_000n })).next,
    'active',
    'a top-up on top of a settling one resumes',
  )

  const deleted = transition(task('active'), { type: 'delete' }, settling)
  t.same(find(deleted.effects, 'close_escrow'), { type: 'close_escrow', when: 'after_pending_payments', refund: true }, 'delete waits for the payment before it closes')
  t.same(
    find(transition(task('deleted'), { type: 'run_finished', outcome: 'succeeded', consecutive_infra_failures: 0 }, facts({ pending_micros: 1n })).effects, 'close_escrow')?.when,
    'after_pending_payments',
  )

  t.same(
    transition(task('deleted'), { type: 'payment_decided', settled: true, create: false }, facts()).effects,
    [{ type: 'close_escrow', when: 'now', refund: true }],
    'decided on a deleted task: it closes now',
  )
  t.same(
    find(transition(task('deleted'), { type: 'payment_decided', settled: false, create: false }, facts({ run_in_flight: true })).effects, 'close_escrow')?.when,
    'after_in_flight_run',
  )
  t.same(transition(task('active'), { type: 'payment_decided', settled: true, create: true }, facts()), { next: 'active', effects: [] }, 'settled create: nothing to do')
  t.same(
    transition(task('paused'), { type: 'payment_decided', settled: false, create: false }, facts()),
    { next: 'paused', effects: [] },
    'failed top-up: the next dispatch decides',
  )
  const failedCreate = transition(task('active'), { type: 'payment_decided', settled: false, create: true }, facts({ available_micros: 0n }))
  t.equal(failedCreate.next, 'deleted', 'the task a failed create payment was to buy goes')
  t.same(find(failedCreate.effects, 'close_escrow'), { type: 'close_escrow', when: 'now', refund: true })
})
