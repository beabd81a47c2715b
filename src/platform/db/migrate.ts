// One migration runner for both adapters. Files named `NNNN_name.sql` in a directory are applied in
// order, once each, each in its own transaction, and recorded in schema_migrations (id = file name
// without `.sql`). Every transaction first takes a transaction-scoped advisory lock, so replicas
// starting together apply each file exactly once (the loser waits, then sees it recorded).
// A migration file must be runnable inside a transaction (no CREATE INDEX CONCURRENTLY, VACUUM, ...).

import { readdir, readFile } from 'node:fs/promises'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import type { Db, Queryable } from './index.ts'

/** src/migrations/ */
export const migrationsDir = fileURLToPath(new URL('../../migrations/', import.meta.url))

/** Arbitrary constant key for pg_advisory_xact_lock shared by every agent-gateway replica. */
export const MIGRATION_LOCK_KEY = 4174622001n

const FILE_RE = /^(\d{4,})_[A-Za-z0-9_-]+\.sql$/

export interface MigrationFile {
  id: string
  file: string
}

/**
 * Migration files in `dir`, sorted by number. Non-.sql files are ignored; a .sql file not named
 * `NNNN_name.sql` or a duplicate number throws (never silently skipped).
 */
export async function listMigrations(dir: string): Promise<MigrationFile[]> {
  const names = (await readdir(dir)).filter((name) => name.endsWith('.sql'))
  const misnamed = names.filter((name) => !FILE_RE.test(name))
  if (misnamed.length > 0) {
    throw new Error(`Migration files must be named NNNN_name.sql (letters, digits, _ and -): ${misnamed.join(', ')}`)
  }
  const byNumber = new Map<number, string>()
  for (const name of names) {
    const n = Number(FILE_RE.exec(name)?.[1])
    const other = byNumber.get(n)
    if (other !== undefined) throw new Error(`Two migrations share number ${n}: ${other} and ${name}`)
    byNumber.set(n, name)
  }
  return [...byNumber.entries()].sort(([a], [b]) => a - b).map(([, name]) => ({ id: name.slice(0, -'.sql'.length), file: path.join(dir, name) }))
}

async function lock(tx: Queryable): Promise<void> {
  await tx.query('select pg_advisory_xact_lock($1::bigint)', [MIGRATION_LOCK_KEY])
}

async function isApplied(tx: Queryable, id: string): Promise<boolean> {
  const rows = await tx.query('select 1 from schema_migrations where id = $1', [id])
  return rows.length > 0
}

/** Applies pending migrations from `dir`; returns the ids applied by this call (empty when up to date). */
export async function migrate(db: Db, dir: string = migrationsDir): Promise<string[]> {
  const files = await listMigrations(dir)
  await db.transaction(async (tx) => {
    await lock(tx)
    await tx.exec('create table if not exists schema_migrations (id text primary key, applied_at timestamptz not null default now())')
  })
  const done = new Set((await db.query<{ id: string }>('select id from schema_migrations')).map((row) => row.id))
  const applied: string[] = []
  for (const migration of files) {
    if (done.has(migration.id)) continue
    const sql = await readFile(migration.file, 'utf8')
    const ran = await db.transaction(async (tx) => {
      await lock(tx)
      if (await isApplied(tx, migration.id)) return false // another replica got here first
      try {
        await tx.exec(sql)
      } catch (err) {
        if (err instanceof Error) err.message = `migration ${migration.id} failed: ${err.message}`
        throw err
      }
      await tx.query('insert into schema_migrations (id, applied_at) values ($1, now())', [migration.id])
      return true
    })
    if (ran) applied.push(migration.id)
  }
  return applied
}
