// One process of the memory service, in-process: the real memory role (openMemoryRole, as
// src/runtime.ts opens it: its key ring under a DATA_DIR shared by every process of a test, the
// lexical embedder, the job queue, the money) and the real memory listener, over a shared database
// and chain, with its own chain adapter (its own nonce tracking) and payments module, wrapped in a
// ProcessLife (crashable.ts) so it can be killed at any step. Also the real x402 client's signing,
// the real SIGN-IN-WITH-X client's owner proofs and the calls the memory money tests make.
import type { FastifyInstance } from 'fastify'
import { x402Client, x402HTTPClient } from '@x402/core/client'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import { createSIWxPayload, encodeSIWxHeader } from '@x402/extensions/sign-in-with-x'
import type { PrivateKeyAccount } from 'viem/accounts'
import type { Address, Hex } from 'viem'
import type { Db } from '../../src/platform/db/index.ts'
import { createLogger } from '../../src/platform/logger.ts'
import { createMetrics } from '../../src/platform/metrics.ts'
import { loadConfig } from '../../src/platform/config.ts'
import { systemClock, type Clock } from '../../src/platform/clock.ts'
import type { KeyValue } from '../../src/platform/kv/index.ts'
import { registry } from '../../src/catalog/registry.ts'
import { createCatalog } from '../../src/catalog/catalog.ts'
import type { Payments } from '../../src/payments/index.ts'
import { stuckSettlements } from '../../src/payments/outcomes.ts'
import { stuckRefunds } from '../../src/payments/refunds.ts'
import type { StartedDevChain } from '../../src/payments/chain/dev.ts'
import { IMPLEMENTED_OPERATIONS } from '../../src/runtime.ts'
import { buildMemoryApp } from '../../src/memory/app.ts'
import { openMemoryRole, type MemoryRole } from '../../src/memory/role.ts'
import { jobQueueOnDemand, type JobQueueOnDemand } from '../../src/roles/job-queue.ts'
import type { ProcessLife } from './crashable.ts'
import { crashablePayments } from './paid-process.ts'

export const MEMORY_URL = 'http://memory.crash.test'
const GATEWAY_URL = 'http://gateway.crash.test'
/** One memory-ops unit: the price of a per-call write. */
export const WRITE_PRICE = 1_000n
const logger = createLogger('silent')

export interface MemoryProc {
  life: ProcessLife
  payments: Payments
  role: MemoryRole
  /** The process's job queue (opened only with dreaming on). */
  jobs: JobQueueOnDemand
  app: FastifyInstance
  kv: KeyValue
}

// A job queue (pg-boss) the role starts polls and keeps time on its own timers. Dreaming is off
// here (no model), so a queue carries nothing; its statements go to the shared database outside the
// kill switch, so that the steps of a request (the kill points, enumerated by index) are the same
// on every run whether or not the role starts one.
const QUEUE_SQL = /\bpgboss\.|date_part\('epoch', now\(\)\)/

function queueOutsideTheKillSwitch(shared: Db, process: Db): Db {
  return {
    ...process,
    query: (sql, params) => (QUEUE_SQL.test(sql) ? shared.query(sql, params) : process.query(sql, params)),
    exec: (sql) => (QUEUE_SQL.test(sql) ? shared.exec(sql) : process.exec(sql)),
  }
}

/** One process of the memory service over the shared database, chain and DATA_DIR (its key ring). */
export async function bootMemory(db: Db, dev: StartedDevChain, settlerKey: Hex, payTo: Address, dataDir: string, clock: Clock = systemClock): Promise<MemoryProc> {
  const { life, pdb, kv, payments } = await crashablePayments(db, dev, settlerKey, payTo, clock)
  const config = loadConfig({ DATA_DIR: dataDir, PUBLIC_MEMORY_URL: MEMORY_URL, PUBLIC_BASE_URL: GATEWAY_URL, PAY_TO_ADDRESS: payTo })
  const roleDb = queueOutsideTheKillSwitch(db, pdb)
  const jobs = jobQueueOnDemand({ db: roleDb, logger })
  const role = await openMemoryRole({ config, db: roleDb, clock, logger, payments, jobs: () => jobs.get() })
  const catalog = createCatalog(registry, { urls: { gateway: GATEWAY_URL, scheduler: 'http://scheduler.crash.test', memory: MEMORY_URL }, implemented: IMPLEMENTED_OPERATIONS })
  // As src/runtime.ts wires the memory listener.
  const app = buildMemoryApp({
    catalog,
    logger,
    metrics: createMetrics({ defaultMetrics: false }),
    bodyLimitBytes: 1 << 20,
    payTo,
    readiness: {},
    diagnostics: {
      settlements: () => stuckSettlements(pdb),
      memory: async () => role.describe(),
      memoryRefunds: () => stuckRefunds({ standing: () => role.money.refunds.standing() }),
    },
    payments,
    kv,
    service: role.service,
    money: role.money,
  })
  await app.ready()
  return { life, payments, role, jobs, app, kv }
}

export async function shutdownMemory(proc: MemoryProc): Promise<void> {
  proc.life.kill()
  await Promise.allSettled([proc.app.close(), proc.role.stop(), proc.jobs.stop(), proc.payments.close(), proc.kv.close()])
}

export interface MemoryCall {
  method: 'POST' | 'DELETE'
  url: string
  /** JSON body; undefined: none (a deposit has no body). */
  body?: unknown
  headers: Record<string, string>
}

export interface MemoryAnswer {
  status: number
  body: Record<string, any>
  headers: Record<string, unknown>
}

export async function sendMemory(proc: MemoryProc, call: MemoryCall, extra: Record<string, string> = {}): Promise<MemoryAnswer> {
  const res = await proc.app.inject({
    method: call.method,
    url: call.url,
    headers: { ...(call.body === undefined ? {} : { 'content-type': 'application/json' }), ...call.headers, ...extra },
    ...(call.body === undefined ? {} : { payload: JSON.stringify(call.body) }),
  })
  return { status: res.statusCode, body: res.body ? (res.json() as Record<string, any>) : {}, headers: res.headers }
}

/** The real x402 client's payment header for the call's 402 (taken before the kill switch is armed). */
export async function signPayment(proc: MemoryProc, buyer: PrivateKeyAccount, call: MemoryCall): Promise<Record<string, string>> {
  const res = await proc.app.inject({
    method: call.method,
    url: call.url,
    headers: { ...(call.body === undefined ? {} : { 'content-type': 'application/json' }), ...call.headers },
    ...(call.body === undefined ? {} : { payload: JSON.stringify(call.body) }),
  })
  if (res.statusCode !== 402) throw new Error(`expected a 402 for ${call.method} ${call.url}, got ${res.statusCode} ${res.body}`)
  const http = new x402HTTPClient(new x402Client().register('eip155:8453', new ExactEvmScheme(buyer)))
  const required = http.getPaymentRequiredResponse((name) => res.headers[name.toLowerCase()] as string | undefined, res.json())
  return http.encodePaymentSignatureHeader(await http.createPaymentPayload(required))
}

/**
 * What an agent does for an owner call or a direct-rail write: call without a proof, take the SIWX
 * challenge of the answer (401, or the write's 402), sign it with the real client for the URL it
 * called. Returns the SIGN-IN-WITH-X header.
 */
export async function ownerProof(proc: MemoryProc, account: PrivateKeyAccount, call: MemoryCall): Promise<Record<string, string>> {
  const first = await sendMemory(proc, call)
  if (first.status !== 401 && first.status !== 402) throw new Error(`expected a 401 or 402 for ${call.method} ${call.url}, got ${first.status} ${JSON.stringify(first.body)}`)
  const challenge = first.body.extensions?.['sign-in-with-x']
  if (!challenge) throw new Error(`${first.status} without a SIWX challenge at ${call.url}`)
  const chain = challenge.supportedChains[0]
  const payload = await createSIWxPayload({ ...challenge.info, chainId: chain.chainId, type: chain.type }, account, `${MEMORY_URL}${call.url}`)
  return { 'sign-in-with-x': encodeSIWxHeader(payload) }
}

export const depositCall = (amountMicros: bigint): MemoryCall => ({ method: 'POST', url: '/api/v1/deposits', headers: { 'x-pay-amount-micros': amountMicros.toString() } })
export const writeCall = (key: string, content: string): MemoryCall => ({
  method: 'POST',
  url: '/api/v1/memories',
  body: { content, context: 'crash', tags: ['drill'] },
  headers: { 'idempotency-key': key },
})
export const withdrawCall = (): MemoryCall => ({ method: 'DELETE', url: '/api/v1/deposits', headers: {} })
