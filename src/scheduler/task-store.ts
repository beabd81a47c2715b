// The scheduler_tasks table: every statement that writes it, and every read of it but two kinds
// of join: the escrow's (escrow-store.ts: settled costs, an owner's totals and ledger pages, a plan
// holder's reservations) and a run's with its task (run-store.ts: the owner check, the helpers'
// token check). Each function is one statement over any Queryable (a transaction or the pool), so
// callers compose them in their own transaction and keep its lock order (run-store.ts says it;
// many tasks are locked in id order). Which of a task's fields the row holds and which the Task
// resource: docs/architecture.md "Where a task's fields live".
import type { Queryable } from '../platform/db/index.ts'
import { toJson } from '../platform/db/index.ts'
import type { Rail } from './contract/index.ts'
import type { SerializedHint, StoredSpec, TaskRow } from './records.ts'

// ------------------------------------------------------------------ loading

export async function taskById(q: Queryable, taskId: string): Promise<TaskRow | undefined> {
  return (await q.query<TaskRow>(`select * from scheduler_tasks where id = $1`, [taskId]))[0]
}

/** The task row locked until the transaction ends: every money decision on a task holds it. */
export async function taskForUpdate(q: Queryable, taskId: string): Promise<TaskRow | undefined> {
  return (await q.query<TaskRow>(`select * from scheduler_tasks where id = $1 for update`, [taskId]))[0]
}

/** Many task rows locked in id order (a batch of dispatches or settlements). */
export async function tasksForUpdate(q: Queryable, taskIds: readonly string[]): Promise<TaskRow[]> {
  return q.query<TaskRow>(`select * from scheduler_tasks where id = any($1::text[]) order by id for update`, [taskIds])
}

export async function taskByIdempotencyKey(q: Queryable, idempotencyKey: string): Promise<TaskRow | undefined> {
  return (await q.query<TaskRow>(`select * from scheduler_tasks where idempotency_key = $1`, [idempotencyKey]))[0]
}

export async function taskStatus(q: Queryable, taskId: string): Promise<TaskRow['status'] | undefined> {
  return (await q.query<{ status: TaskRow['status'] }>(`select status from scheduler_tasks where id = $1`, [taskId]))[0]?.status
}

/** What a claimed run's sandbox request is built from (unlocked: these fields never change). */
export async function taskExecutionSpecs(q: Queryable, taskIds: readonly string[]): Promise<{ id: string; spec: StoredSpec; env_ciphertext: string | null }[]> {
  return q.query<{ id: string; spec: StoredSpec; env_ciphertext: string | null }>(`select id, spec, env_ciphertext from scheduler_tasks where id = any($1::text[])`, [taskIds])
}

export async function activeTaskCount(q: Queryable, owner: string): Promise<number> {
  const rows = await q.query<{ n: bigint }>(`select count(*)::int8 as n from scheduler_tasks where owner = $1 and status = 'active'`, [owner])
  return Number(rows[0]?.n ?? 0n)
}

// ------------------------------------------------------------------ writing

export interface NewTask {
  id: string
  owner: string
  rail: Rail
  status: TaskRow['status']
  spec: StoredSpec
  env_ciphertext: string | null
  env_keys: readonly string[]
  idempotency_key: string
  request_hash: string
  payment_protocol: string
  payment_channel: string
  at: Date
}

export async function insertTask(q: Queryable, task: NewTask): Promise<void> {
  await q.query(
    `insert into scheduler_tasks (id, owner, rail, status, spec, env_ciphertext, env_keys, idempotency_key, request_hash, payment_protocol, payment_channel, recovery_hint, created_at, updated_at)
           values ($1, $2, $13, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $12)`,
    [
      task.id,
      task.owner,
      task.status,
      task.spec,
      task.env_ciphertext,
      toJson(task.env_keys),
      task.idempotency_key,
      task.request_hash,
      task.payment_protocol,
      task.payment_channel,
      null,
      task.at,
      task.rail,
    ],
  )
}

/**
 * A transition's status and recovery hint; a deletion stamps deleted_at once. A status change
 * flags the row as owing its Task resource a write (cleared by clearResourceSyncPending).
 */
export async function writeTaskState(q: Queryable, taskId: string, status: TaskRow['status'], hint: SerializedHint | null, at: Date): Promise<void> {
  await q.query(
    `update scheduler_tasks set status = $2, recovery_hint = $3, updated_at = $4, deleted_at = case when $2 = 'deleted' then coalesce(deleted_at, $4) else deleted_at end,
                resource_sync_pending = resource_sync_pending or $2 <> status
          where id = $1`,
    [taskId, status, hint, at],
  )
}

/** An active marketplace task whose holder's plan no longer covers a run. */
export async function pauseActiveForFunds(q: Queryable, taskId: string, hint: SerializedHint, at: Date): Promise<void> {
  await q.query(`update scheduler_tasks set status = 'paused_insufficient_funds', recovery_hint = $2, updated_at = $3 where id = $1 and status = 'active'`, [taskId, hint, at])
}

/** The run-finished counters: infrastructure failures in a row, continuations in a chain. */
export async function setConsecutiveCounts(q: Queryable, taskId: string, infraFailures: number, continuations: number): Promise<void> {
  await q.query(`update scheduler_tasks set consecutive_infra_failures = $2, consecutive_continuations = $3 where id = $1`, [taskId, infraFailures, continuations])
}

/**
 * PATCH: only the fields it changed are merged into the stored spec, so the fields fixed at create
 * (source, runtime, schedule, …) have insertTask as their one writer.
 */
export async function mergeTaskSpec(q: Queryable, taskId: string, changes: Partial<StoredSpec>, at: Date): Promise<void> {
  await q.query(`update scheduler_tasks set spec = spec || $2::jsonb, updated_at = $3 where id = $1`, [taskId, changes, at])
}

export async function setTaskEnv(q: Queryable, taskId: string, envCiphertext: string | null, envKeys: readonly string[], at: Date): Promise<void> {
  await q.query(`update scheduler_tasks set env_ciphertext = $2, env_keys = $3, updated_at = $4 where id = $1`, [taskId, envCiphertext, toJson(envKeys), at])
}

export async function setWebhookSecretHash(q: Queryable, taskId: string, secretHash: string, at: Date): Promise<void> {
  await q.query(`update scheduler_tasks set webhook_secret_hash = $2, webhook_rotated_at = $3, updated_at = $3 where id = $1`, [taskId, secretHash, at])
}

export async function clearWebhookSecret(q: Queryable, taskId: string, at: Date): Promise<void> {
  await q.query(`update scheduler_tasks set webhook_secret_hash = null, updated_at = $2 where id = $1`, [taskId, at])
}

/** A create whose payment failed: a retry with the same Idempotency-Key creates a new task. */
export async function releaseIdempotencyKey(q: Queryable, taskId: string): Promise<void> {
  await q.query(`update scheduler_tasks set idempotency_key = idempotency_key || ':payment-failed:' || id where id = $1`, [taskId])
}

// ------------------------------------------------------------------ the Task resource outbox

export async function resourceSyncState(q: Queryable, taskId: string): Promise<{ status: TaskRow['status']; resource_sync_pending: boolean } | undefined> {
  return (await q.query<{ status: TaskRow['status']; resource_sync_pending: boolean }>(`select status, resource_sync_pending from scheduler_tasks where id = $1`, [taskId]))[0]
}

/** The row's resource write is done, if its status is still `status` (a newer change keeps the flag). */
export async function clearResourceSyncPending(q: Queryable, taskId: string, status: TaskRow['status']): Promise<void> {
  await q.query(`update scheduler_tasks set resource_sync_pending = false where id = $1 and status = $2`, [taskId, status])
}

/** Rows still owed a resource write, longest waiting first, 500 at most (one recovery pass). */
export async function tasksOwingResourceSync(q: Queryable): Promise<string[]> {
  const rows = await q.query<{ id: string }>(`select id from scheduler_tasks where resource_sync_pending order by updated_at limit 500`)
  return rows.map((row) => row.id)
}

/** Which of `taskIds` have a row. */
export async function existingTaskIds(q: Queryable, taskIds: readonly string[]): Promise<Set<string>> {
  return new Set((await q.query<{ id: string }>(`select id from scheduler_tasks where id = any($1::text[])`, [taskIds])).map((row) => row.id))
}
