// Hostile JSON-RPC on POST /mcp vs a neighbour's /healthz, on ONE server process: the MCP route as
// the gateway mounts it (createHttpApp, registerMcpRoute, the real registry's tool table: a
// tools/list result is about 235 KB) with the launcher's V8 flags. /healthz is probed every
// BENCH_PROBE_MS by a worker thread (its own event loop: the hostile client's work is not timed),
// first on an idle server, then while the main thread sends, in BENCH_ROUNDS rounds: a
// 2,000-message batch of tools/list (past MAX_BATCH_MESSAGES), a 100-message one (the largest
// taken, 2025-03-26), and 300 malformed messages (BENCH_CONCURRENCY at a time). Every message must
// be answered, with the code docs/mcp.md gives it.
//   node bench/mcp-batch.bench.ts
//   BENCH_ROUNDS=10 BENCH_PROBE_MS=5 node bench/mcp-batch.bench.ts
import { spawn, type ChildProcess } from 'node:child_process'
import os from 'node:os'
import { fileURLToPath } from 'node:url'
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads'
import { createCatalog } from '../src/catalog/catalog.ts'
import { registry } from '../src/catalog/registry.ts'
import { createOperationDispatcher } from '../src/mcp/dispatcher.ts'
import { registerMcpRoute } from '../src/mcp/server.ts'
import { MAX_BATCH_MESSAGES } from '../src/mcp/transport.ts'
import { createHttpApp } from '../src/platform/http.ts'
import { createLogger } from '../src/platform/logger.ts'
import { createMetrics } from '../src/platform/metrics.ts'
import { IMPLEMENTED_OPERATIONS } from '../src/runtime.ts'

const THIS_FILE = fileURLToPath(import.meta.url)
const HEADERS = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' }
/** A message not answered by then counts as unanswered (the probe's clients gave up at 90 s). */
const ANSWER_WITHIN_MS = 30_000

// ------------------------------------------------------------------ the server (child process)

async function serve(): Promise<void> {
  const logger = createLogger('silent')
  const urls = { gateway: 'http://127.0.0.1:1', scheduler: 'http://127.0.0.1:1', memory: 'http://127.0.0.1:1' }
  const catalog = createCatalog(registry, { urls, implemented: IMPLEMENTED_OPERATIONS })
  const bodyLimitBytes = 16 * 1024 * 1024
  const app = createHttpApp({ name: 'gateway', logger, metrics: createMetrics({ defaultMetrics: false }), bodyLimitBytes })
  registerMcpRoute(app, { catalog, dispatcher: createOperationDispatcher({ local: new Map([['gateway', app]]), urls }), bodyLimitBytes, logger })
  // The longest turn of the event loop since the last read, in CPU time of the main thread between
  // two timer ticks: unlike wall time, not lengthened by the other processes of a shared machine.
  let longestTurnMs = 0
  let last = process.threadCpuUsage()
  setInterval(() => {
    const now = process.threadCpuUsage()
    longestTurnMs = Math.max(longestTurnMs, (now.user - last.user + now.system - last.system) / 1000)
    last = now
  }, 1).unref()
  app.get('/__loop', async () => {
    const read = { longestTurnMs }
    longestTurnMs = 0
    return read
  })
  await app.listen({ port: 0, host: '127.0.0.1' })
  const address = app.server.address()
  console.log(`ready ${typeof address === 'object' && address ? address.port : 0}`)
}

function startServer(): Promise<{ url: string; child: ChildProcess }> {
  // The V8 flags the launcher runs the service with (bin/agent-gateway.js).
  const child = spawn(process.execPath, ['--no-memory-reducer', '--max-semi-space-size=16', THIS_FILE, 'serve'], { stdio: ['ignore', 'pipe', 'inherit'] })
  return new Promise((resolve, reject) => {
    let out = ''
    child.stdout?.on('data', (chunk: Buffer) => {
      out += chunk.toString()
      const match = /ready (\d+)/.exec(out)
      if (match) resolve({ url: `http://127.0.0.1:${match[1]}`, child })
    })
    child.once('exit', (code) => reject(new Error(`server exited (${code}) before it was ready: ${out}`)))
  })
}

// ------------------------------------------------------------------ the /healthz prober (worker thread)

interface ProbeJob {
  url: string
  intervalMs: number
}

async function probe(job: ProbeJob): Promise<void> {
  const latencies: number[] = []
  let stopped = false
  parentPort?.once('message', () => {
    stopped = true
  })
  while (!stopped) {
    const started = performance.now()
    await (await fetch(`${job.url}/healthz`)).text()
    latencies.push(performance.now() - started)
    await new Promise((resolve) => setTimeout(resolve, job.intervalMs))
  }
  parentPort?.postMessage(latencies)
}

/** The server's longest event-loop turn (CPU ms) since the last read. */
async function longestTurn(url: string): Promise<number> {
  return ((await (await fetch(`${url}/__loop`)).json()) as { longestTurnMs: number }).longestTurnMs
}

/** Probes /healthz while `work` runs: the latencies in ms, and the server's longest turn meanwhile. */
async function probed(url: string, intervalMs: number, work: () => Promise<void>): Promise<{ latencies: number[]; longestTurnMs: number }> {
  const worker = new Worker(THIS_FILE, { workerData: { url, intervalMs } satisfies ProbeJob })
  const latencies = new Promise<number[]>((resolve, reject) => {
    worker.once('message', resolve)
    worker.once('error', reject)
  })
  await new Promise((resolve) => setTimeout(resolve, 200))
  await longestTurn(url)
  await work()
  const longestTurnMs = await longestTurn(url)
  worker.postMessage('stop')
  const result = await latencies
  await worker.terminate()
  return { latencies: result, longestTurnMs }
}

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] ?? Number.NaN
}

// ------------------------------------------------------------------ the hostile load

/** A JSON-RPC answer, as far as the checks read it. */
interface RpcAnswer {
  id?: unknown
  result?: unknown
  error?: { code?: unknown }
}

/** Malformed messages and the error each must get (docs/mcp.md "Errors"). */
const MALFORMED: { body: string; code: number; id: number | null }[] = [
  { body: '{"jsonrpc":"2.0","id":1.5,"method":"tools/list"}', code: -32600, id: null },
  { body: '{"jsonrpc":"2.0","id":1e300,"method":"tools/list"}', code: -32600, id: null },
  { body: '{"jsonrpc":"2.0","id":3,"method":"tools/list","_meta":"x"}', code: -32600, id: null },
  { body: '{"jsonrpc":"2.0","id":4,"method":"tools/list","params":[]}', code: -32602, id: 4 },
  { body: '{"jsonrpc":"2.0","id":5,"method":"tools/list","params":{"_meta":5}}', code: -32602, id: 5 },
  { body: '{"jsonrpc":"2.0","id":6,"method":"tools/list","params":{"_meta":"x"}}', code: -32602, id: 6 },
  { body: '{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"_meta":{"progressToken":{}}}}', code: -32602, id: 7 },
  { body: '{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"getTask","arguments":[1,2]}}', code: -32602, id: 8 },
  { body: '{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"getTask","arguments":"x"}}', code: -32602, id: 9 },
  { body: '{"jsonrpc":"2.0","method":"notifications/initialized","params":[]}', code: -32602, id: null },
]

interface Tally {
  posts: number
  messages: number
  answered: number
  wrong: string[]
  unanswered: number
}

async function post(url: string, body: string, headers: Record<string, string> = {}): Promise<{ status: number; answer: RpcAnswer | RpcAnswer[] } | undefined> {
  try {
    const response = await fetch(`${url}/mcp`, { method: 'POST', headers: { ...HEADERS, ...headers }, body, signal: AbortSignal.timeout(ANSWER_WITHIN_MS) })
    return { status: response.status, answer: JSON.parse(await response.text()) }
  } catch {
    return undefined
  }
}

async function hostileRound(url: string, concurrency: number, malformedCount: number, tally: Tally): Promise<void> {
  const list = (id: number) => ({ jsonrpc: '2.0', id, method: 'tools/list' })
  const check = (what: string, ok: boolean) => {
    if (!ok) tally.wrong.push(what)
  }
  // Past the limit: one refusal for the whole batch, nothing run.
  const over = await post(url, JSON.stringify(Array.from({ length: 2_000 }, (_, i) => list(i))))
  tally.posts += 1
  tally.messages += 2_000
  if (!over) tally.unanswered += 2_000
  else {
    tally.answered += 2_000
    check('2,000-message batch', over.status === 400 && (over.answer as RpcAnswer).error?.code === -32600)
  }
  // The largest batch taken: one answer per id (a list, or the answer-budget error).
  const full = await post(url, JSON.stringify(Array.from({ length: MAX_BATCH_MESSAGES }, (_, i) => list(i))), { 'mcp-protocol-version': '2025-03-26' })
  tally.posts += 1
  tally.messages += MAX_BATCH_MESSAGES
  const answers = Array.isArray(full?.answer) ? full.answer : []
  tally.answered += answers.length
  tally.unanswered += MAX_BATCH_MESSAGES - answers.length
  check(
    `${MAX_BATCH_MESSAGES}-message batch`,
    answers.every((answer, i) => answer.id === i && (answer.result || answer.error?.code === -32000)),
  )
  let next = 0
  const worker = async () => {
    while (next < malformedCount) {
      const message = MALFORMED[next++ % MALFORMED.length] as (typeof MALFORMED)[number]
      const answer = await post(url, message.body)
      tally.posts += 1
      tally.messages += 1
      if (!answer) tally.unanswered += 1
      else {
        tally.answered += 1
        const error = (answer.answer as RpcAnswer).error
        check(message.body, error?.code === message.code && (answer.answer as RpcAnswer).id === message.id)
      }
    }
  }
  await Promise.all(Array.from({ length: concurrency }, worker))
}

async function main(): Promise<void> {
  const rounds = Number(process.env.BENCH_ROUNDS ?? 5)
  const intervalMs = Number(process.env.BENCH_PROBE_MS ?? 10)
  const concurrency = Number(process.env.BENCH_CONCURRENCY ?? 25)
  const malformed = Number(process.env.BENCH_MALFORMED ?? 300)
  const idleS = Number(process.env.BENCH_IDLE_S ?? 5)
  const server = await startServer()
  try {
    const tally: Tally = { posts: 0, messages: 0, answered: 0, wrong: [], unanswered: 0 }
    // Warm the route (and its JIT) before anything is timed.
    await hostileRound(server.url, concurrency, MALFORMED.length, { posts: 0, messages: 0, answered: 0, wrong: [], unanswered: 0 })
    const idle = await probed(server.url, intervalMs, () => new Promise((resolve) => setTimeout(resolve, idleS * 1000)))
    const started = performance.now()
    const loaded = await probed(server.url, intervalMs, async () => {
      for (let round = 0; round < rounds; round += 1) await hostileRound(server.url, concurrency, malformed, tally)
    })
    const hostileS = (performance.now() - started) / 1000
    const row = (name: string, { latencies, longestTurnMs }: { latencies: number[]; longestTurnMs: number }) =>
      `| ${name} | ${latencies.length} | ${percentile(latencies, 50).toFixed(1)} | ${percentile(latencies, 99).toFixed(1)} | ${Math.max(...latencies).toFixed(1)} | ${longestTurnMs.toFixed(1)} |`
    const p99 = (run: { latencies: number[] }) => percentile(run.latencies, 99)
    const ratio = p99(loaded) / p99(idle)
    console.log(
      [
        `Node ${process.version}, ${os.cpus().length} × ${os.cpus()[0]?.model ?? 'cpu'}, load average ${os.loadavg()[0]?.toFixed(1)}; /healthz probed every ${intervalMs} ms from a worker thread`,
        `hostile: ${rounds} rounds of [a 2,000-message batch, a ${MAX_BATCH_MESSAGES}-message batch, ${malformed} malformed messages ${concurrency} at a time] in ${hostileS.toFixed(1)} s`,
        '',
        "| /healthz | probes | p50 ms | p99 ms | max ms | server's longest turn, CPU ms |",
        '|---|---:|---:|---:|---:|---:|',
        row(`idle (${idleS} s)`, idle),
        row('under the hostile load', loaded),
        '',
        `/healthz p99 under load ÷ idle: ${ratio.toFixed(2)}× (${p99(loaded).toFixed(1)} ms vs ${p99(idle).toFixed(1)} ms; target under 50 ms)`,
        `messages: ${tally.messages} in ${tally.posts} POSTs, ${tally.answered} answered, ${tally.unanswered} unanswered, ${tally.wrong.length} with a wrong answer${tally.wrong.length ? `: ${[...new Set(tally.wrong)].slice(0, 5).join('; ')}` : ''}`,
      ].join('\n'),
    )
    if (tally.unanswered > 0 || tally.wrong.length > 0) process.exitCode = 1
  } finally {
    server.child.kill('SIGTERM')
    await new Promise((resolve) => server.child.once('exit', resolve))
  }
}

if (!isMainThread) {
  await probe(workerData as ProbeJob)
} else if (process.argv[2] === 'serve') {
  process.once('SIGTERM', () => process.exit(0))
  await serve()
} else {
  await main()
}
