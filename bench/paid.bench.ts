// Paid route, verify + reserve + settle: OUR guard (fastify + createHttpApp + access.wrap, local
// verification, replay reservation in the database, settlement through the ChainPort, ledger) vs
// the REFERENCE @x402/express paymentMiddleware (x402ResourceServer + a local x402Facilitator with
// @x402/evm ExactEvmScheme), both settling on the SAME in-process chain model
// (test/helpers/memory-chain.ts: one in-memory USDC behind our ChainPort and behind the reference's
// FacilitatorEvmSigner; settlement is instant). Each server runs in its own child process;
// autocannon runs here. Every request carries a FRESH payment signed up front by the real x402
// client (@x402/core x402HTTPClient + @x402/evm ExactEvmScheme) in worker threads.
//   npx node bench/paid.bench.ts
//   BENCH_REQUESTS=20000 BENCH_REFERENCE_REQUESTS=4000 BENCH_WARMUP=1000 BENCH_CONNECTIONS=50 \
//   BENCH_DB=pglite,postgres TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/test npx node bench/paid.bench.ts
import { spawn, type ChildProcess } from 'node:child_process'
import type { Server } from 'node:http'
import os from 'node:os'
import { fileURLToPath } from 'node:url'
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads'
import autocannon from 'autocannon'
import { x402Client, x402HTTPClient } from '@x402/core/client'
import { x402Facilitator } from '@x402/core/facilitator'
import { decodePaymentResponseHeader } from '@x402/core/http'
import type { FacilitatorClient } from '@x402/core/server'
import type { PaymentRequired, SupportedResponse } from '@x402/core/types'
import { paymentMiddleware, x402ResourceServer } from '@x402/express'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import { ExactEvmScheme as ExactEvmFacilitatorScheme } from '@x402/evm/exact/facilitator'
import { ExactEvmScheme as ExactEvmServerScheme } from '@x402/evm/exact/server'
import { wrapFetchWithPayment } from '@x402/fetch'
import type { Address, Hex } from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { BUYER_FUNDS, PAID_HELLO_PATH, servePaidHello, throwawayPostgres } from './paid-hello.ts'
import { recoveryBackend } from '../src/payments/x402/index.ts'
import { memoryFacilitatorSigner, memoryUsdc } from '../test/helpers/memory-chain.ts'

const FUNDS = BUYER_FUNDS
const PATH = PAID_HELLO_PATH
const NETWORK = 'eip155:8453'
const THIS_FILE = fileURLToPath(import.meta.url)

// ------------------------------------------------------------------ signer worker

interface SignJob {
  paymentRequired: PaymentRequired
  keys: Hex[]
  count: number
}

async function signPayments(job: SignJob): Promise<string[]> {
  const clients = job.keys.map((k) => new x402HTTPClient(new x402Client().register(NETWORK, new ExactEvmScheme(privateKeyToAccount(k)))))
  const headers: string[] = []
  for (let i = 0; i < job.count; i += 1) {
    const client = clients[i % clients.length] as x402HTTPClient
    const encoded = client.encodePaymentSignatureHeader(await client.createPaymentPayload(job.paymentRequired))
    headers.push(encoded['PAYMENT-SIGNATURE'] as string)
  }
  return headers
}

// ------------------------------------------------------------------ servers (child processes)

interface ServerEnv {
  buyers: Address[]
  payTo: Address
}

function serverEnv(): ServerEnv {
  return { buyers: (process.env.BENCH_BUYERS ?? '').split(',').filter(Boolean) as Address[], payTo: process.env.BENCH_PAY_TO as Address }
}

interface ExpressResponse {
  json(value: unknown): void
}
interface ExpressApp {
  use(handler: unknown): void
  get(path: string, handler: (request: unknown, response: ExpressResponse) => void | Promise<void>): void
  listen(port: number, host: string, callback: () => void): Server
}

async function serveReference(): Promise<void> {
  const { buyers, payTo } = serverEnv()
  // express ships no types here; @x402/express brings it in.
  const express = ((await import('express' as string)) as { default: () => ExpressApp }).default
  const token = memoryUsdc()
  for (const buyer of buyers) token.mint(buyer, FUNDS)
  const facilitator = new x402Facilitator().register(NETWORK, new ExactEvmFacilitatorScheme(memoryFacilitatorSigner(token)))
  // x402Facilitator works as a FacilitatorClient at run time, but its getSupported is sync (notes §2.5).
  const facilitatorClient: FacilitatorClient = {
    verify: (payload, requirements) => facilitator.verify(payload, requirements),
    settle: (payload, requirements) => facilitator.settle(payload, requirements),
    getSupported: async () => facilitator.getSupported() as SupportedResponse,
  }
  const resourceServer = new x402ResourceServer(facilitatorClient).register(NETWORK, new ExactEvmServerScheme())
  const app = express()
  app.get('/__cpu', (_request, response) => {
    const u = process.cpuUsage()
    response.json({ seconds: (u.user + u.system) / 1e6, database: 0 })
  })
  app.get('/__stats', (_request, response) => {
    response.json({ transfers: token.transfers, payeeMicros: token.balanceOf(payTo).toString(), ledger: {} })
  })
  app.use(
    paymentMiddleware(
      { [`GET ${PATH}`]: { accepts: { scheme: 'exact', price: '$0.01', network: NETWORK, payTo }, description: 'Paid hello-world', mimeType: 'application/json' } },
      resourceServer,
    ),
  )
  app.get(PATH, (_request, response) => response.json({ ok: true }))
  const server = app.listen(0, '127.0.0.1', () => {
    const address = server.address()
    console.log(`ready ${typeof address === 'object' && address ? address.port : 0}`)
  })
}

// ------------------------------------------------------------------ the benchmark

interface Child {
  name: string
  url: string
  child: ChildProcess
}

function startServer(name: string, mode: string, env: Record<string, string>): Promise<Child> {
  // BENCH_PROFILE=1 writes a .cpuprofile of every server into BENCH_PROFILE_DIR (default: the cwd).
  const profile = process.env.BENCH_PROFILE ? ['--cpu-prof', `--cpu-prof-dir=${process.env.BENCH_PROFILE_DIR ?? process.cwd()}`] : []
  const child = spawn(process.execPath, [...profile, THIS_FILE, mode], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'inherit'] })
  return new Promise((resolve, reject) => {
    let out = ''
    child.stdout?.on('data', (chunk: Buffer) => {
      out += chunk.toString()
      const match = /ready (\d+)/.exec(out)
      if (match) resolve({ name, url: `http://127.0.0.1:${match[1]}`, child })
    })
    child.once('exit', (code) => reject(new Error(`${name} exited (${code}) before it was ready: ${out}`)))
  })
}

/** SIGTERM (the servers exit cleanly, writing a CPU profile if asked), SIGKILL after 5 s. */
async function stopServer(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()))
  child.kill('SIGTERM')
  const timer = setTimeout(() => child.kill('SIGKILL'), 5_000)
  await exited
  clearTimeout(timer)
}

async function signInWorkers(paymentRequired: PaymentRequired, keys: Hex[], count: number): Promise<string[]> {
  const workers = Math.max(1, Math.min(os.availableParallelism(), 8))
  const share = Math.ceil(count / workers)
  const parts = await Promise.all(
    Array.from({ length: workers }, (_, w) => {
      const job: SignJob = { paymentRequired, keys, count: Math.max(0, Math.min(share, count - w * share)) }
      return new Promise<string[]>((resolve, reject) => {
        const worker = new Worker(THIS_FILE, { workerData: job })
        worker.once('message', (headers: string[]) => resolve(headers))
        worker.once('error', reject)
      })
    }),
  )
  return parts.flat()
}

interface Measured {
  name: string
  requests: number
  requestsPerSec: number
  p50Ms: number
  p99Ms: number
  cpuUsPerReq: number
  dbCpuUsPerReq: number
  non2xx: number
}

async function cpuOf(server: Child): Promise<{ seconds: number; database: number }> {
  return (await (await fetch(`${server.url}/__cpu`)).json()) as { seconds: number; database: number }
}

async function load(server: Child, headers: string[], amount: number, connections: number): Promise<autocannon.Result & { elapsedS: number }> {
  let next = 0
  const started = performance.now()
  const result = await autocannon({
    url: server.url + PATH,
    connections,
    amount,
    requests: [
      {
        method: 'GET',
        path: PATH,
        setupRequest: (request) => ({ ...request, headers: { ...request.headers, 'payment-signature': headers[next++ % headers.length] as string } }),
      },
    ],
  })
  return Object.assign(result, { elapsedS: (performance.now() - started) / 1000 })
}

async function measure(server: Child, warmup: string[], measured: string[], amount: number, connections: number): Promise<Measured> {
  await load(server, warmup, Math.min(warmup.length, Math.max(1, warmup.length - connections)), connections)
  const before = await cpuOf(server)
  const result = await load(server, measured, amount, connections)
  const after = await cpuOf(server)
  const total = result.requests.total
  return {
    name: server.name,
    requests: total,
    requestsPerSec: total / result.elapsedS,
    p50Ms: result.latency.p50,
    p99Ms: result.latency.p99,
    cpuUsPerReq: ((after.seconds - before.seconds) * 1e6) / Math.max(1, total),
    dbCpuUsPerReq: ((after.database - before.database) * 1e6) / Math.max(1, total),
    non2xx: result.non2xx,
  }
}

async function main(): Promise<void> {
  const requests = Number(process.env.BENCH_REQUESTS ?? 20_000)
  const referenceRequests = Number(process.env.BENCH_REFERENCE_REQUESTS ?? 4_000)
  const warmupCount = Number(process.env.BENCH_WARMUP ?? 1_000)
  const connections = Number(process.env.BENCH_CONNECTIONS ?? 50)
  const databases = (process.env.BENCH_DB ?? 'pglite,postgres').split(',').map((s) => s.trim())

  const keys = Array.from({ length: 8 }, () => generatePrivateKey())
  const buyers = keys.map((k) => privateKeyToAccount(k).address)
  const payTo = privateKeyToAccount(generatePrivateKey()).address
  const env = { BENCH_BUYERS: buyers.join(','), BENCH_PAY_TO: payTo }

  const servers: Child[] = []
  const cleanups: (() => Promise<void>)[] = []
  const notes: string[] = []
  try {
    servers.push(await startServer('reference: @x402/express + local x402Facilitator', 'serve-reference', env))
    if (databases.includes('pglite')) servers.push(await startServer('ours: fastify + guard, PGlite memory://', 'serve-ours', env))
    if (databases.includes('postgres')) {
      const pg = await throwawayPostgres()
      if (typeof pg === 'string') notes.push(`Postgres row skipped: ${pg}`)
      else {
        cleanups.push(pg.drop)
        servers.push(await startServer('ours: fastify + guard, Postgres 15 (local)', 'serve-ours', { ...env, BENCH_DATABASE_URL: pg.url }))
      }
    }

    // Each server's own 402, read and paid by the real client once (also proves the wiring).
    const required = new Map<Child, PaymentRequired>()
    for (const server of servers) {
      const res = await fetch(server.url + PATH)
      if (res.status !== 402) throw new Error(`${server.name}: unpaid call answered ${res.status}`)
      const http = new x402HTTPClient(new x402Client().register(NETWORK, new ExactEvmScheme(privateKeyToAccount(keys[0] as Hex))))
      required.set(
        server,
        http.getPaymentRequiredResponse((n) => res.headers.get(n), await res.json().catch(() => undefined)),
      )
      const pay = wrapFetchWithPayment(fetch, new x402Client().register(NETWORK, new ExactEvmScheme(privateKeyToAccount(keys[0] as Hex))))
      const paid = await pay(server.url + PATH)
      const receipt = decodePaymentResponseHeader(paid.headers.get('payment-response') ?? '')
      if (paid.status !== 200 || !receipt.success) throw new Error(`${server.name}: a real client's paid call answered ${paid.status}`)
    }

    const signStarted = performance.now()
    const batches = new Map<Child, { warmup: string[]; measured: string[]; amount: number }>()
    let signed = 0
    for (const server of servers) {
      const amount = server.name.startsWith('reference') ? referenceRequests : requests
      const all = await signInWorkers(required.get(server) as PaymentRequired, keys, warmupCount + amount + 2 * connections)
      signed += all.length
      batches.set(server, { warmup: all.slice(0, warmupCount), measured: all.slice(warmupCount), amount })
    }
    const signMs = performance.now() - signStarted
    const signLine = `pre-signed ${signed} payments with the real x402 client in ${(signMs / 1000).toFixed(1)} s on ${Math.min(os.availableParallelism(), 8)} worker threads (${((signMs * Math.min(os.availableParallelism(), 8)) / signed).toFixed(2)} ms CPU per payment)`

    const results: Measured[] = []
    for (const server of servers) {
      const batch = batches.get(server) as { warmup: string[]; measured: string[]; amount: number }
      results.push(await measure(server, batch.warmup, batch.measured, batch.amount, connections))
      const stats = (await (await fetch(`${server.url}/__stats`)).json()) as { transfers: number; payeeMicros: string; ledger: Record<string, number> }
      notes.push(
        `${server.name}: ${stats.transfers} transfers settled on the chain model, payee holds ${stats.payeeMicros} micros` +
          (Object.keys(stats.ledger).length ? `, payments_ledger ${JSON.stringify(stats.ledger)}` : ''),
      )
    }

    const reference = results[0] as Measured
    const lines = [
      `Node ${process.version}, ${os.cpus().length} × ${os.cpus()[0]?.model ?? 'cpu'}, autocannon ${connections} connections, signature recovery backend: ${recoveryBackend}`,
      signLine,
      '',
      '| Server | requests | req/s | ratio vs reference | server CPU µs/req | + DB backends µs/req | capacity ratio vs reference | p50 ms | p99 ms | non-2xx |',
      '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
      ...results.map((r) => {
        const totalCpu = r.cpuUsPerReq + r.dbCpuUsPerReq
        return `| ${r.name} | ${r.requests} | ${r.requestsPerSec.toFixed(0)} | ${(r.requestsPerSec / reference.requestsPerSec).toFixed(2)} | ${r.cpuUsPerReq.toFixed(0)} | ${r.dbCpuUsPerReq ? r.dbCpuUsPerReq.toFixed(0) : '–'} | ${(reference.cpuUsPerReq / totalCpu).toFixed(2)} | ${r.p50Ms} | ${r.p99Ms} | ${r.non2xx} |`
      }),
      '',
      ...notes.map((n) => `- ${n}`),
    ]
    console.log(lines.join('\n'))
    const failures = results.filter((r) => r.non2xx > 0)
    if (failures.length > 0) console.error('non-2xx answers:', failures.map((r) => `${r.name}: ${r.non2xx}`).join(', '))
  } finally {
    await Promise.all(servers.map((server) => stopServer(server.child)))
    for (const cleanup of cleanups) await cleanup().catch(() => undefined)
  }
}

if (!isMainThread) {
  parentPort?.postMessage(await signPayments(workerData as SignJob))
} else if (process.argv[2] === 'serve-ours' || process.argv[2] === 'serve-reference') {
  process.once('SIGTERM', () => process.exit(0))
  await (process.argv[2] === 'serve-ours' ? servePaidHello() : serveReference())
} else {
  await main()
}
