// The scheduler's application service: every task operation of SPEC "Scheduler service operations"
// and the run lifecycle the run controller drives (claim → execute → finish). It joins the pure
// domain (validate, states, escrow, rates) to its adapters:
// - Postgres/PGlite holds money (append-only ledger), secrets (encrypted env, hashed secrets) and
//   run records; every money decision runs in one transaction with the task row locked FOR UPDATE,
//   so concurrent calls on one task are serialised and a reservation is taken exactly once;
// - the Task/Run resources (ResourceStore port) carry the scheduling truth the controllers
//   reconcile: suspend, triggerRequestedAt, end_at, the script; Runs are created by the cron
//   reconciler, or here for synchronous, webhook and continuation runs;
// - the chain port sends refunds; the mailer sends completion e-mails.
// Decisions beyond the domain modules (documented in docs/scheduler.md):
// - Idempotency-Key is global (unique per task): look-ups happen before payment, so a retried
//   create with the same key and body returns the task without paying twice.
// - A task of another wallet answers 404 TASK_NOT_FOUND, as a missing one does (no enumeration).
// - Runs lost to the service (infra_error, executor restart) are not charged.
import { randomBytes } from 'node:crypto'
import { Batcher } from '../platform/batcher.ts'
import type { Db, Queryable } from '../platform/db/index.ts'
import { isUniqueViolation, toJson } from '../platform/db/index.ts'
import { AppError } from '../platform/errors.ts'
import type { Clock } from '../platform/clock.ts'
import type { Logger } from '../platform/logger.ts'
import type { Mailer } from '../platform/mailer.ts'
import { formatUsd, type Micros } from '../platform/money.ts'
import { storableText } from '../platform/text-safety.ts'
import type { ChainPort } from '../payments/chain/types.ts'
import { isConflict, isAlreadyExists, NotFoundError, type ResourceStore } from '../../controllers/resource-store.ts'
import type { RunResource, TaskResource, TaskSpec as TaskResourceSpec, TriggerType } from '../../controllers/task-reconciler.ts'
import type { ExecutionRequest, ExecutionResult } from '../../controllers/executor.ts'
import { closeEscrow, finalizeRun, summarize, type EscrowSummary, type LedgerEntry, type Reservation } from './domain/escrow.ts'
import type { SchedulerRates } from './domain/rates.ts'
import { transition, initialTransition, isTerminal, type Effect, type Rail, type RunOutcome, type RunTrigger, type TaskSnapshot, type TransitionFacts, type TransitionResult } from './domain/states.ts'
import { idempotencyHash, validateCreateTask, validateEnv, validatePatch, type TaskSpec } from './domain/validate.ts'
import { ceilingOf, RUN_FINAL_STATUSES, runSlimView, runView, serializeHint, taskView, toStoredSpec, truncateUtf8, type RunRow, type StoredSpec, type TaskRow } from './records.ts'
import { newBearerSecret, secretHash, type SchedulerSecrets } from './secrets.ts'
import { createRefunds, type Refunds } from './refunds.ts'
import type { OutcomeHandler } from '../payments/outcomes.ts'
import { createSchedulerMarketplace, normalizeOwner, ownerLabel, type PlanHolder, type SchedulerMarketplace } from './marketplace.ts'

export const TASK_API_VERSION = 'jobs.agent-gateway.dev/v1alpha1'

export interface EnvSecretsPort {
  put(taskName: string, taskUid: string, env: Record<string, string>): Promise<unknown>
}

export interface LogStore {
  put(key: string, data: Buffer, contentType: string): Promise<unknown>
  get(key: string): Promise<{ data: Buffer; contentType: string } | undefined>
}

export interface SchedulerServiceDeps {
  db: Db
  clock: Clock
  rates: SchedulerRates
  secrets: SchedulerSecrets
  tasks: ResourceStore<TaskResource>
  runs: ResourceStore<RunResource>
  namespace: string
  chain: Pick<ChainPort, 'transfer' | 'resend'>
  mailer: Mailer
  logger: Logger
  logs: LogStore
  /** Public base of the scheduler ({scheduler_url}). */
  publicUrl: string
  /** Base URL run sandboxes use to reach the helper endpoint (defaults to publicUrl). */
  internalUrl?: string
  envSecrets?: EnvSecretsPort
  /** How long a synchronous run may wait beyond its own caps (default 60 s). */
  syncSlackMs?: number
  /** Public base of the gateway ({base_url}), named in marketplace-rail answers (plan purchase links). */
  gatewayUrl?: string
  /** The marketplace rail (plan access, usage reports); default: the registry's scheduler plans on this database. */
  marketplace?: SchedulerMarketplace
}

/** What a paid create/fund learned from the payment guard. */
export interface PaymentFacts {
  payer: string
  protocol: string
  amountMicros: Micros
  /** The payment's spend key (direct rail); null on the marketplace rail, where nothing is paid. */
  replayKey: string | null
  /**
   * Binds the charge to its payment inside the transaction that records it (the payment guard's
   * bind). Without it the charge stays provisional until chargeOutcomes decides it.
   */
  bind?: ((tx: Queryable, effect: string) => Promise<void>) | undefined
}

/** The outcome handler name of direct-rail escrow payments (payment_reservations.effect). */
export const SCHEDULER_CHARGE_EFFECT = 'scheduler.charge'

export type RunClaim =
  | { kind: 'claimed'; run: RunRow }
  | { kind: 'skipped'; reason: string; message: string }
  /** Leave the Run pending and look again later (trigger/continuation behind an in-flight run). */
  | { kind: 'deferred' }

/** A run to dispatch: the API's synchronous claim, or the controller's (scheduled, triggered, a continuation). */
interface DispatchDecisionInput {
  runId: string
  taskId: string
  trigger: RunTrigger
  /** The run's instant has not come yet (see decideDispatch). */
  ahead?: boolean
}

/** A run the controller dispatches (scheduled, triggered or a continuation). */
export interface DispatchInput extends DispatchDecisionInput {
  /** Aborts the execution (the run was deleted or cancelled). */
  signal: AbortSignal
}

export type DispatchResult =
  | { kind: 'claimed'; run: RunRow; request?: Omit<ExecutionRequest, 'namespace' | 'taskUid' | 'runUid'>; token?: string }
  | { kind: 'skipped'; reason: string; message: string }
  | { kind: 'deferred' }

interface RunRowInsert {
  id: string
  task_id: string
  trigger: RunTrigger
  status: 'claimed' | 'skipped'
  reserved: bigint
  outcome: string | null
  error: string | null
  token_hash: string | null
  finished: Date | null
  token: string | null
}

const IN_FLIGHT = ['claimed', 'running'] as const

/** A task's escrow as the state machine needs it: ledger totals, a run in flight, payments settling. */
interface EscrowFacts {
  summary: EscrowSummary
  inFlight: boolean
  /** Provisional direct-rail charges (create, top-ups) whose settlement is not known yet. */
  pending: bigint
}
/** A Task resource this old without its row is an orphan of a crashed create (see removeOrphanTaskResources). */
const ORPHAN_GRACE_MS = 10 * 60_000
const ORPHAN_SWEEP_EVERY_MS = 60 * 60_000
/** A task's total settled cost (its run_cost rows), as a select-list column of `scheduler_tasks t`. */
const TASK_COST_SQL = `(select -coalesce(sum(amount_micros), 0) from scheduler_ledger l where l.task_id = t.id and l.kind = 'run_cost')::int8 as cost`
// Owners: wallets compare lowercase; marketplace plan holders (`agent:<id>`) exactly (marketplace.ts).
const lower = (owner: string) => normalizeOwner(owner)

function newId(prefix: string): string {
  // Lowercase base32-ish: a DNS-1123 label, so it doubles as the Task/Run resource name.
  const alphabet = 'abcdefghijklmnopqrstuvwxyz234567'
  const bytes = randomBytes(16)
  let out = prefix
  for (const byte of bytes) out += alphabet[byte & 31]
  return out
}

export function createSchedulerService(deps: SchedulerServiceDeps) {
  const { db, clock, rates, secrets, tasks, runs, namespace, logger } = deps
  const internalUrl = deps.internalUrl ?? deps.publicUrl
  const marketplace = deps.marketplace ?? createSchedulerMarketplace({ db, clock, rates, logger, gatewayUrl: deps.gatewayUrl })
  const outputCap = rates.hard_caps.max_output_bytes_in_run
  const refunds: Refunds = createRefunds({ db, chain: deps.chain, logger })

  // ------------------------------------------------------------------ loading

  async function loadTask(q: Queryable, id: string, lock = false): Promise<TaskRow | undefined> {
    const rows = await q.query<TaskRow>(`select * from scheduler_tasks where id = $1${lock ? ' for update' : ''}`, [id])
    return rows[0]
  }

  async function ownedTask(q: Queryable, id: string, owner: string, lock = false): Promise<TaskRow> {
    const task = await loadTask(q, id, lock)
    if (task === undefined || task.owner !== lower(owner)) throw new AppError('TASK_NOT_FOUND', `No task ${id} belongs to this wallet`, { field: 'path.id' })
    return task
  }

  async function escrowOf(q: Queryable, taskId: string): Promise<{ rows: LedgerEntry[]; reservations: Reservation[]; summary: EscrowSummary }> {
    const rows = (
      await q.query<{ kind: LedgerEntry['kind']; amount_micros: bigint; run_id: string | null }>(
        `select kind, amount_micros, run_id from scheduler_ledger where task_id = $1 and kind <> 'usage' order by id`,
        [taskId],
      )
    ).map((row) => ({ kind: row.kind, amount_micros: row.amount_micros, run_id: row.run_id }))
    const reservations = (
      await q.query<{ id: string; reserved_micros: bigint }>(
        `select id, reserved_micros from scheduler_runs where task_id = $1 and status in ('claimed', 'running') and reserved_micros > 0`,
        [taskId],
      )
    ).map((row) => ({ run_id: row.id, amount_micros: row.reserved_micros }))
    return { rows, reservations, summary: summarize(rows, reservations) }
  }

  async function runInFlight(q: Queryable, taskId: string): Promise<boolean> {
    const rows = await q.query(`select 1 from scheduler_runs where task_id = $1 and status in ('claimed', 'running') limit 1`, [taskId])
    return rows.length > 0
  }

  function snapshot(task: TaskRow): TaskSnapshot {
    return { id: task.id, status: task.status, rail: task.rail, scheduled: task.spec.schedule !== null, end_at: task.spec.end_at }
  }

  /**
   * The escrow summary and whether a run is in flight, in ONE statement (the dispatch and settle
   * paths run this per run): ledger sums per kind, in the order summarize() checks them, instead of
   * every row of the task's history.
   */
  async function escrowFacts(q: Queryable, taskId: string): Promise<EscrowFacts> {
    return (await escrowFactsMany(q, [taskId])).get(taskId) as EscrowFacts
  }

  /** escrowFacts for many tasks in one statement (the batched dispatch). */
  async function escrowFactsMany(q: Queryable, taskIds: readonly string[]): Promise<Map<string, EscrowFacts>> {
    const rows = await q.query<{ id: string; sums: Record<string, string>; reserved: bigint; in_flight: boolean; pending: bigint }>(
      `select t.id,
              (select coalesce(jsonb_object_agg(kind, total), '{}'::jsonb)
                 from (select kind, sum(amount_micros)::text as total from scheduler_ledger where task_id = t.id and kind <> 'usage' group by kind) k) as sums,
              (select coalesce(sum(reserved_micros), 0)::int8 from scheduler_runs where task_id = t.id and status in ('claimed', 'running')) as reserved,
              exists (select 1 from scheduler_runs where task_id = t.id and status in ('claimed', 'running')) as in_flight,
              (select coalesce(sum(amount_micros), 0)::int8 from scheduler_charges where task_id = t.id and state = 'provisional') as pending
         from unnest($1::text[]) as t(id)`,
      [taskIds],
    )
    const out = new Map<string, EscrowFacts>()
    for (const row of rows) {
      const entries: LedgerEntry[] = []
      for (const kind of ['charge', 'reversal', 'run_cost', 'refund', 'dust_forfeit'] as const) {
        if (row.sums[kind] !== undefined) entries.push({ kind, amount_micros: BigInt(row.sums[kind]), run_id: null })
      }
      const reservations = row.reserved > 0n ? [{ run_id: 'reserved', amount_micros: row.reserved }] : []
      out.set(row.id, { summary: summarize(entries, reservations), inFlight: row.in_flight, pending: row.pending })
    }
    return out
  }

  /**
   * `heldInBatch`: reservations a batched dispatch made earlier in the same transaction for other
   * marketplace tasks of this holder (not visible in the database yet).
   */
  async function factsOf(q: Queryable, task: TaskRow, known?: EscrowFacts, heldInBatch = 0n): Promise<TransitionFacts & { escrow: EscrowSummary }> {
    const { summary, inFlight, pending } = known ?? (await escrowFacts(q, task.id))
    let available = summary.available_micros
    if (task.rail === 'marketplace') {
      // The cap is the seller-local limit; the holder's plan credit is what pays.
      const room = (await marketplace.planRoom(q, task.owner)) - heldInBatch
      if (room < available) available = room < 0n ? 0n : room
    }
    return {
      now: clock.now(),
      ceiling_micros: ceilingOf(task.spec, rates),
      available_micros: available,
      pending_micros: pending,
      run_in_flight: inFlight,
      escrow: summary,
    }
  }

  // ------------------------------------------------------------------ effects

  /** What to do after the transaction commits. */
  interface AfterCommit {
    syncSuspend?: boolean
    triggerAt?: Date
    deleteResource?: boolean
    refund?: boolean
    cancelRun?: boolean
    reject?: AppError
    /** The status the Task resource is brought in line with (clears resource_sync_pending). */
    resourceStatus?: TaskRow['status']
  }

  /** Applies a transition's effects inside the transaction; returns the post-commit work. */
  async function applyTransition(tx: Queryable, task: TaskRow, result: TransitionResult, facts: TransitionFacts): Promise<AfterCommit> {
    const after: AfterCommit = {}
    let hint: unknown = task.recovery_hint
    let hintTouched = false
    for (const effect of result.effects as Effect[]) {
      switch (effect.type) {
        case 'set_recovery_hint':
          hint = serializeHint(effect.hint)
          hintTouched = true
          break
        case 'clear_recovery_hint':
          hintTouched = hint !== null
          hint = null
          break
        case 'queue_run':
          after.triggerAt = facts.now
          break
        case 'record_top_up':
          break // the caller appends the charge row with its payment facts
        case 'cancel_in_flight_run':
          after.cancelRun = true
          break
        case 'close_escrow':
          if (effect.when === 'now') {
            const { rows, reservations } = await escrowOf(tx, task.id)
            const closing = closeEscrow(rows, reservations, { rail: task.rail, minRefundMicros: rates.min_refund_micros })
            for (const entry of closing) {
              await tx.query(`insert into scheduler_ledger (task_id, kind, amount_micros, run_id) values ($1, $2, $3, $4)`, [task.id, entry.kind, entry.amount_micros, null])
              if (entry.kind === 'refund') {
                await tx.query(
                  `insert into scheduler_refunds (task_id, to_address, amount_micros, state) values ($1, $2, $3, 'pending') on conflict (task_id) do nothing`,
                  [task.id, task.owner, -entry.amount_micros],
                )
                after.refund = true
              }
            }
          }
          break
        case 'reject':
          after.reject = effect.error
          break
        default:
          break // schedule_next / clear_next_run: the Task resource's suspend flag below; start/skip/defer: claim()
      }
    }
    const next = result.next
    // A transition that changes nothing (most dispatches and settlements) writes nothing. A status
    // change owes the Task resource a write (suspend, deletion): flagged here, in the same
    // transaction, and cleared once done (syncTaskResource), so a crash in between is redone.
    if (next !== task.status || hintTouched) {
      await tx.query(
        `update scheduler_tasks set status = $2, recovery_hint = $3, updated_at = $4, deleted_at = case when $2 = 'deleted' then coalesce(deleted_at, $4) else deleted_at end,
                resource_sync_pending = resource_sync_pending or $2 <> status
          where id = $1`,
        [task.id, next, hint === null ? null : hint, clock.now()],
      )
    }
    if (next !== task.status) {
      if (next === 'deleted' || next === 'terminated') after.deleteResource = true
      else after.syncSuspend = next !== 'active'
      after.resourceStatus = next
    }
    return after
  }

  /** Replaces the Task resource's spec with `change` applied, retrying on resourceVersion conflicts. */
  async function updateTaskResource(taskId: string, change: (spec: TaskResourceSpec) => TaskResourceSpec): Promise<void> {
    for (let attempt = 0; attempt < 5; attempt += 1) {
      const current = await tasks.get(namespace, taskId)
      if (current === undefined) return
      try {
        await tasks.replaceSpec({ ...current, spec: change(current.spec) })
        return
      } catch (error) {
        if (!isConflict(error)) throw error
      }
    }
    throw new AppError('INTERNAL', `Task resource ${taskId} kept changing; try again`)
  }

  async function runAfterCommit(task: TaskRow, after: AfterCommit): Promise<void> {
    if (after.deleteResource) {
      try {
        await tasks.delete(namespace, task.id)
      } catch (error) {
        if (!(error instanceof NotFoundError)) throw error
      }
    } else if (after.syncSuspend !== undefined) {
      const suspend = after.syncSuspend
      await updateTaskResource(task.id, (spec) => ({ ...spec, suspend }))
    }
    if (after.triggerAt !== undefined) {
      const at = after.triggerAt.toISOString()
      await updateTaskResource(task.id, (spec) => ({ ...spec, triggerRequestedAt: at }))
    }
    if (after.resourceStatus !== undefined) {
      await db.query(`update scheduler_tasks set resource_sync_pending = false where id = $1 and status = $2`, [task.id, after.resourceStatus])
    }
    if (after.refund) await refunds.send(task.id)
    if (after.reject) throw after.reject
  }

  /**
   * Brings the Task resource in line with its row (suspend, or deletion when terminal) and clears
   * the row's resource_sync_pending flag: the post-commit step a crash may have skipped.
   */
  async function syncTaskResource(taskId: string): Promise<void> {
    const row = (await db.query<{ status: TaskRow['status'] }>(`select status from scheduler_tasks where id = $1`, [taskId]))[0]
    if (row === undefined) return
    if (isTerminal(row.status)) {
      await tasks.delete(namespace, taskId).catch((error: unknown) => {
        if (!(error instanceof NotFoundError)) throw error
      })
    } else {
      const suspend = row.status !== 'active'
      await updateTaskResource(taskId, (spec) => (spec.suspend === suspend ? spec : { ...spec, suspend }))
    }
    await db.query(`update scheduler_tasks set resource_sync_pending = false where id = $1 and status = $2`, [taskId, row.status])
  }

  let lastOrphanSweep = 0

  /**
   * Task resources without a task row: createTask writes the resource first and deletes it if the
   * row's transaction fails, so only a process dying in between leaves one (its cron would create
   * Runs that are only ever skipped). Those older than `before` (default: ORPHAN_GRACE_MS ago,
   * longer than any create takes) are deleted.
   */
  async function removeOrphanTaskResources(before = new Date(clock.nowMs() - ORPHAN_GRACE_MS)): Promise<number> {
    lastOrphanSweep = clock.nowMs()
    const old = (await tasks.list(namespace)).items.filter((resource) => Date.parse(resource.metadata.creationTimestamp) < before.getTime())
    if (old.length === 0) return 0
    const known = new Set((await db.query<{ id: string }>(`select id from scheduler_tasks where id = any($1::text[])`, [old.map((r) => r.metadata.name)])).map((row) => row.id))
    let removed = 0
    for (const resource of old) {
      if (known.has(resource.metadata.name)) continue
      await tasks.delete(namespace, resource.metadata.name).catch((error: unknown) => {
        if (!(error instanceof NotFoundError)) throw error
      })
      removed += 1
    }
    if (removed > 0) logger.info({ removed }, 'removed Task resources whose create never committed')
    return removed
  }

  /**
   * The scheduler's crash recovery, run at start and on a timer: Task resources a status change
   * still owes a write, and refunds that are due (new, failed, or interrupted mid-send).
   */
  async function recover(options: { orphanedBefore?: Date } = {}): Promise<{ resources: number; refunds: number }> {
    if (options.orphanedBefore !== undefined) {
      // Refunds a dead process was sending: its lease need not run out (see ReconcileOptions).
      await db.query(`update scheduler_refunds set next_attempt_at = now() where state = 'sending' and updated_at < $1`, [options.orphanedBefore])
    }
    if (options.orphanedBefore !== undefined || clock.nowMs() - lastOrphanSweep > ORPHAN_SWEEP_EVERY_MS) await removeOrphanTaskResources(options.orphanedBefore)
    const owed = await db.query<{ id: string }>(`select id from scheduler_tasks where resource_sync_pending order by updated_at limit 500`)
    for (const { id } of owed) {
      await syncTaskResource(id).catch((error: unknown) => logger.warn({ err: error, taskId: id }, 'Task resource sync failed; retried on the next pass'))
    }
    return { resources: owed.length, refunds: await refunds.retryDue() }
  }

  async function view(q: Queryable, task: TaskRow) {
    const { summary, pending } = await escrowFacts(q, task.id)
    let nextRunAt: Date | null = null
    if (task.status === 'active' && task.spec.schedule !== null) {
      const resource = await tasks.get(namespace, task.id)
      const trigger = resource?.spec.triggerRequestedAt
      const handled = resource?.status?.lastTriggerHandled
      if (trigger !== undefined && (handled === undefined || Date.parse(trigger) > Date.parse(handled))) nextRunAt = new Date(trigger)
      else if (resource?.status?.nextRunAt) nextRunAt = new Date(resource.status.nextRunAt)
    }
    return taskView(task, summary, rates, nextRunAt, pending)
  }

  function taskResource(task: { id: string; owner: string; status: string }, spec: StoredSpec): Omit<TaskResource, 'metadata'> & { metadata: { name: string; namespace: string; labels: Record<string, string> } } {
    const resourceSpec: TaskResourceSpec = {
      taskId: task.id,
      owner: task.owner,
      suspend: task.status !== 'active',
      concurrencyPolicy: 'Forbid',
      runtime: spec.runtime,
      entrypoint: spec.entrypoint,
      source: spec.source,
      dependencies: spec.dependencies,
      maxRuntimeSec: spec.max_runtime_sec,
      envSecretRef: { name: `${task.id}-env` },
    }
    if (spec.schedule !== null) resourceSpec.schedule = { cron: spec.schedule.cron, timezone: spec.schedule.timezone }
    if (spec.end_at !== null) resourceSpec.endAt = spec.end_at
    return {
      apiVersion: TASK_API_VERSION,
      kind: 'Task',
      metadata: { name: task.id, namespace, labels: { 'jobs.agent-gateway.dev/owner': ownerLabel(task.owner) } },
      spec: resourceSpec,
    }
  }

  // ------------------------------------------------------------------ create / fund

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
  ): Promise<{ spec: TaskSpec; hash: string } | { existing: Record<string, unknown> }> {
    const spec = validateCreateTask(body, { now: clock.now(), rates })
    const hash = idempotencyHash(spec)
    const prior = (await db.query<TaskRow>(`select * from scheduler_tasks where idempotency_key = $1`, [idempotencyKey]))[0]
    if (prior !== undefined) {
      if (prior.request_hash !== hash) {
        throw new AppError('IDEMPOTENCY_CONFLICT', 'This Idempotency-Key was used with another body; use a new key for a new task', { field: 'header.idempotency-key' })
      }
      return { existing: await view(db, prior) }
    }
    if (holder !== undefined) {
      // Marketplace rail: nothing is paid; X-Pay-Amount-Micros is optional (and must agree if sent).
      if (headerAmount !== undefined && headerAmount !== spec.max_amount_usdc_micros) {
        throw new AppError('VALIDATION_ERROR', `X-Pay-Amount-Micros (${headerAmount}) must equal max_amount_usdc_micros (${spec.max_amount_usdc_micros}); on the marketplace rail it can be left out`, {
          field: 'header.x-pay-amount-micros',
        })
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
    spec: TaskSpec
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
    const initial = initialTransition({ id, rail, scheduled: spec.schedule !== null, end_at: spec.end_at }, { ceiling_micros: ceiling, available_micros: spec.max_amount_usdc_micros })
    // The resource first: if the database write fails we delete it; the reverse order could leave
    // a paid task that never runs.
    const resource = await tasks.create(taskResource({ id, owner, status: initial.next }, stored))
    const now = clock.now()
    try {
      await db.transaction(async (tx) => {
        await tx.query(
          `insert into scheduler_tasks (id, owner, rail, status, spec, env_ciphertext, env_keys, idempotency_key, request_hash, payment_protocol, payment_channel, recovery_hint, created_at, updated_at)
           values ($1, $2, $13, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $12)`,
          [
            id,
            owner,
            initial.next,
            stored,
            Object.keys(spec.env).length > 0 ? secrets.encryptEnv(id, spec.env) : null,
            toJson(Object.keys(spec.env).sort()),
            input.idempotencyKey,
            input.hash,
            payment.protocol,
            `${payment.protocol}:${owner}`,
            null,
            now,
            rail,
          ],
        )
        await recordCharge(tx, id, 'create', spec.max_amount_usdc_micros, payment, null)
        const task = (await loadTask(tx, id, true)) as TaskRow
        await applyTransition(tx, task, { next: initial.next, effects: initial.effects }, { now, ceiling_micros: ceiling, available_micros: spec.max_amount_usdc_micros, run_in_flight: false })
      })
    } catch (error) {
      await tasks.delete(namespace, id).catch(() => {})
      if (isUniqueViolation(error)) throw new AppError('IDEMPOTENCY_CONFLICT', 'A concurrent create used this Idempotency-Key; retry to get its task', { field: 'header.idempotency-key' })
      throw error
    }
    if (deps.envSecrets && Object.keys(spec.env).length > 0) await deps.envSecrets.put(id, resource.metadata.uid, spec.env)
    return { id, task: await currentView(id) }
  }

  /**
   * A payment into the escrow. Marketplace rail: the cap is raised at once (an audit row, no
   * money). Direct rail: a provisional charge, bound to the payment, that enters the ledger only
   * when the payment settles (with its transaction hash).
   */
  async function recordCharge(tx: Queryable, taskId: string, kind: 'create' | 'top_up', amount: Micros, payment: PaymentFacts, fundingKey: string | null): Promise<void> {
    if (payment.replayKey === null) {
      await tx.query(`insert into scheduler_ledger (task_id, kind, amount_micros) values ($1, 'charge', $2)`, [taskId, amount])
      return
    }
    await tx.query(`insert into scheduler_charges (replay_key, task_id, kind, amount_micros, funding_key, state) values ($1, $2, $3, $4, $5, 'provisional')`, [
      payment.replayKey,
      taskId,
      kind,
      amount,
      fundingKey,
    ])
    await payment.bind?.(tx, SCHEDULER_CHARGE_EFFECT)
  }

  /** The task as GET shows it (no owner check: callers checked or created it). */
  async function currentView(taskId: string): Promise<Record<string, unknown>> {
    return view(db, (await loadTask(db, taskId)) as TaskRow)
  }

  /**
   * The payments module's side of direct-rail escrow payments: a settled charge enters the ledger
   * with its transaction hash; a failed one is reversed (a failed create deletes its task and
   * frees its Idempotency-Key; a failed top-up frees its key). Either lets a closing escrow close.
   * Runs inside the payment decision's transaction, so it happens once, after any crash.
   */
  const chargeOutcomes: OutcomeHandler = {
    async settled(tx, replayKey, reference) {
      const charge = await provisionalCharge(tx, replayKey)
      if (charge === undefined) return
      await tx.query(`update scheduler_charges set state = 'settled', tx_hash = $2, decided_at = $3 where replay_key = $1`, [replayKey, reference, clock.now()])
      await tx.query(`insert into scheduler_ledger (task_id, kind, amount_micros, replay_key, tx_hash) values ($1, 'charge', $2, $3, $4)`, [charge.task_id, charge.amount_micros, replayKey, reference])
      await decidedEvent(tx, charge.task_id, { settled: true, create: charge.kind === 'create' })
    },
    async failed(tx, replayKey) {
      const charge = await provisionalCharge(tx, replayKey)
      if (charge === undefined) return
      await tx.query(`update scheduler_charges set state = 'reversed', decided_at = $2 where replay_key = $1`, [replayKey, clock.now()])
      if (charge.funding_key !== null) await tx.query(`delete from scheduler_fundings where task_id = $1 and idempotency_key = $2`, [charge.task_id, charge.funding_key])
      if (charge.kind === 'create') {
        // A retry with the same Idempotency-Key creates a new task instead of finding this one.
        await tx.query(`update scheduler_tasks set idempotency_key = idempotency_key || ':payment-failed:' || id where id = $1`, [charge.task_id])
      }
      await decidedEvent(tx, charge.task_id, { settled: false, create: charge.kind === 'create' })
    },
    async afterCommit(replayKey) {
      const row = (await db.query<{ task_id: string }>(`select task_id from scheduler_charges where replay_key = $1`, [replayKey]))[0]
      if (row === undefined) return
      const task = (await loadTask(db, row.task_id)) as TaskRow
      if (task.resource_sync_pending === true) await syncTaskResource(task.id)
      await refunds.send(task.id)
    },
  }

  async function provisionalCharge(tx: Queryable, replayKey: string) {
    const charge = (
      await tx.query<{ task_id: string; kind: 'create' | 'top_up'; amount_micros: bigint; funding_key: string | null; state: string }>(
        `select task_id, kind, amount_micros, funding_key, state from scheduler_charges where replay_key = $1 for update`,
        [replayKey],
      )
    )[0]
    return charge?.state === 'provisional' ? charge : undefined
  }

  async function decidedEvent(tx: Queryable, taskId: string, event: { settled: boolean; create: boolean }): Promise<void> {
    const task = (await loadTask(tx, taskId, true)) as TaskRow
    const facts = await factsOf(tx, task)
    await applyTransition(tx, task, transition(snapshot(task), { type: 'payment_decided', ...event }, facts), facts)
  }

  async function precheckFund(
    taskId: string,
    body: { top_up_amount_micros: unknown },
    idempotencyKey: string,
    headerAmount: Micros | undefined,
    /** Who asks: the plan holder of Authorization: Bearer (marketplace), and whether a payment credential came. */
    requester: { holder?: PlanHolder | undefined; credential: boolean } = { credential: true },
  ): Promise<{ amount: Micros } | { existing: Record<string, unknown> }> {
    const task = await loadTask(db, taskId)
    if (task === undefined) throw new AppError('TASK_NOT_FOUND', `No task ${taskId}`, { field: 'path.id' })
    // The rail of the top-up must be the rail of the task (marketplace.ts): a plan token raises the
    // cap of its own marketplace task; a payment tops up a direct-rail escrow.
    if (requester.holder !== undefined && task.rail === 'direct') {
      throw new AppError('CHANNEL_MISMATCH', `Task ${taskId} is on the direct rail: top it up with an x402 / MPP payment through the channel that created it (${task.payment_channel}), not with a plan token`, {
        extensions: { expected_channel: task.payment_channel, rail: task.rail },
      })
    }
    if (task.rail === 'marketplace') {
      if (requester.holder === undefined) {
        if (requester.credential) {
          throw new AppError('CHANNEL_MISMATCH', `Task ${taskId} is on the marketplace rail: nothing is paid to the scheduler; raise its cap with the owner's plan token (Authorization: Bearer <accessToken>) and no payment`, {
            extensions: { expected_channel: task.payment_channel, rail: task.rail },
          })
        }
        throw new AppError('bearer_required', `Task ${taskId} is on the marketplace rail: send the owner's plan token as Authorization: Bearer <accessToken>; nothing is charged`, {
          field: 'header.authorization',
          extensions: { rail: task.rail },
        })
      }
      if (task.owner !== requester.holder.owner) throw new AppError('TASK_NOT_FOUND', `No task ${taskId} belongs to this plan holder`, { field: 'path.id' })
    }
    const amount = BigInt(String(body.top_up_amount_micros))
    const prior = (await db.query<{ amount_micros: bigint }>(`select amount_micros from scheduler_fundings where task_id = $1 and idempotency_key = $2`, [taskId, idempotencyKey]))[0]
    if (prior !== undefined) {
      if (prior.amount_micros !== amount) throw new AppError('IDEMPOTENCY_CONFLICT', 'This Idempotency-Key funded another amount', { field: 'header.idempotency-key' })
      return { existing: await view(db, task) }
    }
    if (task.rail === 'marketplace' ? headerAmount !== undefined && headerAmount !== amount : headerAmount !== amount) {
      throw new AppError('VALIDATION_ERROR', `X-Pay-Amount-Micros (${headerAmount ?? 'missing'}) must equal top_up_amount_micros (${amount})`, { field: 'header.x-pay-amount-micros' })
    }
    if (task.rail === 'marketplace' && !isTerminal(task.status)) await marketplace.assertCanRun(task)
    // Refuse before payment what the state machine would refuse after it.
    transition(snapshot(task), { type: 'fund', amount_micros: amount }, await factsOf(db, task))
    return { amount }
  }

  async function fundTask(input: { taskId: string; amount: Micros; idempotencyKey: string; payment: PaymentFacts }): Promise<{ task: Record<string, unknown> }> {
    const { taskId, amount, payment } = input
    let task!: TaskRow
    const after = await db.transaction(async (tx) => {
      task = (await loadTask(tx, taskId, true)) as TaskRow
      if (task.payment_channel !== null && task.payment_channel !== `${payment.protocol}:${lower(payment.payer)}`) {
        throw new AppError('CHANNEL_MISMATCH', `Fund through the channel that created the task (${task.payment_channel}); this payment came from ${payment.protocol}:${lower(payment.payer)}`, {
          extensions: { expected_channel: task.payment_channel },
        })
      }
      const facts = await factsOf(tx, task)
      const result = transition(snapshot(task), { type: 'fund', amount_micros: amount }, facts)
      await tx.query(`insert into scheduler_fundings (task_id, idempotency_key, amount_micros) values ($1, $2, $3)`, [taskId, input.idempotencyKey, amount])
      await recordCharge(tx, taskId, 'top_up', amount, payment, input.idempotencyKey)
      return applyTransition(tx, task, result, facts)
    })
    await runAfterCommit(task, after)
    return { task: await currentView(taskId) }
  }

  // ------------------------------------------------------------------ owner operations

  async function getTask(taskId: string, owner: string) {
    return view(db, await ownedTask(db, taskId, owner))
  }

  async function event(taskId: string, owner: string, make: (task: TaskRow) => Parameters<typeof transition>[1]) {
    let task!: TaskRow
    const after = await db.transaction(async (tx) => {
      task = await ownedTask(tx, taskId, owner, true)
      const facts = await factsOf(tx, task)
      return applyTransition(tx, task, transition(snapshot(task), make(task), facts), facts)
    })
    await runAfterCommit(task, after)
    return view(db, (await loadTask(db, taskId)) as TaskRow)
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
    const spec: StoredSpec = { ...task.spec }
    if (patch.notify_email !== undefined) spec.notify_email = patch.notify_email
    if (patch.end_at !== undefined) spec.end_at = patch.end_at
    if (patch.tool_list !== undefined) spec.tool_list = patch.tool_list
    if (patch.max_sibling_spend_micros !== undefined) spec.max_sibling_spend_micros = patch.max_sibling_spend_micros.toString()
    if (patch.max_runtime_sec !== undefined) spec.max_runtime_sec = patch.max_runtime_sec
    await db.transaction(async (tx) => {
      await ownedTask(tx, taskId, owner, true)
      if (patch.max_runtime_sec !== undefined && (await runInFlight(tx, taskId))) {
        throw new AppError('RUN_IN_FLIGHT', 'max_runtime_sec cannot change while a run is claimed or running', { field: 'body.max_runtime_sec' })
      }
      await tx.query(`update scheduler_tasks set spec = $2, updated_at = $3 where id = $1`, [taskId, spec, clock.now()])
    })
    if (patch.end_at !== undefined || patch.max_runtime_sec !== undefined) {
      await updateTaskResource(taskId, (current) => {
        const next: TaskResourceSpec = { ...current, maxRuntimeSec: spec.max_runtime_sec }
        if (spec.end_at === null) delete next.endAt
        else next.endAt = spec.end_at
        return next
      })
    }
    return view(db, (await loadTask(db, taskId)) as TaskRow)
  }

  async function replaceEnv(taskId: string, owner: string, body: { env: unknown }) {
    const env = validateEnv(body.env, rates)
    const task = await ownedTask(db, taskId, owner)
    if (isTerminal(task.status)) transition(snapshot(task), { type: 'pause' }, await factsOf(db, task)) // throws the terminal state's error
    const keys = Object.keys(env).sort()
    const now = clock.now()
    await db.query(`update scheduler_tasks set env_ciphertext = $2, env_keys = $3, updated_at = $4 where id = $1`, [
      taskId,
      keys.length > 0 ? secrets.encryptEnv(taskId, env) : null,
      toJson(keys),
      now,
    ])
    if (deps.envSecrets) {
      const resource = await tasks.get(namespace, taskId)
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
    if (isTerminal(task.status)) transition(snapshot(task), { type: 'pause' }, await factsOf(db, task))
    const secret = newBearerSecret('whsec_')
    const now = clock.now()
    await db.query(`update scheduler_tasks set webhook_secret_hash = $2, webhook_rotated_at = $3, updated_at = $3 where id = $1`, [taskId, secretHash(secret), now])
    return { task_id: taskId, secret, webhook_url: `${deps.publicUrl}/api/v1/tasks/${taskId}/webhook`, created_at: now.toISOString() }
  }

  async function disableWebhook(taskId: string, owner: string) {
    await ownedTask(db, taskId, owner)
    await db.query(`update scheduler_tasks set webhook_secret_hash = null, updated_at = $2 where id = $1`, [taskId, clock.now()])
    return { task_id: taskId, webhook_enabled: false as const }
  }

  async function deleteTask(taskId: string, owner: string) {
    let task!: TaskRow
    const after = await db.transaction(async (tx) => {
      task = await ownedTask(tx, taskId, owner, true)
      const facts = await factsOf(tx, task)
      return applyTransition(tx, task, transition(snapshot(task), { type: 'delete' }, facts), facts)
    })
    await runAfterCommit(task, after)
    const fresh = (await loadTask(db, taskId)) as TaskRow
    const refund = await refundOutlook(fresh)
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
  async function refundOutlook(task: TaskRow) {
    const sent = (
      await db.query<{ amount_micros: bigint; tx_hash: string | null; state: string; next_attempt_at: Date; error: string | null }>(
        `select amount_micros, tx_hash, state, next_attempt_at, error from scheduler_refunds where task_id = $1`,
        [task.id],
      )
    )[0]
    const base = { amount_micros: '0', estimated: false, tx_hash: null as string | null, expected_by: null as string | null }
    if (sent !== undefined) {
      const amount = sent.amount_micros.toString()
      if (sent.state === 'confirmed') return { ...base, state: 'confirmed' as const, amount_micros: amount, tx_hash: sent.tx_hash, detail: 'Refunded on-chain to the paying wallet.' }
      const retrying = sent.state === 'failed'
      return {
        ...base,
        state: retrying ? ('retrying' as const) : ('sending' as const),
        amount_micros: amount,
        tx_hash: sent.tx_hash,
        expected_by: sent.next_attempt_at.toISOString(),
        detail: retrying ? `The refund could not be sent yet (${sent.error ?? 'unknown'}); it is retried automatically until it is confirmed.` : 'The refund transaction is on its way.',
      }
    }
    if (task.rail === 'marketplace') return { ...base, state: 'none' as const, detail: 'Marketplace rail: the cap is not money held for you; nothing is refunded.' }
    const { summary, inFlight, pending } = await escrowFacts(db, task.id)
    if (summary.closed) {
      return { ...base, state: 'none' as const, detail: `The remainder (${summary.forfeited_micros} micros) was below the minimum refund and was forfeited as dust.` }
    }
    if (inFlight) {
      const run = (await db.query<{ started_at: Date | null; created_at: Date }>(`select started_at, created_at from scheduler_runs where task_id = $1 and status in ('claimed', 'running') limit 1`, [task.id]))[0]
      const from = run?.started_at ?? run?.created_at ?? clock.now()
      const by = new Date(Math.max(from.getTime(), clock.nowMs()) + (task.spec.max_runtime_sec + 60) * 1000)
      return {
        ...base,
        state: 'after_run' as const,
        // At least the balance less the run's reserved ceiling; the run's actual cost decides.
        amount_micros: (summary.balance_micros - summary.reserved_micros + pending).toString(),
        estimated: true,
        expected_by: by.toISOString(),
        detail: 'A run is in flight: it was asked to stop, and the balance less its actual cost is refunded as soon as it finishes.',
      }
    }
    if (pending > 0n) {
      return {
        ...base,
        state: 'after_payment' as const,
        amount_micros: (summary.balance_micros + pending).toString(),
        estimated: true,
        detail: 'A payment into this escrow is still settling on-chain; the refund is sent once it is known (the part that settles is refunded, a failed part was never taken).',
      }
    }
    return { ...base, state: 'none' as const, detail: 'Nothing is left to refund.' }
  }

  // ------------------------------------------------------------------ runs: reads

  function logsUrl(runId: string): string {
    return `${deps.publicUrl}/api/v1/runs/${runId}/logs?sig=${secrets.sign(`logs:${runId}`)}`
  }

  async function ownedRun(runId: string, owner: string): Promise<RunRow> {
    const rows = await db.query<RunRow & { owner: string }>(`select r.*, t.owner from scheduler_runs r join scheduler_tasks t on t.id = r.task_id where r.id = $1`, [runId])
    const run = rows[0]
    if (run === undefined || run.owner !== lower(owner)) throw new AppError('not_found', `No run ${runId} of this wallet`, { field: 'path.id' })
    return run
  }

  async function getRun(runId: string, owner: string) {
    const run = await ownedRun(runId, owner)
    return runView(run, logsUrl(run.id), outputCap)
  }

  async function runLogs(runId: string, signature: string): Promise<string> {
    if (!secrets.verify(`logs:${runId}`, signature)) throw new AppError('not_found', 'Unknown log URL', { field: 'query.sig' })
    const blob = await deps.logs.get(`runs/${runId}/output.log`)
    if (blob !== undefined) return blob.data.toString('utf8')
    const run = (await db.query<RunRow>(`select * from scheduler_runs where id = $1`, [runId]))[0]
    if (run === undefined) throw new AppError('not_found', `No run ${runId}`, { field: 'path.id' })
    return `${run.stdout}${run.stderr ? `\n--- stderr ---\n${run.stderr}` : ''}`
  }

  async function listRuns(taskId: string, owner: string, query: { cursor?: string; limit?: number }) {
    await ownedTask(db, taskId, owner)
    const limit = query.limit ?? 20
    let before: { at: Date; id: string } | undefined
    if (query.cursor !== undefined) {
      const [at, id] = Buffer.from(query.cursor, 'base64url').toString('utf8').split('|')
      if (!at || !id || Number.isNaN(Date.parse(at))) throw new AppError('VALIDATION_ERROR', 'cursor is not one this API issued', { field: 'query.cursor' })
      before = { at: new Date(at), id }
    }
    const rows = await db.query<RunRow>(
      before === undefined
        ? `select * from scheduler_runs where task_id = $1 order by created_at desc, id desc limit $2`
        : `select * from scheduler_runs where task_id = $1 and (created_at, id) < ($3, $4) order by created_at desc, id desc limit $2`,
      before === undefined ? [taskId, limit + 1] : [taskId, limit + 1, before.at, before.id],
    )
    const page = rows.slice(0, limit)
    const last = page[page.length - 1]
    return {
      runs: page.map(runSlimView),
      next_cursor: rows.length > limit && last ? Buffer.from(`${last.created_at.toISOString()}|${last.id}`).toString('base64url') : null,
    }
  }

  async function taskLedger(taskId: string, owner: string) {
    const task = await ownedTask(db, taskId, owner)
    const rows = await db.query<{ id: bigint; kind: string; amount_micros: bigint; run_id: string | null; tx_hash: string | null; refund_tx: string | null; created_at: Date }>(
      `select l.id, l.kind, l.amount_micros, l.run_id, l.tx_hash, r.tx_hash as refund_tx, l.created_at
         from scheduler_ledger l left join scheduler_refunds r on r.task_id = l.task_id and l.kind = 'refund' and r.state = 'confirmed'
        where l.task_id = $1 order by l.id`,
      [taskId],
    )
    // 'usage' rows (marketplace rail) restate a run's cost as reported on the meter: left out of the
    // sum, which is then the remaining lifetime cap (direct rail: no usage rows, the escrow balance).
    const sum = rows.reduce((acc, row) => (row.kind === 'usage' ? acc : acc + row.amount_micros), 0n)
    return {
      task_id: taskId,
      rail: task.rail,
      rows: rows.map((row) => ({
        id: row.id.toString(),
        kind: row.kind,
        amount_micros: row.amount_micros.toString(),
        tx_hash: row.tx_hash ?? row.refund_tx ?? null,
        run_id: row.run_id,
        created_at: row.created_at.toISOString(),
      })),
      sum_micros: sum.toString(),
      authoritative: task.rail === 'direct',
      // A closed direct escrow: whether its refund row is on-chain yet, or still owed and why.
      ...(isTerminal(task.status) && task.rail === 'direct' ? { refund: await refundOutlook(task) } : {}),
    }
  }

  /**
   * A task's total settled cost (its run_cost rows), as GET …/usage counts it; undefined for an
   * unknown task. Read by the TaskController after every finished run, so the reads of concurrent
   * callers are grouped into one query.
   */
  const costBatcher = new Batcher<string, bigint | undefined>(
    async (taskIds) => {
      const rows = await db.query<{ id: string; cost: bigint | null }>(
        `select t.id, ${TASK_COST_SQL} from scheduler_tasks t where t.id = any($1::text[])`,
        [taskIds],
      )
      const costs = new Map(rows.map((row) => [row.id, row.cost ?? 0n]))
      return taskIds.map((id) => costs.get(id))
    },
    (taskId) => taskId,
    200,
  )
  const taskCost = (taskId: string): Promise<bigint | undefined> => costBatcher.submit(taskId)

  async function ownerUsage(owner: string) {
    const rows = await db.query<{ id: string; status: string; rail: string; runs: bigint; cost: bigint | null; balance: bigint | null; refunded: bigint | null }>(
      `select t.id, t.status, t.rail,
              (select count(*) from scheduler_runs r where r.task_id = t.id and r.status not in ('skipped')) as runs,
              ${TASK_COST_SQL},
              (select coalesce(sum(amount_micros), 0) from scheduler_ledger l where l.task_id = t.id and l.kind <> 'usage')::int8 as balance,
              (select -coalesce(sum(amount_micros), 0) from scheduler_ledger l where l.task_id = t.id and l.kind = 'refund')::int8 as refunded
         from scheduler_tasks t where t.owner = $1 order by t.created_at`,
      [lower(owner)],
    )
    const totals = { tasks: rows.length, runs: 0, cost: 0n, balance: 0n, refunded: 0n }
    const list = rows.map((row) => {
      totals.runs += Number(row.runs)
      totals.cost += row.cost ?? 0n
      totals.balance += row.balance ?? 0n
      totals.refunded += row.refunded ?? 0n
      return {
        task_id: row.id,
        status: row.status,
        rail: row.rail,
        runs: Number(row.runs),
        cumulative_cost_micros: (row.cost ?? 0n).toString(),
        balance_micros: (row.balance ?? 0n).toString(),
      }
    })
    return {
      owner: lower(owner),
      tasks: list,
      totals: {
        tasks: totals.tasks,
        runs: totals.runs,
        cumulative_cost_micros: totals.cost.toString(),
        balance_micros: totals.balance.toString(),
        refunded_micros: totals.refunded.toString(),
      },
    }
  }

  // ------------------------------------------------------------------ runs: lifecycle

  /**
   * Dispatch decision for one run, in one transaction (decideDispatch): the state machine's
   * `dispatch` event with the funding check; on start, the run row is inserted holding the per-run
   * ceiling as its reservation. Idempotent per run id: a run already claimed is returned as claimed.
   */
  async function claimRun(input: { runId: string; taskId: string; trigger: RunTrigger }): Promise<RunClaim> {
    let decided: Awaited<ReturnType<typeof decideDispatch>>
    try {
      decided = await decideDispatch([input], false)
    } catch (error) {
      // The one-in-flight index: a concurrent claim won. Synchronous callers get their SPEC code.
      if (isUniqueViolation(error)) {
        if (input.trigger === 'webhook') throw new AppError('RATE_LIMIT', 'A webhook run of this task is already in flight; one at a time')
        if (input.trigger === 'manual') throw new AppError('RUN_IN_FLIGHT', 'A run of this task is claimed or running; one run at a time')
        return { kind: 'deferred' }
      }
      throw error
    }
    for (const { task, after } of decided.afters) await runAfterCommit(task, after)
    const result = decided.results[0] as DispatchResult
    return result.kind === 'claimed' ? { kind: 'claimed', run: result.run } : result
  }

  /**
   * The run controller's dispatch: the dispatch decision (decideDispatch) and, for a run claimed
   * (or running, when adopted), its execution request with a fresh helper token. Calls are
   * group-committed: one transaction decides a batch of runs (one per task), so thousands of runs
   * due in the same minute are dispatched in a few dozen transactions. Never throws a SPEC error: only
   * the schedule, trigger and continuation triggers come here (sync runs are claimed by the API).
   */
  function dispatchRun(input: DispatchInput): Promise<DispatchResult> {
    return dispatchBatcher.submit(input)
  }

  const dispatchBatcher = new Batcher<DispatchInput, DispatchResult>(
    async (inputs) => {
      try {
        return await dispatchBatch(inputs)
      } catch (error) {
        // A concurrent claim of one of these tasks won the one-in-flight index: decide one by one.
        if (!isUniqueViolation(error) || inputs.length === 1) {
          if (isUniqueViolation(error)) return [{ kind: 'deferred' }]
          throw error
        }
        const out: DispatchResult[] = []
        for (const input of inputs) out.push(await dispatchBatch([input]).then((r) => r[0] as DispatchResult, (e: unknown) => (isUniqueViolation(e) ? { kind: 'deferred' } : Promise.reject(e))))
        return out
      }
    },
    (input) => input.taskId,
    200,
  )

  /**
   * The dispatch decision for a batch of runs, in one transaction: tasks locked in id order, the
   * facts of all of them read in one statement, the run rows written in one. `tokens`: claimed runs
   * get a fresh helper token (the controller's dispatch, which then builds their requests); the
   * API's synchronous claim needs none. The caller runs the after-commit work.
   */
  async function decideDispatch(
    inputs: readonly DispatchDecisionInput[],
    tokens: boolean,
  ): Promise<{ results: DispatchResult[]; afters: { task: TaskRow; after: AfterCommit }[] }> {
    const afters: { task: TaskRow; after: AfterCommit }[] = []
    const results = await db.transaction(async (tx) => {
      const now = clock.now()
      const existing = new Map(
        (await tx.query<RunRow>(`select * from scheduler_runs where id = any($1::text[])`, [inputs.map((input) => input.runId)])).map((row) => [row.id, row]),
      )
      const fresh = inputs.filter((input) => !existing.has(input.runId))
      const taskIds = [...new Set(fresh.map((input) => input.taskId))].sort()
      const tasks = new Map(
        taskIds.length === 0 ? [] : (await tx.query<TaskRow>(`select * from scheduler_tasks where id = any($1::text[]) order by id for update`, [taskIds])).map((task) => [task.id, task]),
      )
      const known = taskIds.length === 0 ? new Map() : await escrowFactsMany(tx, taskIds)
      const out: (DispatchResult | { pending: RunRowInsert })[] = []
      const inserts: RunRowInsert[] = []
      const tokenUpdates: { id: string; token: string }[] = []
      const heldByOwner = new Map<string, bigint>()
      for (const input of inputs) {
        const row = existing.get(input.runId)
        if (row !== undefined) {
          if (row.status === 'skipped') out.push({ kind: 'skipped', reason: row.outcome ?? 'skipped', message: row.error ?? 'skipped' })
          else if (tokens && (row.status === 'claimed' || row.status === 'running')) {
            const token = newBearerSecret('run_')
            tokenUpdates.push({ id: row.id, token })
            out.push({ kind: 'claimed', run: row, token })
          } else out.push({ kind: 'claimed', run: row })
          continue
        }
        const task = tasks.get(input.taskId)
        if (task === undefined) {
          // The Task resource is written before the task row commits (createTask): a run created
          // ahead for a task made seconds before its slot can get here first. Look again later.
          out.push(input.ahead === true ? { kind: 'deferred' } : { kind: 'skipped', reason: 'TaskNotFound', message: `task ${input.taskId} does not exist` })
          continue
        }
        const facts = await factsOf(tx, task, known.get(task.id), heldByOwner.get(task.owner) ?? 0n)
        const result = transition(snapshot(task), { type: 'dispatch', trigger: input.trigger }, facts)
        if (input.ahead === true && result.effects.some((effect) => effect.type === 'skip_run' && effect.reason === 'run_in_flight')) {
          out.push({ kind: 'deferred' })
          continue
        }
        const after = await applyTransition(tx, task, result, facts)
        afters.push({ task, after })
        const start = result.effects.find((effect) => effect.type === 'start_run')
        if (start && start.type === 'start_run') {
          if (task.rail === 'marketplace') heldByOwner.set(task.owner, (heldByOwner.get(task.owner) ?? 0n) + start.reserve_micros)
          const token = tokens ? newBearerSecret('run_') : null
          const insert: RunRowInsert = { id: input.runId, task_id: task.id, trigger: input.trigger, status: 'claimed', reserved: start.reserve_micros, outcome: null, error: null, token_hash: token === null ? null : secretHash(token), finished: null, token }
          inserts.push(insert)
          out.push({ pending: insert })
          continue
        }
        if (result.effects.some((effect) => effect.type === 'defer_run')) {
          out.push({ kind: 'deferred' })
          continue
        }
        const skip = result.effects.find((effect) => effect.type === 'skip_run')
        const reason = skip && skip.type === 'skip_run' ? skip.reason : 'not_active'
        const message = skipMessage(reason, facts.ceiling_micros, result.next)
        inserts.push({ id: input.runId, task_id: task.id, trigger: input.trigger, status: 'skipped', reserved: 0n, outcome: reason, error: message, token_hash: null, finished: now, token: null })
        out.push({ kind: 'skipped', reason, message })
      }
      const written = new Map<string, RunRow>()
      if (inserts.length > 0) {
        const rows = await tx.query<RunRow>(
          `insert into scheduler_runs (id, task_id, trigger, status, reserved_micros, outcome, error, token_hash, created_at, finished_at)
           select i.id, i.task_id, i.trigger, i.status, i.reserved, i.outcome, i.error, i.token_hash, $9, i.finished
             from unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int8[], $6::text[], $7::text[], $8::text[], $10::timestamptz[])
                  as i(id, task_id, trigger, status, reserved, outcome, error, token_hash, finished)
           returning *`,
          [
            inserts.map((i) => i.id),
            inserts.map((i) => i.task_id),
            inserts.map((i) => i.trigger),
            inserts.map((i) => i.status),
            inserts.map((i) => i.reserved),
            inserts.map((i) => i.outcome),
            inserts.map((i) => i.error),
            inserts.map((i) => i.token_hash),
            now,
            inserts.map((i) => i.finished),
          ],
        )
        for (const row of rows) written.set(row.id, row)
      }
      if (tokenUpdates.length > 0) {
        await tx.query(`update scheduler_runs r set token_hash = u.hash from unnest($1::text[], $2::text[]) as u(id, hash) where r.id = u.id`, [
          tokenUpdates.map((u) => u.id),
          tokenUpdates.map((u) => secretHash(u.token)),
        ])
      }
      return out.map((entry): DispatchResult =>
        'pending' in entry ? { kind: 'claimed', run: written.get(entry.pending.id) as RunRow, ...(entry.pending.token === null ? {} : { token: entry.pending.token }) } : entry,
      )
    })
    return { results, afters }
  }

  async function dispatchBatch(inputs: readonly DispatchInput[]): Promise<DispatchResult[]> {
    const { results, afters } = await decideDispatch(inputs, true)
    for (const { task, after } of afters) {
      await runAfterCommit(task, after).catch((error: unknown) => logger.warn({ err: error, taskId: task.id }, 'post-dispatch work failed'))
    }
    // The requests of claimed runs: code and env from the task rows (read after commit, unlocked).
    const needed = [...new Set(results.flatMap((result, i) => (result.kind === 'claimed' && result.token !== undefined ? [(inputs[i] as DispatchInput).taskId] : [])))]
    const specs = new Map(
      needed.length === 0
        ? []
        : (await db.query<{ id: string; spec: StoredSpec; env_ciphertext: string | null }>(`select id, spec, env_ciphertext from scheduler_tasks where id = any($1::text[])`, [needed])).map((row) => [row.id, row]),
    )
    return results.map((result, i) => {
      if (result.kind !== 'claimed' || result.token === undefined) return result
      const input = inputs[i] as DispatchInput
      const task = specs.get(input.taskId)
      if (task === undefined) return { kind: 'claimed', run: result.run }
      return { kind: 'claimed', run: result.run, request: requestOf(input.runId, task, result.token, input.signal) }
    })
  }

  function skipMessage(reason: string, ceiling: Micros, state: string): string {
    return reason === 'insufficient_funds'
      ? `skipped: the escrow is below the per-run ceiling (${formatUsd(ceiling)} USD); the task is paused until funded`
      : reason === 'run_in_flight'
        ? 'skipped: another run of this task was in flight'
        : reason === 'schedule_ended'
          ? 'skipped: the schedule ended'
          : `skipped: the task is ${state}`
  }

  function requestOf(runId: string, task: { id: string; spec: StoredSpec; env_ciphertext: string | null }, token: string, signal: AbortSignal): Omit<ExecutionRequest, 'namespace' | 'taskUid' | 'runUid'> {
    return {
      runName: runId,
      taskName: task.id,
      runtime: task.spec.runtime,
      source: task.spec.source,
      entrypoint: task.spec.entrypoint,
      env: secrets.decryptEnv(task.id, task.env_ciphertext),
      envSecretName: `${task.id}-env`,
      dependencies: task.spec.dependencies,
      maxRuntimeSec: task.spec.max_runtime_sec,
      helper: { url: `${internalUrl}/internal/v1/runs/${runId}`, token },
      signal,
    }
  }

  /**
   * claimed → running, exactly once per run, for a batch of runs in one statement; `adopt` names
   * runs already running whose attempt is re-attached. Returns the ids this call started.
   */
  async function startRuns(runIds: readonly string[], adopt: readonly string[] = []): Promise<Set<string>> {
    if (runIds.length === 0) return new Set()
    const rows = await db.query<{ id: string }>(
      `update scheduler_runs set status = 'running', started_at = coalesce(started_at, $3)
        where id = any($1::text[]) and (status = 'claimed' or (status = 'running' and id = any($2::text[])))
        returning id`,
      [runIds, adopt, clock.now()],
    )
    return new Set(rows.map((row) => row.id))
  }

  /** Runs claimed or running since before `before` (the run controller's orphan sweep). */
  async function openRuns(before: Date): Promise<{ id: string; status: string }[]> {
    return db.query<{ id: string; status: string }>(`select id, status from scheduler_runs where status in ('claimed', 'running') and created_at < $1 order by created_at`, [before])
  }

  /** A claimed run that never started (deleted or cancelled before its instant): settled at no cost. */
  async function releaseRun(runId: string, reason: string): Promise<{ run: RunRow }> {
    const now = clock.now()
    return finishRun(runId, {
      outcome: 'cancelled',
      exitCode: null,
      stdout: '',
      stderr: '',
      stdoutBytes: 0,
      stderrBytes: 0,
      startedAt: now,
      finishedAt: now,
      durationMs: 0,
      installDurationMs: 0,
      runtimeVersion: 'none',
      error: reason,
      notStarted: true,
    })
  }

  /** What a finished attempt costs: runtime and install by the started second, helper meters, overhead. */
  function costOf(run: RunRow, result: ExecutionResult): Micros {
    if (result.outcome === 'infra_error' || result.notStarted === true) return 0n
    const seconds = (ms: number) => BigInt(Math.ceil(Math.max(0, ms) / 1000))
    return (
      seconds(result.durationMs) * rates.sandbox_per_second_micros +
      seconds(result.installDurationMs) * rates.dependency_install.per_second_micros +
      run.sibling_spend_micros +
      run.llm_cost_micros +
      rates.overhead_micros
    )
  }

  const OUTCOME_STATUS: Record<ExecutionResult['outcome'], RunRow['status']> = {
    succeeded: 'succeeded',
    failed: 'failed',
    timed_out: 'timed_out',
    cancelled: 'cancelled',
    infra_error: 'failed',
  }

  /**
   * Settles a finished attempt, once: the run_cost row (min(actual, reserved)), the reservation
   * released, the run record, the task's state machine (`run_finished`), a continuation, the
   * completion e-mail. Returns the final run row. A second call returns the same row.
   */
  async function finishRun(runId: string, result: ExecutionResult): Promise<{ run: RunRow; continuation?: { delaySec: number } }> {
    const input = { runId, result }
    const outcome = await finishBatcher.submit(input)
    if (outcome === undefined) throw new Error(`run ${runId} was never claimed`)
    return afterFinish(input, outcome)
  }

  // Settlements are group-committed like dispatches: one transaction settles a batch of runs, the
  // ledger rows and run records written in one statement each; each caller then does its own
  // post-commit work.
  const finishBatcher = new Batcher<FinishInput, FinishOutcome | undefined>((inputs) => finishBatch(inputs), (input) => input.runId, 200)

  interface FinishInput {
    runId: string
    result: ExecutionResult
  }

  interface FinishOutcome {
    run: RunRow
    /** Set when this call settled the run (not when it was settled already). */
    task?: TaskRow
    after?: AfterCommit
    continuation?: { delaySec: number }
  }

  async function finishBatch(inputs: readonly FinishInput[]): Promise<(FinishOutcome | undefined)[]> {
    return db.transaction(async (tx) => {
      const ids = inputs.map((input) => input.runId)
      const current = new Map((await tx.query<RunRow>(`select * from scheduler_runs where id = any($1::text[]) order by id for update`, [ids])).map((row) => [row.id, row]))
      // One run per task is settled per pass; another of the same task (never in normal flight:
      // one run at a time) goes in the next pass of this transaction, seeing the first's effects.
      const outcomes = new Map<string, FinishOutcome>()
      let pending = inputs.filter((input) => {
        const row = current.get(input.runId)
        if (row === undefined) return false // never claimed: that caller gets the error
        if (!(RUN_FINAL_STATUSES as readonly string[]).includes(row.status)) return true
        outcomes.set(input.runId, { run: row })
        return false
      })
      while (pending.length > 0) {
        const seen = new Set<string>()
        const pass: FinishInput[] = []
        const later: FinishInput[] = []
        for (const input of pending) {
          const taskId = (current.get(input.runId) as RunRow).task_id
          if (seen.has(taskId)) later.push(input)
          else {
            seen.add(taskId)
            pass.push(input)
          }
        }
        for (const [id, outcome] of await settlePass(tx, pass, current)) outcomes.set(id, outcome)
        pending = later
      }
      return inputs.map((input) => outcomes.get(input.runId))
    })
  }

  async function settlePass(tx: Queryable, pass: readonly FinishInput[], current: Map<string, RunRow>): Promise<Map<string, FinishOutcome>> {
    const taskIds = [...new Set(pass.map((input) => (current.get(input.runId) as RunRow).task_id))].sort()
    const tasks = new Map((await tx.query<TaskRow>(`select * from scheduler_tasks where id = any($1::text[]) order by id for update`, [taskIds])).map((task) => [task.id, task]))
    const cap = rates.hard_caps.max_output_bytes_in_run
    const ledger: { task_id: string; amount: bigint; run_id: string }[] = []
    const updates: unknown[][] = []
    for (const { runId, result } of pass) {
      const run = current.get(runId) as RunRow
      const settled = finalizeRun({ run_id: runId, amount_micros: run.reserved_micros }, costOf(run, result))
      for (const row of settled.rows) ledger.push({ task_id: run.task_id, amount: row.amount_micros, run_id: runId })
      if (settled.absorbed_micros > 0n) logger.warn({ runId, absorbed: settled.absorbed_micros.toString() }, 'run cost above its reservation was absorbed')
      updates.push([
        runId,
        OUTCOME_STATUS[result.outcome],
        settled.charged_micros,
        result.exitCode,
        result.outcome,
        // A script's output may hold bytes Postgres text cannot (NUL): kept, replaced by U+FFFD.
        result.error === undefined ? null : storableText(result.error),
        truncateUtf8(storableText(result.stdout), cap),
        truncateUtf8(storableText(result.stderr), cap),
        result.stdoutBytes,
        result.stderrBytes,
        result.runtimeVersion,
        Math.round(result.installDurationMs),
        result.notStarted === true ? null : result.startedAt,
        result.finishedAt,
      ])
    }
    if (ledger.length > 0) {
      await tx.query(
        `insert into scheduler_ledger (task_id, kind, amount_micros, run_id) select l.task_id, 'run_cost', l.amount, l.run_id from unnest($1::text[], $2::int8[], $3::text[]) with ordinality as l(task_id, amount, run_id, ord) order by l.ord`,
        [ledger.map((l) => l.task_id), ledger.map((l) => l.amount), ledger.map((l) => l.run_id)],
      )
    }
    const column = (i: number) => updates.map((u) => u[i])
    const finishedRows = await tx.query<RunRow>(
      `update scheduler_runs r set status = u.status, reserved_micros = 0, cost_micros = u.cost, exit_code = u.exit_code, outcome = u.outcome, error = u.error,
              stdout = u.stdout, stderr = u.stderr, stdout_bytes = u.stdout_bytes, stderr_bytes = u.stderr_bytes, runtime_version = u.runtime_version,
              install_ms = u.install_ms, started_at = coalesce(r.started_at, u.started_at), finished_at = u.finished_at, token_hash = null
         from unnest($1::text[], $2::text[], $3::int8[], $4::int4[], $5::text[], $6::text[], $7::text[], $8::text[], $9::int8[], $10::int8[], $11::text[], $12::int4[], $13::timestamptz[], $14::timestamptz[])
              as u(id, status, cost, exit_code, outcome, error, stdout, stderr, stdout_bytes, stderr_bytes, runtime_version, install_ms, started_at, finished_at)
        where r.id = u.id
        returning r.*`,
      [column(0), column(1), column(2), column(3), column(4), column(5), column(6), column(7), column(8), column(9), column(10), column(11), column(12), column(13)],
    )
    const finished = new Map(finishedRows.map((row) => [row.id, row]))
    const known = await escrowFactsMany(tx, taskIds)
    const out = new Map<string, FinishOutcome>()
    for (const { runId, result } of pass) {
      const before = current.get(runId) as RunRow
      const task = tasks.get(before.task_id) as TaskRow
      const run = finished.get(runId) as RunRow
      current.set(runId, run)
      const infraFailures = result.outcome === 'infra_error' ? task.consecutive_infra_failures + 1 : 0
      const wantsContinuation = before.continuation_delay_sec !== null && result.outcome === 'succeeded' && task.status === 'active'
      const chain = wantsContinuation ? (before.trigger === 'continuation' ? task.consecutive_continuations : 0) + 1 : 0
      if (infraFailures !== task.consecutive_infra_failures || chain !== task.consecutive_continuations) {
        await tx.query(`update scheduler_tasks set consecutive_infra_failures = $2, consecutive_continuations = $3 where id = $1`, [task.id, infraFailures, chain])
      }
      const facts = await factsOf(tx, task, known.get(task.id))
      const outcome: RunOutcome = result.outcome
      const after = await applyTransition(tx, task, transition(snapshot(task), { type: 'run_finished', outcome, consecutive_infra_failures: infraFailures }, facts), facts)
      Object.assign(after, await marketplace.reportRunUsage(tx, task, run)) // marketplace rail: usage report + plan debit once per run, may pause (marketplace.ts)
      out.set(runId, { run, task, after, ...(wantsContinuation ? { continuation: { delaySec: before.continuation_delay_sec as number } } : {}) })
    }
    return out
  }

  /** After a settlement commits: the run log, the task's follow-up, a continuation, the e-mail. */
  async function afterFinish(input: FinishInput, outcome: FinishOutcome): Promise<{ run: RunRow; continuation?: { delaySec: number } }> {
    const { run, task, after, continuation } = outcome
    const { runId, result } = input
    if (task === undefined || after === undefined) return { run }
    if (result.notStarted === true) {
      // Released before it started: no log, no e-mail, no continuation; the task's follow-up (a
      // refund once a deleted task's last run is settled) still happens.
      await runAfterCommit(task, after)
      return { run }
    }
    const log = `${result.stdout}${result.stderr ? `\n--- stderr ---\n${result.stderr}` : ''}`
    await deps.logs.put(`runs/${runId}/output.log`, Buffer.from(log), 'text/plain; charset=utf-8').catch((error: unknown) => logger.warn({ err: error, runId }, 'storing the run log failed'))
    await runAfterCommit(task, after)
    if (continuation) await createRunResource(task.id, 'continuation', new Date(clock.nowMs() + continuation.delaySec * 1000))
    if (task.spec.notify_email && (run.trigger === 'schedule' || run.trigger === 'trigger' || run.trigger === 'continuation')) {
      deps.mailer
        .send({
          to: task.spec.notify_email,
          subject: `[agent-gateway] run ${run.id} of task ${task.id}: ${run.status}`,
          text:
            `Task ${task.id} ran (${run.trigger}) and ${run.status}${run.exit_code === null ? '' : ` with exit code ${run.exit_code}`}.\n` +
            `Cost: ${formatUsd(run.cost_micros)} USD.\nRun: ${deps.publicUrl}/api/v1/runs/${run.id}\nLogs: ${logsUrl(run.id)}\n`,
        })
        .catch((error: unknown) => logger.warn({ err: error, runId }, 'completion e-mail failed'))
    }
    return continuation ? { run, continuation } : { run }
  }

  /** Creates a Run resource outside the cron reconciler (manual, webhook, continuation). */
  async function createRunResource(taskId: string, trigger: TriggerType, notBefore?: Date): Promise<string> {
    const task = await tasks.get(namespace, taskId)
    if (task === undefined) throw new AppError('TASK_NOT_FOUND', `Task ${taskId} has no resource`)
    const at = notBefore ?? clock.now()
    const name = `${taskId}-${trigger[0]}${at.getTime().toString(36)}${randomBytes(2).toString('hex')}`
    try {
      await runs.create({
        apiVersion: TASK_API_VERSION,
        kind: 'Run',
        metadata: {
          name,
          namespace,
          labels: { 'jobs.agent-gateway.dev/task': taskId, 'jobs.agent-gateway.dev/trigger': trigger },
          ownerReferences: [{ kind: 'Task', name: taskId, uid: task.metadata.uid }],
        },
        spec: {
          taskRef: { name: taskId, uid: task.metadata.uid, generation: task.metadata.generation },
          trigger: { type: trigger, scheduledTime: at.toISOString() },
          ...(notBefore ? { notBefore: notBefore.toISOString() } : {}),
        },
        status: { phase: 'Pending' },
      })
    } catch (error) {
      if (!isAlreadyExists(error)) throw error
    }
    return name
  }

  /**
   * POST /runs and the webhook: claims synchronously (so refusals answer this request), creates the
   * Run resource the controller executes, and waits until the run is finalised.
   */
  async function runSynchronously(task: TaskRow, trigger: 'manual' | 'webhook') {
    if (task.status === 'active') await marketplace.assertCanRun(task) // marketplace rail: 403 plan_required without a covering plan
    const runId = `${task.id}-${trigger[0]}${clock.nowMs().toString(36)}${randomBytes(2).toString('hex')}`
    const claim = await claimRun({ runId, taskId: task.id, trigger })
    if (claim.kind !== 'claimed') {
      const fresh = (await loadTask(db, task.id)) as TaskRow
      transition(snapshot(fresh), { type: 'dispatch', trigger }, await factsOf(db, fresh)) // throws the state's error
      throw new AppError('TASK_PAUSED_INSUFFICIENT_FUNDS', claim.kind === 'skipped' ? claim.message : 'The run could not start')
    }
    const resource = await tasks.get(namespace, task.id)
    try {
      await runs.create({
        apiVersion: TASK_API_VERSION,
        kind: 'Run',
        metadata: {
          name: runId,
          namespace,
          labels: { 'jobs.agent-gateway.dev/task': task.id, 'jobs.agent-gateway.dev/trigger': trigger },
          ownerReferences: resource ? [{ kind: 'Task', name: task.id, uid: resource.metadata.uid }] : [],
        },
        spec: { taskRef: { name: task.id, ...(resource ? { uid: resource.metadata.uid } : {}) }, trigger: { type: trigger, scheduledTime: clock.now().toISOString() } },
        status: { phase: 'Queued' },
      })
    } catch (error) {
      // Nothing will execute it: release the reservation at no cost.
      await finishRun(runId, lostResult('the run could not be handed to the controller'))
      throw error
    }
    const deadline = Date.now() + (task.spec.max_runtime_sec * 1000 + task.spec.dependencies.length * rates.dependency_install.budget_sec_per_package * 1000 + (deps.syncSlackMs ?? 60_000))
    for (;;) {
      const run = (await db.query<RunRow>(`select * from scheduler_runs where id = $1`, [runId]))[0] as RunRow
      if ((RUN_FINAL_STATUSES as readonly string[]).includes(run.status)) return runView(run, logsUrl(runId), outputCap)
      if (Date.now() > deadline) throw new AppError('INTERNAL', `Run ${runId} did not finish in time; see GET /api/v1/runs/${runId}`)
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
  }

  async function runNow(taskId: string, owner: string) {
    return runSynchronously(await ownedTask(db, taskId, owner), 'manual')
  }

  async function runWebhook(taskId: string, bearer: string | undefined) {
    const task = await loadTask(db, taskId)
    if (task === undefined) throw new AppError('TASK_NOT_FOUND', `No task ${taskId}`, { field: 'path.id' })
    if (bearer === undefined || task.webhook_secret_hash === null || secretHash(bearer) !== task.webhook_secret_hash) {
      throw new AppError('API_KEY_INVALID', 'Send the webhook secret as Authorization: Bearer whsec_…; it is invalid or the webhook is disabled', {
        field: 'header.authorization',
      })
    }
    return runSynchronously(task, 'webhook')
  }

  function lostResult(reason: string): ExecutionResult {
    const now = clock.now()
    return { outcome: 'infra_error', exitCode: null, stdout: '', stderr: '', stdoutBytes: 0, stderrBytes: 0, startedAt: now, finishedAt: now, durationMs: 0, installDurationMs: 0, runtimeVersion: 'unknown', error: reason }
  }

  async function runRow(runId: string): Promise<RunRow | undefined> {
    return (await db.query<RunRow>(`select * from scheduler_runs where id = $1`, [runId]))[0]
  }

  // ------------------------------------------------------------------ accounts and keys

  async function accountOf(owner: string): Promise<{ id: string; created_at: Date; plan: string; status: string }> {
    const id = newId('acct')
    await db.query(`insert into scheduler_accounts (id, owner) values ($1, $2) on conflict (owner) do nothing`, [id, lower(owner)])
    return (await db.query<{ id: string; created_at: Date; plan: string; status: string }>(`select id, created_at, plan, status from scheduler_accounts where owner = $1`, [lower(owner)]))[0]!
  }

  async function createKey(owner: string) {
    const account = await accountOf(owner)
    const key = newBearerSecret('agk_')
    const id = newId('key')
    const now = clock.now()
    await db.query(`insert into scheduler_api_keys (id, account_id, prefix, key_hash, created_at) values ($1, $2, $3, $4, $5)`, [id, account.id, key.slice(0, 10), secretHash(key), now])
    return { id, key, prefix: key.slice(0, 10), account_id: account.id, created_at: now.toISOString() }
  }

  /** The account of an API key; throws API_KEY_INVALID. Records last_used_at. */
  async function accountForKey(bearer: string | undefined): Promise<{ id: string; owner: string }> {
    if (bearer === undefined) throw new AppError('API_KEY_INVALID', 'Send the account API key as Authorization: Bearer agk_…', { field: 'header.authorization' })
    const rows = await db.query<{ account_id: string; owner: string }>(
      `update scheduler_api_keys k set last_used_at = $2 from scheduler_accounts a
        where k.key_hash = $1 and k.revoked_at is null and a.id = k.account_id returning k.account_id, a.owner`,
      [secretHash(bearer), clock.now()],
    )
    const row = rows[0]
    if (row === undefined) throw new AppError('API_KEY_INVALID', 'The API key is unknown or revoked', { field: 'header.authorization' })
    return { id: row.account_id, owner: row.owner }
  }

  async function keysOf(accountId: string) {
    const rows = await db.query<{ id: string; prefix: string; created_at: Date; revoked_at: Date | null; last_used_at: Date | null }>(
      `select id, prefix, created_at, revoked_at, last_used_at from scheduler_api_keys where account_id = $1 order by created_at, id`,
      [accountId],
    )
    return rows.map((row) => ({ id: row.id, prefix: row.prefix, created_at: row.created_at.toISOString(), revoked_at: row.revoked_at?.toISOString() ?? null, last_used_at: row.last_used_at?.toISOString() ?? null }))
  }

  async function getAccount(account: { id: string; owner: string }) {
    const info = (await db.query<{ created_at: Date; plan: string; status: string }>(`select created_at, plan, status from scheduler_accounts where id = $1`, [account.id]))[0]!
    const usage = await ownerUsage(account.owner)
    const active = await db.query<{ n: bigint }>(`select count(*)::int8 as n from scheduler_tasks where owner = $1 and status = 'active'`, [account.owner])
    const now = clock.now()
    const start = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1))
    const end = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1))
    return {
      id: account.id,
      plan: info.plan,
      status: info.status,
      period: { start: start.toISOString(), end: end.toISOString() },
      credit_balance_micros: usage.totals.balance_micros,
      tasks_active: Number(active[0]?.n ?? 0n),
      runs_lifetime: usage.totals.runs,
      keys: await keysOf(account.id),
    }
  }

  async function revokeKey(account: { id: string }, keyId: string) {
    const rows = await db.query<{ account_id: string; revoked_at: Date | null }>(`select account_id, revoked_at from scheduler_api_keys where id = $1`, [keyId])
    const key = rows[0]
    if (key === undefined || key.account_id !== account.id) throw new AppError('API_KEY_NOT_FOUND', `No key ${keyId} in this account`, { field: 'path.id' })
    const updated = await db.query<{ revoked_at: Date }>(`update scheduler_api_keys set revoked_at = coalesce(revoked_at, $2) where id = $1 returning revoked_at`, [keyId, clock.now()])
    return { id: keyId, revoked_at: updated[0]!.revoked_at.toISOString() }
  }

  /** Account ledger: the owner's escrow movements as grant / reversal / cost_finalize, newest first. */
  async function accountLedger(account: { owner: string }, query: { cursor?: string; limit?: number }) {
    const limit = query.limit ?? 20
    let before: bigint | undefined
    if (query.cursor !== undefined) {
      if (!/^\d{1,19}$/.test(query.cursor)) throw new AppError('VALIDATION_ERROR', 'cursor is not one this API issued', { field: 'query.cursor' })
      before = BigInt(query.cursor)
    }
    const rows = await db.query<{ id: bigint; kind: string; amount_micros: bigint; task_id: string; run_id: string | null; created_at: Date }>(
      `select l.id, l.kind, l.amount_micros, l.task_id, l.run_id, l.created_at from scheduler_ledger l join scheduler_tasks t on t.id = l.task_id
        where t.owner = $1 and l.kind <> 'usage' ${before === undefined ? '' : 'and l.id < $3'} order by l.id desc limit $2`,
      before === undefined ? [account.owner, limit + 1] : [account.owner, limit + 1, before],
    )
    const kindOf = (kind: string) => (kind === 'charge' ? 'grant' : kind === 'run_cost' ? 'cost_finalize' : 'reversal')
    const page = rows.slice(0, limit)
    return {
      rows: page.map((row) => ({ id: row.id.toString(), kind: kindOf(row.kind), amount_micros: row.amount_micros.toString(), task_id: row.task_id, run_id: row.run_id, created_at: row.created_at.toISOString() })),
      next_cursor: rows.length > limit ? page[page.length - 1]!.id.toString() : null,
    }
  }

  return {
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
    getRun,
    runLogs,
    listRuns,
    taskLedger,
    ownerUsage,
    taskCost,
    runNow,
    runWebhook,
    claimRun,
    dispatchRun,
    startRuns,
    releaseRun,
    openRuns,
    finishRun,
    lostResult,
    runRow,
    recover,
    syncTaskResource,
    chargeOutcomes,
    currentView,
    /** Outstanding refunds (metrics, readiness detail). */
    refundStanding: () => refunds.standing(),
    createKey,
    accountForKey,
    getAccount,
    keysOf,
    revokeKey,
    accountLedger,
    /** Escrow of one task, for invariant checks. */
    escrow: (taskId: string) => escrowOf(db, taskId),
    /** The marketplace rail: plan access of create/fund/owner calls, usage reports of runs. */
    marketplace,
  }
}

export type SchedulerService = ReturnType<typeof createSchedulerService>
