// The drills' own Postgres and Redis (test/helpers/own-services.ts): a Postgres restart -m immediate
// kills every connection and loses nothing committed, and the pool reconnects; a Redis restart
// comes back empty on the same port.
import t from 'tap'
import { openDb } from '../../src/platform/db/index.ts'
import { ownPostgresUnavailable, ownRedisUnavailable, startOwnPostgres, startOwnRedis } from '../helpers/own-services.ts'
import { execFile } from 'node:child_process'
import { promisify } from 'node:util'

const run = promisify(execFile)

t.test('own Postgres: restart -m immediate under a connection pool', { skip: ownPostgresUnavailable() ?? false }, async (t) => {
  const pg = await startOwnPostgres()
  t.teardown(() => pg.destroy())
  await pg.createDatabase('drill')
  const db = await openDb({ kind: 'postgres', url: pg.url('drill') })
  t.teardown(() => db.close())
  await db.query(`create table kept (n int)`)
  await db.query(`insert into kept values (1)`)
  await pg.restartImmediate()
  let answered: unknown
  for (const deadline = Date.now() + 20_000; Date.now() < deadline; ) {
    answered = await db.query<{ n: number }>(`select n from kept`).catch((error: unknown) => error)
    if (Array.isArray(answered)) break
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
  t.same(answered, [{ n: 1 }], 'the pool reconnects and what was committed is there')
})

t.test('own Redis: a restart comes back empty on the same port', { skip: ownRedisUnavailable() ?? false }, async (t) => {
  const redis = await startOwnRedis()
  t.teardown(() => redis.destroy())
  const cli = (...args: string[]) => run('redis-cli', ['-p', String(redis.port), ...args]).then((out) => out.stdout.trim())
  t.equal(await cli('set', 'k', 'v'), 'OK')
  await redis.restart()
  t.equal(await cli('get', 'k'), '', 'nothing kept')
  await redis.kill()
  await t.rejects(cli('ping'), 'down while killed')
  await redis.start()
  t.equal(await cli('ping'), 'PONG')
})
