// The topology drill's faults, at moments drawn from a printed seed: kill -9 of a replica's whole
// process group and its restart with the same environment (as the kubelet restarts a container),
// pg_terminate_backend of every connection to the drill's database, a kill of every Redis client
// connection of the drill's Redis database (CLIENT KILL ID …, never FLUSH), and the RPC node stopped
// for a while and restarted on its saved state. One fault at a time: the next waits for the
// previous one's recovery. Each fault is a window [start, end + grace] in which clients may see
// 503 problem+json with Retry-After (topology-invariants.ts).
import { openDb } from '../../src/platform/db/index.ts'
import { openAdmin } from './servers.ts'
import type { RoleProcess, Topology } from './topology.ts'

export type FaultKind = 'kill' | 'pg-terminate' | 'redis-kill' | 'rpc-stop'
export const FAULT_KINDS: readonly FaultKind[] = ['kill', 'pg-terminate', 'redis-kill', 'rpc-stop']

export interface Fault {
  kind: FaultKind
  /** The killed process (kill), or what was cut (n connections). */
  target: string
  /** Date.now() when it was injected and when its dependency or process was back (ready). */
  start: number
  end: number
  /** ms from injection to ready again (kill: the restart, to /readyz 200; rpc-stop: down time + restart). */
  recoveryMs: number
  /** The restart failed, or the process was not ready within the bound. */
  error?: string
}

export interface FaultPlan {
  at: number // ms after the load started
  kind: FaultKind
  /** 0..1, picks the target among the candidates when the fault runs. */
  pick: number
}

/** `count` faults spread over [lead, durationMs − tail], kinds cycled through `kinds` in a seeded order. */
export function planFaults(random: () => number, durationMs: number, count: number, kinds: readonly FaultKind[]): FaultPlan[] {
  const lead = Math.min(10_000, durationMs * 0.1)
  const span = Math.max(1, durationMs - lead - Math.min(20_000, durationMs * 0.15))
  const order = [...kinds]
  const plan: FaultPlan[] = []
  for (let i = 0; i < count; i += 1) {
    if (i % order.length === 0) order.sort(() => random() - 0.5)
    plan.push({ at: Math.round(lead + random() * span), kind: order[i % order.length] as FaultKind, pick: random() })
  }
  return plan.sort((a, b) => a.at - b.at)
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** kill -9 of the process group of a replica, then its restart; the fault ends when /readyz is 200. */
async function killAndRestart(topology: Topology, proc: RoleProcess, readyBoundMs: number): Promise<Fault> {
  const start = Date.now()
  await topology.kill(proc)
  const fault: Fault = { kind: 'kill', target: proc.name, start, end: start, recoveryMs: 0 }
  try {
    await topology.start(proc)
    proc.restarts += 1
  } catch (error) {
    fault.error = `restart of ${proc.name} failed: ${(error as Error).message.slice(0, 2000)}`
  }
  fault.end = Date.now()
  fault.recoveryMs = fault.end - start
  if (!fault.error && fault.recoveryMs > readyBoundMs) fault.error = `${proc.name} ready ${fault.recoveryMs} ms after its kill, over the bound of ${readyBoundMs} ms`
  return fault
}

/** pg_terminate_backend of every backend on the drill's database (the admin's own excepted). */
async function terminateBackends(topology: Topology): Promise<Fault> {
  const admin = await openAdmin()
  const start = Date.now()
  try {
    // The pids first, then one terminate each: in a single WHERE, Postgres may call
    // pg_terminate_backend before the other conditions filter (every backend of the server, its own included).
    const rows = await admin.query<{ pid: number }>(`select pid from pg_stat_activity where datname = $1 and pid <> pg_backend_pid()`, [topology.database.name])
    let terminated = 0
    for (const row of rows) {
      const [answer] = await admin.query<{ ok: boolean }>('select pg_terminate_backend($1::int) as ok', [row.pid])
      if (answer?.ok) terminated += 1
    }
    return { kind: 'pg-terminate', target: `${terminated} connections`, start, end: Date.now(), recoveryMs: 0 }
  } finally {
    await admin.close()
  }
}

/** CLIENT KILL of every normal client connected to the drill's Redis database (its own excepted). */
async function killRedisClients(topology: Topology): Promise<Fault> {
  const { createClient } = await import('redis')
  const client = createClient({ url: topology.redisUrl })
  client.on('error', () => {})
  await client.connect()
  const start = Date.now()
  try {
    const list = String(await client.sendCommand(['CLIENT', 'LIST', 'TYPE', 'normal']))
    const own = String(await client.sendCommand(['CLIENT', 'ID']))
    const ids = list
      .split('\n')
      .map((line) =>
        Object.fromEntries(
          line
            .trim()
            .split(' ')
            .map((pair) => [pair.slice(0, pair.indexOf('=')), pair.slice(pair.indexOf('=') + 1)]),
        ),
      )
      .filter((fields) => fields.id && fields.db === String(topology.redisDb) && fields.id !== own)
      .map((fields) => fields.id as string)
    for (const id of ids) await client.sendCommand(['CLIENT', 'KILL', 'ID', id]).catch(() => undefined)
    return { kind: 'redis-kill', target: `${ids.length} connections`, start, end: Date.now(), recoveryMs: 0 }
  } finally {
    client.destroy()
  }
}

/** The RPC node stopped (state saved) for `downMs`, then restarted on the same port and state. */
async function stopRpc(topology: Topology, downMs: number): Promise<Fault> {
  const start = Date.now()
  await topology.stopChain()
  await sleep(downMs)
  const fault: Fault = { kind: 'rpc-stop', target: `${Math.round(downMs / 1000)} s down`, start, end: start, recoveryMs: 0 }
  try {
    await topology.startChain()
  } catch (error) {
    fault.error = `the RPC node did not restart: ${(error as Error).message.slice(0, 2000)}`
  }
  fault.end = Date.now()
  fault.recoveryMs = fault.end - start
  return fault
}

export interface FaultRunner {
  faults: Fault[]
  /** Resolves when every planned fault has run (or the drill was stopped). */
  done: Promise<void>
  stop(): void
}

/** Runs `plan` against `topology` from now on, one fault at a time. */
export function runFaults(
  topology: Topology,
  plan: FaultPlan[],
  options: { rpcDownMs: number; readyBoundMs: number; log: (line: string) => void; stopAfterMs: number },
): FaultRunner {
  const faults: Fault[] = []
  let stopped = false
  const began = Date.now()
  const done = (async () => {
    for (const step of plan) {
      const wait = began + step.at - Date.now()
      if (wait > 0) await sleep(wait)
      if (stopped || Date.now() - began > options.stopAfterMs) break
      let fault: Fault
      try {
        if (step.kind === 'kill') {
          const candidates = topology.processes
          const proc = candidates[Math.floor(step.pick * candidates.length)] as RoleProcess
          fault = await killAndRestart(topology, proc, options.readyBoundMs)
        } else if (step.kind === 'pg-terminate') fault = await terminateBackends(topology)
        else if (step.kind === 'redis-kill') fault = await killRedisClients(topology)
        else fault = await stopRpc(topology, options.rpcDownMs)
      } catch (error) {
        const now = Date.now()
        fault = { kind: step.kind, target: '?', start: now, end: now, recoveryMs: 0, error: `could not inject: ${(error as Error).message}` }
      }
      faults.push(fault)
      options.log(
        `fault ${faults.length} at ${((fault.start - began) / 1000).toFixed(1)} s: ${fault.kind} ${fault.target}` +
          `${fault.recoveryMs > 0 ? `, recovered in ${(fault.recoveryMs / 1000).toFixed(1)} s` : ''}${fault.error ? ` — ${fault.error}` : ''}`,
      )
    }
  })()
  return {
    faults,
    done,
    stop() {
      stopped = true
    },
  }
}

/** A database handle on the drill's database, for the checks at the end. */
export function openDrillDb(topology: Topology) {
  return openDb({ kind: 'postgres', url: topology.database.url, poolMax: 1 })
}
