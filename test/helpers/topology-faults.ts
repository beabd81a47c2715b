// The topology drill's faults, at moments drawn from a printed seed: kill -9 of a replica's whole
// process group and its restart with the same environment (as the kubelet restarts a container),
// pg_terminate_backend of every connection to the drill's database, the own Postgres restarted
// `-m immediate`, a kill of every Redis client connection of the drill's Redis database (CLIENT KILL
// ID …, never FLUSH), the own Redis restarted empty, the RPC front refusing or dropping connections
// for a while, the RPC front answering seconds late, the RPC node itself restarted behind a closed
// front, and the blob volume filled to ENOSPC. One fault at a time: the next waits for the previous
// one's recovery. Each fault is a window [start, end + grace] in which clients may see 503
// problem+json with Retry-After (topology-invariants.ts).
import { MEDIA_SPEECH_PATH } from '../../src/media/client.ts'
import { openDb } from '../../src/platform/db/index.ts'
import { seededRandom } from './signals.ts'
import type { RoleProcess, Topology } from './topology.ts'

export type FaultKind =
  | 'kill'
  | 'leader-kill'
  | 'api-restart'
  | 'pg-terminate'
  | 'pg-restart'
  | 'redis-kill'
  | 'redis-restart'
  | 'rpc-stop'
  | 'rpc-slow'
  | 'rpc-restart'
  | 'disk-full'
export const FAULT_KINDS: readonly FaultKind[] = [
  'kill',
  'leader-kill',
  'api-restart',
  'pg-terminate',
  'pg-restart',
  'redis-kill',
  'redis-restart',
  'rpc-stop',
  'rpc-slow',
  'rpc-restart',
  'disk-full',
]
/** Kinds that need the kubernetes executor (the fake API server and the controllers' Lease). */
export const KUBE_KINDS: readonly FaultKind[] = ['leader-kill', 'api-restart']
/**
 * A follower takes an expired Lease within its duration (15 s) plus two retry periods (2 s each)
 * of reading it, plus the slack of a loaded machine (controllers/kubernetes/leader-election.ts).
 */
const LEADER_TAKEOVER_BOUND_MS = 25_000
/** Kinds that restart a service the drill must own (not the machine's shared Postgres or Redis). */
export const OWN_SERVICE_KINDS: readonly FaultKind[] = ['pg-restart', 'redis-restart']

export interface FaultOptions {
  /** rpc-stop: how long the front refuses or drops connections. */
  rpcDownMs: number
  /** rpc-slow: how long answers are late, and by how much (each answer drawn in [min, max]). */
  rpcSlowMs: number
  rpcDelayMs: [number, number]
  /** disk-full: how long the blob volume stays full. */
  diskFullMs: number
  /** kill: a restarted process must be ready within this. */
  readyBoundMs: number
  /** pg-restart, redis-restart, rpc-restart, disk-full: every process ready again within this of the injection. */
  recoveryBoundMs: number
  log: (line: string) => void
  stopAfterMs: number
}

export interface Fault {
  kind: FaultKind
  /** The killed process (kill), or what was cut (n connections). */
  target: string
  /** Date.now() when it was injected and when its dependency or process was back (ready). */
  start: number
  end: number
  /** ms from injection to ready again (kill: the restart, to /readyz 200; restarts: every /readyz 200; rpc-stop: down time). */
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

/** Starts a killed `proc` again (as the kubelet restarts a container); the fault ends when it is ready. */
async function restartAfter(topology: Topology, proc: RoleProcess, fault: Fault): Promise<void> {
  try {
    await topology.start(proc)
    proc.restarts += 1
  } catch (error) {
    fault.error = `restart of ${proc.name} failed: ${(error as Error).message.slice(0, 2000)}`
  }
  fault.end = Date.now()
  fault.recoveryMs = fault.end - fault.start
}

/** kill -9 of the process group of a replica, then its restart; the fault ends when /readyz is 200. */
async function killAndRestart(topology: Topology, proc: RoleProcess, readyBoundMs: number): Promise<Fault> {
  const start = Date.now()
  await topology.kill(proc)
  const fault: Fault = { kind: 'kill', target: proc.name, start, end: start, recoveryMs: 0 }
  await restartAfter(topology, proc, fault)
  if (!fault.error && fault.recoveryMs > readyBoundMs) fault.error = `${proc.name} ready ${fault.recoveryMs} ms after its kill, over the bound of ${readyBoundMs} ms`
  return fault
}

/** pg_terminate_backend of every backend on the drill's database (the admin's own excepted). */
async function terminateBackends(topology: Topology): Promise<Fault> {
  const admin = await topology.openAdmin()
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

/** A dependency restarted by `restart`; the fault ends when every process's /readyz is 200 again. */
async function restartDependency(topology: Topology, kind: FaultKind, what: string, restart: () => Promise<void>, boundMs: number): Promise<Fault> {
  const start = Date.now()
  const fault: Fault = { kind, target: what, start, end: start, recoveryMs: 0 }
  try {
    await restart()
    const back = Date.now() - start
    await topology.untilAllReady(boundMs)
    fault.target = `${what} (back in ${(back / 1000).toFixed(1)} s)`
  } catch (error) {
    fault.error = `${what}: ${(error as Error).message.slice(0, 2000)}`
  }
  fault.end = Date.now()
  fault.recoveryMs = fault.end - start
  if (!fault.error && fault.recoveryMs > boundMs) fault.error = `every /readyz 200 only ${fault.recoveryMs} ms after the ${kind}, over the bound of ${boundMs} ms`
  return fault
}

/** The RPC front refuses (or accepts and resets) every connection for `downMs`; the node keeps running. */
async function stopRpc(topology: Topology, downMs: number, pick: number): Promise<Fault> {
  const mode = pick < 0.5 ? 'refuse' : 'reset'
  const start = Date.now()
  await topology.rpcFront.down(mode)
  await sleep(downMs)
  const fault: Fault = { kind: 'rpc-stop', target: `${Math.round(downMs / 1000)} s of ${mode === 'refuse' ? 'refused' : 'reset'} connections`, start, end: start, recoveryMs: 0 }
  try {
    await topology.rpcFront.up()
  } catch (error) {
    fault.error = `the RPC front did not open again: ${(error as Error).message.slice(0, 2000)}`
  }
  fault.end = Date.now()
  fault.recoveryMs = fault.end - start
  return fault
}

/** Every RPC answer held back by a seeded delay in `delayMs` for `slowMs`. */
async function slowRpc(topology: Topology, slowMs: number, delayMs: [number, number], pick: number): Promise<Fault> {
  const random = seededRandom(Math.floor(pick * 2 ** 31))
  const [min, max] = delayMs
  const start = Date.now()
  topology.rpcFront.slow(() => Math.round(min + random() * (max - min)))
  await sleep(slowMs)
  topology.rpcFront.slow(undefined)
  const delayed = topology.rpcFront.stats.delayed
  // The answers still held when it ends are late too: the window covers the longest of them.
  await sleep(max)
  const end = Date.now()
  return { kind: 'rpc-slow', target: `${Math.round(slowMs / 1000)} s of answers ${min / 1000}–${max / 1000} s late (${delayed} so far)`, start, end, recoveryMs: end - start }
}

/** The internal media API asked for a short speech (its WAV goes to the blob store): the status and code. */
async function probeBlobWrite(topology: Topology): Promise<{ status: number; code?: string; problem: boolean; retryAfter: boolean; ms: number }> {
  const media = topology.processes.find((proc) => proc.role === 'media') as RoleProcess
  const begun = Date.now()
  const res = await fetch(`http://127.0.0.1:${media.port}${MEDIA_SPEECH_PATH}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${media.env.MEDIA_INTERNAL_TOKEN}` },
    body: JSON.stringify({ input: `disk probe ${Date.now()}` }),
    signal: AbortSignal.timeout(30_000),
  }).catch(() => undefined)
  if (!res) return { status: 0, problem: false, retryAfter: false, ms: Date.now() - begun }
  const body = (await res.json().catch(() => ({}))) as { code?: string }
  return {
    ms: Date.now() - begun,
    status: res.status,
    ...(body.code ? { code: body.code } : {}),
    problem: (res.headers.get('content-type') ?? '').startsWith('application/problem+json'),
    retryAfter: res.headers.get('retry-after') !== null,
  }
}

/**
 * The blob volume filled to ENOSPC for `fullMs`, then freed. A blob write meanwhile (the media
 * probe) must be refused as 503 problem+json with Retry-After, and every process must live on.
 */
async function fillDisk(topology: Topology, options: FaultOptions): Promise<Fault> {
  const start = Date.now()
  const bytes = await topology.blobs.fill()
  const fault: Fault = { kind: 'disk-full', target: `blob volume full (${Math.round(bytes / 2 ** 20)} MiB filler)`, start, end: start, recoveryMs: 0 }
  const problems: string[] = []
  try {
    const full = await probeBlobWrite(topology)
    fault.target += `; a blob write answered ${full.status}${full.code ? ` ${full.code}` : ''} in ${(full.ms / 1000).toFixed(1)} s`
    if (full.status !== 0 && (full.status !== 503 || !full.problem || !full.retryAfter)) {
      problems.push(
        `a blob write on the full volume answered ${full.status} ${full.code ?? ''} (problem+json ${full.problem}, Retry-After ${full.retryAfter}), not 503 problem+json with Retry-After`,
      )
    }
    await sleep(Math.max(0, start + options.diskFullMs - Date.now()))
  } finally {
    topology.blobs.free()
  }
  try {
    await topology.untilAllReady(options.recoveryBoundMs)
    const freed = await probeBlobWrite(topology)
    fault.target += `, once freed ${freed.status} in ${(freed.ms / 1000).toFixed(1)} s`
    // Songs and speech need the media tools; without them media answers 503 media_unavailable throughout.
    if (freed.status !== 200 && freed.code !== 'media_unavailable') problems.push(`a blob write after the volume was freed answered ${freed.status} ${freed.code ?? ''}`)
  } catch (error) {
    problems.push((error as Error).message.slice(0, 500))
  }
  fault.end = Date.now()
  fault.recoveryMs = fault.end - start
  if (problems.length > 0) fault.error = problems.join('; ')
  return fault
}

/**
 * kill -9 of the controller holding the Lease; the fault ends when it is back (ready) after another
 * controller took the Lease, which must happen within LEADER_TAKEOVER_BOUND_MS.
 */
async function killLeader(topology: Topology, readyBoundMs: number): Promise<Fault> {
  const kube = topology.kube
  if (!kube) throw new Error('leader-kill needs the kubernetes executor')
  const holder = kube.leader()
  const proc = topology.processes.find((candidate) => candidate.name === holder?.name)
  if (!holder || !proc) throw new Error(`no controller holds the Lease (holder ${holder?.identity ?? 'none'})`)
  const start = Date.now()
  await topology.kill(proc)
  const fault: Fault = { kind: 'leader-kill', target: proc.name, start, end: start, recoveryMs: 0 }
  let takeoverMs: number | undefined
  while (Date.now() - start < LEADER_TAKEOVER_BOUND_MS) {
    const now = kube.leader()
    if (now && now.name !== holder.name) {
      takeoverMs = Date.now() - start
      break
    }
    await sleep(250)
  }
  await restartAfter(topology, proc, fault)
  if (takeoverMs === undefined)
    fault.error = `no other controller took the Lease within ${LEADER_TAKEOVER_BOUND_MS} ms of the leader's kill${fault.error ? `; ${fault.error}` : ''}`
  else fault.target = `${proc.name} (Lease taken over in ${(takeoverMs / 1000).toFixed(1)} s)`
  if (!fault.error && fault.recoveryMs > readyBoundMs + LEADER_TAKEOVER_BOUND_MS) fault.error = `${proc.name} ready ${fault.recoveryMs} ms after its kill`
  return fault
}

/** The API server away for 1-5 s (seeded) and back with a compacted history; ends when every /readyz is 200. */
function restartApiServer(topology: Topology, pick: number, boundMs: number): Promise<Fault> {
  const kube = topology.kube
  if (!kube) throw new Error('api-restart needs the kubernetes executor')
  const downMs = Math.round(1_000 + pick * 4_000)
  return restartDependency(
    topology,
    'api-restart',
    `API server down ${(downMs / 1000).toFixed(1)} s, watches ended, history compacted`,
    () => kube.restartApiServer(downMs).then(() => undefined),
    boundMs,
  )
}

function inject(topology: Topology, step: FaultPlan, options: FaultOptions): Promise<Fault> {
  const bound = options.recoveryBoundMs
  switch (step.kind) {
    case 'leader-kill':
      return killLeader(topology, options.readyBoundMs)
    case 'api-restart':
      return restartApiServer(topology, step.pick, bound)
    case 'kill': {
      const proc = topology.processes[Math.floor(step.pick * topology.processes.length)] as RoleProcess
      return killAndRestart(topology, proc, options.readyBoundMs)
    }
    case 'pg-terminate':
      return terminateBackends(topology)
    case 'pg-restart':
      return restartDependency(topology, 'pg-restart', 'pg_ctl restart -m immediate', () => topology.restartPostgres(), bound)
    case 'redis-kill':
      return killRedisClients(topology)
    case 'redis-restart':
      return restartDependency(topology, 'redis-restart', 'Redis killed and started empty', () => topology.restartRedis(), bound)
    case 'rpc-stop':
      return stopRpc(topology, options.rpcDownMs, step.pick)
    case 'rpc-slow':
      return slowRpc(topology, options.rpcSlowMs, options.rpcDelayMs, step.pick)
    case 'rpc-restart':
      return restartDependency(
        topology,
        'rpc-restart',
        'anvil restarted behind the closed front',
        async () => {
          await topology.stopChain()
          await topology.startChain()
        },
        bound,
      )
    case 'disk-full':
      return fillDisk(topology, options)
  }
}

export interface FaultRunner {
  faults: Fault[]
  /** Resolves when every planned fault has run (or the drill was stopped). */
  done: Promise<void>
  stop(): void
}

/** Runs `plan` against `topology` from now on, one fault at a time. */
export function runFaults(topology: Topology, plan: FaultPlan[], options: FaultOptions): FaultRunner {
  const faults: Fault[] = []
  let stopped = false
  const began = Date.now()
  const done = (async () => {
    for (const step of plan) {
      const wait = began + step.at - Date.now()
      if (wait > 0) await sleep(wait)
      if (stopped || Date.now() - began > options.stopAfterMs) break
      if (step.kind === 'disk-full' && topology.blobs.unavailable) {
        options.log(`fault at ${((Date.now() - began) / 1000).toFixed(1)} s: disk-full skipped (${topology.blobs.unavailable})`)
        continue
      }
      let fault: Fault
      try {
        fault = await inject(topology, step, options)
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
