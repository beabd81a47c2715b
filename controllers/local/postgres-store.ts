// The embedded ResourceStore backend: Task and Run resources in Postgres or PGlite (same SQL),
// schema in src/migrations/0003_resources.sql.
// - resourceVersion: one global counter row bumped inside every write transaction. Its row lock is
//   held until COMMIT, so writes commit in RV order and "events after n" never skips a late commit.
// - watch: polls resource_events every `pollMs` (default 100 ms) and is woken at once by writes made
//   through any store on the same Db handle in this process.
// - retention: events beyond the newest `eventRetention` per kind are pruned (every
//   `compactEvery` writes, or via compact()); the pruned horizon is recorded, and a watch from an RV
//   below it rejects with GoneError (410) so the informer relists.
// - status writes are a top-level merge (RFC 7386 style: a null value removes the key).
// - cut for now: finalizers are stored but delete does not wait for them (no deletionTimestamp phase).
import { randomUUID } from 'node:crypto'
import { EventEmitter } from 'node:events'
import { toJson, type Db, type Queryable, type Row } from '../../src/platform/db/index.ts'
import {
  ConflictError,
  GoneError,
  NotFoundError,
  type AnyResource,
  type ListOptions,
  type ListResult,
  type NewResource,
  type ObjectMeta,
  type ResourceKind,
  type ResourceStore,
  type WatchEvent,
  type WatchEventType,
  type WatchOptions,
} from '../resource-store.ts'

export interface PostgresStoreOptions {
  kind: ResourceKind
  apiVersion?: string
  /** Clock for creationTimestamp (tests inject a fake one). */
  now?: () => Date
  pollMs?: number
  eventRetention?: number
  compactEvery?: number
}

interface ResourceRow extends Row {
  kind: string
  namespace: string
  name: string
  api_version: string
  uid: string
  resource_version: bigint
  generation: bigint
  creation_timestamp: Date
  deletion_timestamp: Date | null
  labels: Record<string, string>
  owner_references: ObjectMeta['ownerReferences']
  finalizers: string[]
  spec: unknown
  status: unknown
}

const wakers = new WeakMap<Db, EventEmitter>()
function waker(db: Db): EventEmitter {
  let emitter = wakers.get(db)
  if (emitter === undefined) {
    emitter = new EventEmitter()
    emitter.setMaxListeners(0)
    wakers.set(db, emitter)
  }
  return emitter
}

function toResource<R extends AnyResource>(row: ResourceRow): R {
  const metadata: ObjectMeta = {
    name: row.name,
    namespace: row.namespace,
    uid: row.uid,
    resourceVersion: String(row.resource_version),
    generation: Number(row.generation),
    creationTimestamp: row.creation_timestamp.toISOString(),
  }
  if (row.deletion_timestamp !== null) metadata.deletionTimestamp = row.deletion_timestamp.toISOString()
  if (Object.keys(row.labels).length > 0) metadata.labels = row.labels
  if (row.owner_references !== undefined && row.owner_references.length > 0) metadata.ownerReferences = row.owner_references
  if (row.finalizers.length > 0) metadata.finalizers = row.finalizers
  const resource: AnyResource = { apiVersion: row.api_version, kind: row.kind as ResourceKind, metadata, spec: row.spec }
  if (row.status !== null) resource.status = row.status
  return resource as R
}

async function nextRv(tx: Queryable): Promise<bigint> {
  const [row] = await tx.query<{ rv: bigint }>('update resource_version_counter set rv = rv + 1 returning rv')
  if (row === undefined) throw new Error('resource_version_counter is empty: run migrations')
  return row.rv
}

async function appendEvent(tx: Queryable, rv: bigint, type: WatchEventType, object: AnyResource): Promise<void> {
  await tx.query('insert into resource_events (resource_version, kind, type, object) values ($1, $2, $3, $4::jsonb)', [
    rv,
    object.kind,
    type,
    toJson(object),
  ])
}

function parseRv(value: string): bigint {
  if (!/^\d+$/.test(value)) throw new GoneError(`invalid resourceVersion "${value}"`)
  return BigInt(value)
}

export class PostgresResourceStore<R extends AnyResource> implements ResourceStore<R> {
  readonly kind: ResourceKind
  readonly #db: Db
  readonly #apiVersion: string
  readonly #now: () => Date
  readonly #pollMs: number
  readonly #retention: number
  readonly #compactEvery: number

  constructor(db: Db, options: PostgresStoreOptions) {
    this.#db = db
    this.kind = options.kind
    this.#apiVersion = options.apiVersion ?? 'jobs.agent-gateway.dev/v1alpha1'
    this.#now = options.now ?? (() => new Date())
    this.#pollMs = options.pollMs ?? 100
    this.#retention = options.eventRetention ?? 1000
    this.#compactEvery = options.compactEvery ?? 100
  }

  async get(namespace: string, name: string): Promise<R | undefined> {
    const [row] = await this.#db.query<ResourceRow>('select * from resources where kind = $1 and namespace = $2 and name = $3', [
      this.kind,
      namespace,
      name,
    ])
    return row === undefined ? undefined : toResource<R>(row)
  }

  async list(namespace?: string, options: ListOptions = {}): Promise<ListResult<R>> {
    // One statement = one snapshot: the items and the counter agree, so a watch from list_rv misses nothing.
    const rows = await this.#db.query<ResourceRow & { list_rv: bigint }>(
      `select c.rv as list_rv, r.* from resource_version_counter c
         left join resources r on r.kind = $1
           and ($2::text is null or r.namespace = $2::text)
           and ($3::jsonb is null or r.labels @> $3::jsonb)
           and ($4::text is null or r.spec #>> '{taskRef,name}' = $4::text)
           and ($5::text is null or r.status ->> 'phase' = $5::text)
       order by r.namespace, r.name`,
      [
        this.kind,
        namespace ?? null,
        options.labelSelector === undefined ? null : toJson(options.labelSelector),
        options.fieldSelector?.['spec.taskRef.name'] ?? null,
        options.fieldSelector?.['status.phase'] ?? null,
      ],
    )
    const first = rows[0]
    if (first === undefined) throw new Error('resource_version_counter is empty: run migrations')
    return {
      resourceVersion: String(first.list_rv),
      items: rows.filter((row) => row.name !== null).map((row) => toResource<R>(row)),
    }
  }

  async create(resource: NewResource<R>): Promise<R> {
    const meta = resource.metadata
    const created = await this.#write(async (tx) => {
      const rv = await nextRv(tx)
      const [row] = await tx.query<ResourceRow>(
        `insert into resources (kind, namespace, name, api_version, uid, resource_version, generation, creation_timestamp,
           labels, owner_references, spec, status)
         values ($1, $2, $3, $4, $5, $6, 1, $7, $8::jsonb, $9::jsonb, $10::jsonb, $11::jsonb)
         on conflict (kind, namespace, name) do nothing
         returning *`,
        [
          this.kind,
          meta.namespace,
          meta.name,
          resource.apiVersion || this.#apiVersion,
          randomUUID(),
          rv,
          this.#now(),
          toJson(meta.labels ?? {}),
          toJson(meta.ownerReferences ?? []),
          toJson(resource.spec ?? {}),
          resource.status === undefined ? null : toJson(resource.status),
        ],
      )
      if (row === undefined) throw new ConflictError('AlreadyExists', `${this.kind} ${meta.namespace}/${meta.name} already exists`)
      const object = toResource<R>(row)
      await appendEvent(tx, rv, 'ADDED', object)
      await this.#maybeCompact(tx, rv)
      return object
    })
    return created
  }

  async replaceSpec(resource: R): Promise<R> {
    const meta = resource.metadata
    return this.#write(async (tx) => {
      const rv = await nextRv(tx)
      const [row] = await tx.query<ResourceRow>(
        `update resources set
           generation = generation + (case when spec is distinct from $5::jsonb then 1 else 0 end),
           spec = $5::jsonb, labels = $6::jsonb, resource_version = $7
         where kind = $1 and namespace = $2 and name = $3 and resource_version = $4
         returning *`,
        [this.kind, meta.namespace, meta.name, parseRv(meta.resourceVersion), toJson(resource.spec ?? {}), toJson(meta.labels ?? {}), rv],
      )
      if (row === undefined) throw await this.#missOrConflict(tx, meta.namespace, meta.name)
      const object = toResource<R>(row)
      await appendEvent(tx, rv, 'MODIFIED', object)
      await this.#maybeCompact(tx, rv)
      return object
    })
  }

  async patchStatus(namespace: string, name: string, status: R['status'], options: { resourceVersion?: string } = {}): Promise<R> {
    return this.#write(async (tx) => {
      const rv = await nextRv(tx)
      const [row] = await tx.query<ResourceRow>(
        `update resources set
           status = jsonb_strip_nulls(coalesce(status, '{}'::jsonb) || $5::jsonb), resource_version = $6
         where kind = $1 and namespace = $2 and name = $3 and ($4::int8 is null or resource_version = $4::int8)
         returning *`,
        [
          this.kind,
          namespace,
          name,
          options.resourceVersion === undefined ? null : parseRv(options.resourceVersion),
          toJson(status ?? {}),
          rv,
        ],
      )
      if (row === undefined) throw await this.#missOrConflict(tx, namespace, name)
      const object = toResource<R>(row)
      await appendEvent(tx, rv, 'MODIFIED', object)
      await this.#maybeCompact(tx, rv)
      return object
    })
  }

  async delete(namespace: string, name: string): Promise<void> {
    await this.#write(async (tx) => {
      const [first] = await tx.query<ResourceRow>('select * from resources where kind = $1 and namespace = $2 and name = $3', [
        this.kind,
        namespace,
        name,
      ])
      if (first === undefined) throw new NotFoundError(`${this.kind} ${namespace}/${name} not found`)
      // Background cascade: the owner first, then its dependents, breadth first (any kind).
      const pending: ResourceRow[] = [first]
      while (pending.length > 0) {
        const target = pending.shift() as ResourceRow
        const rv = await nextRv(tx)
        const [gone] = await tx.query<ResourceRow>('delete from resources where uid = $1 returning *', [target.uid])
        if (gone === undefined) continue
        const object = toResource<AnyResource>({ ...gone, resource_version: rv })
        await appendEvent(tx, rv, 'DELETED', object)
        const dependents = await tx.query<ResourceRow>(
          'select * from resources where namespace = $1 and owner_references @> $2::jsonb order by kind, name',
          [gone.namespace, toJson([{ uid: gone.uid }])],
        )
        pending.push(...dependents)
        await this.#maybeCompact(tx, rv)
      }
    })
  }

  async watch(options: WatchOptions, onEvent: (event: WatchEvent<R>) => void): Promise<void> {
    const { signal } = options
    let last = options.resourceVersion === undefined || options.resourceVersion === '' ? await this.#currentRv() : parseRv(options.resourceVersion)
    const batch = 500
    while (!signal.aborted) {
      const rows = await this.#db.query<{ resource_version: bigint; type: WatchEventType; object: R }>(
        'select resource_version, type, object from resource_events where kind = $1 and resource_version > $2 order by resource_version limit $3',
        [this.kind, last, batch],
      )
      // Checked after reading: if nothing above `last` had been pruned by now, the rows are complete.
      if ((await this.#horizon()) > last) throw new GoneError(`resourceVersion ${last} is older than the retained events`)
      for (const row of rows) {
        if (signal.aborted) return
        onEvent({ type: row.type, object: row.object })
        last = row.resource_version
      }
      if (rows.length === batch) continue
      await this.#sleep(signal)
    }
  }

  /** Prunes events beyond the newest `eventRetention` of this kind; returns the new horizon. */
  async compact(): Promise<bigint> {
    return this.#write(async (tx) => this.#compact(tx))
  }

  async #compact(tx: Queryable): Promise<bigint> {
    const [cut] = await tx.query<{ resource_version: bigint }>(
      'select resource_version from resource_events where kind = $1 order by resource_version desc offset $2 limit 1',
      [this.kind, this.#retention],
    )
    if (cut !== undefined) {
      await tx.query('delete from resource_events where kind = $1 and resource_version <= $2', [this.kind, cut.resource_version])
      await tx.query(
        `insert into resource_event_horizon (kind, compacted_rv) values ($1, $2)
         on conflict (kind) do update set compacted_rv = greatest(resource_event_horizon.compacted_rv, excluded.compacted_rv)`,
        [this.kind, cut.resource_version],
      )
    }
    const [row] = await tx.query<{ compacted_rv: bigint }>('select compacted_rv from resource_event_horizon where kind = $1', [this.kind])
    return row?.compacted_rv ?? 0n
  }

  async #maybeCompact(tx: Queryable, rv: bigint): Promise<void> {
    if (rv % BigInt(this.#compactEvery) === 0n) await this.#compact(tx)
  }

  async #write<T>(fn: (tx: Queryable) => Promise<T>): Promise<T> {
    const result = await this.#db.transaction(fn)
    waker(this.#db).emit('write')
    return result
  }

  async #missOrConflict(tx: Queryable, namespace: string, name: string): Promise<Error> {
    const rows = await tx.query('select 1 from resources where kind = $1 and namespace = $2 and name = $3', [this.kind, namespace, name])
    return rows.length === 0
      ? new NotFoundError(`${this.kind} ${namespace}/${name} not found`)
      : new ConflictError('Conflict', `${this.kind} ${namespace}/${name}: the object has been modified; apply your changes to the latest version`)
  }

  async #currentRv(): Promise<bigint> {
    const [row] = await this.#db.query<{ rv: bigint }>('select rv from resource_version_counter')
    return row?.rv ?? 0n
  }

  async #horizon(): Promise<bigint> {
    const [row] = await this.#db.query<{ compacted_rv: bigint }>('select compacted_rv from resource_event_horizon where kind = $1', [this.kind])
    return row?.compacted_rv ?? 0n
  }

  #sleep(signal: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const emitter = waker(this.#db)
      const done = (): void => {
        clearTimeout(timer)
        emitter.off('write', done)
        signal.removeEventListener('abort', done)
        resolve()
      }
      const timer = setTimeout(done, this.#pollMs)
      emitter.on('write', done)
      signal.addEventListener('abort', done, { once: true })
    })
  }
}
