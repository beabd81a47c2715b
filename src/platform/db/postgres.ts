// Server adapter: node-postgres Pool. Result parsing uses a per-pool type table (codec.ts), never
// pg's global `types`, so other pg users in the process are unaffected.

import pg from 'pg'
import { encodeParams, parserFor } from './codec.ts'
import { DbError, pgErrorCodes, toDbError } from './errors.ts'
import type { Db, PostgresOptions, Queryable, Row } from './index.ts'
import { assertOutsideTx, runInTxScope } from './scope.ts'

type Client = pg.Pool | pg.PoolClient

// Every format we receive is text: we never request binary results.
const types: pg.CustomTypesConfig = {
  getTypeParser: ((typeOid: number) => parserFor(typeOid)) as pg.CustomTypesConfig['getTypeParser'],
}

function rethrow(err: unknown): never {
  throw toDbError(err)
}

async function runQuery<T extends Row>(client: Client, sql: string, params: readonly unknown[] | undefined): Promise<pg.QueryResult<T>> {
  // queryMode 'extended' even without params: one statement per query, like PGlite.
  const config = { text: sql, values: encodeParams(params), queryMode: 'extended' } as pg.QueryConfig
  try {
    return await client.query<T>(config)
  } catch (err) {
    rethrow(err)
  }
}

async function runExec(client: Client, sql: string): Promise<void> {
  try {
    await client.query(sql) // simple protocol: several statements allowed
  } catch (err) {
    rethrow(err)
  }
}

function asError(err: unknown): Error {
  return err instanceof Error ? err : new Error(String(err))
}

export async function openPostgres(options: PostgresOptions): Promise<Db> {
  const pool = new pg.Pool({
    connectionString: options.url,
    max: options.poolMax ?? 10,
    connectionTimeoutMillis: options.connectTimeoutMs ?? 5000,
    application_name: options.applicationName ?? 'agent-gateway',
    types,
  })
  const onError = options.onError ?? (() => {})
  // Without a listener an idle client's error (e.g. server restart) would crash the process.
  pool.on('error', (err) => onError(err))
  try {
    await pool.query('select 1') // fail fast on a wrong URL / unreachable server
  } catch (err) {
    await pool.end().catch(() => {})
    rethrow(err)
  }
  return new PostgresDb(pool)
}

class PostgresDb implements Db {
  readonly kind = 'postgres' as const
  readonly #pool: pg.Pool
  #closed = false

  constructor(pool: pg.Pool) {
    this.#pool = pool
  }

  async query<T extends Row = Row>(sql: string, params?: readonly unknown[]): Promise<T[]> {
    assertOutsideTx(this, 'query')
    return (await runQuery<T>(this.#pool, sql, params)).rows
  }

  async exec(sql: string): Promise<void> {
    assertOutsideTx(this, 'exec')
    return runExec(this.#pool, sql)
  }

  async transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T> {
    assertOutsideTx(this, 'transaction')
    let client: pg.PoolClient
    try {
      client = await this.#pool.connect()
    } catch (err) {
      rethrow(err)
    }
    // A checked-out client has no pool listener: a connection error between two statements (the
    // backend terminated, the server restarting) would be an unhandled 'error' event and end the
    // process. It is kept here; the next statement fails, and the client is discarded on release.
    let lost: Error | undefined
    const onLost = (err: Error): void => {
      lost ??= err
    }
    client.on('error', onLost)
    // A server-reported error (a DbError) leaves the connection usable; anything else discards it.
    const release = (err?: Error): void => {
      client.off('error', onLost)
      client.release(err ?? lost)
    }
    let open = true
    const check = (): void => {
      if (!open) throw new Error('Transaction is closed')
    }
    const tx: Queryable = {
      query: async <R extends Row = Row>(sql: string, params?: readonly unknown[]) => {
        check()
        return (await runQuery<R>(client, sql, params)).rows
      },
      exec: async (sql: string) => {
        check()
        return runExec(client, sql)
      },
    }
    try {
      await runExec(client, 'BEGIN')
    } catch (err) {
      open = false
      release(err instanceof DbError ? undefined : asError(err))
      throw err
    }
    let result: T
    try {
      result = await runInTxScope(this, () => fn(tx))
    } catch (err) {
      open = false
      let releaseError: Error | undefined
      try {
        await client.query('ROLLBACK')
      } catch (rollbackErr) {
        releaseError = asError(rollbackErr) // connection in an unknown state: discard it
      }
      release(releaseError)
      throw err
    }
    open = false
    let commit: pg.QueryResult
    try {
      commit = await client.query('COMMIT')
    } catch (err) {
      const converted = toDbError(err)
      release(converted instanceof DbError ? undefined : asError(converted))
      throw converted
    }
    release()
    if (commit.command === 'ROLLBACK') {
      // A statement failed inside fn and fn swallowed the error: Postgres rolled back on COMMIT.
      throw new DbError('Transaction was rolled back instead of committed', pgErrorCodes.inFailedTransaction, {
        severity: 'ERROR',
      })
    }
    return result
  }

  async ping(): Promise<boolean> {
    if (this.#closed) return false
    try {
      await this.#pool.query('select 1')
      return true
    } catch {
      return false
    }
  }

  async close(): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    await this.#pool.end()
  }
}
