// The shared job queue (pg-boss over our Db port) on embedded PGlite and on a real Postgres:
// two queue instances (replicas) on one database handle every job exactly once, a cron schedule
// sends once per slot whatever the number of replicas, a failing job is retried with back-off,
// a concurrent install (the "already exists" race pg-boss expects) leaves the connection usable,
// a send inside a rolled-back transaction never runs, and stop() aborts handlers past its grace.
// Each run uses its own pg-boss schema, dropped at the end.
import { randomBytes } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import t, { type Test } from 'tap'
import { openDb, type Db, type Queryable } from '../../src/platform/db/index.ts'
import { type JobQueue, type OpenJobQueueOptions, openJobQueue } from '../../src/platform/jobs.ts'
import { PG_URL, redactUrl } from '../helpers/servers.ts'
import { testJobLogger, until as waitUntil } from '../helpers/waiting.ts'

/** Waits here are for retries and workers: up to 30 s before a test fails. */
const until = (what: string, check: () => boolean | Promise<boolean>, timeoutMs = 30_000) => waitUntil(what, check, timeoutMs)

interface Backend {
  name: string
  /** A handle for one replica (PGlite: the one shared handle; Postgres: a pool of its own). */
  handle(poolMax?: number): Promise<Db>
  /** The handle used for assertions and cleanup. */
  admin: Db
}

/** Records the scripts pg-boss ran through Db.transaction that failed (the install race). */
function recordingDb(db: Db, failures: string[]): Db {
  return {
    kind: db.kind,
    query: (sql, params) => db.query(sql, params),
    exec: (sql) => db.exec(sql),
    ping: () => db.ping(),
    close: () => db.close(),
    transaction: async <T>(fn: (tx: Queryable) => Promise<T>) => {
      try {
        return await db.transaction(fn)
      } catch (err) {
        failures.push((err as Error).message)
        throw err
      }
    },
  }
}

async function suite(t: Test, backend: Backend): Promise<void> {
  const schema = `jobs_test_${randomBytes(4).toString('hex')}`
  const queues: JobQueue[] = []
  t.teardown(async () => {
    for (const queue of queues) await queue.stop({ timeoutMs: 1000 })
    await backend.admin.exec(`drop schema if exists ${schema} cascade`)
  })
  t.comment(`pg-boss schema ${schema}`)
  const open = async (extra: Partial<OpenJobQueueOptions> = {}, db?: Db): Promise<JobQueue> => {
    const queue = await openJobQueue({ db: db ?? (await backend.handle()), logger: testJobLogger(), schema, ...extra })
    queues.push(queue)
    return queue
  }
  const fast = { cronMonitorIntervalSeconds: 1, cronWorkerIntervalSeconds: 1 }

  await t.test('two replicas installing at once: the loser of the race rolls back and its connection stays usable', async (t) => {
    const failures: string[] = []
    const [a, b] = await Promise.all([open(fast, recordingDb(await backend.handle(1), failures)), open(fast, recordingDb(await backend.handle(1), failures))])
    t.comment(`failed install scripts: ${failures.length ? failures.join('; ') : 'none (no race this time)'}`)
    if (backend.name === 'pglite')
      t.ok(
        failures.some((m) => m.includes('already exists')),
        'PGlite serialises the two installs: the second hits "already exists"',
      )
    for (const m of failures) t.match(m, /already exists/)
    // Both handles (one connection each) still work.
    const id = await a!.send('t.install', { x: 1 })
    t.ok(id)
    const seen: string[] = []
    await b!.work<{ x: number }>('t.install', async (job) => void seen.push(job.id), { pollingIntervalSeconds: 0.5 })
    await until('the job', () => seen.length === 1)
    t.same(seen, [id])
  })

  await t.test('replicas declaring queues at once (a fresh install rolling out): no deadlock, every queue once', async (t) => {
    const replicas = await Promise.all([open(), open(), open()])
    const names = Array.from({ length: 12 }, (_, n) => `t.declare.${n}`)
    // Each replica in its own order, as roles open their modules in different orders.
    const results = await Promise.allSettled(replicas.map((queue, r) => Promise.all((r % 2 ? [...names].reverse() : names).map((name) => queue.declare(name, { retryLimit: 3 })))))
    const failed = results.flatMap((result) => (result.status === 'rejected' ? [String((result.reason as Error)?.message ?? result.reason)] : []))
    t.same(failed, [], 'no declaration failed (pg-boss creates a partition per queue: concurrent ATTACH PARTITIONs deadlock unless serialised)')
    const [row] = await backend.admin.query<{ n: string }>(`select count(*)::text as n from ${schema}.queue where name like 't.declare.%'`)
    t.equal(row?.n, String(names.length))
  })
  await t.test('two replicas working one queue: every job handled exactly once', async (t) => {
    const a = await open()
    const b = await open()
    const handled = new Map<string, string[]>()
    const worker = (who: string) => async (job: { id: string; data: { n: number } }) => {
      handled.set(job.id, [...(handled.get(job.id) ?? []), who])
      await sleep(Math.random() * 10)
    }
    await a.work('t.once', worker('a'), { batchSize: 4, pollingIntervalSeconds: 0.5 })
    await b.work('t.once', worker('b'), { batchSize: 4, pollingIntervalSeconds: 0.5 })
    const ids: string[] = []
    for (let n = 0; n < 60; n++) {
      const id = await (n % 2 ? a : b).send('t.once', { n })
      ids.push(id!)
    }
    await until('60 jobs handled', () => handled.size === 60)
    await sleep(1500) // a second claim would show up here
    t.equal(handled.size, 60)
    const twice = [...handled.entries()].filter(([, by]) => by.length !== 1)
    t.same(twice, [], 'no job handled twice')
    t.same(new Set(handled.keys()), new Set(ids))
    const byA = [...handled.values()].filter((by) => by[0] === 'a').length
    t.comment(`replica a handled ${byA}, replica b ${60 - byA}`)
    await until('all completed', async () => {
      const rows = await backend.admin.query<{ n: bigint }>(`select count(*) as n from ${schema}.job where name = 't.once' and state = 'completed'`)
      return rows[0]!.n === 60n
    })
  })

  await t.test('a failing job is retried with back-off, and fails for good past its retry limit', async (t) => {
    const queue = await open()
    const attempts: { retryCount: number; at: number }[] = []
    await queue.work<{ k: string }>(
      't.retry',
      async (job) => {
        if (job.data.k === 'flaky') {
          attempts.push({ retryCount: job.retryCount, at: Date.now() })
          if (job.retryCount < 2) throw new Error(`attempt ${job.retryCount} fails`)
          return
        }
        throw new Error('always fails')
      },
      { pollingIntervalSeconds: 0.5 },
    )
    await queue.send('t.retry', { k: 'flaky' }, { retryLimit: 2, retryDelay: 1, retryBackoff: true })
    const doomed = await queue.send('t.retry', { k: 'doomed' }, { retryLimit: 1, retryDelay: 1 })
    await until('three attempts', () => attempts.length === 3, 20_000)
    t.same(
      attempts.map((a) => a.retryCount),
      [0, 1, 2],
    )
    const gap1 = attempts[1]!.at - attempts[0]!.at
    const gap2 = attempts[2]!.at - attempts[1]!.at
    t.comment(`gaps ${gap1} ms, ${gap2} ms`)
    t.ok(gap1 >= 900, `first retry waited ${gap1} ms (delay 1 s, ×[1, 2) jitter)`)
    t.ok(gap2 >= 1900, `second retry waited ${gap2} ms (delay doubled: 2 s, ×[1, 2) jitter)`)
    await until('the doomed job failed for good', async () => {
      const rows = await backend.admin.query<{ state: string; retry_count: number; output: { message?: string } }>(
        `select state::text as state, retry_count, output from ${schema}.job where name = 't.retry' and id = $1`,
        [doomed],
      )
      return rows[0]?.state === 'failed' && rows[0].retry_count === 1 && rows[0].output.message === 'always fails'
    })
  })

  await t.test('a batch with one failure: the others complete, only the failed one is retried', async (t) => {
    const queue = await open()
    const runs = new Map<number, number>()
    await queue.work<{ n: number }>(
      't.batch',
      async (job) => {
        runs.set(job.data.n, (runs.get(job.data.n) ?? 0) + 1)
        if (job.data.n === 2 && job.retryCount === 0) throw new Error('n=2 fails once')
      },
      { batchSize: 5, pollingIntervalSeconds: 0.5 },
    )
    for (let n = 0; n < 5; n++) await queue.send('t.batch', { n }, { retryLimit: 1, retryDelay: 1 })
    await until('n=2 ran twice', () => runs.get(2) === 2, 20_000)
    await sleep(1500)
    t.same(
      [...runs.entries()].sort((x, y) => x[0] - y[0]),
      [
        [0, 1],
        [1, 1],
        [2, 2],
        [3, 1],
        [4, 1],
      ],
    )
  })

  await t.test('a send inside a transaction is enqueued only if it commits', async (t) => {
    const queue = await open()
    await queue.declare('t.tx')
    const seen: string[] = []
    await queue.work<{ v: string }>('t.tx', async (job) => void seen.push(job.data.v), { pollingIntervalSeconds: 0.5 })
    await t.rejects(
      backend.admin.transaction(async (tx) => {
        await queue.send('t.tx', { v: 'rolled back' }, { tx })
        throw new Error('abort the transaction')
      }),
      /abort the transaction/,
    )
    await backend.admin.transaction(async (tx) => {
      await queue.send('t.tx', { v: 'committed' }, { tx })
    })
    await until('the committed job', () => seen.length === 1)
    await sleep(1000)
    t.same(seen, ['committed'])
    await t.rejects(
      backend.admin.transaction((tx) => queue.send('t.undeclared', {}, { tx })),
      /must be declared/,
    )
  })

  await t.test('stop() waits for handlers, then aborts those past the grace period: the job is retried later', async (t) => {
    const queue = await open()
    let started = false
    let abortedWith: unknown
    await queue.work(
      't.stop',
      (job) =>
        new Promise<void>((_resolve, reject) => {
          started = true
          job.signal.addEventListener('abort', () => {
            abortedWith = job.signal.reason
            reject(job.signal.reason)
          })
        }),
      { pollingIntervalSeconds: 0.5 },
    )
    const id = await queue.send('t.stop', {}, { retryLimit: 3, retryDelay: 60 })
    await until('the handler to start', () => started)
    const before = Date.now()
    await queue.stop({ timeoutMs: 1000 })
    t.ok(Date.now() - before >= 900, 'stop waited for the grace period')
    t.match(String((abortedWith as Error)?.message), /stopped|shut down/)
    const rows = await backend.admin.query<{ state: string }>(`select state::text as state from ${schema}.job where name = 't.stop' and id = $1`, [id])
    t.equal(rows[0]?.state, 'retry', 'the interrupted job waits for its retry')
    await t.rejects(queue.send('t.stop', {}), /stopping/)
  })
}

/**
 * Cron: two instances schedule and work the same queue for `durationS` seconds, started at second
 * `from` of a minute (or at once when the run fits before the minute ends); returns the slots sent.
 */
async function cronRun(backend: Backend, t: Test, run: { from?: number; durationS: number }): Promise<number> {
  const schema = `jobs_cron_${randomBytes(4).toString('hex')}`
  const queues: JobQueue[] = []
  t.teardown(async () => {
    for (const queue of queues) await queue.stop({ timeoutMs: 1000 })
    await backend.admin.exec(`drop schema if exists ${schema} cascade`)
  })
  const now = new Date()
  const second = now.getUTCSeconds() + now.getUTCMilliseconds() / 1000
  const from = run.from ?? (second + run.durationS + 4 < 59 ? second : 1)
  const waitS = second <= from ? from - second : 60 - second + from
  t.comment(`waiting ${waitS.toFixed(1)} s for second ${from.toFixed(0)} of a minute`)
  await sleep(waitS * 1000)
  const fired: string[] = []
  const end = Date.now() + run.durationS * 1000
  for (let r = 0; r < 2; r++) {
    const queue = await openJobQueue({ db: await backend.handle(), logger: testJobLogger(), schema, cronMonitorIntervalSeconds: 1, cronWorkerIntervalSeconds: 1 })
    queues.push(queue)
    await queue.schedule('t.cron', '* * * * *', { from: 'cron' })
    await queue.work<{ from: string }>('t.cron', async (job) => void fired.push(job.id), { pollingIntervalSeconds: 0.5 })
  }
  await sleep(Math.max(0, end - Date.now()))
  // Both replicas stop checking the clock; the last slot's job still reaches a worker.
  const slots = await backend.admin.query<{ slot: Date; n: bigint }>(
    `select singleton_on as slot, count(*) as n from ${schema}.job where name = '__pgboss__send-it' and singleton_key = 't.cron' group by 1 order by 1`,
  )
  await until(
    'the sent jobs handled',
    async () => {
      const rows = await backend.admin.query<{ n: bigint }>(`select count(*) as n from ${schema}.job where name = 't.cron'`)
      return Number(rows[0]!.n) === slots.length && fired.length === slots.length
    },
    10_000,
  ).catch(() => {})
  const jobs = await backend.admin.query<{ n: bigint }>(`select count(*) as n from ${schema}.job where name = 't.cron'`)
  t.comment(`slots ${slots.map((s) => s.slot.toISOString().slice(11, 16)).join(', ')}; jobs ${jobs[0]!.n}; handled ${fired.length}`)
  t.ok(
    slots.every((s) => s.n === 1n),
    'one send per slot',
  )
  t.equal(Number(jobs[0]!.n), slots.length, 'one job per slot, not one per replica')
  t.equal(fired.length, slots.length, 'each handled once')
  t.equal(new Set(fired).size, fired.length)
  const schedules = await backend.admin.query(`select name from ${schema}.schedule`)
  t.equal(schedules.length, 1, 'one schedule row for both replicas')
  return slots.length
}

async function postgresBackend(t: Test): Promise<Backend | undefined> {
  let admin: Db
  try {
    admin = await openDb({ kind: 'postgres', url: PG_URL, poolMax: 2, connectTimeoutMs: 3000 })
  } catch (err) {
    const reason = `Postgres unreachable at ${redactUrl(PG_URL)} (${(err as Error).message}); set TEST_DATABASE_URL`
    t.comment(reason)
    t.skip(reason, () => {})
    return undefined
  }
  const handles: Db[] = []
  t.teardown(async () => {
    for (const db of handles) await db.close()
    await admin.close()
  })
  return {
    name: 'postgres',
    admin,
    handle: async (poolMax = 4) => {
      const db = await openDb({ kind: 'postgres', url: PG_URL, poolMax })
      handles.push(db)
      return db
    },
  }
}

async function pgliteBackend(t: Test): Promise<Backend> {
  const db = await openDb({ kind: 'pglite', dataDir: 'memory://' })
  t.teardown(() => db.close())
  return { name: 'pglite', admin: db, handle: async () => db }
}

t.test('PGlite (one embedded connection shared by both replicas)', async (t) => {
  await suite(t, await pgliteBackend(t))
})

t.test('Postgres (each replica its own pool)', async (t) => {
  const backend = await postgresBackend(t)
  if (backend) await suite(t, backend)
})

t.test('cron with two replicas: once per slot, across a minute boundary', async (t) => {
  // On Postgres when it is there (the multi-replica case), else on PGlite.
  const backend = (await postgresBackend(t)) ?? (await pgliteBackend(t))
  t.comment(`on ${backend.name}`)
  t.equal(await cronRun(backend, t, { from: 55, durationS: 10 }), 2, 'two slots, two sends')
})

t.test('cron with two replicas on PGlite: once within one slot', async (t) => {
  const backend = await pgliteBackend(t)
  t.equal(await cronRun(backend, t, { durationS: 6 }), 1)
})

t.test('the loser of an install race that meets the winner as a catalog unique violation still starts', async (t) => {
  // Seen with two gateways starting on a fresh database: CREATE SCHEMA IF NOT EXISTS lost to the
  // other replica's committed install with 23505 on pg_namespace, and pg-boss (which expects
  // "already exists") refused to start. Played here: the install script runs, then reports that error.
  const backend = await postgresBackend(t)
  if (!backend) return
  const schema = `jobs_race_${randomBytes(4).toString('hex')}`
  t.teardown(() => backend.admin.exec(`drop schema if exists ${schema} cascade`))
  const db = await backend.handle(1)
  let raced = 0
  const racing: Db = {
    kind: db.kind,
    query: (sql, params) => db.query(sql, params),
    exec: (sql) => db.exec(sql),
    ping: () => db.ping(),
    close: () => db.close(),
    transaction: async <T>(fn: (tx: Queryable) => Promise<T>) => {
      const result = await db.transaction(fn)
      const script = await db.query<{ n: string }>(`select count(*)::text as n from pg_namespace where nspname = $1`, [schema])
      if (raced === 0 && script[0]?.n === '1') {
        raced += 1
        throw Object.assign(new Error(`duplicate key value violates unique constraint "pg_namespace_nspname_index"`), { code: '23505' })
      }
      return result
    },
  }
  const queue = await openJobQueue({ db: racing, logger: testJobLogger(), schema })
  t.teardown(() => queue.stop({ timeoutMs: 1000 }))
  t.equal(raced, 1, 'the install reported the race')
  t.ok(await queue.send('t.race', { x: 1 }), 'and the queue works')
})
