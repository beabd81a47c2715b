// What the two dispatch benchmarks (ours, bench/dispatch.bench.ts, and the graphile-worker peer,
// bench/dispatch-peer.bench.ts) share, so both report lag the same way.
import { readFileSync } from 'node:fs'

export const PG_URL = process.env.BENCH_DATABASE_URL ?? process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test'

export const log = (msg: string): void => {
  process.stdout.write(`[${new Date().toISOString().slice(11, 23)}] ${msg}\n`)
}
export const mib = (bytes: number): string => `${(bytes / 1048576).toFixed(0)} MiB`
export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))

/** Nearest-rank percentile of an ascending array (NaN when empty). */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] as number
}

/** A lag for the report: `n/a`, `not run` (infinite), ms below 10 s, seconds above. */
export const fmtMs = (ms: number): string => (!Number.isFinite(ms) ? (Number.isNaN(ms) ? 'n/a' : 'not run') : ms >= 10_000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.round(ms)} ms`)

/** The process's memory after a full GC (with --expose-gc). */
export function memory(): { rss: number; heapUsed: number } {
  global.gc?.()
  const m = process.memoryUsage()
  return { rss: m.rss, heapUsed: m.heapUsed }
}

/** The first minute boundary after `after` (epoch ms). */
export function nextBoundary(after: number): number {
  return Math.floor(after / 60_000) * 60_000 + 60_000
}

/**
 * CPU time (ms, user + system) of these processes (Postgres backends on this host) from /proc. A
 * backend that exited between two readings takes its time with it, so a difference of two
 * readings undercounts when backends come and go.
 */
export function procCpuMs(pids: readonly number[]): number {
  let ticks = 0
  for (const pid of pids) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
      ticks += Number(fields[11]) + Number(fields[12]) // utime, stime (fields 14, 15)
    } catch {
      // exited meanwhile
    }
  }
  return ticks * 10 // USER_HZ = 100
}
