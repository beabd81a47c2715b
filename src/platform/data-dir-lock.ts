// One process per embedded data directory: PGlite files and the dev chain's state would be
// corrupted by a second writer. The lock is a file holding the owner's pid, created exclusively;
// a lock whose pid is gone (crash, SIGKILL) is taken over.
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import path from 'node:path'

export class DataDirLockedError extends Error {
  readonly pid: number
  constructor(dataDir: string, pid: number) {
    super(`DATA_DIR ${dataDir} is in use by process ${pid}; stop it or set another DATA_DIR`)
    this.name = 'DataDirLockedError'
    this.pid = pid
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM'
  }
}

/** Takes the lock of `dataDir`; returns its release. Throws DataDirLockedError when held. */
export function lockDataDir(dataDir: string): () => void {
  mkdirSync(dataDir, { recursive: true })
  const file = path.join(dataDir, 'agent-gateway.lock')
  for (let attempt = 0; attempt < 2; attempt += 1) {
    try {
      writeFileSync(file, String(process.pid), { flag: 'wx' })
      return () => rmSync(file, { force: true })
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error
      const holder = Number(readFileSync(file, 'utf8').trim())
      if (Number.isInteger(holder) && holder > 0 && holder !== process.pid && alive(holder)) throw new DataDirLockedError(dataDir, holder)
      rmSync(file, { force: true }) // stale: its process is gone
    }
  }
  throw new Error(`could not lock ${dataDir}`)
}
