// The database of an agent-gateway process, as the configuration names it: Postgres at DATABASE_URL,
// or the embedded PGlite under DATA_DIR (one process per DATA_DIR: src/platform/data-dir-lock.ts).
// Apart from the composition root so that `agent-gateway migrate` and `memory rotate-key` open it
// without loading the roles.
import path from 'node:path'
import type { Config } from '../config.ts'
import { lockDataDir } from '../data-dir-lock.ts'
import type { Logger } from '../logger.ts'
import { openDb, type Db } from './index.ts'

/** The database of this process; the embedded one also takes the DATA_DIR lock (released on close). */
export async function openPlatformDb(config: Config): Promise<Db> {
  return openDatabase(config, config.databaseUrl ? undefined : lockDataDir(config.dataDir))
}

/**
 * Opens the database; `unlock` (the DATA_DIR lock, taken by the caller for PGlite) is released on
 * close or failure. With `logger`, a PGlite directory without a cluster is created and migrated in
 * a child process first (pglite-init.ts), while the caller goes on loading its modules.
 */
export async function openDatabase(config: Config, unlock: (() => void) | undefined, logger?: Logger): Promise<Db> {
  if (config.databaseUrl || unlock === undefined) return openDb({ kind: 'postgres', url: config.databaseUrl as string, poolMax: config.databasePoolMax })
  try {
    const dir = path.join(config.dataDir, 'pgdata')
    if (logger) {
      const { initPgliteInChild, needsInitdb } = await import('./pglite-init.ts')
      if (needsInitdb(dir)) {
        logger.info({ dir }, 'embedded database: first start on this DATA_DIR, creating it')
        // On failure PGlite creates it in this process, as it always could (and says what fails).
        await initPgliteInChild(dir).catch((error: unknown) => logger.warn({ err: error }, 'embedded database: could not create it in a child process; creating it here'))
      }
    }
    const db = await openDb({ kind: 'pglite', dataDir: dir })
    const close = db.close.bind(db)
    return Object.assign(db, {
      close: async () => {
        try {
          await close()
        } finally {
          unlock()
        }
      },
    })
  } catch (error) {
    unlock()
    throw error
  }
}
