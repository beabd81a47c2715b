// A paid MCP tool call vs the same paid HTTP call, side by side on ONE server process: the paid
// hello-world operation (bench/paid-hello.ts; production wiring: createHttpApp, the registry
// route behind the payments access rule, PGlite memory://, the in-process chain model of
// test/helpers/memory-chain.ts), and POST /mcp (registerMcpRoute, src/mcp's stateless JSON
// transport, the tool call dispatched into the same app with app.inject). Every call carries a FRESH payment
// signed up front by the real x402 client in worker threads; HTTP sends it as PAYMENT-SIGNATURE,
// MCP as _meta["x402/payment"]. CPU per call is the server process's own (process.cpuUsage).
//   npx node bench/mcp.bench.ts
//   BENCH_REQUESTS=5000 BENCH_WARMUP=1000 BENCH_CONNECTIONS=20 BENCH_ROUNDS=2 BENCH_DB=pglite npx node bench/mcp.bench.ts
// BENCH_DB=postgres (TEST_DATABASE_URL, default postgres://postgres@127.0.0.1:5432/test) runs on a
// throw-away Postgres database and adds its backends' CPU (/proc/<pid>/stat) in its own column.
import { spawn, type ChildProcess } from 'node:child_process'
import os from 'node:os'
import { fileURLToPath } from 'node:url'
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads'
import autocannon from 'autocannon'
import { x402Client, x402HTTPClient } from '@x402/core/client'
import { encodePaymentSignatureHeader } from '@x402/core/http'
import type { PaymentPayload, PaymentRequired } from '@x402/core/types'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import type { Hex } from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { PAID_HELLO_PATH, servePaidHello, throwawayPostgres } from './paid-hello.ts'
import { createOperationDispatcher } from '../src/mcp/dispatcher.ts'
import { registerMcpRoute } from '../src/mcp/server.ts'

const PATH = PAID_HELLO_PATH
const NETWORK = 'eip155:8453'
const THIS_FILE = fileURLToPath(import.meta.url)

// ------------------------------------------------------------------ signer worker

interface SignJob {
  paymentRequired: PaymentRequired
  keys: Hex[]
  count: number
}

async function signPayments(job: SignJob): Promise<PaymentPayload[]> {
  const clients = job.keys.map((k) => new x402Client().register(NETWORK, new ExactEvmScheme(privateKeyToAccount(k))))
  const payloads: PaymentPayload[] = []
  for (let i = 0; i < job.count; i += 1) payloads.push(await (clients[i % clients.length] as x402Client).createPaymentPayload(job.paymentRequired))
  return payloads
}

async function signInWorkers(paymentRequired: PaymentRequired, keys: Hex[], count: number): Promise<PaymentPayload[]> {
  const workers = Math.max(1, Math.min(os.availableParallelism(), 8))
  const share = Math.ceil(count / workers)
  const parts = await Promise.all(
    Array.from({ length: workers }, (_, w) => {
      const job: SignJob = { paymentRequired, keys, count: Math.max(0, Math.min(share, count - w * share)) }
      return new Promise<PaymentPayload[]>((resolve, reject) => {
        const worker = new Worker(THIS_FILE, { workerData: job })
        worker.once('message', resolve)
        worker.once('error', reject)
      })
    }),
  )
  return parts.flat()
}

// ------------------------------------------------------------------ the server (child process)

async function serve(): Promise<void> {
  await servePaidHello(({ app, catalog, bodyLimitBytes, logger }) => {
    registerMcpRoute(app, { catalog, dispatcher: createOperationDispatcher({ local: new Map([['gateway', app]]), urls: catalog.urls }), bodyLimitBytes, logger })
  })
}

// ------------------------------------------------------------------ the benchmark

function startServer(env: Record<string, string>): Promise<{ url: string; child: ChildProcess }> {
  // BENCH_PROFILE=1 writes the server's .cpuprofile into BENCH_PROFILE_DIR (default: the cwd).
  const profile = process.env.BENCH_PROFILE ? ['--cpu-prof', `--cpu-prof-dir=${process.env.BENCH_PROFILE_DIR ?? process.cwd()}`] : []
  // The V8 flags the launcher runs the service with (bin/agent-gateway.js, docs/architecture.md):
  // without them the young generation shrinks and every allocation-heavy path pays for it.
  const child = spawn(process.execPath, ['--no-memory-reducer', '--max-semi-space-size=16', ...profile, THIS_FILE, 'serve'], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'inherit'],
  })
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

type Kind = 'http' | 'mcp'
const MCP_HEADERS = { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-06-18' }

function mcpBody(payload: PaymentPayload, id: number): string {
  return JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'paidHello', arguments: {}, _meta: { 'x402/payment': payload } } })
}

interface Measured {
  kind: Kind
  requests: number
  requestsPerSec: number
  p50Ms: number
  p99Ms: number
  cpuUsPerCall: number
  dbCpuUsPerCall: number
  failures: number
}

async function cpu(url: string): Promise<{ seconds: number; database: number }> {
  return (await (await fetch(`${url}/__cpu`)).json()) as { seconds: number; database: number }
}

async function load(url: string, kind: Kind, payloads: PaymentPayload[], connections: number): Promise<{ result: autocannon.Result; elapsedS: number; failures: number }> {
  let next = 0
  let failures = 0
  const started = performance.now()
  const request: autocannon.Request =
    kind === 'http'
      ? {
          method: 'GET',
          path: PATH,
          setupRequest: (r) => ({ ...r, headers: { ...r.headers, 'payment-signature': encodePaymentSignatureHeader(payloads[next++ % payloads.length] as PaymentPayload) } }),
        }
      : {
          method: 'POST',
          path: '/mcp',
          setupRequest: (r) => {
            next += 1
            return { ...r, headers: { ...r.headers, ...MCP_HEADERS }, body: mcpBody(payloads[(next - 1) % payloads.length] as PaymentPayload, next) }
          },
          // A tool result is a 200 either way: a refused payment is an isError result.
          onResponse: (_status, body) => {
            if (!body.includes('"x402/payment-response"')) failures += 1
          },
        }
  const result = await autocannon({ url, connections, amount: payloads.length, requests: [request] })
  return { result, elapsedS: (performance.now() - started) / 1000, failures: failures + result.non2xx }
}

async function measure(url: string, kind: Kind, payloads: PaymentPayload[], connections: number): Promise<Measured> {
  const before = await cpu(url)
  const { result, elapsedS, failures } = await load(url, kind, payloads, connections)
  const after = await cpu(url)
  const total = result.requests.total
  return {
    kind,
    requests: total,
    requestsPerSec: total / elapsedS,
    p50Ms: result.latency.p50,
    p99Ms: result.latency.p99,
    cpuUsPerCall: ((after.seconds - before.seconds) * 1e6) / Math.max(1, total),
    dbCpuUsPerCall: ((after.database - before.database) * 1e6) / Math.max(1, total),
    failures,
  }
}

async function main(): Promise<void> {
  const requests = Number(process.env.BENCH_REQUESTS ?? 5_000)
  const warmup = Number(process.env.BENCH_WARMUP ?? 1_000)
  const connections = Number(process.env.BENCH_CONNECTIONS ?? 20)
  const rounds = Number(process.env.BENCH_ROUNDS ?? 2)
  const keys = Array.from({ length: 8 }, () => generatePrivateKey())
  const payTo = privateKeyToAccount(generatePrivateKey()).address
  const throwaway = process.env.BENCH_DB === 'postgres' ? await throwawayPostgres() : undefined
  if (typeof throwaway === 'string') throw new Error(throwaway)
  const postgres = throwaway
  const database = postgres ? 'Postgres (local)' : 'PGlite memory://'
  const server = await startServer({
    BENCH_BUYERS: keys.map((k) => privateKeyToAccount(k).address).join(','),
    BENCH_PAY_TO: payTo,
    ...(postgres ? { BENCH_DATABASE_URL: postgres.url } : {}),
  })
  try {
    const unpaid = await fetch(server.url + PATH)
    if (unpaid.status !== 402) throw new Error(`unpaid call answered ${unpaid.status}`)
    const http = new x402HTTPClient(new x402Client().register(NETWORK, new ExactEvmScheme(privateKeyToAccount(keys[0] as Hex))))
    // The declared extensions are left out (a client without them): every call is a fresh payment.
    const { extensions: _declared, ...required } = http.getPaymentRequiredResponse((n) => unpaid.headers.get(n), await unpaid.json().catch(() => undefined))
    const probe = await fetch(server.url + PATH, {
      headers: { 'payment-signature': encodePaymentSignatureHeader((await signPayments({ paymentRequired: required, keys, count: 1 }))[0] as PaymentPayload) },
    })
    if (probe.status !== 200) throw new Error(`a paid call answered ${probe.status}: ${await probe.text()}`)
    const perKind = 2 * warmup + rounds * requests
    const signStarted = performance.now()
    const all = await signInWorkers(required, keys, 2 * perKind)
    const signS = (performance.now() - signStarted) / 1000
    const batches: Record<Kind, PaymentPayload[]> = { http: all.slice(0, perKind), mcp: all.slice(perKind) }
    const take = (kind: Kind, n: number) => batches[kind].splice(0, n)
    // Warm both paths (JIT, ajv compilation, PGlite caches), then alternate the measured rounds.
    for (const kind of ['http', 'mcp'] as const) await load(server.url, kind, take(kind, warmup), connections)
    for (const kind of ['http', 'mcp'] as const) await load(server.url, kind, take(kind, warmup), connections)
    const results: Measured[] = []
    for (let round = 0; round < rounds; round += 1) {
      for (const kind of ['http', 'mcp'] as const) results.push(await measure(server.url, kind, take(kind, requests), connections))
    }
    const stats = (await (await fetch(`${server.url}/__stats`)).json()) as { transfers: number; payeeMicros: string; ledger: Record<string, number> }
    const mean = (kind: Kind, field: keyof Measured) => {
      const rows = results.filter((r) => r.kind === kind)
      return rows.reduce((sum, r) => sum + (r[field] as number), 0) / rows.length
    }
    const ratio = mean('mcp', 'cpuUsPerCall') / mean('http', 'cpuUsPerCall')
    const withDb = (kind: Kind) => mean(kind, 'cpuUsPerCall') + mean(kind, 'dbCpuUsPerCall')
    console.log(
      [
        `Node ${process.version}, ${os.cpus().length} × ${os.cpus()[0]?.model ?? 'cpu'}, autocannon ${connections} connections, ${rounds} rounds of ${requests} calls each, ${database}`,
        `pre-signed ${all.length} payments with the real x402 client in ${signS.toFixed(1)} s`,
        '',
        '| Path | round | calls | calls/s | server CPU µs/call | + DB backends µs/call | p50 ms | p99 ms | failures |',
        '|---|---:|---:|---:|---:|---:|---:|---:|---:|',
        ...results.map(
          (r, i) =>
            `| ${r.kind === 'http' ? 'HTTP GET /paid + PAYMENT-SIGNATURE' : 'MCP tools/call paidHello + _meta x402/payment'} | ${Math.floor(i / 2) + 1} | ${r.requests} | ${r.requestsPerSec.toFixed(0)} | ${r.cpuUsPerCall.toFixed(0)} | ${postgres ? r.dbCpuUsPerCall.toFixed(0) : '–'} | ${r.p50Ms} | ${r.p99Ms} | ${r.failures} |`,
        ),
        '',
        `MCP / HTTP server CPU per paid call: ${ratio.toFixed(2)}× (${mean('mcp', 'cpuUsPerCall').toFixed(0)} µs vs ${mean('http', 'cpuUsPerCall').toFixed(0)} µs)` +
          (postgres ? `; with the database backends: ${(withDb('mcp') / withDb('http')).toFixed(2)}× (${withDb('mcp').toFixed(0)} µs vs ${withDb('http').toFixed(0)} µs)` : ''),
        `settled on the chain model: ${stats.transfers} transfers, payee holds ${stats.payeeMicros} micros, payments_ledger ${JSON.stringify(stats.ledger)}`,
      ].join('\n'),
    )
  } finally {
    server.child.kill('SIGTERM')
    await new Promise((resolve) => server.child.once('exit', resolve))
    await postgres?.drop()
  }
}

if (!isMainThread) {
  parentPort?.postMessage(await signPayments(workerData as SignJob))
} else if (process.argv[2] === 'serve') {
  process.once('SIGTERM', () => process.exit(0))
  await serve()
} else {
  await main()
}
