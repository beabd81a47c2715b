// The gateway and scheduler apps (optionally memory) over a scheduler world, as src/runtime.ts
// wires them, with an in-memory USDC: for tests that buy plans and create tasks over HTTP. Closed
// with the test.
import type { AddressInfo } from 'node:net'
import type { Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import { createLogger } from '../../src/platform/logger.ts'
import { createMetrics } from '../../src/platform/metrics.ts'
import { createMailer } from '../../src/platform/mailer.ts'
import { openKeyValue, type KeyValue } from '../../src/platform/kv/index.ts'
import { registry } from '../../src/catalog/registry.ts'
import { createCatalog } from '../../src/catalog/catalog.ts'
import { openPayments, type Payments } from '../../src/payments/index.ts'
import { buildGatewayApp, GATEWAY_OPERATIONS } from '../../src/gateway/app.ts'
import { buildSchedulerApp, SCHEDULER_OPERATIONS } from '../../src/scheduler/app.ts'
import { buildMemoryApp, MEMORY_OPERATIONS } from '../../src/memory/app.ts'
import { openMemoryRole } from '../../src/memory/role.ts'
import { jobQueueOnDemand } from '../../src/roles/job-queue.ts'
import { loadConfig } from '../../src/platform/config.ts'
import { systemClock } from '../../src/platform/clock.ts'
import { mkdtempSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { memoryChain, memoryUsdc, type MemoryUsdc } from './memory-chain.ts'
import type { World } from './scheduler-world.ts'
import { mediaDown } from './media.ts'
import { registerMediaSales } from '../../src/gateway/media-sales.ts'
import type { MediaClient } from '../../src/media/service.ts'

export const PAY_TO = '0x000000000000000000000000000000000000c0de' as const
export const GATEWAY_URL = 'https://gw.test'

export interface WorldApps {
  payments: Payments
  kv: KeyValue
  token: MemoryUsdc
  /** Listening on 127.0.0.1 (real x402 clients call it over HTTP). */
  gateway: FastifyInstance
  gatewayBase: string
  scheduler: FastifyInstance
  memory: FastifyInstance | undefined
}

export async function worldApps(t: Test, world: World, options: { memory?: boolean; media?: MediaClient } = {}): Promise<WorldApps> {
  const logger = createLogger('silent')
  const kv = await openKeyValue({ kind: 'memory' })
  const token = memoryUsdc()
  const payments = await openPayments({
    db: world.db,
    kv,
    logger,
    clock: world.clock,
    registry,
    dataDir: '',
    payTo: PAY_TO,
    gatewayUrl: GATEWAY_URL,
    chain: memoryChain(token),
    reconcileEveryMs: 0,
  })
  const catalog = createCatalog(registry, {
    urls: { gateway: GATEWAY_URL, scheduler: 'http://scheduler.test', memory: 'http://memory.test' },
    implemented: new Set<string>([...GATEWAY_OPERATIONS, ...SCHEDULER_OPERATIONS, ...MEMORY_OPERATIONS]),
  })
  const mailer = createMailer({ from: 'test@localhost' })
  const deps = { catalog, logger, metrics: createMetrics(), bodyLimitBytes: 1_000_000, payTo: PAY_TO, readiness: {} }
  // As src/runtime.ts wires the gateway's media sales.
  registerMediaSales({ db: world.db, payments, logger })
  const gateway = buildGatewayApp({ ...deps, payments, mailer, db: world.db, media: { client: options.media ?? mediaDown } })
  await gateway.listen({ host: '127.0.0.1', port: 0 })
  const gatewayBase = `http://127.0.0.1:${(gateway.server.address() as AddressInfo).port}`
  const scheduler = buildSchedulerApp({ ...deps, payments, kv, service: world.service })
  // As src/runtime.ts opens the memory role: its key ring generated under a throwaway DATA_DIR.
  const memoryDir = options.memory ? mkdtempSync(path.join(os.tmpdir(), 'agw-memory-')) : undefined
  const jobs = jobQueueOnDemand({ db: world.db, logger })
  const memoryRole = memoryDir
    ? await openMemoryRole({ config: loadConfig({ DATA_DIR: memoryDir }), db: world.db, clock: systemClock, logger, payments, jobs: () => jobs.get() })
    : undefined
  const memory = memoryRole ? buildMemoryApp({ ...deps, payments, kv, service: memoryRole.service, money: memoryRole.money }) : undefined
  await Promise.all([scheduler.ready(), memory?.ready()])
  t.teardown(async () => {
    await Promise.allSettled([scheduler.close(), gateway.close(), memory?.close(), memoryRole?.stop(), jobs.stop()])
    if (memoryDir) rmSync(memoryDir, { recursive: true, force: true })
    mailer.close()
    await payments.close()
    await kv.close()
    await world.close()
  })
  return { payments, kv, token, gateway, gatewayBase, scheduler, memory }
}
