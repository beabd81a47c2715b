// Discovery routes vs a bare fastify hello-world, measured with autocannon in the same run on
// the same machine. Each server runs in its own child process; autocannon runs here.
//   npm run bench                       (defaults: 10 s per route, 50 connections)
//   BENCH_DURATION=5 BENCH_CONNECTIONS=20 npm run bench
import { spawn, type ChildProcess } from 'node:child_process'
import { mkdtempSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import autocannon from 'autocannon'
import { freePort, repoRoot, startCli } from '../test/helpers/cli.ts'

const duration = Number(process.env.BENCH_DURATION ?? 10)
const connections = Number(process.env.BENCH_CONNECTIONS ?? 50)

interface Result {
  name: string
  /** Server CPU time per request (user + system), µs: the server's capacity when the client saturates first. */
  cpuUsPerReq: number
  url: string
  requestsPerSec: number
  p50Ms: number
  p99Ms: number
  bytesPerReq: number
  non2xx: number
}

async function measure(name: string, url: string, cpuSeconds: () => Promise<number>, headers: Record<string, string> = {}): Promise<Result> {
  // Warm up (JIT, caches) before the measured run.
  await autocannon({ url, connections, duration: 2, headers })
  const cpuBefore = await cpuSeconds()
  const result = await autocannon({ url, connections, duration, headers })
  const cpuAfter = await cpuSeconds()
  return {
    name,
    cpuUsPerReq: ((cpuAfter - cpuBefore) * 1e6) / Math.max(1, result.requests.total),
    url,
    requestsPerSec: result.requests.average,
    p50Ms: result.latency.p50,
    p99Ms: result.latency.p99,
    bytesPerReq: Math.round(result.throughput.average / Math.max(1, result.requests.average)),
    non2xx: result.non2xx,
  }
}

// The peer: a bare fastify hello-world; `/same-bytes` serves a fixed copy of our largest page so
// the cost of moving the bytes is separated from the cost of our code.
async function startBareFastify(sameBytes: string): Promise<{ url: string; child: ChildProcess }> {
  const port = await freePort()
  const dir = mkdtempSync(path.join(os.tmpdir(), 'agw-bench-'))
  const script = path.join(dir, 'hello.mjs')
  writeFileSync(path.join(dir, 'same-bytes.json'), sameBytes)
  writeFileSync(
    script,
    `import Fastify from ${JSON.stringify(path.join(repoRoot, 'node_modules/fastify/fastify.js'))}
import { readFileSync } from 'node:fs'
const sameBytes = readFileSync(${JSON.stringify(path.join(dir, 'same-bytes.json'))}, 'utf8')
const app = Fastify({ logger: false })
app.get('/', async () => ({ hello: 'world' }))
app.get('/same-bytes', async (_request, reply) => reply.type('application/json; charset=utf-8').send(sameBytes))
app.get('/__cpu', async () => { const u = process.cpuUsage(); return { seconds: (u.user + u.system) / 1e6 } })
await app.listen({ host: '127.0.0.1', port: ${port} })
console.log('ready')`,
  )
  const child = spawn(process.execPath, [script], { stdio: ['ignore', 'pipe', 'inherit'] })
  await new Promise<void>((resolve) => child.stdout?.once('data', () => resolve()))
  return { url: `http://127.0.0.1:${port}/`, child }
}

const cli = await startCli({ env: { LOG_LEVEL: 'warn' } })
const largestPage = await (await fetch(`${cli.gateway}/openapi.json?page=2`)).text()
const bare = await startBareFastify(largestPage)
const bareCpu = async () => ((await (await fetch(`${bare.url}__cpu`)).json()) as { seconds: number }).seconds
// prom-client's process_cpu_seconds_total (user + system) of the gateway process.
const gatewayCpu = async () => {
  const text = await (await fetch(`${cli.gateway}/metrics`)).text()
  const match = text.match(/^agent_gateway_process_cpu_seconds_total (\S+)$/m)
  return Number(match?.[1] ?? Number.NaN)
}
try {
  const baseline = await measure('bare fastify hello-world', bare.url, bareCpu)
  const sameBytes = await measure(`bare fastify, same ${largestPage.length} bytes as /openapi.json?page=2`, `${bare.url}same-bytes`, bareCpu)
  const routes = [
    ['GET /openapi.json (page 1)', '/openapi.json'],
    ['GET /openapi.json?q=song', '/openapi.json?q=song'],
    ['GET /openapi.json?page=2', '/openapi.json?page=2'],
    ['GET /manifest.json', '/manifest.json'],
    ['GET /services', '/services'],
    ['GET /services/songmodel-3-pro', '/services/songmodel-3-pro'],
    ['GET /llms.txt', '/llms.txt'],
  ] as const
  const results: Result[] = []
  for (const [name, route] of routes) results.push(await measure(name, cli.gateway + route, gatewayCpu))
  // What agents using fetch/undici see: they send Accept-Encoding and get the precompressed bytes.
  const compressed = { 'accept-encoding': 'br, gzip' }
  for (const [name, route] of routes) results.push(await measure(`${name}, br`, cli.gateway + route, gatewayCpu, compressed))
  const lines = [
    `Node ${process.version}, ${os.cpus().length} × ${os.cpus()[0]?.model ?? 'cpu'}, autocannon ${connections} connections, ${duration} s per route`,
    '',
    '| Route | req/s | ratio vs bare | server CPU µs/req | capacity ratio vs bare | p50 ms | p99 ms | bytes/req |',
    '|---|---:|---:|---:|---:|---:|---:|---:|',
    ...[baseline, sameBytes, ...results].map(
      (r) =>
        `| ${r.name} | ${r.requestsPerSec.toFixed(0)} | ${(r.requestsPerSec / baseline.requestsPerSec).toFixed(2)} | ${r.cpuUsPerReq.toFixed(1)} | ${(baseline.cpuUsPerReq / r.cpuUsPerReq).toFixed(2)} | ${r.p50Ms} | ${r.p99Ms} | ${r.bytesPerReq} |`,
    ),
    '',
    'req/s is bounded by autocannon (a JS client on the other core) as much as by the server; "capacity" is the',
    'server CPU per request of the bare server divided by ours: the throughput ratio each would reach with a free client.',
  ]
  console.log(lines.join('\n'))
  const failures = [baseline, sameBytes, ...results].filter((r) => r.non2xx > 0)
  if (failures.length > 0) console.error('non-2xx answers:', failures.map((r) => `${r.name}: ${r.non2xx}`).join(', '))
} finally {
  bare.child.kill('SIGKILL')
  await cli.stop('SIGTERM')
}
