// The embedded ResourceStore backend: Task and Run resources in Postgres or PGlite (same SQL),
// schema in src/migrations/0003_resources.sql.
// - resourceVersion: one global counter row bumped inside every write transaction. Its row lock is
//   held until COMMIT, so writes commit in RV order and "events after n" never skips a late commit.
// - watch: polls resource_events every `pollMs` (default 100 ms) and is woken at once by writes made
//   through any store on the same Db handle in this process.
// - retention: events beyond the newest `eventRetention` (default 100,000, minutes of history at
//   10,000 runs a minute: a watcher pruned past relists everything, so this must outlast bursts)
//   per kind are pruned (every `compactEvery` writes, or via compact()); the pruned horizon is recorded, and a watch from an RV
//   below it rejects with GoneError (410) so the informer relists.
// - status writes are a top-level merge (RFC 7386 style: a null value removes the key).
// - cut for now: finalizers are stored but delete does not wait for them (no deletionTimestamp phase).
import { randomUUID } from 'node:crypto'
import { EventEmitter } from 'node:events'
import { toJson, type Db, type Row } from '../../src/platform/db/index.ts'
import { Batcher } from '../../src/platform/batcher.ts'
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
} from '../../src/scheduler/contract/index.ts'

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

/**
 * SQL building the API object of a resources row (alias `a`) exactly as toResource() does, so an
 * event can be written in the same statement as the row. `rv` overrides the resourceVersion.
 */
function OBJECT_JSON(a: string, rv = `${a}.resource_version`): string {
  const ts = (column: string) => `to_char(${column} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`
  return `(jsonb_build_object('apiVersion', ${a}.api_version, 'kind', ${a}.kind, 'spec', ${a}.spec,
      'metadata', jsonb_build_object('name', ${a}.name, 'namespace', ${a}.namespace, 'uid', ${a}.uid,
          'resourceVersion', (${rv})::text, 'generation', ${a}.generation, 'creationTimestamp', ${ts(`${a}.creation_timestamp`)})
        || case when ${a}.deletion_timestamp is null then '{}'::jsonb else jsonb_build_object('deletionTimestamp', ${ts(`${a}.deletion_timestamp`)}) end
        || case when ${a}.labels = '{}'::jsonb then '{}'::jsonb else jsonb_build_object('labels', ${a}.labels) end
        || case when ${a}.owner_references = '[]'::jsonb then '{}'::jsonb else jsonb_build_object('ownerReferences', ${a}.owner_references) end
        || case when ${a}.finalizers = '[]'::jsonb then '{}'::jsonb else jsonb_build_object('finalizers', ${a}.finalizers) end)
    || case when ${a}.status is null then '{}'::jsonb else jsonb_build_object('status', ${a}.status) end)`
}

interface CreateInput {
  namespace: string
  name: string
  apiVersion: string
  uid: string
  created: Date
  /** JSON texts. */
  labels: string
  ownerReferences: string
  spec: string
  status: string | null
}

interface PatchInput {
  namespace: string
  name: string
  /** Optimistic concurrency: the resourceVersion the caller read, or null. */
  expected: bigint | null
  /** JSON text of the merge patch. */
  status: string
}

/**
 * Group commit: calls made while a batch is being written are written together in the next one
 * statement. Under load many writes share one counter bump and one COMMIT (the fsync the counter
 * lock is held through); alone, a write goes out at once. Each batch is one statement (the delete's
 * look-ups only read), so a batch the database refuses wrote nothing: the Batcher then writes it
 * again in halves until the item at fault fails alone (a NUL or an unpaired surrogate in a spec,
 * say), and only that caller gets the error; its neighbours are written.
 */
interface KindBatches {
  create: Batcher<CreateInput, ResourceRow | undefined>
  patch: Batcher<PatchInput, ResourceRow | undefined>
  /** Deletes with their cascade; answers how many objects went (0 = not found). */
  remove: Batcher<{ namespace: string; name: string }, number>
}

const MAX_BATCH = 500
const batchesByDb = new WeakMap<Db, Map<string, KindBatches>>()

function makeBatches(db: Db, kind: string): KindBatches {
  const create = new Batcher<CreateInput, ResourceRow | undefined>(
    async (items) => {
      // resourceVersions rv-n+1 … rv in submission order; a name that exists already (or twice in
      // the batch) inserts nothing and leaves a gap, as a failed write does on the API server.
      const rows = await db.query<ResourceRow & { ord: bigint }>(
        `with c as (update resource_version_counter set rv = rv + $2 returning rv),
         i as (select * from unnest($3::text[], $4::text[], $5::text[], $6::text[], $7::timestamptz[], $8::text[], $9::text[], $10::text[], $11::text[])
                 with ordinality as t(namespace, name, api_version, uid, created, labels, owner_references, spec, status, ord)),
         ins as (insert into resources (kind, namespace, name, api_version, uid, resource_version, generation, creation_timestamp,
                   labels, owner_references, spec, status)
                 select $1, i.namespace, i.name, i.api_version, i.uid, (select rv from c) - $2 + i.ord, 1, i.created,
                        i.labels::jsonb, i.owner_references::jsonb, i.spec::jsonb, i.status::jsonb
                   from i order by i.ord
                 on conflict (kind, namespace, name) do nothing
                 returning *),
         e as (insert into resource_events (resource_version, kind, type, object)
               select ins.resource_version, ins.kind, 'ADDED', ${OBJECT_JSON('ins')} from ins)
         select ins.*, i.ord from ins join i on i.uid = ins.uid`,
        [
          kind,
          items.length,
          items.map((i) => i.namespace),
          items.map((i) => i.name),
          items.map((i) => i.apiVersion),
          items.map((i) => i.uid),
          items.map((i) => i.created),
          items.map((i) => i.labels),
          items.map((i) => i.ownerReferences),
          items.map((i) => i.spec),
          items.map((i) => i.status),
        ],
      )
      const byOrd = new Map(rows.map((row) => [Number(row.ord), row]))
      return items.map((_item, i) => byOrd.get(i + 1))
    },
    (item) => `${item.namespace}/${item.name}`,
    MAX_BATCH,
  )
  const patch = new Batcher<PatchInput, ResourceRow | undefined>(
    async (items) => {
      // Top-level merge (a null value removes the key); optimistic where `expected` is set.
      const rows = await db.query<ResourceRow & { ord: bigint }>(
        `with c as (update resource_version_counter set rv = rv + $2 returning rv),
         i as (select * from unnest($3::text[], $4::text[], $5::int8[], $6::text[]) with ordinality as t(namespace, name, expected, status, ord)),
         u as (update resources r set
                 status = jsonb_strip_nulls(coalesce(r.status, '{}'::jsonb) || i.status::jsonb),
                 resource_version = (select rv from c) - $2 + i.ord
               from i
               where r.kind = $1 and r.namespace = i.namespace and r.name = i.name and (i.expected is null or r.resource_version = i.expected)
               returning r.*, i.ord),
         e as (insert into resource_events (resource_version, kind, type, object)
               select u.resource_version, u.kind, 'MODIFIED', ${OBJECT_JSON('u')} from u)
         select * from u`,
        [kind, items.length, items.map((i) => i.namespace), items.map((i) => i.name), items.map((i) => i.expected), items.map((i) => i.status)],
      )
      const byOrd = new Map(rows.map((row) => [Number(row.ord), row]))
      return items.map((_item, i) => byOrd.get(i + 1))
    },
    (item) => `${item.namespace}/${item.name}`,
    MAX_BATCH,
  )
  const remove = new Batcher<{ namespace: string; name: string }, number>(
    async (items) => {
      // Background cascade: each object, then its dependents (any kind, found level by level
      // through the indexed owner_uids), all removed in ONE statement, each with its own
      // resourceVersion and DELETED event.
      const roots = await db.query<{ uid: string; namespace: string; name: string }>(
        `select r.uid, r.namespace, r.name from resources r join unnest($2::text[], $3::text[]) as i(namespace, name)
            on r.kind = $1 and r.namespace = i.namespace and r.name = i.name`,
        [kind, items.map((i) => i.namespace), items.map((i) => i.name)],
      )
      const rootOf = new Map<string, string>() // uid → the item key it is deleted for
      for (const root of roots) rootOf.set(root.uid, `${root.namespace}/${root.name}`)
      const doomed = [...rootOf.keys()]
      for (let level = doomed; level.length > 0; ) {
        const dependents = await db.query<{ uid: string; owner: string }>(
          `select r.uid, o.uid as owner from resources r cross join lateral jsonb_array_elements_text(r.owner_uids) as o(uid)
            where r.owner_uids ?| $1::text[] and o.uid = any($1::text[])
            order by r.kind, r.name`,
          [level],
        )
        const next: string[] = []
        for (const dependent of dependents) {
          if (rootOf.has(dependent.uid)) continue
          rootOf.set(dependent.uid, rootOf.get(dependent.owner) as string)
          next.push(dependent.uid)
          doomed.push(dependent.uid)
        }
        level = next
      }
      const gone =
        doomed.length === 0
          ? []
          : await db.query<{ uid: string }>(
              `with d as (select uid, ord from unnest($1::text[]) with ordinality as d(uid, ord)),
         c as (update resource_version_counter set rv = rv + $2 returning rv),
         del as (delete from resources r using d where r.uid = d.uid
                 returning r.*, (select rv from c) - $2 + d.ord as new_rv),
         e as (insert into resource_events (resource_version, kind, type, object)
               select del.new_rv, del.kind, 'DELETED', ${OBJECT_JSON('del', 'del.new_rv')} from del)
         select uid from del`,
              [doomed, doomed.length],
            )
      const counts = new Map<string, number>()
      for (const { uid } of gone) {
        const key = rootOf.get(uid) as string
        counts.set(key, (counts.get(key) ?? 0) + 1)
      }
      return items.map((item) => counts.get(`${item.namespace}/${item.name}`) ?? 0)
    },
    (item) => `${item.namespace}/${item.name}`,
    MAX_BATCH,
  )
  return { create, patch, remove }
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
  #writesSinceCompact = 0
  #compacting = false

  constructor(db: Db, options: PostgresStoreOptions) {
    this.#db = db
    this.kind = options.kind
    this.#apiVersion = options.apiVersion ?? 'jobs.agent-gateway.dev/v1alpha1'
    this.#now = options.now ?? (() => new Date())
    this.#pollMs = options.pollMs ?? 100
    this.#retention = options.eventRetention ?? 100_000
    this.#compactEvery = options.compactEvery ?? 1000
  }

  async get(namespace: string, name: string): Promise<R | undefined> {
    const [row] = await this.#db.query<ResourceRow>('select * from resources where kind = $1 and namespace = $2 and name = $3', [this.kind, namespace, name])
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
    const row: CreateInput = {
      namespace: meta.namespace,
      name: meta.name,
      apiVersion: resource.apiVersion || this.#apiVersion,
      uid: randomUUID(),
      created: this.#now(),
      labels: toJson(meta.labels ?? {}),
      ownerReferences: toJson(meta.ownerReferences ?? []),
      spec: toJson(resource.spec ?? {}),
      status: resource.status === undefined ? null : toJson(resource.status),
    }
    const created = await this.#batches().create.submit(row)
    if (created === undefined) throw new ConflictError('AlreadyExists', `${this.kind} ${meta.namespace}/${meta.name} already exists`)
    this.#afterWrite(1)
    return toResource<R>(created)
  }

  async replaceSpec(resource: R): Promise<R> {
    const meta = resource.metadata
    const expected = parseRv(meta.resourceVersion)
    // One statement: the counter bump, the row and its event commit together; the counter's row
    // lock is held for this statement and its COMMIT only.
    const [row] = await this.#db.query<ResourceRow>(
      `with c as (update resource_version_counter set rv = rv + 1 returning rv),
       u as (update resources r set
               generation = r.generation + (case when r.spec is distinct from $5::jsonb then 1 else 0 end),
               spec = $5::jsonb, labels = $6::jsonb, resource_version = (select rv from c)
             where r.kind = $1 and r.namespace = $2 and r.name = $3 and r.resource_version = $4
             returning r.*),
       e as (insert into resource_events (resource_version, kind, type, object)
             select u.resource_version, u.kind, 'MODIFIED', ${OBJECT_JSON('u')} from u)
       select * from u`,
      [this.kind, meta.namespace, meta.name, expected, toJson(resource.spec ?? {}), toJson(meta.labels ?? {})],
    )
    if (row === undefined) throw await this.#missOrConflict(meta.namespace, meta.name)
    this.#afterWrite(1)
    return toResource<R>(row)
  }

  async patchStatus(namespace: string, name: string, status: R['status'], options: { resourceVersion?: string } = {}): Promise<R> {
    const expected = options.resourceVersion === undefined ? null : parseRv(options.resourceVersion)
    const row = await this.#batches().patch.submit({ namespace, name, expected, status: toJson(status ?? {}) })
    if (row === undefined) throw await this.#missOrConflict(namespace, name)
    this.#afterWrite(1)
    return toResource<R>(row)
  }

  async delete(namespace: string, name: string): Promise<void> {
    const count = await this.#batches().remove.submit({ namespace, name })
    if (count === 0) throw new NotFoundError(`${this.kind} ${namespace}/${name} not found`)
    this.#afterWrite(count)
  }

  async watch(options: WatchOptions, onEvent: (event: WatchEvent<R>) => void): Promise<void> {
    const { signal } = options
    let last = options.resourceVersion === undefined || options.resourceVersion === '' ? await this.#currentRv() : parseRv(options.resourceVersion)
    const batch = 500
    while (!signal.aborted) {
      // One statement, one snapshot: if nothing above `last` had been pruned in it, the rows are complete.
      const result = await this.#db.query<{ horizon: bigint; resource_version: bigint | null; type: WatchEventType; object: R }>(
        `select h.horizon, e.resource_version, e.type, e.object
           from (select coalesce((select compacted_rv from resource_event_horizon where kind = $1), 0::int8) as horizon) h
           left join lateral (select resource_version, type, object from resource_events
                               where kind = $1 and resource_version > $2 order by resource_version limit $3) e on true
          order by e.resource_version`,
        [this.kind, last, batch],
      )
      if ((result[0]?.horizon ?? 0n) > last) throw new GoneError(`resourceVersion ${last} is older than the retained events`)
      const rows = result.filter((row) => row.resource_version !== null) as { resource_version: bigint; type: WatchEventType; object: R }[]
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
    return this.#db.transaction(async (tx) => {
      const [cut] = await tx.query<{ resource_version: bigint }>('select resource_version from resource_events where kind = $1 order by resource_version desc offset $2 limit 1', [
        this.kind,
        this.#retention,
      ])
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
    })
  }

  /** Wakes this process's watchers; compacts every `compactEvery` writes (outside the write path). */
  #afterWrite(count: number): void {
    waker(this.#db).emit('write')
    this.#writesSinceCompact += count
    if (this.#writesSinceCompact >= this.#compactEvery && !this.#compacting) {
      this.#writesSinceCompact = 0
      this.#compacting = true
      this.compact()
        .catch(() => {}) // retried after the next compactEvery writes
        .finally(() => {
          this.#compacting = false
        })
    }
  }

  #batches(): KindBatches {
    let perKind = batchesByDb.get(this.#db)
    if (perKind === undefined) {
      perKind = new Map()
      batchesByDb.set(this.#db, perKind)
    }
    let batches = perKind.get(this.kind)
    if (batches === undefined) {
      batches = makeBatches(this.#db, this.kind)
      perKind.set(this.kind, batches)
    }
    return batches
  }

  async #missOrConflict(namespace: string, name: string): Promise<Error> {
    const rows = await this.#db.query('select 1 from resources where kind = $1 and namespace = $2 and name = $3', [this.kind, namespace, name])
    return rows.length === 0
      ? new NotFoundError(`${this.kind} ${namespace}/${name} not found`)
      : new ConflictError('Conflict', `${this.kind} ${namespace}/${name}: the object has been modified; apply your changes to the latest version`)
  }

  async #currentRv(): Promise<bigint> {
    const [row] = await this.#db.query<{ rv: bigint }>('select rv from resource_version_counter')
    return row?.rv ?? 0n
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
