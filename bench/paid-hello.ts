// The one paid operation the paid-route benches sell, and the server that sells it: GET /paid,
// 0.01 USD per call, answering {ok:true}, behind the production payments access rule on the
// in-process chain model. bench/paid.bench.ts puts it against @x402/express; bench/mcp.bench.ts
// calls it over HTTP and as an MCP tool.
import { randomBytes } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { Type } from '@sinclair/typebox'
import type { FastifyInstance } from 'fastify'
import type { Address } from 'viem'
import { createCatalog, type Catalog } from '../src/catalog/catalog.ts'
import { mountOperations } from '../src/catalog/routes.ts'
import type { Registry } from '../src/catalog/types.ts'
import { openPayments } from '../src/payments/index.ts'
import { systemClock } from '../src/platform/clock.ts'
import { openDb, pgErrorCode, type Db } from '../src/platform/db/index.ts'
import { migrate } from '../src/platform/db/migrate.ts'
import { createHttpApp } from '../src/platform/http.ts'
import { openKeyValue } from '../src/platform/kv/index.ts'
import { createLogger, type Logger } from '../src/platform/logger.ts'
import { createMetrics } from '../src/platform/metrics.ts'
import { memoryChain, memoryUsdc } from '../test/helpers/memory-chain.ts'

export const PAID_HELLO_PRICE = 10_000n // $0.01
export const PAID_HELLO_PATH = '/paid'
export const PAID_HELLO_OPERATION = 'paidHello'
/** Test USDC minted to each buyer. */
export const BUYER_FUNDS = 10n ** 15n

export const paidHelloRegistry: Registry = {
  services: [
    {
      slug: 'bench',
      title: 'Paid hello',
      description: 'One paid hello-world operation',
      server: 'gateway',
      access: 'payg',
      meter: { name: 'requests', unit: 'request', unitPriceMicros: PAID_HELLO_PRICE, includedUnits: 0 },
      plans: [],
      operations: [
        {
          operationId: PAID_HELLO_OPERATION,
          service: 'bench',
          server: 'gateway',
          method: 'GET',
          path: PAID_HELLO_PATH,
          summary: 'Paid hello-world',
          description: 'Answers {ok:true} for 0.01 USD',
          tags: ['bench'],
          access: 'payg',
          proof: 'payment',
          pricing: { kind: 'per-unit' },
          schemas: { response: { 200: Type.Object({ ok: Type.Boolean() }) } },
        },
      ],
    },
  ],
}

/** CPU seconds of the database backends (Postgres), each pid's last sample kept once it exits. */
export function cpuOfPids(pids: number[], seen: Map<number, number>): number {
  const tick = 100 // USER_HZ on Linux
  for (const pid of pids) {
    try {
      const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? []
      seen.set(pid, (Number(fields[11]) + Number(fields[12])) / tick)
    } catch {
      // the backend exited: keep its last sample
    }
  }
  let total = 0
  for (const value of seen.values()) total += value
  return total
}

export interface PaidHelloServer {
  app: FastifyInstance
  catalog: Catalog
  bodyLimitBytes: number
  logger: Logger
}

/**
 * The server process of a paid bench: the paid hello-world with the production wiring (the
 * registry route behind the payments access rule), on PGlite memory:// or BENCH_DATABASE_URL,
 * buyers (BENCH_BUYERS) funded on the in-process chain, paying BENCH_PAY_TO. `/__cpu` reports its
 * own CPU and its database backends', `/__stats` what settled. `extend` adds routes before it
 * listens; prints "ready <port>".
 */
export async function servePaidHello(extend?: (server: PaidHelloServer) => void): Promise<void> {
  const buyers = (process.env.BENCH_BUYERS ?? '').split(',').filter(Boolean) as Address[]
  const payTo = process.env.BENCH_PAY_TO as Address
  const databaseUrl = process.env.BENCH_DATABASE_URL
  const db: Db = databaseUrl ? await openDb({ kind: 'postgres', url: databaseUrl, poolMax: 10 }) : await openDb({ kind: 'pglite', dataDir: 'memory://' })
  await migrate(db)
  const kv = await openKeyValue({ kind: 'memory' })
  const logger = createLogger('silent')
  const token = memoryUsdc()
  for (const buyer of buyers) token.mint(buyer, BUYER_FUNDS)
  const gatewayUrl = 'https://gw.bench'
  const registry = paidHelloRegistry
  const payments = await openPayments({ db, kv, logger, clock: systemClock, registry, dataDir: '', payTo, gatewayUrl, chain: memoryChain(token), reconcileEveryMs: 0 })
  const catalog = createCatalog(registry, { urls: { gateway: gatewayUrl, scheduler: gatewayUrl, memory: gatewayUrl }, implemented: new Set([PAID_HELLO_OPERATION]) })
  const bodyLimitBytes = 1 << 20
  const app = createHttpApp({ name: 'gateway', logger, metrics: createMetrics({ defaultMetrics: false }), bodyLimitBytes })
  app.decorateRequest('payment', null)
  mountOperations(app, catalog.operations, { [PAID_HELLO_OPERATION]: async () => ({ ok: true }) }, (entry, handler) => payments.access.wrap(entry, handler))
  extend?.({ app, catalog, bodyLimitBytes, logger })

  const backendCpu = new Map<number, number>()
  app.get('/__cpu', async () => {
    const usage = process.cpuUsage()
    let database = 0
    if (db.kind === 'postgres') {
      const rows = await db.query<{ pid: number }>(`select pid from pg_stat_activity where datname = current_database()`)
      database = cpuOfPids(
        rows.map((row) => row.pid),
        backendCpu,
      )
    }
    return { seconds: (usage.user + usage.system) / 1e6, database }
  })
  app.get('/__stats', async () => {
    const rows = await db.query<{ event: string; n: bigint }>(`select event, count(*)::int8 as n from payments_ledger group by event`)
    return { transfers: token.transfers, payeeMicros: token.balanceOf(payTo).toString(), ledger: Object.fromEntries(rows.map((row) => [row.event, Number(row.n)])) }
  })
  await app.listen({ host: '127.0.0.1', port: 0 })
  const address = app.server.address()
  console.log(`ready ${typeof address === 'object' && address ? address.port : 0}`)
}

/** A throw-away Postgres database (created here, dropped at the end), or the reason there is none. */
export async function throwawayPostgres(): Promise<{ url: string; drop(): Promise<void> } | string> {
  const base = process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test'
  let admin: Db
  try {
    admin = await openDb({ kind: 'postgres', url: base, poolMax: 1, connectTimeoutMs: 3000 })
  } catch (error) {
    if (pgErrorCode(error) !== '3D000') return `Postgres unreachable at ${base}: ${(error as Error).message}`
    const fallback = new URL(base)
    fallback.pathname = '/postgres'
    admin = await openDb({ kind: 'postgres', url: fallback.toString(), poolMax: 1, connectTimeoutMs: 3000 })
  }
  const name = `agw_bench_${randomBytes(6).toString('hex')}`
  await admin.exec(`create database ${name}`)
  const url = new URL(base)
  url.pathname = `/${name}`
  return {
    url: url.toString(),
    async drop() {
      await admin.exec(`drop database if exists ${name} with (force)`)
      await admin.close()
    },
  }
}
