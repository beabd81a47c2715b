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
  url: string
  requestsPerSec: number
  p50Ms: number
  p99Ms: number
  bytesPerReq: number
  non2xx: number
}

async function measure(name: string, url: string): Promise<Result> {
  // Warm up (JIT, caches) before the measured run.
  await autocannon({ url, connections, duration: 2 })
  const result = await autocannon({ url, connections, duration })
  return {
    name,
    url,
    requestsPerSec: result.requests.average,
    p50Ms: result.latency.p50,
    p99Ms: result.latency.p99,
    bytesPerReq: Math.round(result.throughput.average / Math.max(1, result.requests.average)),
    non2xx: result.non2xx,
  }
}

async function startBareFastify(): Promise<{ url: string; child: ChildProcess }> {
  const port = await freePort()
  const dir = mkdtempSync(path.join(os.tmpdir(), 'agw-bench-'))
  const script = path.join(dir, 'hello.mjs')
  writeFileSync(
    script,
    `import Fastify from ${JSON.stringify(path.join(repoRoot, 'node_modules/fastify/fastify.js'))}
const app = Fastify({ logger: false })
app.get('/', async () => ({ hello: 'world' }))
await app.listen({ host: '127.0.0.1', port: ${port} })
console.log('ready')`,
  )
  const child = spawn(process.execPath, [script], { stdio: ['ignore', 'pipe', 'inherit'] })
  await new Promise<void>((resolve) => child.stdout?.once('data', () => resolve()))
  return { url: `http://127.0.0.1:${port}/`, child }
}

const bare = await startBareFastify()
const cli = await startCli({ env: { LOG_LEVEL: 'warn' } })
try {
  const baseline = await measure('bare fastify hello-world', bare.url)
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
  for (const [name, route] of routes) results.push(await measure(name, cli.gateway + route))
  const lines = [
    `Node ${process.version}, ${os.cpus().length} × ${os.cpus()[0]?.model ?? 'cpu'}, autocannon ${connections} connections, ${duration} s per route`,
    '',
    '| Route | req/s | ratio vs bare | p50 ms | p99 ms | bytes/req |',
    '|---|---:|---:|---:|---:|---:|',
    `| ${baseline.name} | ${baseline.requestsPerSec.toFixed(0)} | 1.00 | ${baseline.p50Ms} | ${baseline.p99Ms} | ${baseline.bytesPerReq} |`,
    ...results.map(
      (r) =>
        `| ${r.name} | ${r.requestsPerSec.toFixed(0)} | ${(r.requestsPerSec / baseline.requestsPerSec).toFixed(2)} | ${r.p50Ms} | ${r.p99Ms} | ${r.bytesPerReq} |`,
    ),
  ]
  console.log(lines.join('\n'))
  const failures = [baseline, ...results].filter((r) => r.non2xx > 0)
  if (failures.length > 0) console.error('non-2xx answers:', failures.map((r) => `${r.name}: ${r.non2xx}`).join(', '))
} finally {
  bare.child.kill('SIGKILL')
  await cli.stop('SIGTERM')
}
