// A new embedded database is created in a child process: PGlite's initdb (a second PGlite and its
// own WebAssembly instance, a tarball of the new cluster unpacked file by file) and the migrations.
//
// Why not in the service's process: about 3 s of CPU on the thread that also loads the role
// modules, and what it leaves behind stays resident there (tens of MB of the C heap fragmented
// by the unpacking, which no garbage collection gives back: a first start idled about 45 MB above
// a second one). In a child it runs on another core while this process loads its modules, and its
// memory goes with it. The service then opens the directory as on any later start.
//
// The caller holds the DATA_DIR lock (src/platform/data-dir-lock.ts) and waits for the child, so
// no one else opens the directory meanwhile. Run directly, this file is the child:
//   node src/platform/db/pglite-init.ts DIR
import { spawn, type ChildProcess } from 'node:child_process'
import { existsSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

/** True when `dir` holds no PGlite cluster yet (PGlite runs initdb on such a directory). */
export function needsInitdb(dir: string): boolean {
  return !existsSync(path.join(dir, 'PG_VERSION'))
}

/**
 * Creates and migrates the embedded database in `dir` in a child process. Resolves when it is done;
 * rejects with the child's error (the caller may still open the directory itself, which runs
 * initdb in-process as before).
 */
export function initPgliteInChild(dir: string, options: { timeoutMs?: number } = {}): Promise<void> {
  const script = fileURLToPath(import.meta.url)
  const child = spawn(process.execPath, ['--max-semi-space-size=16', script, dir], { stdio: ['ignore', 'ignore', 'pipe'] })
  let stderr = ''
  child.stderr?.setEncoding('utf8')
  child.stderr?.on('data', (chunk: string) => {
    if (stderr.length < 16_384) stderr += chunk
  })
  // This process ending, however it ends (a signal before ready, SIGKILL), must not leave the child
  // writing the directory once the lock is gone: a watchdog holds the read end of a pipe only this
  // process writes to; the kernel closes it when this process dies, and the watchdog kills the child.
  const watchdog = child.pid === undefined ? undefined : startWatchdog(child.pid)
  const done = () => {
    clearTimeout(timer)
    watchdog?.kill('SIGKILL')
  }
  const timer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs ?? 120_000)
  return new Promise<void>((resolve, reject) => {
    child.once('error', (error) => {
      done()
      reject(error)
    })
    child.once('exit', (code, signal) => {
      done()
      if (code === 0) resolve()
      else reject(new Error(`creating the embedded database in ${dir} failed (${signal ?? `exit ${code}`}): ${stderr.trim() || 'no output'}`))
    })
  })
}

function startWatchdog(pid: number): ChildProcess | undefined {
  try {
    const watchdog = spawn('/bin/sh', ['-c', 'read -r _ignored; kill -KILL "$1" 2>/dev/null; exit 0', 'pglite-init-watchdog', String(pid)], {
      stdio: ['pipe', 'ignore', 'ignore'],
    })
    watchdog.on('error', () => undefined)
    watchdog.unref()
    ;(watchdog.stdin as unknown as { unref?: () => void } | null)?.unref?.()
    return watchdog
  } catch {
    return undefined
  }
}

async function childMain(dir: string): Promise<void> {
  const { enableCompileCache } = await import('node:module')
  enableCompileCache()
  const [{ openPglite }, { migrate, migrationsDir }] = await Promise.all([import('./pglite.ts'), import('./migrate.ts')])
  const db = await openPglite({ kind: 'pglite', dataDir: dir })
  try {
    await migrate(db, migrationsDir)
  } finally {
    await db.close()
  }
}

if (import.meta.main) {
  const dir = process.argv[2]
  if (!dir) {
    process.stderr.write('usage: node src/platform/db/pglite-init.ts DIR\n')
    process.exit(2)
  }
  try {
    await childMain(dir)
  } catch (error) {
    process.stderr.write(`${(error as Error).stack ?? String(error)}\n`)
    process.exitCode = 1
  }
}
