// The topology drill's scheduled work (docs/reliability.md, "Schedules and callbacks"): a task
// buyer (x402 v2, funded by the dev chain's faucet mint) creates every-minute cron tasks whose runs
// are short python and node scripts, enables each task's inbound webhook and calls it now and then
// between slots (a synchronous run); a reviewer opens review sessions with callbacks to a local
// receiver and submits them (topology-reviews.ts). At the end the tasks are deleted as their owner.
//
// The check, after quiescence, from the database (the API lists only recent runs): every cron slot
// due while a task lived ran exactly once — one Run per slot (run names are per slot), one sandbox
// execution per run (each execution stores one artifact with a fresh name, so a second execution
// of the same run leaves a second artifact) — and none is missing unless the Task resource
// recorded a documented skip (ConcurrentRunActive under Forbid, MissedStartingDeadline); every
// webhook run answered exists once, and no webhook run exists that no call asked for; a run lost
// to the service (infra_error) only inside a fault's window; each escrow exact (one charge, one
// run_cost per charged run, the rest refunded on-chain, the ledger at 0), and the buyer's balance
// on the chain what that says.
//
// The scheduler has no outbound per-run webhook (SPEC: runs report by notify_email, or inline for
// synchronous runs), so the per-run evidence is the artifact, and the webhook is the inbound one.
import { randomBytes } from 'node:crypto'
import { ownerCall } from './owner-call.ts'
import type { Topology } from './topology.ts'
import { type Fault, openDrillDb } from './topology-faults.ts'
import { type Buyer, type CallRecord, fundBuyers, MINTED, payer, TASK_AMOUNT } from './topology-load.ts'
import { checkReviews, persistRecorded, type Receiver, type Reviews, type ReviewsSummary, startReviews } from './topology-reviews.ts'

type Json = Record<string, any>
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))
const CALL_TIMEOUT_MS = 60_000
const timeout = () => AbortSignal.timeout(CALL_TIMEOUT_MS)
/** Slots this close to a task's creation or deletion may or may not run (dispatch ahead, deletion racing the slot). */
const EDGE_MS = 5_000
/** A fault explains a failed or lost run this long after its recovery (the new controller settles lost runs). */
const FAULT_TAIL_MS = 60_000

// Each execution stores one artifact under a fresh name: two executions of one run leave two.
const PYTHON = [
  'import sys, time, uuid',
  'time.sleep(3)  # in its sandbox a while: a controller kill can find it in flight',
  'name = "exec-" + uuid.uuid4().hex + ".txt"',
  'r = store_artifact(name, "drill")',
  'print("drill-exec", name, r["status"])',
  'sys.exit(0 if r["status"] == 201 else 1)',
].join('\n')
const NODE = [
  "const { randomUUID } = require('node:crypto')",
  ';(async () => {',
  '  await new Promise((resolve) => setTimeout(resolve, 3000))',
  "  const name = 'exec-' + randomUUID() + '.txt'",
  "  const r = await store_artifact(name, 'drill')",
  "  console.log('drill-exec', name, r.status)",
  '  process.exitCode = r.status === 201 ? 0 : 1',
  '})()',
].join('\n')

function cronTask(runtime: 'python' | 'node'): Json {
  return {
    schedule: { cron: '* * * * *', timezone: 'UTC' },
    runtime,
    entrypoint: runtime === 'python' ? 'main.py' : 'main.js',
    source: runtime === 'python' ? PYTHON : NODE,
    max_runtime_sec: 20,
    max_sibling_calls: 0,
    max_amount_usdc_micros: TASK_AMOUNT,
    artifacts: { enabled: true },
  }
}

export interface ScheduledTask {
  id: string
  runtime: 'python' | 'node'
  webhookSecret?: string
  /** Run ids of webhook calls answered 200, and how many calls got no answer to judge by (cut off, 5xx). */
  webhookRuns: string[]
  webhookUnanswered: number
  deleted: boolean
}

export interface SchedulesOptions {
  random: () => number
  log: (line: string) => void
  /** Started before the topology: the gateways' REVIEWS_EGRESS_ALLOW names it. */
  receiver: Receiver
  /** Every-minute tasks (python and node alternately); default 3. */
  tasks?: number
  /** Review sessions with callbacks; default 3, one every `reviewSpacingMs` (40 s). */
  reviews?: number
  reviewSpacingMs?: number
  /** Chance per task and minute of a webhook run between slots; default 0.5. */
  webhookChance?: number
}

export interface SchedulesSummary {
  tasks: number
  slotsDue: number
  slotsRan: number
  /** Slots the Task resource recorded as skipped for a documented reason. */
  slotsSkipped: number
  runsLost: number
  webhookRuns: number
  /** Seconds from slot to start of the scheduled runs: max. */
  maxLagS: number
  /** What the service wallet gained from this module (run costs kept, dust, review plans). */
  serviceGain: bigint
  reviews: ReviewsSummary
}

export interface Schedules {
  calls: CallRecord[]
  buyers: Buyer[]
  tasks: ScheduledTask[]
  /** Stops the webhook callers and the reviewer, then deletes every task as its owner. */
  stop(): Promise<void>
  /** After quiescence (refunds confirmed): one PROBLEM per violation; closes the receiver. */
  check(problems: string[], faults: Fault[]): Promise<SchedulesSummary>
}

const minute = 60_000
const stamp = (slot: number) => new Date(slot).toISOString().replace(/[-T:]/g, '').slice(0, 12)
const slotOf = (name: string) => Date.UTC(Number(name.slice(0, 4)), Number(name.slice(4, 6)) - 1, Number(name.slice(6, 8)), Number(name.slice(8, 10)), Number(name.slice(10, 12)))
const ms = (value: unknown) => (value === null || value === undefined ? undefined : new Date(value as string).getTime())

/** Funds its own two buyers (tasks, reviews) and starts the workers. */
export async function startSchedules(topology: Topology, options: SchedulesOptions): Promise<Schedules> {
  const calls: CallRecord[] = []
  const [taskBuyer, reviewBuyer] = (await fundBuyers(topology, 2, 0)) as [Buyer, Buyer]
  taskBuyer.label = `schedules buyer ${taskBuyer.account.address.toLowerCase()}`
  reviewBuyer.label = `reviews buyer ${reviewBuyer.account.address.toLowerCase()}`
  const scheduler = topology.urls.scheduler
  const tasks: ScheduledTask[] = []
  let stopping = false

  const pay = payer(taskBuyer.account)
  for (let i = 0; i < (options.tasks ?? 3); i += 1) {
    const runtime = i % 2 === 0 ? 'python' : 'node'
    const key = `topo-cron-${randomBytes(8).toString('hex')}`
    const created = await persistRecorded(
      calls,
      'schedule.create',
      taskBuyer,
      () =>
        pay(`${scheduler}/api/v1/tasks`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'idempotency-key': key, 'x-pay-amount-micros': String(TASK_AMOUNT) },
          body: JSON.stringify(cronTask(runtime)),
          signal: timeout(),
        }),
      Date.now() + 180_000,
    )
    const id = created.body.task_id ?? created.body.id
    if (!created.res?.ok || typeof id !== 'string') {
      options.log(`schedules: a create answered ${created.res?.status ?? 'nothing'}: ${JSON.stringify(created.body).slice(0, 200)}`)
      continue
    }
    const task: ScheduledTask = { id, runtime, webhookRuns: [], webhookUnanswered: 0, deleted: false }
    tasks.push(task)
    const hook = await persistRecorded(
      calls,
      'schedule.webhook-enable',
      taskBuyer,
      () => ownerCall(taskBuyer.account, `${scheduler}/api/v1/tasks/${id}/webhook`, { method: 'PUT', signal: timeout() }),
      Date.now() + 120_000,
    )
    if (hook.res?.ok && typeof hook.body.secret === 'string') task.webhookSecret = hook.body.secret
  }
  options.log(`schedules: ${tasks.length} every-minute tasks (${tasks.map((task) => `${task.id} ${task.runtime}`).join(', ')})`)

  // A webhook run between slots: second 22-34 of a minute, clear of the dispatch point (15 s ahead).
  const webhookCaller = async (task: ScheduledTask) => {
    while (!stopping && task.webhookSecret !== undefined) {
      const at = (Math.floor(Date.now() / minute) + 1) * minute + 22_000 + Math.floor(options.random() * 12_000)
      while (!stopping && Date.now() < at) await sleep(250)
      if (stopping || options.random() >= (options.webhookChance ?? 0.5)) continue
      const { res, body } = await persistRecordedOnce(calls, taskBuyer, () =>
        fetch(`${scheduler}/api/v1/tasks/${task.id}/webhook`, { method: 'POST', headers: { authorization: `Bearer ${task.webhookSecret}` }, signal: timeout() }),
      )
      if (res?.ok && typeof body.id === 'string') task.webhookRuns.push(body.id)
      else if (!res || res.status >= 500) task.webhookUnanswered += 1
    }
  }
  const callers = tasks.map((task) => webhookCaller(task))
  const reviews: Reviews = startReviews(topology, reviewBuyer, options.receiver, calls, {
    count: options.reviews ?? 3,
    spacingMs: options.reviewSpacingMs ?? 40_000,
    random: options.random,
    log: options.log,
  })

  return {
    calls,
    buyers: [taskBuyer, reviewBuyer],
    tasks,
    async stop() {
      stopping = true
      await Promise.all([...callers, reviews.stop()])
      for (const task of tasks) {
        const res = await persistRecorded(
          calls,
          'schedule.delete',
          taskBuyer,
          () => ownerCall(taskBuyer.account, `${scheduler}/api/v1/tasks/${task.id}`, { method: 'DELETE', signal: timeout() }),
          Date.now() + 240_000,
        )
        task.deleted = res.res?.ok === true
      }
    },
    async check(problems, faults) {
      try {
        const summary = await checkTasks(topology, taskBuyer, tasks, faults, problems)
        const review = await checkReviews(topology, reviewBuyer, options.receiver, reviews, problems)
        const reviewBalance = await topology.chain().balanceOf(reviewBuyer.account.address)
        if (reviewBalance !== MINTED - review.planMicros) {
          problems.push(`${reviewBuyer.label} holds ${reviewBalance} micros, expected ${MINTED - review.planMicros} (minted less ${review.planMicros} of review plans)`)
        }
        return { ...summary, serviceGain: summary.serviceGain + review.planMicros, reviews: review }
      } finally {
        await options.receiver.close()
      }
    },
  }
}

/** One webhook call, recorded; not repeated (a repeat would be another run, not a retry). */
async function persistRecordedOnce(calls: CallRecord[], buyer: Buyer, call: () => Promise<Response>) {
  return persistRecorded(calls, 'schedule.webhook-run', buyer, call, 0)
}

type RunRow = {
  id: string
  task_id: string
  trigger: string
  status: string
  outcome: string | null
  error: string | null
  cost_micros: bigint
  artifacts_count: number
  created_at: Date
  started_at: Date | null
  finished_at: Date | null
  executions: bigint
}

async function checkTasks(topology: Topology, buyer: Buyer, tasks: ScheduledTask[], faults: Fault[], problems: string[]): Promise<Omit<SchedulesSummary, 'reviews'>> {
  const summary: Omit<SchedulesSummary, 'reviews'> = { tasks: tasks.length, slotsDue: 0, slotsRan: 0, slotsSkipped: 0, runsLost: 0, webhookRuns: 0, maxLagS: 0, serviceGain: 0n }
  const ids = tasks.map((task) => task.id)
  const inFault = (from: number, to: number) => faults.some((fault) => from <= fault.end + FAULT_TAIL_MS && to >= fault.start - 1_000)
  const db = await openDrillDb(topology)
  try {
    // Quiescence for this module: no run in flight, every refund of ours confirmed.
    const deadline = Date.now() + 240_000
    for (;;) {
      const open = await db.query<{ n: bigint }>(
        `select (select count(*) from scheduler_runs where task_id = any($1::text[]) and status in ('queued', 'claimed', 'running'))
              + (select count(*) from scheduler_refunds where task_id = any($1::text[]) and state <> 'confirmed') as n`,
        [ids],
      )
      if (BigInt(open[0]?.n ?? 0) === 0n || Date.now() > deadline) break
      await sleep(1_000)
    }
    const taskRows = await db.query<{ id: string; status: string; created_at: Date; deleted_at: Date | null }>(
      `select id, status, created_at, deleted_at from scheduler_tasks where id = any($1::text[])`,
      [ids],
    )
    const runs = await db.query<RunRow>(
      `select r.id, r.task_id, r.trigger, r.status, r.outcome, r.error, r.cost_micros, r.artifacts_count, r.created_at, r.started_at, r.finished_at,
              (select count(*) from scheduler_public_files f where f.run_id = r.id and f.kind = 'artifact')::int8 as executions
         from scheduler_runs r where r.task_id = any($1::text[]) order by r.id`,
      [ids],
    )
    const ledger = await db.query<{ task_id: string; kind: string; amount_micros: bigint; run_id: string | null; tx_hash: string | null }>(
      `select task_id, kind, amount_micros, run_id, tx_hash from scheduler_ledger where task_id = any($1::text[]) order by id`,
      [ids],
    )
    const refunds = await db.query<{ task_id: string; amount_micros: bigint; state: string; tx_hash: string | null }>(
      `select task_id, amount_micros, state, tx_hash from scheduler_refunds where task_id = any($1::text[])`,
      [ids],
    )
    // Every status the Task resources went through: the documented skips and the resource's birth.
    const events = await db.query<{ name: string; type: string; created: string | null; skipped: Json | null; missed: number | null }>(
      `select object->'metadata'->>'name' as name, type, object->'metadata'->>'creationTimestamp' as created,
              object->'status'->'lastSkipped' as skipped, (object->'status'->>'missedSlots')::int as missed
         from resource_events where kind = 'Task' and object->'metadata'->>'name' = any($1::text[]) order by resource_version`,
      [ids],
    )
    let costs = 0n
    let dust = 0n
    let refunded = 0n
    for (const task of tasks) {
      const row = taskRows.find((candidate) => candidate.id === task.id)
      if (!row) {
        problems.push(`task ${task.id}: not in the database`)
        continue
      }
      if (row.status !== 'deleted') problems.push(`task ${task.id}: ${row.status} after its owner's DELETE (expected deleted)`)
      const mine = runs.filter((run) => run.task_id === task.id)
      const seen = events.filter((event) => event.name === task.id)
      const born = Math.max(ms(row.created_at) ?? 0, ms(seen.find((event) => event.created)?.created) ?? 0)
      const died = ms(row.deleted_at) ?? Date.now()
      const skips = new Map<string, string>()
      let missed = 0
      for (const event of seen) {
        if (event.skipped?.slot) skips.set(stamp(ms(event.skipped.slot) as number), event.skipped.reason)
        missed = Math.max(missed, event.missed ?? 0)
      }
      // Scheduled runs: exactly one per due slot, none outside the task's life.
      const scheduled = new Map<string, RunRow[]>()
      for (const run of mine.filter((candidate) => candidate.trigger === 'schedule')) {
        const suffix = run.id.slice(task.id.length + 1)
        if (!run.id.startsWith(`${task.id}-`) || !/^\d{12}$/.test(suffix)) problems.push(`task ${task.id}: scheduled run ${run.id} is not named for a slot`)
        scheduled.set(suffix, [...(scheduled.get(suffix) ?? []), run])
      }
      for (const [slot, list] of scheduled) if (list.length > 1) problems.push(`task ${task.id}: slot ${slot} has ${list.length} runs (${list.map((run) => run.id).join(', ')})`)
      for (let slot = Math.ceil(born / minute) * minute; slot <= died; slot += minute) {
        const edge = slot - born < EDGE_MS || died - slot < EDGE_MS
        const name = stamp(slot)
        const run = scheduled.get(name)?.[0]
        scheduled.delete(name)
        if (edge) continue
        summary.slotsDue += 1
        if (!run) {
          const reason = skips.get(name)
          if (reason === 'ConcurrentRunActive' || reason === 'MissedStartingDeadline') summary.slotsSkipped += 1
          else if (missed > 0 && inFault(slot - minute, slot)) summary.slotsSkipped += 1
          else problems.push(`task ${task.id}: cron slot ${new Date(slot).toISOString()} never ran (no Run${reason ? `; recorded skip ${reason}` : ''})`)
          continue
        }
        summary.slotsRan += 1
        const started = ms(run.started_at)
        if (started !== undefined) {
          summary.maxLagS = Math.max(summary.maxLagS, (started - slot) / 1000)
          if (started - slot > 300_000) problems.push(`task ${task.id}: slot ${name} started ${((started - slot) / 1000).toFixed(0)} s late, past the 300 s starting deadline`)
        }
      }
      for (const [slot, list] of scheduled) {
        // Dispatched ahead of a slot after the deletion, then released (cancelled at no cost): documented.
        const at = slotOf(slot)
        for (const run of list) {
          if (!(at > died && at - died <= 20_000 && run.status === 'cancelled'))
            problems.push(`task ${task.id}: run ${run.id} (${run.status}) for slot ${slot}, outside the task's life`)
        }
      }
      // Webhook runs: each answered one exists; none beyond the calls that went unanswered.
      const hooked = mine.filter((run) => run.trigger === 'webhook')
      summary.webhookRuns += hooked.length
      for (const id of task.webhookRuns) if (!hooked.some((run) => run.id === id)) problems.push(`task ${task.id}: webhook run ${id} was answered but is not in the database`)
      const unasked = hooked.filter((run) => !task.webhookRuns.includes(run.id)).length
      if (unasked > task.webhookUnanswered)
        problems.push(`task ${task.id}: ${unasked} webhook runs no answered call accounts for (${task.webhookUnanswered} calls went unanswered)`)
      const jobsOfRun = new Map<string, number>()
      for (const job of topology.kube?.jobHistory() ?? []) if (job.run) jobsOfRun.set(job.run, (jobsOfRun.get(job.run) ?? 0) + 1)
      for (const run of mine) {
        if (run.trigger !== 'schedule' && run.trigger !== 'webhook')
          problems.push(`task ${task.id}: run ${run.id} has trigger ${run.trigger}; the drill asked only for slots and webhooks`)
        // The local executor runs the script (one artifact per execution); the kubernetes executor's
        // pods are the kubelet double's, so there an execution is a Job the double saw for the run.
        const executions = topology.kube ? BigInt(jobsOfRun.get(run.id) ?? 0) : BigInt(run.executions)
        if (executions > 1n || run.artifacts_count > 1)
          problems.push(`task ${task.id}: run ${run.id} executed ${executions} times (${run.artifacts_count} artifacts counted): one run, one sandbox`)
        const from = ms(run.created_at) ?? 0
        const to = ms(run.finished_at) ?? Date.now()
        if (run.status === 'succeeded') {
          if (executions !== 1n) problems.push(`task ${task.id}: run ${run.id} succeeded with ${executions} executions recorded`)
        } else if (run.status === 'cancelled' && run.trigger === 'schedule' && to >= died - EDGE_MS) {
          // Dispatched, then the task was deleted before its slot: released at no cost (documented).
        } else if (inFault(from, to)) {
          summary.runsLost += 1
        } else problems.push(`task ${task.id}: run ${run.id} ended ${run.status} (${run.outcome ?? ''} ${run.error ?? ''}) outside every fault window`)
      }
      // The escrow: one charge, one run_cost per charged run, closed by a refund of the rest.
      const rows = ledger.filter((entry) => entry.task_id === task.id)
      const charges = rows.filter((entry) => entry.kind === 'charge')
      const funded = charges.reduce((sum, entry) => sum + BigInt(entry.amount_micros), 0n)
      if (charges.length !== 1 || funded !== BigInt(TASK_AMOUNT) || charges.some((entry) => !entry.tx_hash)) {
        problems.push(`task ${task.id}: ${charges.length} charges of ${funded} micros (expected one of ${TASK_AMOUNT} with its tx hash)`)
      }
      const runCosts = new Map<string, bigint>()
      for (const entry of rows.filter((candidate) => candidate.kind === 'run_cost')) {
        if (entry.run_id === null || runCosts.has(entry.run_id)) problems.push(`task ${task.id}: run_cost row for run ${entry.run_id} twice or without a run`)
        runCosts.set(entry.run_id ?? '', -BigInt(entry.amount_micros))
      }
      for (const run of mine) {
        const cost = BigInt(run.cost_micros)
        if ((runCosts.get(run.id) ?? 0n) !== cost) problems.push(`task ${task.id}: run ${run.id} cost ${cost} micros, its ledger says ${runCosts.get(run.id) ?? 'nothing'}`)
        runCosts.delete(run.id)
      }
      for (const [run] of runCosts) problems.push(`task ${task.id}: a run_cost for ${run}, which is not one of its runs`)
      const spent = mine.reduce((sum, run) => sum + BigInt(run.cost_micros), 0n)
      const kept = -rows.filter((entry) => entry.kind === 'dust_forfeit').reduce((sum, entry) => sum + BigInt(entry.amount_micros), 0n)
      const back = -rows.filter((entry) => entry.kind === 'refund').reduce((sum, entry) => sum + BigInt(entry.amount_micros), 0n)
      const total = rows.reduce((sum, entry) => sum + (entry.kind === 'usage' ? 0n : BigInt(entry.amount_micros)), 0n)
      if (total !== 0n) problems.push(`task ${task.id}: its ledger sums to ${total} micros after deletion (expected 0)`)
      if (back + kept !== funded - spent) problems.push(`task ${task.id}: refunded ${back} + forfeited ${kept} micros of ${funded} funded less ${spent} spent`)
      const refund = refunds.find((entry) => entry.task_id === task.id)
      if (back > 0n && (refund?.state !== 'confirmed' || BigInt(refund.amount_micros) !== back || !refund.tx_hash)) {
        problems.push(`task ${task.id}: the refund of ${back} micros is ${refund ? `${refund.state} of ${refund.amount_micros}` : 'not in scheduler_refunds'}`)
      }
      costs += spent
      dust += kept
      refunded += refund?.state === 'confirmed' ? BigInt(refund.amount_micros) : 0n
    }
    summary.serviceGain = costs + dust
    const balance = await topology.chain().balanceOf(buyer.account.address)
    const expected = MINTED - BigInt(tasks.length) * BigInt(TASK_AMOUNT) + refunded
    if (balance !== expected) problems.push(`${buyer.label} holds ${balance} micros, expected ${expected} (${tasks.length} escrows, ${refunded} refunded, ${costs} run costs)`)
  } finally {
    await db.close()
  }
  return summary
}
