// The scheduler's writes of Task and Run resources (the ResourceStore port: Kubernetes custom
// resources, or their Postgres/PGlite twin): a task's resource from its row, spec changes retried
// on resourceVersion conflicts, the status-change outbox (a row flagged `resource_sync_pending` in
// the transaction that changed its status is brought in line after commit, or by the recovery
// sweep), the removal of resources whose create never committed, and Runs made outside the cron.
import { randomBytes } from 'node:crypto'
import type { Db } from '../platform/db/index.ts'
import { AppError } from '../platform/errors.ts'
import type { Clock } from '../platform/clock.ts'
import type { Logger } from '../platform/logger.ts'
import { isTerminal } from './domain/states.ts'
import { ownerLabel } from './marketplace.ts'
import type { StoredSpec, TaskRow } from './records.ts'
import { clearResourceSyncPending, existingTaskIds, resourceSyncState, tasksOwingResourceSync } from './task-store.ts'
import { isAlreadyExists, isConflict, NotFoundError, type ResourceStore, type RunResource, type TaskResource, type TaskResourceSpec, type TriggerType } from './contract/index.ts'

export const TASK_API_VERSION = 'jobs.agent-gateway.dev/v1alpha1'

/** A Task resource this old without its row is an orphan of a crashed create. */
const ORPHAN_GRACE_MS = 10 * 60_000
const ORPHAN_SWEEP_EVERY_MS = 60 * 60_000

export interface TaskResourcesDeps {
  db: Db
  clock: Clock
  logger: Logger
  tasks: ResourceStore<TaskResource>
  runs: ResourceStore<RunResource>
  namespace: string
}

export type NewTaskResource = Omit<TaskResource, 'metadata'> & { metadata: { name: string; namespace: string; labels: Record<string, string> } }

export function createTaskResources(deps: TaskResourcesDeps) {
  const { db, clock, logger, tasks, runs, namespace } = deps
  let lastOrphanSweep = 0

  /** The declared half of a task (docs/architecture.md "Where a task's fields live"), from the spec its row stores. */
  function taskResource(task: { id: string; owner: string; status: string }, spec: StoredSpec): NewTaskResource {
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

  /** Replaces the Task resource's spec with `change` applied, retrying on resourceVersion conflicts. */
  async function updateSpec(taskId: string, change: (spec: TaskResourceSpec) => TaskResourceSpec): Promise<void> {
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

  async function remove(taskId: string): Promise<void> {
    await tasks.delete(namespace, taskId).catch((error: unknown) => {
      if (!(error instanceof NotFoundError)) throw error
    })
  }

  /** Clears the row's flag once its resource matches `status` (a newer change keeps it set). */
  async function synced(taskId: string, status: TaskRow['status']): Promise<void> {
    await clearResourceSyncPending(db, taskId, status)
  }

  /** Brings the Task resource in line with its row (suspend, or deletion when terminal), if it is owed a write. */
  async function sync(taskId: string): Promise<void> {
    const row = await resourceSyncState(db, taskId)
    if (row === undefined || !row.resource_sync_pending) return
    if (isTerminal(row.status)) await remove(taskId)
    else {
      const suspend = row.status !== 'active'
      await updateSpec(taskId, (spec) => (spec.suspend === suspend ? spec : { ...spec, suspend }))
    }
    await synced(taskId, row.status)
  }

  /**
   * Task resources without a task row: a create writes the resource first and deletes it if the
   * row's transaction fails, so only a process dying in between leaves one (its cron would create
   * Runs that are only ever skipped). Those older than `before` (default: ORPHAN_GRACE_MS ago,
   * longer than any create takes) are deleted.
   */
  async function removeOrphans(before = new Date(clock.nowMs() - ORPHAN_GRACE_MS)): Promise<number> {
    lastOrphanSweep = clock.nowMs()
    const old = (await tasks.list(namespace)).items.filter((resource) => Date.parse(resource.metadata.creationTimestamp) < before.getTime())
    if (old.length === 0) return 0
    const names = old.map((r) => r.metadata.name)
    const known = await existingTaskIds(db, names)
    let removed = 0
    for (const resource of old) {
      if (known.has(resource.metadata.name)) continue
      await remove(resource.metadata.name)
      removed += 1
    }
    if (removed > 0) logger.info({ removed }, 'removed Task resources whose create never committed')
    return removed
  }

  /**
   * The resource half of crash recovery: orphans (at `orphanedBefore`, when the caller knows every
   * earlier writer is dead; else hourly with the grace), then every row still owed a write.
   */
  async function recover(orphanedBefore?: Date): Promise<number> {
    if (orphanedBefore !== undefined || clock.nowMs() - lastOrphanSweep > ORPHAN_SWEEP_EVERY_MS) await removeOrphans(orphanedBefore)
    const owed = await tasksOwingResourceSync(db)
    for (const id of owed) {
      await sync(id).catch((error: unknown) => logger.warn({ err: error, taskId: id }, 'Task resource sync failed; retried on the next pass'))
    }
    return owed.length
  }

  /** A Run made outside the cron reconciler (continuation, trigger), named for its instant. */
  async function createRun(taskId: string, trigger: TriggerType, notBefore?: Date): Promise<string> {
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

  /** The Run of a synchronous run (POST /runs, the webhook), already claimed under `runId`. */
  async function createClaimedRun(taskId: string, runId: string, trigger: 'manual' | 'webhook'): Promise<void> {
    const resource = await tasks.get(namespace, taskId)
    await runs.create({
      apiVersion: TASK_API_VERSION,
      kind: 'Run',
      metadata: {
        name: runId,
        namespace,
        labels: { 'jobs.agent-gateway.dev/task': taskId, 'jobs.agent-gateway.dev/trigger': trigger },
        ownerReferences: resource ? [{ kind: 'Task', name: taskId, uid: resource.metadata.uid }] : [],
      },
      spec: { taskRef: { name: taskId, ...(resource ? { uid: resource.metadata.uid } : {}) }, trigger: { type: trigger, scheduledTime: clock.now().toISOString() } },
      status: { phase: 'Queued' },
    })
  }

  return {
    taskResource,
    updateSpec,
    remove,
    synced,
    sync,
    recover,
    createRun,
    createClaimedRun,
    get: (taskId: string) => tasks.get(namespace, taskId),
    create: (resource: NewTaskResource) => tasks.create(resource),
  }
}

export type TaskResources = ReturnType<typeof createTaskResources>
