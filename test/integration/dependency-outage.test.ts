// A database restart under load (`pg_ctl restart -m immediate` of a cluster of the test's own):
// requests that meet it are answered 503 problem+json with Retry-After, never 500, and the pool
// is back as soon as the server is. Plus the errors the drivers raise, one by one.
import t from 'tap'
import { openDb } from '../../src/platform/db/index.ts'
import { unavailableDependency } from '../../src/platform/dependency-errors.ts'
import { createHttpApp, toAppError } from '../../src/platform/http.ts'
import { createLogger } from '../../src/platform/logger.ts'
import { createMetrics } from '../../src/platform/metrics.ts'
import { ownPostgresUnavailable, startOwnPostgres } from '../helpers/own-services.ts'

t.test('driver errors of an unreachable dependency are 503 unavailable with Retry-After; others stay 500', async (t) => {
  const pgShutdown = Object.assign(new Error('terminating connection due to administrator command'), { code: '57P01', severity: 'FATAL' })
  const cases: [string, unknown][] = [
    ['admin shutdown (57P01)', pgShutdown],
    ['cannot connect now (57P03)', Object.assign(new Error('the database system is starting up'), { code: '57P03', severity: 'FATAL' })],
    ['connection exception (08006)', Object.assign(new Error('connection failure'), { code: '08006', severity: 'FATAL' })],
    ['refused socket', Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' })],
    ['pg: terminated', new Error('Connection terminated unexpectedly')],
    ['redis: closed client', Object.assign(new Error('The client is closed'), { name: 'ClientClosedError' })],
    ['wrapped in a cause', new Error('query failed', { cause: pgShutdown })],
    // The Kubernetes client's undici: the API server went away mid-request.
    ['undici: other side closed', Object.assign(new Error('other side closed'), { name: 'SocketError', code: 'UND_ERR_SOCKET' })],
    ['undici: connect timeout', Object.assign(new Error('Connect Timeout Error'), { name: 'ConnectTimeoutError', code: 'UND_ERR_CONNECT_TIMEOUT' })],
    ['fetch failed, caused by a reset', new TypeError('fetch failed', { cause: Object.assign(new Error('other side closed'), { code: 'UND_ERR_SOCKET' }) })],
  ]
  for (const [what, error] of cases) {
    const answer = toAppError(error)
    t.match({ status: answer.status, code: answer.code, retry: answer.headers['retry-after'] }, { status: 503, code: 'unavailable', retry: '2' }, what)
  }
  for (const [what, error] of [
    ['a unique violation', Object.assign(new Error('duplicate key'), { code: '23505', severity: 'ERROR' })],
    ['a bug', new TypeError('x is not a function')],
    ['a syntax error in SQL', Object.assign(new Error('syntax error'), { code: '42601', severity: 'ERROR' })],
  ] as const) {
    t.equal(unavailableDependency(error), undefined, `${what} is not an outage`)
    t.equal(toAppError(error).status, 500, `${what}: 500`)
  }
})

t.test('a Postgres restart under load: 503 with Retry-After while it is down, never 500', { skip: ownPostgresUnavailable() ?? false }, async (t) => {
  const pg = await startOwnPostgres()
  t.teardown(() => pg.destroy())
  await pg.createDatabase('outage')
  const db = await openDb({ kind: 'postgres', url: pg.url('outage') })
  t.teardown(() => db.close())
  const app = createHttpApp({ name: 'outage', logger: createLogger('silent'), metrics: createMetrics({ defaultMetrics: false }), bodyLimitBytes: 1024 })
  app.get('/count', async () => (await db.query<{ n: number }>(`select count(*)::int as n from pg_class`))[0])
  await app.ready()
  t.teardown(() => app.close())
  const seen = new Map<string, number>()
  let stop = false
  const worker = async () => {
    while (!stop) {
      const res = await app.inject({ method: 'GET', url: '/count' })
      const kind = res.statusCode === 503 ? `503 ${res.headers['content-type']} retry-after=${res.headers['retry-after']}` : String(res.statusCode)
      seen.set(kind, (seen.get(kind) ?? 0) + 1)
    }
  }
  const workers = Array.from({ length: 4 }, worker)
  await new Promise((resolve) => setTimeout(resolve, 200))
  await pg.restartImmediate()
  await new Promise((resolve) => setTimeout(resolve, 500))
  stop = true
  await Promise.all(workers)
  const kinds = [...seen.keys()].sort()
  t.ok(seen.get('200'), 'answered before and after the restart')
  t.same(
    kinds.filter((kind) => kind !== '200'),
    kinds.filter((kind) => kind === '503 application/problem+json; charset=utf-8 retry-after=2'),
    `only 503 problem+json with Retry-After besides 200 (${JSON.stringify(Object.fromEntries(seen))})`,
  )
  t.equal((await app.inject({ method: 'GET', url: '/count' })).statusCode, 200, 'the pool is back')
})

t.test('a connection terminated inside a transaction fails that transaction, never the process', { skip: ownPostgresUnavailable() ?? false }, async (t) => {
  const pg = await startOwnPostgres()
  t.teardown(() => pg.destroy())
  await pg.createDatabase('terminated')
  const db = await openDb({ kind: 'postgres', url: pg.url('terminated') })
  const admin = await openDb({ kind: 'postgres', url: pg.url('postgres') })
  t.teardown(async () => {
    await db.close()
    await admin.close()
  })
  const outcome = await db
    .transaction(async (tx) => {
      const [own] = await tx.query<{ pid: number }>(`select pg_backend_pid() as pid`)
      await admin.query(`select pg_terminate_backend($1)`, [own?.pid])
      // The error event arrives between two statements, while the client is checked out.
      await new Promise((resolve) => setTimeout(resolve, 500))
      return tx.query(`select 1`)
    })
    .then(
      () => 'committed',
      (error: unknown) => error,
    )
  t.not(outcome, 'committed')
  t.equal(unavailableDependency(outcome), 'connection', 'answered as an outage (503), not a bug')
  t.same(await db.query(`select 1 as n`), [{ n: 1 }], 'the pool discarded the dead client and goes on')
})
