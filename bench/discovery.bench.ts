// Discovery routes vs a bare fastify hello-world, measured with autocannon in the same run on
// the same machine. The gateway runs as the real CLI, the peer is a bare fastify app (same
// fastify, logger off) in its own process; autocannon runs here.
//   npm run bench                       (defaults: 3 rounds, 10 s per measurement, 50 connections)
//   BENCH_ROUNDS=1 BENCH_DURATION=5 BENCH_CONNECTIONS=20 BENCH_ROLES="serve" BENCH_VARIANTS=plain,br npm run bench
//
// The CLI runs the gateway role alone (`agent-gateway gateway`, one role per process as deployed);
// BENCH_ROLES="serve" measures the all-roles process instead, background work included.
//
// Each round measures, route by route, the hello-world, then ours followed by the peer process
// sending our exact response (same status, headers and bytes) straight from node:http with nothing
// else per request: the cost of the bytes alone, the floor for any server sending that response.
// Plain, br and gzip. Ratios are taken against the hello-world of the same block; the table shows medians
// over rounds. Server CPU per request is each process's CPU time delta over the run divided by the
// requests answered.
//
// The load generator does no work the measurement does not need: autocannon 9 appends every
// response body to a JavaScript string (a UTF-8 decode per chunk) even when nothing checks bodies.
// On a 2-core machine that client work, not the server, capped large and compressed responses
// (page 1 br, 7 KB: 32,000 req/s with the decode, 76,000 without, node:http alone serving it).
// The bench drops it for every target alike (hello-world included); byte counts are kept.
// BENCH_DECODE_BODIES=1 measures with it.
//
// Client and servers are pinned to separate cores (taskset, when there are 2+ cores): autocannon on
// core 0, the gateway and the peer (never loaded at the same time) on core 1, so neither server
// competes with the client for a core and every target runs under the same conditions (on this
// shared machine the same route still moves ±15 % between measurements; hence rounds and medians).
// BENCH_PIN=0 leaves placement to the kernel.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process'
import { request } from 'node:http'
import { mkdtempSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { createRequire } from 'node:module'
import autocannon from 'autocannon'
import { freePort, repoRoot, startCli } from '../test/helpers/cli.ts'

const rounds = Number(process.env.BENCH_ROUNDS ?? 3)
const duration = Number(process.env.BENCH_DURATION ?? 10)
const warmup = Number(process.env.BENCH_WARMUP ?? 2)
const connections = Number(process.env.BENCH_CONNECTIONS ?? 50)
const roles = (process.env.BENCH_ROLES ?? 'gateway').split(/\s+/).filter(Boolean)
const decodeBodies = process.env.BENCH_DECODE_BODIES === '1'
const pinned = process.env.BENCH_PIN !== '0' && os.cpus().length >= 2 && hasTaskset()

function hasTaskset(): boolean {
  try {
    execFileSync('taskset', ['-p', String(process.pid)], { stdio: 'ignore' })
    return true
  } catch {
    return false
  }
}

/** Every thread of `pid` (and the threads it starts later) on `core`. */
function pin(pid: number | undefined, core: number): void {
  if (pinned && pid !== undefined) execFileSync('taskset', ['-a', '-p', '-c', String(core), String(pid)], { stdio: 'ignore' })
}

if (!decodeBodies) {
  // Bodies are neither verified nor kept (no expectBody/verifyBody): keep only autocannon's byte count.
  const PipelinedRequestsQueue = createRequire(import.meta.url)('autocannon/lib/pipelinedRequestsQueue.js') as { prototype: { addBody(data: Buffer): void } }
  PipelinedRequestsQueue.prototype.addBody = () => {}
}

interface Run {
  requestsPerSec: number
  /** Server CPU time (user + system) per request, µs. */
  cpuUsPerReq: number
  p50Ms: number
  p99Ms: number
  bytesPerReq: number
  non2xx: number
}

interface Target {
  name: string
  url: string
  headers: Record<string, string>
  cpuSeconds: () => Promise<number>
}

async function measure(target: Target, seconds: number): Promise<Run> {
  const cpuBefore = await target.cpuSeconds()
  const result = await autocannon({ url: target.url, connections, duration: seconds, headers: target.headers })
  const cpuAfter = await target.cpuSeconds()
  return {
    requestsPerSec: result.requests.average,
    cpuUsPerReq: ((cpuAfter - cpuBefore) * 1e6) / Math.max(1, result.requests.total),
    p50Ms: result.latency.p50,
    p99Ms: result.latency.p99,
    bytesPerReq: Math.round(result.throughput.average / Math.max(1, result.requests.average)),
    non2xx: result.non2xx,
  }
}

interface CapturedResponse {
  status: number
  headers: Record<string, string>
  bodyBase64: string
}

/** One raw response (node:http, so a br body stays compressed as it travelled). */
async function capture(url: string, headers: Record<string, string>): Promise<CapturedResponse> {
  return await new Promise((resolve, reject) => {
    request(url, { headers }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (chunk: Buffer) => chunks.push(chunk))
      res.on('end', () => {
        const kept: Record<string, string> = {}
        for (const [name, value] of Object.entries(res.headers)) {
          // The peer's fastify and node add these themselves.
          if (['content-length', 'date', 'connection', 'keep-alive', 'transfer-encoding'].includes(name)) continue
          if (typeof value === 'string') kept[name] = value
        }
        resolve({ status: res.statusCode ?? 0, headers: kept, bodyBase64: Buffer.concat(chunks).toString('base64') })
      })
      res.on('error', reject)
    })
      .on('error', reject)
      .end()
  })
}

// The peer: a bare fastify hello-world, plus `/same/N` answering with response N of ours as
// captured, written by node:http before fastify sees the request (one writeHead with a prepared
// header list, one end), so the cost of moving those bytes is separated from the cost of any code.
async function startBareFastify(responses: CapturedResponse[]): Promise<{ url: string; child: ChildProcess }> {
  const port = await freePort()
  const dir = mkdtempSync(path.join(os.tmpdir(), 'agw-bench-'))
  const script = path.join(dir, 'hello.mjs')
  writeFileSync(path.join(dir, 'responses.json'), JSON.stringify(responses))
  writeFileSync(
    script,
    `import Fastify from ${JSON.stringify(path.join(repoRoot, 'node_modules/fastify/fastify.js'))}
import { readFileSync } from 'node:fs'
import { createServer } from 'node:http'
const responses = JSON.parse(readFileSync(${JSON.stringify(path.join(dir, 'responses.json'))}, 'utf8'))
const same = new Map(responses.map((response, i) => {
  const body = Buffer.from(response.bodyBase64, 'base64')
  const headers = [...Object.entries(response.headers).flat(), 'content-length', String(body.length)]
  return ['/same/' + i, { status: response.status, headers, body }]
}))
// fastify's own server settings (keep-alive timeout), with /same/N answered before routing.
const serverFactory = (handler, options) => {
  const server = createServer((request, response) => {
    const prepared = same.get(request.url)
    if (prepared === undefined) return handler(request, response)
    response.writeHead(prepared.status, prepared.headers)
    response.end(prepared.body)
  })
  server.keepAliveTimeout = options.keepAliveTimeout
  return server
}
const app = Fastify({ logger: false, serverFactory })
app.get('/', async () => ({ hello: 'world' }))
app.get('/__cpu', async () => { const u = process.cpuUsage(); return { seconds: (u.user + u.system) / 1e6 } })
await app.listen({ host: '127.0.0.1', port: ${port} })
console.log('ready')`,
  )
  // The V8 flags the gateway runs with (bin/agent-gateway.js), so both processes run the same V8.
  const child = spawn(process.execPath, ['--no-memory-reducer', script], { stdio: ['ignore', 'pipe', 'inherit'] })
  await new Promise<void>((resolve) => child.stdout?.once('data', () => resolve()))
  return { url: `http://127.0.0.1:${port}`, child }
}

const median = (values: number[]): number => {
  const sorted = [...values].sort((a, b) => a - b)
  const middle = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? (sorted[middle] as number) : ((sorted[middle - 1] as number) + (sorted[middle] as number)) / 2
}

const routes = [
  ['GET /openapi.json (page 1)', '/openapi.json'],
  ['GET /openapi.json?q=song', '/openapi.json?q=song'],
  ['GET /openapi.json?page=2', '/openapi.json?page=2'],
  ['GET /manifest.json', '/manifest.json'],
  ['GET /services', '/services'],
  ['GET /services/songmodel-3-pro', '/services/songmodel-3-pro'],
  ['GET /llms.txt', '/llms.txt'],
] as const
// Plain (curl, autocannon), and the codings clients ask for: browsers and curl --compressed
// accept br; Node's fetch (undici) sends `gzip, deflate`, as do Python's requests and httpx
// without the brotli package. Each gets the precompressed bytes. BENCH_VARIANTS picks a subset
// (`plain,br,gzip`, the default).
const allVariants = {
  plain: ['', {}],
  br: [', br', { 'accept-encoding': 'br, gzip' }],
  gzip: [', gzip', { 'accept-encoding': 'gzip, deflate' }],
} as const
const variants = (process.env.BENCH_VARIANTS ?? 'plain,br,gzip').split(',').map((name) => {
  const variant = allVariants[name.trim() as keyof typeof allVariants]
  if (variant === undefined) throw new Error(`BENCH_VARIANTS: unknown variant "${name}" (plain, br, gzip)`)
  return variant
})

const cli = await startCli({ args: roles, env: { LOG_LEVEL: 'info' } })
// prom-client's process_cpu_seconds_total (process.cpuUsage(), user + system) of the gateway process.
const gatewayCpu = async () => {
  const text = await (await fetch(`${cli.gateway}/metrics`)).text()
  const match = text.match(/^agent_gateway_process_cpu_seconds_total (\S+)$/m)
  return Number(match?.[1] ?? Number.NaN)
}
const cases = variants.flatMap(([suffix, headers]) => routes.map(([name, route]) => ({ name: `${name}${suffix}`, route, headers: { ...headers } as Record<string, string> })))
const captured = await Promise.all(cases.map((c) => capture(cli.gateway + c.route, c.headers)))
const bare = await startBareFastify(captured)
pin(process.pid, 0)
pin(cli.child.pid, 1)
pin(bare.child.pid, 1)
const bareCpu = async () => ((await (await fetch(`${bare.url}/__cpu`)).json()) as { seconds: number }).seconds

try {
  const hello: Target = { name: 'bare fastify hello-world', url: `${bare.url}/`, headers: {}, cpuSeconds: bareCpu }
  const pairs = cases.map((c, i) => ({
    ours: { name: c.name, url: cli.gateway + c.route, headers: c.headers, cpuSeconds: gatewayCpu } satisfies Target,
    same: { name: `${c.name} (bare, same bytes)`, url: `${bare.url}/same/${i}`, headers: c.headers, cpuSeconds: bareCpu } satisfies Target,
  }))
  // Warm-up (JIT, caches, compressed variants) before anything is measured.
  for (const target of [hello, ...pairs.flatMap((p) => [p.ours, p.same])]) await measure(target, warmup)

  // One block per route: the hello-world, then ours and the same response for each variant. A
  // case's ratios are taken against its block's hello-world, measured under the same machine load.
  const helloRuns: Run[] = []
  const results = pairs.map(() => ({
    ours: [] as Run[],
    same: [] as Run[],
    rpsRatio: [] as number[],
    cpuRatio: [] as number[],
    sameCpuRatio: [] as number[],
    sameFloorRatio: [] as number[],
  }))
  const blocks = routes.map((_route, r) => variants.map((_variant, v) => v * routes.length + r))
  for (let round = 1; round <= rounds; round++) {
    for (const block of blocks) {
      const baseline = await measure(hello, duration)
      helloRuns.push(baseline)
      for (const i of block) {
        const ours = await measure(pairs[i]!.ours, duration)
        const same = await measure(pairs[i]!.same, duration)
        const result = results[i]!
        result.ours.push(ours)
        result.same.push(same)
        result.rpsRatio.push(ours.requestsPerSec / baseline.requestsPerSec)
        result.cpuRatio.push(baseline.cpuUsPerReq / ours.cpuUsPerReq)
        result.sameCpuRatio.push(same.cpuUsPerReq / ours.cpuUsPerReq)
        result.sameFloorRatio.push(baseline.cpuUsPerReq / same.cpuUsPerReq)
      }
    }
    const last = helloRuns.slice(-blocks.length)
    console.error(
      `round ${round}/${rounds} done: hello-world ${Math.round(median(last.map((r) => r.requestsPerSec)))} req/s, ${median(last.map((r) => r.cpuUsPerReq)).toFixed(1)} µs/req`,
    )
  }

  const fixed = (value: number, digits: number) => value.toFixed(digits)
  const lines = [
    `Node ${process.version}, ${os.cpus().length} × ${os.cpus()[0]?.model ?? 'cpu'}, \`agent-gateway ${roles.join(' ')}\`, autocannon ${connections} connections${decodeBodies ? '' : ' (bodies counted, not decoded)'}${pinned ? ', client on core 0, servers on core 1' : ', unpinned'}, ` +
      `${rounds} round(s) of ${duration} s per measurement after a ${warmup} s warm-up; medians over rounds`,
    '',
    '| Route | req/s | ratio vs hello-world | server CPU µs/req | CPU ratio vs hello-world | node:http alone, same response: req/s | its CPU µs/req | its CPU ratio vs hello-world (best possible) | ours vs same response (CPU) | p50 ms | p99 ms | bytes/req |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    `| bare fastify hello-world | ${fixed(median(helloRuns.map((r) => r.requestsPerSec)), 0)} | 1.00 | ${fixed(median(helloRuns.map((r) => r.cpuUsPerReq)), 1)} | 1.00 | – | – | – | – | ${median(helloRuns.map((r) => r.p50Ms))} | ${median(helloRuns.map((r) => r.p99Ms))} | ${median(helloRuns.map((r) => r.bytesPerReq))} |`,
    ...pairs.map(({ ours }, i) => {
      const r = results[i]!
      return (
        `| ${ours.name} | ${fixed(median(r.ours.map((x) => x.requestsPerSec)), 0)} | ${fixed(median(r.rpsRatio), 2)} | ${fixed(median(r.ours.map((x) => x.cpuUsPerReq)), 1)} | ` +
        `${fixed(median(r.cpuRatio), 2)} | ${fixed(median(r.same.map((x) => x.requestsPerSec)), 0)} | ${fixed(median(r.same.map((x) => x.cpuUsPerReq)), 1)} | ` +
        `${fixed(median(r.sameFloorRatio), 2)} | ${fixed(median(r.sameCpuRatio), 2)} | ${median(r.ours.map((x) => x.p50Ms))} | ${median(r.ours.map((x) => x.p99Ms))} | ${median(r.ours.map((x) => x.bytesPerReq))} |`
      )
    }),
  ]
  console.log(lines.join('\n'))
  const failures = [...helloRuns, ...results.flatMap((r) => [...r.ours, ...r.same])].filter((r) => r.non2xx > 0)
  if (failures.length > 0) console.error(`non-2xx answers in ${failures.length} run(s)`)
} finally {
  bare.child.kill('SIGKILL')
  await cli.stop('SIGTERM')
}
