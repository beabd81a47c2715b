// The one database port every module uses. Two adapters speak the same Postgres SQL dialect
// ($1 placeholders) and map types identically (see codec.ts):
//   int8/bigint → bigint (money = integer micros), int2/int4/float → number, numeric → string,
//   timestamptz/timestamp → Date, date → 'YYYY-MM-DD' string, json/jsonb → parsed value,
//   bool → boolean, bytea → Buffer, arrays of those → arrays; any other type → its text output.
// Errors raised by the server surface as DbError with the SQLSTATE `code` (see errors.ts).

export type Row = Record<string, unknown>

export interface Queryable {
  /**
   * Runs ONE statement with parameters ($1, $2, ...) and returns its rows (empty for statements
   * without RETURNING). Params: see `encodeParam` in codec.ts (a JS array is a Postgres array;
   * a plain object is JSON).
   */
  query<T extends Row = Row>(sql: string, params?: readonly unknown[]): Promise<T[]>
  /** Runs a parameterless SQL script that may hold several statements (migrations, DDL). */
  exec(sql: string): Promise<void>
}

export interface Db extends Queryable {
  readonly kind: 'pglite' | 'postgres'
  /**
   * Runs fn in one transaction (BEGIN/COMMIT, ROLLBACK on throw). Nested calls are not supported:
   * inside fn use only `tx` (calling this Db's query/exec/transaction from fn throws).
   * If fn swallows a failed statement, COMMIT turns into a rollback and this throws a DbError
   * with code 25P02.
   */
  transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T>
  /** true when a trivial query succeeds (for /readyz). */
  ping(): Promise<boolean>
  close(): Promise<void>
}

export interface PgliteOptions {
  kind: 'pglite'
  /** Directory holding the database files (created if missing), or `memory://` for an in-memory db. */
  dataDir: string
  /** Postgres shared_buffers (e.g. '16MB', the default: PGLITE_SHARED_BUFFERS in pglite.ts). */
  sharedBuffers?: string
}

export interface PostgresOptions {
  kind: 'postgres'
  /** postgres://user:password@host:port/database */
  url: string
  /** Pool size (default 10). */
  poolMax?: number
  /** How long to wait for a connection before failing (default 5000 ms). */
  connectTimeoutMs?: number
  /** Reported as application_name (default 'agent-gateway'). */
  applicationName?: string
  /** Errors of idle pooled connections (server restart, network drop). Default: ignored. */
  onError?: (err: Error) => void
}

export type OpenDbOptions = PgliteOptions | PostgresOptions

export async function openDb(options: OpenDbOptions): Promise<Db> {
  switch (options.kind) {
    case 'pglite': {
      const { openPglite } = await import('./pglite.ts')
      return openPglite(options)
    }
    case 'postgres': {
      const { openPostgres } = await import('./postgres.ts')
      return openPostgres(options)
    }
    default: {
      const unknownKind: never = options
      throw new Error(`Unknown db kind: ${String((unknownKind as { kind?: unknown }).kind)}`)
    }
  }
}

export { DbError, isUniqueViolation, pgErrorCode, pgErrorCodes } from './errors.ts'
export { toJson } from './codec.ts'
