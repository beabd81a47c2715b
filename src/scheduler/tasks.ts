// Task commands of the scheduler API (SPEC "Scheduler service operations"): create and fund
// (checked before payment, recorded after authorization: the escrow payment is a provisional
// charge bound to its payment), pause, resume, trigger, PATCH, env, clone, webhook secrets, delete.
// Every money decision runs in one transaction with the task row locked FOR UPDATE, so concurrent
// calls on one task are serialised; the Task resource follows after commit (task-resources.ts).
// Decisions beyond the domain modules (docs/scheduler.md):
// - Idempotency-Key is global (unique per task): look-ups happen before payment, so a retried
//   create with the same key and body returns the task without paying twice.
// - A task of another wallet answers 404 TASK_NOT_FOUND, as a missing one does (no enumeration).
import { randomBytes } from 'node:crypto'
import type { Db } from '../platform/db/index.ts'
import { isUniqueViolation } from '../platform/db/index.ts'
import { AppError } from '../platform/errors.ts'
import type { Clock } from '../platform/clock.ts'
import type { Micros } from '../platform/money.ts'
import type { SchedulerRates } from './domain/rates.ts'
import { initialTransition, isTerminal, transition } from './domain/states.ts'
import { idempotencyHash, type TaskCreateInput, validateCreateTask, validateEnv, validatePatch } from './domain/validate.ts'
import { unconfirmedChargeKeys } from './escrow-store.ts'
import type { PlanHolder, SchedulerMarketplace } from './marketplace.ts'
import { ceilingOf, RUN_FINAL_STATUSES, runView, toStoredSpec, type RunRow, type StoredSpec, type TaskRow } from './records.ts'
import { newBearerSecret, secretHash, type SchedulerSecrets } from './secrets.ts'
import { recordCharge, type PaymentFacts } from './charges.ts'
import { lower, newId, ownedTask, snapshot, type TaskCore } from './task-core.ts'
import type { TaskResources } from './task-resources.ts'
import type { TaskReads } from './task-reads.ts'
import type { SchedulerRunLedger } from './run-ledger.ts'
import { runInFlight } from './run-store.ts'
import { clearWebhookSecret, insertTask, mergeTaskSpec, setTaskEnv, setWebhookSecretHash, taskById, taskByIdempotencyKey, taskForUpdate } from './task-store.ts'
import type { Rail, TaskResourceSpec } from './contract/index.ts'

export interface EnvSecretsPort {
  put(taskName: string, taskUid: string, env: Record<string, string>): Promise<unknown>
}

export interface TaskCommandsDeps {
  db: Db
  clock: Clock
  rates: SchedulerRates
  secrets: SchedulerSecrets
  marketplace: SchedulerMarketplace
  core: TaskCore
  resources: TaskResources
  reads: TaskReads
  runLedger: SchedulerRunLedger
  /** How long a synchronous run may wait beyond its own caps. */
  syncSlackMs: number
  /** Public base of the scheduler ({scheduler_url}): webhook URLs. */
  publicUrl: string
  envSecrets?: EnvSecretsPort | undefined
  /** Asks the chain about payments now (the confirmation sweep): a delete refunds at once what is confirmed. */
  confirm?: ((replayKeys: readonly string[]) => Promise<unknown>) | undefined
}

export function createTaskCommands(deps: TaskCommandsDeps) {
  const { db, clock, rates, secrets, marketplace, core, resources, reads } = deps

  /**
   * Before payment: validates the body and headers, and answers an idempotent retry. Returns the
   * validated spec to create, or the existing task's view.
   */
  async function precheckCreate(
    body: unknown,
    idempotencyKey: string,
    headerAmount: Micros | undefined,
    /** Set on the marketplace rail: the plan holder behind Authorization: Bearer (marketplace.ts). */
    holder?: PlanHolder,
  ): Promise<{ spec: TaskCreateInput; hash: string } | { existing: Record<string, unknown> }> {
    const spec = validateCreateTask(body, { now: clock.now(), rates })
    const hash = idempotencyHash(spec)
    const prior = await taskByIdempotencyKey(db, idempotencyKey)
    if (prior !== undefined) {
      if (prior.request_hash !== hash) {
        throw new AppError('IDEMPOTENCY_CONFLICT', 'This Idempotency-Key was used with another body; use a new key for a new task', { field: 'header.idempotency-key' })
      }
      return { existing: await core.view(db, prior) }
    }
    if (holder !== undefined) {
      // Marketplace rail: nothing is paid; X-Pay-Amount-Micros is optional (and must agree if sent).
      if (headerAmount !== undefined && headerAmount !== spec.max_amount_usdc_micros) {
        throw new AppError(
          'VALIDATION_ERROR',
          `X-Pay-Amount-Micros (${headerAmount}) must equal max_amount_usdc_micros (${spec.max_amount_usdc_micros}); on the marketplace rail it can be left out`,
          {
            field: 'header.x-pay-amount-micros',
          },
        )
      }
      await marketplace.requireAccess(holder.agentId, ceilingOf(toStoredSpec(spec), rates))
      return { spec, hash }
    }
    if (headerAmount === undefined) {
      throw new AppError(
        'VALIDATION_ERROR',
        'X-Pay-Amount-Micros is required on the direct rail and must equal max_amount_usdc_micros (or create on the marketplace rail with Authorization: Bearer <plan access token>)',
        { field: 'header.x-pay-amount-micros' },
      )
    }
    if (headerAmount !== spec.max_amount_usdc_micros) {
      throw new AppError('VALIDATION_ERROR', `X-Pay-Amount-Micros (${headerAmount}) must equal max_amount_usdc_micros (${spec.max_amount_usdc_micros})`, {
        field: 'header.x-pay-amount-micros',
      })
    }
    return { spec, hash }
  }

  /**
   * After authorization, before settlement: creates the task. On the direct rail its escrow
   * payment is a provisional charge bound to the payment in the same transaction; the payment's
   * decision (chargeOutcomes) turns it into a ledger charge or deletes the task.
   */
  async function createTask(input: {
    spec: TaskCreateInput
    hash: string
    idempotencyKey: string
    /** Direct rail: the escrow payment. Marketplace rail: payer = the holder's owner id, protocol 'marketplace', no replay key. */
    payment: PaymentFacts
    rail?: Rail
  }): Promise<{ id: string; task: Record<string, unknown> }> {
    const { spec, payment } = input
    const rail: Rail = input.rail ?? 'direct'
    const id = newId('t')
    const owner = lower(payment.payer)
    const stored = toStoredSpec(spec)
    const ceiling = ceilingOf(stored, rates)
    const initial = initialTransition(
      { id, rail, scheduled: spec.schedule !== null, end_at: spec.end_at },
      { ceiling_micros: ceiling, available_micros: spec.max_amount_usdc_micros },
    )
    // The resource first: if the database write fails we delete it; the reverse order could leave
    // a paid task that never runs.
    const resource = await resources.create(resources.taskResource({ id, owner, status: initial.next }, stored))
    const now = clock.now()
    try {
      await db.transaction(async (tx) => {
        await insertTask(tx, {
          id,
          owner,
          rail,
          status: initial.next,
          spec: stored,
          env_ciphertext: Object.keys(spec.env).length > 0 ? secrets.encryptEnv(id, spec.env) : null,
          env_keys: Object.keys(spec.env).sort(),
          idempotency_key: input.idempotencyKey,
          request_hash: input.hash,
          payment_protocol: payment.protocol,
          payment_channel: `${payment.protocol}:${owner}`,
          at: now,
        })
        await recordCharge(tx, id, 'create', spec.max_amount_usdc_micros, payment, null)
        const task = (await taskForUpdate(tx, id)) as TaskRow
        await core.applyTransition(
          tx,
          task,
          { next: initial.next, effects: initial.effects },
          { now, ceiling_micros: ceiling, available_micros: spec.max_amount_usdc_micros, run_in_flight: false },
        )
      })
    } catch (error) {
      await resources.remove(id).catch(() => {})
      if (isUniqueViolation(error))
        throw new AppError('IDEMPOTENCY_CONFLICT', 'A concurrent create used this Idempotency-Key; retry to get its task', { field: 'header.idempotency-key' })
      throw error
    }
    if (deps.envSecrets && Object.keys(spec.env).length > 0) await deps.envSecrets.put(id, resource.metadata.uid, spec.env)
    return { id, task: await core.currentView(id) }
  }

  /**
   * A payment into the escrow. Marketplace rail: the cap is raised at once (an audit row, no
   * money). Direct rail: a provisional charge, bound to the payment, that enters the ledger only
   * when the payment settles (with its transaction hash).
   */
  async function precheckFund(
    taskId: string,
    body: { top_up_amount_micros: unknown },
    idempotencyKey: string,
    headerAmount: Micros | undefined,
    /** Who asks: the plan holder of Authorization: Bearer (marketplace), and whether a payment credential came. */
    requester: { holder?: PlanHolder | undefined; credential: boolean } = { credential: true },
  ): Promise<{ amount: Micros } | { existing: Record<string, unknown> }> {
    const task = await taskById(db, taskId)
    if (task === undefined) throw new AppError('TASK_NOT_FOUND', `No task ${taskId}`, { field: 'path.id' })
    // The rail of the top-up must be the rail of the task (marketplace.ts): a plan token raises the
    // cap of its own marketplace task; a payment tops up a direct-rail escrow.
    if (requester.holder !== undefined && task.rail === 'direct') {
      throw new AppError(
        'CHANNEL_MISMATCH',
        `Task ${taskId} is on the direct rail: top it up with an x402 / MPP payment through the channel that created it (${task.payment_channel}), not with a plan token`,
        {
          extensions: { expected_channel: task.payment_channel, rail: task.rail },
        },
      )
    }
    if (task.rail === 'marketplace') {
      if (requester.holder === undefined) {
        if (requester.credential) {
          throw new AppError(
            'CHANNEL_MISMATCH',
            `Task ${taskId} is on the marketplace rail: nothing is paid to the scheduler; raise its cap with the owner's plan token (Authorization: Bearer <accessToken>) and no payment`,
            {
              extensions: { expected_channel: task.payment_channel, rail: task.rail },
            },
          )
        }
        throw new AppError('bearer_required', `Task ${taskId} is on the marketplace rail: send the owner's plan token as Authorization: Bearer <accessToken>; nothing is charged`, {
          field: 'header.authorization',
          extensions: { rail: task.rail },
        })
      }
      if (task.owner !== requester.holder.owner) throw new AppError('TASK_NOT_FOUND', `No task ${taskId} belongs to this plan holder`, { field: 'path.id' })
    }
    const amount = BigInt(String(body.top_up_amount_micros))
    const prior = (
      await db.query<{ amount_micros: bigint }>(`select amount_micros from scheduler_fundings where task_id = $1 and idempotency_key = $2`, [taskId, idempotencyKey])
    )[0]
    if (prior !== undefined) {
      if (prior.amount_micros !== amount) throw new AppError('IDEMPOTENCY_CONFLICT', 'This Idempotency-Key funded another amount', { field: 'header.idempotency-key' })
      return { existing: await core.view(db, task) }
    }
    if (task.rail === 'marketplace' ? headerAmount !== undefined && headerAmount !== amount : headerAmount !== amount) {
      throw new AppError('VALIDATION_ERROR', `X-Pay-Amount-Micros (${headerAmount ?? 'missing'}) must equal top_up_amount_micros (${amount})`, {
        field: 'header.x-pay-amount-micros',
      })
    }
    if (task.rail === 'marketplace' && !isTerminal(task.status)) await marketplace.assertCanRun(task)
    // Refuse before payment what the state machine would refuse after it.
    transition(snapshot(task), { type: 'fund', amount_micros: amount }, await core.factsOf(db, task))
    return { amount }
  }

  async function fundTask(input: { taskId: string; amount: Micros; idempotencyKey: string; payment: PaymentFacts }): Promise<{ task: Record<string, unknown> }> {
    const { taskId, amount, payment } = input
    let task!: TaskRow
    const after = await db.transaction(async (tx) => {
      task = (await taskForUpdate(tx, taskId)) as TaskRow
      if (task.payment_channel !== null && task.payment_channel !== `${payment.protocol}:${lower(payment.payer)}`) {
        throw new AppError(
          'CHANNEL_MISMATCH',
          `Fund through the channel that created the task (${task.payment_channel}); this payment came from ${payment.protocol}:${lower(payment.payer)}`,
          {
            extensions: { expected_channel: task.payment_channel },
          },
        )
      }
      const facts = await core.factsOf(tx, task)
      const result = transition(snapshot(task), { type: 'fund', amount_micros: amount }, facts)
      await tx.query(`insert into scheduler_fundings (task_id, idempotency_key, amount_micros) values ($1, $2, $3)`, [taskId, input.idempotencyKey, amount])
      await recordCharge(tx, taskId, 'top_up', amount, payment, input.idempotencyKey)
      return core.applyTransition(tx, task, result, facts)
    })
    await core.runAfterCommit(task, after)
    return { task: await core.currentView(taskId) }
  }

  // ------------------------------------------------------------------ owner operations

  async function getTask(taskId: string, owner: string) {
    return core.view(db, await ownedTask(db, taskId, owner))
  }

  async function event(taskId: string, owner: string, make: (task: TaskRow) => Parameters<typeof transition>[1]) {
    let task!: TaskRow
    const after = await db.transaction(async (tx) => {
      task = await ownedTask(tx, taskId, owner, true)
      const facts = await core.factsOf(tx, task)
      return core.applyTransition(tx, task, transition(snapshot(task), make(task), facts), facts)
    })
    await core.runAfterCommit(task, after)
    return core.currentView(taskId)
  }

  const pauseTask = (taskId: string, owner: string) => event(taskId, owner, () => ({ type: 'pause' }))
  async function resumeTask(taskId: string, owner: string) {
    const task = await ownedTask(db, taskId, owner)
    // Marketplace rail: resuming needs a plan that covers the next run (403 plan_required).
    if (task.status !== 'active') await marketplace.assertCanRun(task)
    return event(taskId, owner, () => ({ type: 'resume' }))
  }

  async function triggerTask(taskId: string, owner: string) {
    const task = await ownedTask(db, taskId, owner)
    const queued = task.status === 'active'
    if (queued) await marketplace.assertCanRun(task)
    const fresh = await event(taskId, owner, () => ({ type: 'trigger' }))
    return { task_id: taskId, queued, status: fresh.status, next_run_at: queued ? clock.now().toISOString() : (fresh.next_run_at as string | null) }
  }

  async function patchTask(taskId: string, owner: string, body: unknown) {
    const task = await ownedTask(db, taskId, owner)
    const patch = validatePatch(
      {
        status: task.status,
        schedule: task.spec.schedule,
        max_runtime_sec: task.spec.max_runtime_sec,
        max_sibling_calls: task.spec.max_sibling_calls,
        tool_list: task.spec.tool_list,
        max_sibling_spend_micros: task.spec.max_sibling_spend_micros === null ? null : BigInt(task.spec.max_sibling_spend_micros),
      },
      body,
      { now: clock.now(), runInFlight: await runInFlight(db, taskId), rates },
    )
    const changes: Partial<StoredSpec> = {}
    if (patch.notify_email !== undefined) changes.notify_email = patch.notify_email
    if (patch.end_at !== undefined) changes.end_at = patch.end_at
    if (patch.tool_list !== undefined) changes.tool_list = patch.tool_list
    if (patch.max_sibling_spend_micros !== undefined) changes.max_sibling_spend_micros = patch.max_sibling_spend_micros.toString()
    if (patch.max_runtime_sec !== undefined) changes.max_runtime_sec = patch.max_runtime_sec
    const spec: StoredSpec = { ...task.spec, ...changes }
    await db.transaction(async (tx) => {
      await ownedTask(tx, taskId, owner, true)
      if (patch.max_runtime_sec !== undefined && (await runInFlight(tx, taskId))) {
        throw new AppError('RUN_IN_FLIGHT', 'max_runtime_sec cannot change while a run is claimed or running', { field: 'body.max_runtime_sec' })
      }
      await mergeTaskSpec(tx, taskId, changes, clock.now())
    })
    if (patch.end_at !== undefined || patch.max_runtime_sec !== undefined) {
      await resources.updateSpec(taskId, (current) => {
        const next: TaskResourceSpec = { ...current, maxRuntimeSec: spec.max_runtime_sec }
        if (spec.end_at === null) delete next.endAt
        else next.endAt = spec.end_at
        return next
      })
    }
    return core.currentView(taskId)
  }

  async function replaceEnv(taskId: string, owner: string, body: { env: unknown }) {
    const env = validateEnv(body.env, rates)
    const task = await ownedTask(db, taskId, owner)
    if (isTerminal(task.status)) transition(snapshot(task), { type: 'pause' }, await core.factsOf(db, task)) // throws the terminal state's error
    const keys = Object.keys(env).sort()
    const now = clock.now()
    await setTaskEnv(db, taskId, keys.length > 0 ? secrets.encryptEnv(taskId, env) : null, keys, now)
    if (deps.envSecrets) {
      const resource = await resources.get(taskId)
      if (resource) await deps.envSecrets.put(taskId, resource.metadata.uid, env)
    }
    return { task_id: taskId, env_keys: keys, updated_at: now.toISOString() }
  }

  async function cloneTask(owner: string, sourceId: string) {
    const task = await ownedTask(db, sourceId, owner)
    const { spec } = task
    const out: Record<string, unknown> = {
      runtime: spec.runtime,
      source: spec.source,
      entrypoint: spec.entrypoint,
      max_runtime_sec: spec.max_runtime_sec,
      max_sibling_calls: spec.max_sibling_calls,
      max_amount_usdc_micros: Number(spec.max_amount_usdc_micros),
    }
    if (spec.schedule !== null) {
      const { cron, timezone, every, at, dayOfWeek } = spec.schedule
      out.schedule = every === undefined ? { cron, timezone } : { every, ...(at ? { at } : {}), ...(dayOfWeek ? { dayOfWeek } : {}), timezone, cron }
    }
    if (spec.tool_list !== null) out.tool_list = spec.tool_list
    if (spec.max_sibling_spend_micros !== null) out.max_sibling_spend_micros = spec.max_sibling_spend_micros
    if (spec.dependencies.length > 0) out.dependencies = spec.dependencies
    if (task.env_keys.length > 0) out.env = Object.fromEntries(task.env_keys.map((key) => [key, '***']))
    if (spec.notify_email !== null) out.notify_email = spec.notify_email
    if (spec.end_at !== null && Date.parse(spec.end_at) > clock.nowMs()) out.end_at = spec.end_at
    if (spec.llm !== null) out.llm = spec.llm.max_cost_usdc_micros_per_run === null ? { profile: spec.llm.profile } : { ...spec.llm }
    if (spec.artifacts.enabled) out.artifacts = { enabled: true }
    return { source_task_id: sourceId, spec: out }
  }

  async function enableWebhook(taskId: string, owner: string) {
    const task = await ownedTask(db, taskId, owner)
    if (isTerminal(task.status)) transition(snapshot(task), { type: 'pause' }, await core.factsOf(db, task))
    const secret = newBearerSecret('whsec_')
    const now = clock.now()
    await setWebhookSecretHash(db, taskId, secretHash(secret), now)
    return { task_id: taskId, secret, webhook_url: `${deps.publicUrl}/api/v1/tasks/${taskId}/webhook`, created_at: now.toISOString() }
  }

  async function disableWebhook(taskId: string, owner: string) {
    await ownedTask(db, taskId, owner)
    await clearWebhookSecret(db, taskId, clock.now())
    return { task_id: taskId, webhook_enabled: false as const }
  }

  async function deleteTask(taskId: string, owner: string) {
    await ownedTask(db, taskId, owner)
    // The escrow refunds only confirmed payments: ask the chain about its others first, so a
    // delete right after a paid create does not wait for the sweep's timer.
    const unconfirmed = await unconfirmedChargeKeys(db, taskId)
    if (unconfirmed.length > 0 && deps.confirm) await deps.confirm(unconfirmed).catch(() => undefined)
    let task!: TaskRow
    const after = await db.transaction(async (tx) => {
      task = await ownedTask(tx, taskId, owner, true)
      const facts = await core.factsOf(tx, task)
      return core.applyTransition(tx, task, transition(snapshot(task), { type: 'delete' }, facts), facts)
    })
    await core.runAfterCommit(task, after)
    const fresh = (await taskById(db, taskId)) as TaskRow
    const refund = await reads.refundOutlook(fresh)
    return {
      id: taskId,
      status: 'deleted' as const,
      rail: fresh.rail,
      refunded_micros: refund.state === 'confirmed' ? refund.amount_micros : '0',
      refund_tx_hash: refund.tx_hash,
      refund,
      deleted_at: (fresh.deleted_at ?? clock.now()).toISOString(),
    }
  }

  /** What a deleted task's owner gets back, and when: sent, still owed (a run or a payment to finish first), or nothing. */

  /**
   * POST /runs and the webhook: claims synchronously (so refusals answer this request), creates the
   * Run resource the controller executes, and waits until the run is finalised.
   */
  async function runSynchronously(task: TaskRow, trigger: 'manual' | 'webhook') {
    if (task.status === 'active') await marketplace.assertCanRun(task) // marketplace rail: 403 plan_required without a covering plan
    const runId = `${task.id}-${trigger[0]}${clock.nowMs().toString(36)}${randomBytes(2).toString('hex')}`
    const claim = await deps.runLedger.claimRun({ runId, taskId: task.id, trigger })
    if (claim.kind !== 'claimed') {
      const fresh = (await taskById(db, task.id)) as TaskRow
      transition(snapshot(fresh), { type: 'dispatch', trigger }, await core.factsOf(db, fresh)) // throws the state's error
      throw new AppError('TASK_PAUSED_INSUFFICIENT_FUNDS', claim.kind === 'skipped' ? claim.message : 'The run could not start')
    }
    try {
      await resources.createClaimedRun(task.id, runId, trigger)
    } catch (error) {
      // Nothing will execute it: release the reservation at no cost.
      await deps.runLedger.finishRun(runId, deps.runLedger.lostResult('the run could not be handed to the controller'))
      throw error
    }
    const deadline = Date.now() + (task.spec.max_runtime_sec * 1000 + task.spec.dependencies.length * rates.dependency_install.budget_sec_per_package * 1000 + deps.syncSlackMs)
    for (;;) {
      const run = (await deps.runLedger.runRow(runId)) as RunRow
      if ((RUN_FINAL_STATUSES as readonly string[]).includes(run.status)) return runView(run, reads.logsUrl(runId), rates.hard_caps.max_output_bytes_in_run)
      if (Date.now() > deadline) throw new AppError('INTERNAL', `Run ${runId} did not finish in time; see GET /api/v1/runs/${runId}`)
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
  }

  async function runNow(taskId: string, owner: string) {
    return runSynchronously(await ownedTask(db, taskId, owner), 'manual')
  }

  async function runWebhook(taskId: string, bearer: string | undefined) {
    const task = await taskById(db, taskId)
    if (task === undefined) throw new AppError('TASK_NOT_FOUND', `No task ${taskId}`, { field: 'path.id' })
    if (bearer === undefined || task.webhook_secret_hash === null || secretHash(bearer) !== task.webhook_secret_hash) {
      throw new AppError('API_KEY_INVALID', 'Send the webhook secret as Authorization: Bearer whsec_…; it is invalid or the webhook is disabled', {
        field: 'header.authorization',
      })
    }
    return runSynchronously(task, 'webhook')
  }

  return {
    runNow,
    runWebhook,
    precheckCreate,
    createTask,
    precheckFund,
    fundTask,
    getTask,
    pauseTask,
    resumeTask,
    triggerTask,
    patchTask,
    replaceEnv,
    cloneTask,
    enableWebhook,
    disableWebhook,
    deleteTask,
  }
}

export type TaskCommands = ReturnType<typeof createTaskCommands>
