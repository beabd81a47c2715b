// Real Postgres and Redis for integration and e2e tests: a throw-away database per test file,
// or a printed skip reason when the server is absent (never a silent pass).
import { randomBytes } from 'node:crypto'
import type { Test } from 'tap'
import { openDb, pgErrorCode, type Db } from '../../src/platform/db/index.ts'
import { openKeyValue } from '../../src/platform/kv/index.ts'

export const PG_URL = process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test'
export const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379'

export function redactUrl(url: string): string {
  const parsed = new URL(url)
  if (parsed.password) parsed.password = '***'
  return parsed.toString()
}

/** A connection that administers the test server (creates and drops throw-away databases). */
export async function openAdmin(): Promise<Db> {
  try {
    return await openDb({ kind: 'postgres', url: PG_URL, poolMax: 1, connectTimeoutMs: 3000 })
  } catch (err) {
    if (pgErrorCode(err) !== '3D000') throw err
    // The named database does not exist: the server is there, so administer via `postgres`.
    const fallback = new URL(PG_URL)
    fallback.pathname = '/postgres'
    return openDb({ kind: 'postgres', url: fallback.toString(), poolMax: 1, connectTimeoutMs: 3000 })
  }
}

/** URL of a fresh database dropped at teardown, or undefined after skipping `t` with the reason. */
export async function throwawayDatabase(t: Test): Promise<string | undefined> {
  let admin: Db
  try {
    admin = await openAdmin()
  } catch (err) {
    const reason = `Postgres unreachable at ${redactUrl(PG_URL)} (${(err as Error).message || String(err)}); set TEST_DATABASE_URL`
    t.comment(reason)
    t.skip(reason, () => {})
    return undefined
  }
  const name = `ag_test_${randomBytes(6).toString('hex')}`
  await admin.exec(`create database ${name}`)
  t.teardown(async () => {
    await admin.exec(`drop database if exists ${name} with (force)`)
    await admin.close()
  })
  const url = new URL(PG_URL)
  url.pathname = `/${name}`
  t.comment(`using throw-away database ${name}`)
  return url.toString()
}

/** REDIS_URL when a Redis answers, else undefined after skipping `t` with the reason. */
export async function reachableRedis(t: Test): Promise<string | undefined> {
  try {
    const kv = await openKeyValue({ kind: 'redis', url: REDIS_URL })
    await kv.close()
    return REDIS_URL
  } catch (err) {
    const reason = `Redis unreachable at ${redactUrl(REDIS_URL)} (${(err as Error).message || String(err)}); set TEST_REDIS_URL`
    t.comment(reason)
    t.skip(reason, () => {})
    return undefined
  }
}

/** Runs `suite` on an in-memory PGlite, then on a throw-away Postgres database (skipped with the reason when absent). */
export function onPgliteAndPostgres(t: Test, suite: (t: Test, db: Db) => Promise<void>): void {
  t.test('on PGlite', async (t) => {
    const db = await openDb({ kind: 'pglite', dataDir: 'memory://' })
    t.teardown(() => db.close())
    await suite(t, db)
  })
  t.test('on Postgres', async (t) => {
    const url = await throwawayDatabase(t)
    if (!url) return
    const db = await openDb({ kind: 'postgres', url })
    t.teardown(() => db.close())
    await suite(t, db)
  })
}
