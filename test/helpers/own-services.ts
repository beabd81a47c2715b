// A Postgres cluster and a Redis server of the caller's own, on free ports, for drills that
// restart or stop them under load: the machine's shared Postgres and Redis serve every other test
// (and CI), so faults are injected only into services the drill started. Postgres runs as the
// `postgres` user (it refuses root) from the Debian binaries; Redis keeps nothing on disk, as the
// machine's does, so a restart loses what it held, as a cache restart in production does.
import { type ChildProcess, execFile, execFileSync, spawn } from 'node:child_process'
import { chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import { freePort } from './cli.ts'

const run = promisify(execFile)

/** The Debian PostgreSQL binaries, newest major first (undefined when none is installed). */
export function postgresBin(): string | undefined {
  const root = '/usr/lib/postgresql'
  if (!existsSync(root)) return undefined
  const majors = readdirSync(root)
    .filter((name) => /^\d+$/.test(name) && existsSync(path.join(root, name, 'bin', 'pg_ctl')))
    .sort((a, b) => Number(b) - Number(a))
  return majors[0] === undefined ? undefined : path.join(root, majors[0], 'bin')
}

export interface OwnPostgres {
  port: number
  /** The cluster's files (its data directory and server.log are under it). */
  root: string
  /** postgres://…/`database` on this cluster (trust auth). */
  url(database?: string): string
  /** Creates `name` (idempotent). */
  createDatabase(name: string): Promise<void>
  /** `pg_ctl restart -m immediate`: every backend dies at once, as after a crash; crash recovery runs at start. */
  restartImmediate(): Promise<void>
  stop(): Promise<void>
  /** Stops the cluster and deletes its files. */
  destroy(): Promise<void>
  /** `pg_ctl stop -m immediate`, synchronously: for a process 'exit' hook (files kept). */
  stopNow(): void
}

export interface OwnPostgresOptions {
  /** max_connections of the cluster (default 200). */
  maxConnections?: number
}

/** Why an own Postgres cannot start here (no binaries, no `postgres` user, not root), or undefined. */
export function ownPostgresUnavailable(): string | undefined {
  if (postgresBin() === undefined) return 'no PostgreSQL server binaries under /usr/lib/postgresql'
  if (process.getuid?.() !== 0) return 'an own Postgres cluster is started as the postgres user, which needs root'
  return undefined
}

const asPostgres = (bin: string, args: string[]) => run('runuser', ['-u', 'postgres', '--', bin, ...args], { maxBuffer: 1 << 20 })

export async function startOwnPostgres(options: OwnPostgresOptions = {}): Promise<OwnPostgres> {
  const unavailable = ownPostgresUnavailable()
  if (unavailable) throw new Error(unavailable)
  const bin = postgresBin() as string
  const root = mkdtempSync(path.join(os.tmpdir(), 'agw-own-pg-'))
  chmodSync(root, 0o755)
  const data = path.join(root, 'data')
  const socket = path.join(root, 'socket')
  const uid = Number((await run('id', ['-u', 'postgres'])).stdout.trim())
  const gid = Number((await run('id', ['-g', 'postgres'])).stdout.trim())
  for (const dir of [data, socket]) {
    mkdirSync(dir, { mode: 0o700 })
    chownSync(dir, uid, gid)
  }
  await asPostgres(path.join(bin, 'initdb'), ['-D', data, '--auth=trust', '--username=postgres', '--encoding=UTF8', '--no-sync'])
  const port = await freePort()
  // fsync stays on: a restart -m immediate must lose nothing that was committed.
  const serverOptions = `-p ${port} -c listen_addresses=127.0.0.1 -k ${socket} -c max_connections=${options.maxConnections ?? 200}`
  const pgCtl = (args: string[]) => asPostgres(path.join(bin, 'pg_ctl'), ['-D', data, '-w', '-t', '60', ...args])
  // -l on every start: a postmaster left on pg_ctl's stdout would hold our pipe open forever.
  const log = path.join(data, 'server.log')
  await pgCtl(['-o', serverOptions, '-l', log, 'start'])
  const url = (database = 'postgres') => `postgres://postgres@127.0.0.1:${port}/${database}`
  return {
    port,
    root,
    url,
    async createDatabase(name) {
      const exists = await run(path.join(bin, 'psql'), ['-h', '127.0.0.1', '-p', String(port), '-U', 'postgres', '-tAc', `select 1 from pg_database where datname = '${name}'`])
      if (exists.stdout.trim() !== '1') await run(path.join(bin, 'createdb'), ['-h', '127.0.0.1', '-p', String(port), '-U', 'postgres', name])
    },
    async restartImmediate() {
      await pgCtl(['-m', 'immediate', '-l', log, 'restart'])
    },
    async stop() {
      await pgCtl(['-m', 'fast', 'stop']).catch(() => undefined)
    },
    async destroy() {
      await pgCtl(['-m', 'immediate', 'stop']).catch(() => undefined)
      rmSync(root, { recursive: true, force: true })
    },
    stopNow() {
      try {
        execFileSync('runuser', ['-u', 'postgres', '--', path.join(bin, 'pg_ctl'), '-D', data, '-m', 'immediate', 'stop'], { stdio: 'ignore', timeout: 10_000 })
      } catch {
        // not running
      }
    },
  }
}

export interface OwnRedis {
  port: number
  url: string
  /** Kills the server (SIGKILL) and starts a new one on the same port, empty. */
  restart(): Promise<void>
  /** Kills it; `start()` brings it back (the outage between is the caller's). */
  kill(): Promise<void>
  start(): Promise<void>
  destroy(): Promise<void>
}

export function ownRedisUnavailable(): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(':')) if (existsSync(path.join(dir, 'redis-server'))) return undefined
  return 'no redis-server on PATH'
}

export async function startOwnRedis(): Promise<OwnRedis> {
  const unavailable = ownRedisUnavailable()
  if (unavailable) throw new Error(unavailable)
  const port = await freePort()
  let child: ChildProcess | undefined
  const start = async () => {
    const spawned = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' })
    child = spawned
    for (const deadline = Date.now() + 10_000; ; ) {
      const answered = await run('redis-cli', ['-p', String(port), 'ping'])
        .then((out) => out.stdout.trim() === 'PONG')
        .catch(() => false)
      if (answered) return
      if (spawned.exitCode !== null || Date.now() > deadline) throw new Error(`redis-server on ${port} did not start`)
      await new Promise((resolve) => setTimeout(resolve, 50))
    }
  }
  const kill = async () => {
    const current = child
    child = undefined
    if (!current || current.exitCode !== null) return
    const exited = new Promise((resolve) => current.once('exit', resolve))
    current.kill('SIGKILL')
    await exited
  }
  await start()
  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    start,
    kill,
    async restart() {
      await kill()
      await start()
    },
    destroy: kill,
  }
}
