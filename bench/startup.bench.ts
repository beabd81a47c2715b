// Start-up and idle memory of the real CLI, side by side with a bare fastify process (the floor).
//   npm run bench:startup                  (3 rounds; BENCH_ROUNDS, BENCH_IDLE_SEC override)
//   BENCH_ROUNDS=1 BENCH_ROLES="serve memory" npm run bench:startup
//
// Every process is started as `npm start` starts it: `node bin/agent-gateway.js ROLE…` with the
// project's Node 24 (the launcher re-executes itself in place with its V8 flags and environment, so
// the pid measured is the service's). Per round:
//   - all roles (`serve`): a first start on an empty DATA_DIR, then a warm second start on it;
//     once more on an empty DATA_DIR and an empty compile cache (NODE_COMPILE_CACHE pointed at a new
//     directory: nothing of an earlier start is reused);
//   - each role alone (`gateway`, `scheduler-api`, `controller`, `media`, `memory`): a first start
//     on its own empty DATA_DIR, then the warm second start, measured;
//   - the floor: a bare fastify hello-world (same Node, same flags and environment), and the same
//     process holding our PGlite adapter open on a migrated database (what the embedded database
//     costs before any of our code);
//   - with BENCH_DATABASE_URL (a Postgres database of its own, which the bench migrates; the memory
//     role records its fixed benchmark key there) and BENCH_REDIS_URL: each
//     role alone as the Helm chart deploys it (Postgres, Redis, the gateway calling media at
//     MEDIA_URL, scheduler-api and controller on the kubernetes executor against the fake API
//     server of test/helpers), warm start: the figures the chart's resources are set from.
// Time to ready is from spawn to the "agent-gateway ready" line (the floor: to its "listening"
// line). The issue's targets (a summary line at the end, PASS or MISS): the warm start of all roles
// ready within 2.5× the PGlite floor (the median of each round's ratio to the floor measured right
// after it), and its idle RSS at most 250 MiB. First request: GET /readyz, then GET /openapi.json, right after ready (a new connection
// each). Idle RSS: VmRSS of the service process BENCH_IDLE_SEC (10) s after ready; anvil, the dev
// chain, is a process of its own and reported apart. --help and --version: median of 5 runs.
// Medians over rounds.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { request } from 'node:http'
import os from 'node:os'
import path from 'node:path'
import { performance } from 'node:perf_hooks'
import { freePort, repoRoot } from '../test/helpers/cli.ts'
import { startFakeKubeApiServer, type FakeKubeApiServer } from '../test/helpers/fake-kube-apiserver.ts'

const rounds = Number(process.env.BENCH_ROUNDS ?? 3)
const idleSec = Number(process.env.BENCH_IDLE_SEC ?? 10)
const ROLE_SETS = (process.env.BENCH_ROLES ?? 'serve gateway scheduler-api controller media memory').split(/\s+/).filter(Boolean)
const databaseUrl = process.env.BENCH_DATABASE_URL
const redisUrl = process.env.BENCH_REDIS_URL
const launcher = path.join(repoRoot, 'bin/agent-gateway.js')
// What the launcher gives the service (bin/agent-gateway.js): the floor runs with the same.
const SERVICE_FLAGS = ['--no-memory-reducer', '--max-semi-space-size=16']
const SERVICE_ENV = { MALLOC_TRIM_THRESHOLD_: '131072' }
const TARGET_READY_RATIO = 2.5
const TARGET_IDLE_RSS_MB = 250
const WARM_ALL = 'all roles (npm start), warm start'
const PGLITE_FLOOR = 'bare fastify + PGlite open (our adapter, migrated database)'

const scratch = mkdtempSync(path.join(os.tmpdir(), 'agw-startup-bench-'))
const median = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b)
  const mid = Math.floor(sorted.length / 2)
  return sorted.length === 0 ? Number.NaN : sorted.length % 2 ? (sorted[mid] as number) : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2
}
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** Resident memory of a process, MiB (VmRSS; VmHWM: its peak so far). */
function rssMb(pid: number, field: 'VmRSS' | 'VmHWM' = 'VmRSS'): number {
  const match = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync(`/proc/${pid}/status`, 'utf8'))
  return match ? Number(match[1]) / 1024 : Number.NaN
}

/** Every descendant of `pid` with its command name. */
function descendants(pid: number): { pid: number; name: string }[] {
  const found: { pid: number; name: string }[] = []
  const visit = (parent: number) => {
    let children: number[] = []
    try {
      for (const task of readFileSync(`/proc/${parent}/task/${parent}/children`, 'utf8').trim().split(/\s+/).filter(Boolean)) children.push(Number(task))
    } catch {
      children = []
    }
    for (const child of children) {
      let name = '?'
      try {
        name = readFileSync(`/proc/${child}/comm`, 'utf8').trim()
      } catch {
        /* gone */
      }
      found.push({ pid: child, name })
      visit(child)
    }
  }
  visit(pid)
  return found
}

/** A GET on a new connection: the time to the last byte, ms. */
function timedGet(url: string): Promise<{ ms: number; status: number }> {
  const started = performance.now()
  return new Promise((resolve, reject) => {
    const req = request(url, { agent: false }, (res) => {
      res.on('data', () => {})
      res.on('end', () => resolve({ ms: performance.now() - started, status: res.statusCode ?? 0 }))
    })
    req.on('error', reject)
    req.end()
  })
}

interface Started {
  child: ChildProcess
  readyMs: number
  output(): string
  stop(): Promise<void>
}

/** Spawns `args` and resolves once its output contains `marker` (the time from spawn to it). */
async function startProcess(command: string, args: string[], env: Record<string, string>, marker: string): Promise<Started> {
  const started = performance.now()
  const child = spawn(command, args, { cwd: repoRoot, env, stdio: ['ignore', 'pipe', 'pipe'] })
  let output = ''
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()))
  const readyMs = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`not ready in 120 s:\n${output}`)), 120_000)
    const check = (chunk: Buffer) => {
      output += chunk.toString()
      if (output.includes(marker)) {
        clearTimeout(timer)
        resolve(performance.now() - started)
      }
    }
    child.stdout?.on('data', check)
    child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()))
    void exited.then(() => {
      clearTimeout(timer)
      reject(new Error(`exited before ready:\n${output}`))
    })
  })
  return {
    child,
    readyMs,
    output: () => output,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM')
      await Promise.race([exited, sleep(15_000)])
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
    },
  }
}

interface Ports {
  GATEWAY_PORT: string
  SCHEDULER_PORT: string
  MEMORY_PORT: string
  MEDIA_PORT: string
  CONTROLLER_PORT: string
  REVIEWS_PORT: string
}

async function ports(): Promise<Ports> {
  return {
    GATEWAY_PORT: String(await freePort()),
    SCHEDULER_PORT: String(await freePort()),
    MEMORY_PORT: String(await freePort()),
    MEDIA_PORT: String(await freePort()),
    CONTROLLER_PORT: String(await freePort()),
    REVIEWS_PORT: String(await freePort()),
  }
}

/** The environment of `role` as the Helm chart deploys it (see the header). */
function deployedEnv(role: string, kube: FakeKubeApiServer, p: Ports): Record<string, string> {
  return {
    DATABASE_URL: databaseUrl as string,
    // The memory role's key ring, the same in every run: the database remembers the active key.
    ...(role === 'memory' ? { MEMORY_KEY_FILE: benchKeyRing() } : {}),
    ...(redisUrl ? { REDIS_URL: redisUrl } : {}),
    ...(role === 'gateway' ? { MEDIA_URL: `http://127.0.0.1:${p.MEDIA_PORT}` } : {}),
    ...(role === 'scheduler-api' || role === 'controller' ? { SCHEDULER_EXECUTOR: 'kubernetes', KUBECONFIG: kube.kubeconfigPath, KUBE_NAMESPACE: 'default' } : {}),
  }
}

/** A key ring of one fixed key (a benchmark's: never a real one), mode 0600. */
function benchKeyRing(): string {
  const file = path.join(scratch, 'memory-keys.json')
  writeFileSync(file, JSON.stringify({ active: 'startup-bench', keys: { 'startup-bench': Buffer.alloc(32, 7).toString('base64') } }), { mode: 0o600 })
  return file
}

/** The probe and the first document of a role's main listener. */
function firstUrls(roleSet: string, p: Ports): string[] {
  const base = (port: string) => `http://127.0.0.1:${port}`
  switch (roleSet) {
    case 'serve':
    case 'gateway':
      return [`${base(p.GATEWAY_PORT)}/readyz`, `${base(p.GATEWAY_PORT)}/openapi.json`]
    case 'scheduler-api':
      return [`${base(p.SCHEDULER_PORT)}/readyz`, `${base(p.SCHEDULER_PORT)}/openapi.json`]
    case 'memory':
      return [`${base(p.MEMORY_PORT)}/readyz`, `${base(p.MEMORY_PORT)}/openapi.json`]
    case 'media':
      return [`${base(p.MEDIA_PORT)}/readyz`]
    default:
      return [`${base(p.CONTROLLER_PORT)}/readyz`]
  }
}

interface Sample {
  readyMs: number
  firstRequestMs: number[]
  rssAtReadyMb: number
  idleRssMb: number
  /** The highest RSS the process reached (start-up included), MiB. */
  peakRssMb: number
  anvilRssMb: number
  phases?: Record<string, number>
}

/** One start of the CLI: time to ready, first requests, idle RSS; then SIGTERM. */
async function measureCli(roleSet: string, dataDir: string, extraEnv: Record<string, string> | ((p: Ports) => Record<string, string>) = {}): Promise<Sample> {
  // A port picked free can be taken before the process binds it (anvil picks its own port too):
  // such a start is run again on other ports, from the same state (an empty DATA_DIR stays empty).
  const fresh = !existsSync(dataDir) || readdirSync(dataDir).length === 0
  for (let attempt = 1; ; attempt++) {
    try {
      return await measureCliOnce(roleSet, dataDir, extraEnv)
    } catch (error) {
      if (attempt >= 3 || !/EADDRINUSE/.test((error as Error).message)) throw error
      console.error(`  (a port was taken meanwhile; again on other ports)`)
      if (fresh) rmSync(dataDir, { recursive: true, force: true })
    }
  }
}

async function measureCliOnce(roleSet: string, dataDir: string, extraEnv: Record<string, string> | ((p: Ports) => Record<string, string>)): Promise<Sample> {
  const p = await ports()
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? '',
    HOME: process.env.HOME ?? '/tmp',
    ...(process.env.TMPDIR ? { TMPDIR: process.env.TMPDIR } : {}),
    ...(process.env.NODE_COMPILE_CACHE ? { NODE_COMPILE_CACHE: process.env.NODE_COMPILE_CACHE } : {}),
    ...p,
    DATA_DIR: dataDir,
    MEDIA_INTERNAL_TOKEN: 'startup-bench-media-token-0123456789abcdef',
    ...(typeof extraEnv === 'function' ? extraEnv(p) : extraEnv),
  }
  const args = roleSet === 'serve' ? ['serve'] : ['serve', roleSet]
  const started = await startProcess(process.execPath, [launcher, ...args], env, 'agent-gateway ready')
  try {
    const pid = started.child.pid as number
    const firstRequestMs: number[] = []
    for (const url of firstUrls(roleSet, p)) {
      const { ms, status } = await timedGet(url)
      if (status >= 500 && !url.endsWith('/readyz')) throw new Error(`${url} answered ${status}`)
      firstRequestMs.push(ms)
    }
    const rssAtReadyMb = rssMb(pid)
    await sleep(idleSec * 1000)
    if (started.child.exitCode !== null || started.child.signalCode !== null) {
      throw new Error(`agent-gateway ${args.join(' ')} ended while idle (${started.child.signalCode ?? `exit ${started.child.exitCode}`}):\n${started.output()}`)
    }
    const idleRssMb = rssMb(pid)
    const peakRssMb = rssMb(pid, 'VmHWM')
    const anvil = descendants(pid).filter((process) => process.name === 'anvil')
    const anvilRssMb = anvil.reduce((sum, process) => sum + rssMb(process.pid), 0)
    const readyLine = started
      .output()
      .split('\n')
      .find((line) => line.startsWith('{') && line.includes('"agent-gateway ready"'))
    const phases = readyLine ? (JSON.parse(readyLine) as { startup?: Record<string, number> }).startup : undefined
    return { readyMs: started.readyMs, firstRequestMs, rssAtReadyMb, idleRssMb, peakRssMb, anvilRssMb, ...(phases ? { phases } : {}) }
  } finally {
    await started.stop()
  }
}

const FASTIFY_FLOOR = `
import Fastify from 'fastify'
const app = Fastify({ logger: false })
app.get('/', async () => ({ hello: 'world' }))
await app.listen({ host: '127.0.0.1', port: Number(process.env.PORT) })
console.log('listening')
`

/** The floor: a bare fastify hello-world; `withPglite` also holds our PGlite adapter open on `dataDir`. */
async function measureFloor(withPglite: string | undefined): Promise<Sample> {
  const port = String(await freePort())
  const script = withPglite
    ? `const { openDb } = await import(${JSON.stringify(path.join(repoRoot, 'src/platform/db/index.ts'))})
const db = await openDb({ kind: 'pglite', dataDir: ${JSON.stringify(withPglite)} })
await db.query('select count(*) from schema_migrations')
${FASTIFY_FLOOR}`
    : FASTIFY_FLOOR
  const env = { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp', PORT: port, ...SERVICE_ENV }
  const started = await startProcess(process.execPath, [...SERVICE_FLAGS, '--input-type=module', '-e', script], env, 'listening')
  try {
    const pid = started.child.pid as number
    const { ms } = await timedGet(`http://127.0.0.1:${port}/`)
    const rssAtReadyMb = rssMb(pid)
    await sleep(idleSec * 1000)
    return { readyMs: started.readyMs, firstRequestMs: [ms], rssAtReadyMb, idleRssMb: rssMb(pid), peakRssMb: rssMb(pid, 'VmHWM'), anvilRssMb: 0 }
  } finally {
    await started.stop()
  }
}

/** Median wall time of `agent-gateway ARGS` run to its end, ms. */
function timeCommand(args: string[], runs = 5): number {
  const times: number[] = []
  for (let i = 0; i < runs; i++) {
    const started = performance.now()
    const result = spawnSync(process.execPath, [launcher, ...args], { cwd: repoRoot, env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp' }, encoding: 'utf8' })
    times.push(performance.now() - started)
    if (result.status !== 0) throw new Error(`agent-gateway ${args.join(' ')} exited ${result.status}: ${result.stderr}`)
  }
  return median(times)
}

const results = new Map<string, Sample[]>()
const record = (name: string, sample: Sample) => {
  results.set(name, [...(results.get(name) ?? []), sample])
  const first = sample.firstRequestMs.map((ms) => ms.toFixed(1)).join(' / ')
  console.error(
    `  ${name}: ready ${sample.readyMs.toFixed(0)} ms, first requests ${first} ms, RSS ${sample.rssAtReadyMb.toFixed(0)} MiB at ready, ${sample.idleRssMb.toFixed(0)} MiB idle, ${sample.peakRssMb.toFixed(0)} MiB peak${sample.anvilRssMb ? ` (+ anvil ${sample.anvilRssMb.toFixed(0)} MiB)` : ''}${sample.phases ? ` ${JSON.stringify(sample.phases)}` : ''}`,
  )
}

try {
  const helpMs = timeCommand(['--help'])
  const versionMs = timeCommand(['--version'])
  console.error(`--help ${helpMs.toFixed(0)} ms, --version ${versionMs.toFixed(0)} ms`)
  for (let round = 1; round <= rounds; round++) {
    console.error(`round ${round}/${rounds}`)
    record('bare fastify hello-world', await measureFloor(undefined))
    for (const roleSet of ROLE_SETS) {
      const dataDir = mkdtempSync(path.join(scratch, `${roleSet}-`))
      const label = roleSet === 'serve' ? 'all roles (npm start)' : `${roleSet} alone`
      record(`${label}, first start (empty DATA_DIR)`, await measureCli(roleSet, dataDir))
      record(`${label}, warm start`, await measureCli(roleSet, dataDir))
      if (roleSet === 'serve') {
        record(PGLITE_FLOOR, await measureFloor(path.join(dataDir, 'pgdata')))
        const cold = mkdtempSync(path.join(scratch, 'cold-'))
        record(`${label}, first start, empty compile cache`, await measureCli(roleSet, path.join(cold, 'data'), { NODE_COMPILE_CACHE: path.join(cold, 'compile-cache') }))
      }
      rmSync(dataDir, { recursive: true, force: true })
    }
    if (databaseUrl) {
      const kube = await startFakeKubeApiServer()
      try {
        for (const role of ROLE_SETS.filter((set) => set !== 'serve')) {
          // One DATA_DIR per role for every round: the memory role's key ring lives there, and the
          // database remembers the key its owners' keys are wrapped under.
          const dataDir = path.join(scratch, `deployed-${role}`)
          if (round === 1) {
            mkdirSync(dataDir)
            await measureCli(role, dataDir, (p) => deployedEnv(role, kube, p)) // migrates the database once
          }
          record(`${role} as deployed (Postgres${redisUrl ? ', Redis' : ''}), warm start`, await measureCli(role, dataDir, (p) => deployedEnv(role, kube, p)))
        }
      } finally {
        await kube.close()
      }
    }
  }

  const floor = results.get('bare fastify hello-world') ?? []
  const floorReady = median(floor.map((s) => s.readyMs))
  const floorRss = median(floor.map((s) => s.idleRssMb))
  const pgliteFloor = results.get(PGLITE_FLOOR) ?? []
  const pgliteFloorReady = median(pgliteFloor.map((s) => s.readyMs))
  const ratio = (value: number, of: number) => (Number.isFinite(of) ? (value / of).toFixed(1) : '–')
  const lines = [
    `Node ${process.versions.node}, ${os.cpus().length} × ${os.cpus()[0]?.model ?? 'cpu'}, ${rounds} round(s), idle RSS ${idleSec} s after ready; medians.`,
    '',
    `\`agent-gateway --help\`: ${helpMs.toFixed(0)} ms; \`agent-gateway --version\`: ${versionMs.toFixed(0)} ms (median of 5, process start to exit).`,
    '',
    '| Process | time to ready ms | × bare fastify (ready) | × PGlite floor (ready) | first request ms (/readyz, /openapi.json) | RSS at ready MiB | idle RSS MiB | × bare fastify (idle RSS) | peak RSS MiB | anvil RSS MiB |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
  ]
  for (const [name, samples] of results) {
    const ready = median(samples.map((s) => s.readyMs))
    const idle = median(samples.map((s) => s.idleRssMb))
    const first = [0, 1]
      .map((i) => samples.map((s) => s.firstRequestMs[i]).filter((ms): ms is number => ms !== undefined))
      .filter((list) => list.length > 0)
      .map((list) => median(list).toFixed(1))
      .join(' / ')
    const anvil = median(samples.map((s) => s.anvilRssMb))
    lines.push(
      `| ${name} | ${ready.toFixed(0)} | ${ratio(ready, floorReady)} | ${ratio(ready, pgliteFloorReady)} | ${first} | ${median(samples.map((s) => s.rssAtReadyMb)).toFixed(0)} | ${idle.toFixed(0)} | ${ratio(idle, floorRss)} | ${median(samples.map((s) => s.peakRssMb)).toFixed(0)} | ${anvil ? anvil.toFixed(0) : '–'} |`,
    )
  }
  const warm = results.get(WARM_ALL) ?? []
  if (warm.length > 0 && warm.length === pgliteFloor.length) {
    // Each round's warm start against the floor measured right after it: the drift of a loaded machine cancels out.
    const readyRatio = median(warm.map((s, i) => s.readyMs / (pgliteFloor[i] as Sample).readyMs))
    const idleRss = median(warm.map((s) => s.idleRssMb))
    const verdict = (pass: boolean) => (pass ? 'PASS' : 'MISS')
    lines.push(
      '',
      `Targets, warm start of all roles: ready ${median(warm.map((s) => s.readyMs)).toFixed(0)} ms, ${readyRatio.toFixed(2)}× the PGlite floor (${pgliteFloorReady.toFixed(0)} ms; median of the rounds' ratios): ${verdict(readyRatio <= TARGET_READY_RATIO)} (≤ ${TARGET_READY_RATIO}×); idle RSS ${idleRss.toFixed(0)} MiB: ${verdict(idleRss <= TARGET_IDLE_RSS_MB)} (≤ ${TARGET_IDLE_RSS_MB} MiB).`,
    )
  }
  console.log(lines.join('\n'))
} finally {
  rmSync(scratch, { recursive: true, force: true })
}
