// Embedded adapter: PGlite (Postgres compiled to WASM) in this process.
// PGlite runs one statement at a time; its own transaction() holds a mutex so concurrent
// callers queue instead of interleaving.

import { mkdir } from 'node:fs/promises'
import path from 'node:path'
import { PGlite, type Transaction } from '@electric-sql/pglite'
import { encodeParams, resultParsers } from './codec.ts'
import { toDbError } from './errors.ts'
import type { Db, PgliteOptions, Queryable, Row } from './index.ts'
import { assertOutsideTx, runInTxScope } from './scope.ts'

/** Directories opened by this process: two PGlite instances on one directory corrupt it. */
const openDirs = new Set<string>()

const MEMORY = 'memory://'

/**
 * Postgres's buffer pool inside PGlite's WebAssembly memory. initdb writes 128MB, and the whole pool
 * is resident once PGlite has allocated it (emscripten zeroes what it hands out): 128 MB of idle
 * memory for a database of a few MB. 16MB (2048 pages of 8 kB) holds the hot part of the embedded
 * default's data; pages beyond it come from the OS page cache (docs/BENCHMARKS.md, "Startup and
 * idle memory").
 */
export const PGLITE_SHARED_BUFFERS = '16MB'

function rethrow(err: unknown): never {
  throw toDbError(err)
}

export async function openPglite(options: PgliteOptions): Promise<Db> {
  const inMemory = options.dataDir === MEMORY || options.dataDir.startsWith(MEMORY)
  let dir: string | undefined
  if (!inMemory) {
    dir = path.resolve(options.dataDir.startsWith('file://') ? options.dataDir.slice(7) : options.dataDir)
    if (openDirs.has(dir)) throw new Error(`PGlite data directory already open in this process: ${dir}`)
    openDirs.add(dir)
  }
  let pg: PGlite
  try {
    if (dir !== undefined) await mkdir(path.dirname(dir), { recursive: true })
    pg = await PGlite.create(dir ?? MEMORY, { startParams: [...PGlite.defaultStartParams, '-c', `shared_buffers=${options.sharedBuffers ?? PGLITE_SHARED_BUFFERS}`] })
  } catch (err) {
    if (dir !== undefined) openDirs.delete(dir)
    throw err
  }
  installCodec(pg)
  return new PgliteDb(pg, dir)
}

/** Replaces PGlite's own parsers so results match the pg adapter exactly (see codec.ts). */
function installCodec(pg: PGlite): void {
  // PGlite falls back to its module defaults only for OIDs that resultParsers also covers, and its
  // instance-level array parsers are dropped: any OID not in our table stays text, as on pg.
  pg.parsers = { ...resultParsers }
  // Params arrive as already-encoded text; PGlite's serializers would reject e.g. a hex string
  // for bytea, so text passes through untouched.
  for (const key of Object.keys(pg.serializers)) {
    const original = pg.serializers[key]
    if (original === undefined) continue
    pg.serializers[key] = (x: unknown) => (typeof x === 'string' ? x : original(x))
  }
}

async function runQuery<T extends Row>(target: PGlite | Transaction, sql: string, params: readonly unknown[] | undefined): Promise<T[]> {
  const values = encodeParams(params)
  try {
    const result = await target.query<T>(sql, values)
    return result.rows
  } catch (err) {
    rethrow(err)
  }
}

async function runExec(target: PGlite | Transaction, sql: string): Promise<void> {
  try {
    await target.exec(sql)
  } catch (err) {
    rethrow(err)
  }
}

class PgliteDb implements Db {
  readonly kind = 'pglite' as const
  readonly #pg: PGlite
  readonly #dir: string | undefined
  #closed = false

  constructor(pg: PGlite, dir: string | undefined) {
    this.#pg = pg
    this.#dir = dir
  }

  async query<T extends Row = Row>(sql: string, params?: readonly unknown[]): Promise<T[]> {
    assertOutsideTx(this, 'query')
    return runQuery<T>(this.#pg, sql, params)
  }

  async exec(sql: string): Promise<void> {
    assertOutsideTx(this, 'exec')
    return runExec(this.#pg, sql)
  }

  async transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T> {
    assertOutsideTx(this, 'transaction')
    try {
      return await this.#pg.transaction(async (ptx) => {
        let open = true
        const check = (): void => {
          if (!open) throw new Error('Transaction is closed')
        }
        const tx: Queryable = {
          query: async <R extends Row = Row>(sql: string, params?: readonly unknown[]) => {
            check()
            return runQuery<R>(ptx, sql, params)
          },
          exec: async (sql: string) => {
            check()
            return runExec(ptx, sql)
          },
        }
        try {
          return await runInTxScope(this, () => fn(tx))
        } finally {
          open = false
        }
      })
    } catch (err) {
      // Includes PGlite's TransactionAbortedError (COMMIT became ROLLBACK): code 25P02.
      rethrow(err)
    }
  }

  async ping(): Promise<boolean> {
    if (this.#closed) return false
    try {
      await this.#pg.query('select 1')
      return true
    } catch {
      return false
    }
  }

  async close(): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    try {
      await this.#pg.close()
    } finally {
      if (this.#dir !== undefined) openDirs.delete(this.#dir)
    }
  }
}
