// One process of the paid service, in-process: the real gateway and scheduler apps over a shared
// database and chain, each process with its own chain adapter (its own nonce tracking), payments
// module and scheduler service, wrapped in a ProcessLife (crashable.ts) so it can be killed at any
// step; in facilitator mode, x402 is verified and settled through an x402 facilitator over HTTP,
// each call a step too. Also the real x402 client's signing and the calls the money tests make.
import { randomBytes } from 'node:crypto'
import type { FastifyInstance } from 'fastify'
import { x402Client, x402HTTPClient } from '@x402/core/client'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import { appendPaymentIdentifierToExtensions } from '@x402/extensions/payment-identifier'
import type { PrivateKeyAccount } from 'viem/accounts'
import type { Address, Hex } from 'viem'
import type { Db } from '../../src/platform/db/index.ts'
import { createLogger } from '../../src/platform/logger.ts'
import { createMetrics, type Metrics } from '../../src/platform/metrics.ts'
import { createMailer } from '../../src/platform/mailer.ts'
import { systemClock, type Clock } from '../../src/platform/clock.ts'
import { openKeyValue, type KeyValue } from '../../src/platform/kv/index.ts'
import { registry } from '../../src/catalog/registry.ts'
import { createCatalog } from '../../src/catalog/catalog.ts'
import { openPayments, type Payments } from '../../src/payments/index.ts'
import { stuckSettlements } from '../../src/payments/outcomes.ts'
import type { StartedDevChain } from '../../src/payments/chain/dev.ts'
import { createRpcChain } from '../../src/payments/chain/rpc.ts'
import type { ChainPort } from '../../src/payments/chain/types.ts'
import { createFacilitator } from '../../src/payments/x402/facilitator.ts'
import { readOnlyChain } from '../../src/payments/x402/read-only-chain.ts'
import { BASE_CHAIN_ID, BASE_USDC } from '../../src/payments/chain/usdc-abi.ts'
import { buildGatewayApp } from '../../src/gateway/app.ts'
import { buildSchedulerApp } from '../../src/scheduler/app.ts'
import { createSchedulerService, SCHEDULER_CHARGE_EFFECT, type SchedulerService } from '../../src/scheduler/service.ts'
import { registerRefundMetrics, stuckRefunds } from '../../src/payments/refunds.ts'
import { createSchedulerSecrets } from '../../src/scheduler/secrets.ts'
import { DEFAULT_RATES } from '../../src/scheduler/domain/rates.ts'
import { IMPLEMENTED_OPERATIONS } from '../../src/runtime.ts'
import { PostgresResourceStore } from '../../controllers/local/postgres-store.ts'
import { crashableChain, crashableDb, crashableFacilitator, ProcessLife } from './crashable.ts'
import type { RunResource, TaskResource } from '../../src/scheduler/contract/index.ts'
import { mediaDown } from './media.ts'

export const GATEWAY_URL = 'http://gateway.crash.test'
export const SCHEDULER_URL = 'http://scheduler.crash.test'
export const PLAN = 'scheduler-credit-5'
export const PLAN_PRICE = 5_000_000n
export const TASK_AMOUNT = 300_000n
export const TOP_UP = 200_000n
const logger = createLogger((process.env.CRASH_LOG_LEVEL as 'error' | undefined) ?? 'silent')
const schedulerKey = randomBytes(32)

export interface Proc {
  life: ProcessLife
  payments: Payments
  service: SchedulerService
  gateway: FastifyInstance
  scheduler: FastifyInstance
  kv: KeyValue
  metrics: Metrics
  /** Authorizations this process tried to broadcast itself in facilitator mode (`from:nonce`; refused): none, ever. */
  ownBroadcasts: string[]
}

export interface ProcessOptions {
  /**
   * Facilitator mode (X402_FACILITATOR_URL with SETTLER_PRIVATE_KEY as the refund wallet): x402 is
   * verified and settled by the facilitator at this URL, each /verify and /settle a kill step; the
   * chain port settles nothing (readOnlyChain) and keeps the settler's wallet for refunds only.
   */
  facilitatorUrl?: string | undefined
}

/**
 * What every killable process starts with: its life (the kill switch), the shared database and a
 * chain adapter of its own (its own nonce tracking) behind that switch, and payments over them.
 */
export async function crashablePayments(db: Db, dev: StartedDevChain, settlerKey: Hex, payTo: Address, clock: Clock, options: ProcessOptions = {}) {
  const life = new ProcessLife()
  const pdb = crashableDb(db, life)
  const rpc = createRpcChain({ rpcUrl: dev.rpcUrl, privateKey: settlerKey, chainId: BASE_CHAIN_ID, usdc: BASE_USDC, pollingIntervalMs: 20, confirmationTimeoutMs: 10_000 })
  const world: ChainPort = {
    ...rpc,
    // The world's time is `clock`: a test that moves it past validBefore moves the chain's with it
    // (anvil's own clock cannot be wound back for the scenarios that follow).
    async authorizationFate(from, nonce, validBefore) {
      const fate = await rpc.authorizationFate(from, nonce, validBefore)
      return fate === 'open' && BigInt(Math.floor(clock.nowMs() / 1000)) >= validBefore ? 'dead' : fate
    },
  }
  const ownBroadcasts: string[] = []
  const readOnly = readOnlyChain(world)
  const port: ChainPort =
    options.facilitatorUrl === undefined
      ? world
      : {
          ...readOnly,
          // The refund wallet: openPayments with SETTLER_PRIVATE_KEY keeps its writes for refunds.
          serviceAddress: world.serviceAddress,
          transfer: (to, amount, transferOptions) => world.transfer(to, amount, transferOptions),
          resend: (tx, expected, resendOptions) => world.resend(tx, expected, resendOptions),
          settleAuthorization: async (auth, signature, settleOptions) => {
            ownBroadcasts.push(`${auth.from}:${auth.nonce}`)
            return readOnly.settleAuthorization(auth, signature, settleOptions)
          },
        }
  const chain = crashableChain(port, life)
  const kv = await openKeyValue({ kind: 'memory' })
  const payments = await openPayments({
    db: pdb,
    kv,
    logger,
    clock,
    registry,
    dataDir: '',
    payTo,
    gatewayUrl: GATEWAY_URL,
    chain,
    reconcileEveryMs: 0,
    ...(options.facilitatorUrl === undefined
      ? {}
      : {
          // As src/runtime.ts in facilitator mode with a refund wallet: the settler key is kept.
          settlerPrivateKey: settlerKey,
          facilitator: crashableFacilitator(createFacilitator({ url: options.facilitatorUrl, timeoutMs: 10_000 }), life),
        }),
  })
  return { life, pdb, chain, kv, payments, ownBroadcasts }
}

/** One process of the service over the shared database and chain (its own chain adapter: its own nonce tracking). */
export async function boot(db: Db, dev: StartedDevChain, settlerKey: Hex, payTo: Address, clock: Clock = systemClock, options: ProcessOptions = {}): Promise<Proc> {
  const { life, pdb, chain, kv, payments, ownBroadcasts } = await crashablePayments(db, dev, settlerKey, payTo, clock, options)
  const mailer = createMailer({ from: 'crash@localhost' })
  const service = createSchedulerService({
    db: pdb,
    clock,
    rates: DEFAULT_RATES,
    secrets: createSchedulerSecrets(schedulerKey),
    tasks: new PostgresResourceStore<TaskResource>(pdb, { kind: 'Task' }),
    runs: new PostgresResourceStore<RunResource>(pdb, { kind: 'Run' }),
    namespace: 'default',
    chain,
    confirm: (keys) => payments.confirmations.sweep(keys),
    mailer,
    logger,
    logs: { put: async () => undefined, get: async () => undefined },
    publicUrl: SCHEDULER_URL,
    gatewayUrl: GATEWAY_URL,
  })
  payments.outcomes.register(SCHEDULER_CHARGE_EFFECT, service.chargeOutcomes)
  const catalog = createCatalog(registry, { urls: { gateway: GATEWAY_URL, scheduler: SCHEDULER_URL, memory: 'http://memory.crash.test' }, implemented: IMPLEMENTED_OPERATIONS })
  const metrics = createMetrics({ defaultMetrics: false })
  registerRefundMetrics(metrics.registry, { standing: () => service.refundStanding(), walletBalance: () => chain.balanceOf(chain.serviceAddress) })
  // As src/runtime.ts wires them.
  const deps = { catalog, logger, metrics, bodyLimitBytes: 1 << 20, payTo, readiness: {}, diagnostics: { settlements: () => stuckSettlements(pdb) } }
  const gateway = buildGatewayApp({ ...deps, payments, mailer, db: pdb, media: { client: mediaDown } })
  const scheduler = buildSchedulerApp({
    ...deps,
    diagnostics: { ...deps.diagnostics, refunds: () => stuckRefunds({ standing: () => service.refundStanding() }) },
    payments,
    kv,
    service,
  })
  await Promise.all([gateway.ready(), scheduler.ready()])
  return { life, payments, service, gateway, scheduler, kv, metrics, ownBroadcasts }
}

export async function shutdown(proc: Proc): Promise<void> {
  proc.life.kill()
  await Promise.allSettled([proc.gateway.close(), proc.scheduler.close(), proc.payments.close(), proc.kv.close()])
}

export interface Call {
  app: 'gateway' | 'scheduler'
  url: string
  body: unknown
  headers: Record<string, string>
}

export interface Answer {
  status: number
  body: Record<string, unknown>
  headers: Record<string, unknown>
}

export async function send(proc: Proc, call: Call, extra: Record<string, string> = {}): Promise<Answer> {
  const app = call.app === 'gateway' ? proc.gateway : proc.scheduler
  const res = await app.inject({ method: 'POST', url: call.url, headers: { 'content-type': 'application/json', ...call.headers, ...extra }, payload: JSON.stringify(call.body) })
  return { status: res.statusCode, body: res.body ? (res.json() as Record<string, unknown>) : {}, headers: res.headers }
}

/**
 * The real client's payment header for the call's 402 (taken before the kill switch is armed);
 * with `paymentId`, carrying it as the x402 payment-identifier extension, as the extension's client helper attaches it.
 */
export async function sign(proc: Proc, buyer: PrivateKeyAccount, call: Call, paymentId?: string): Promise<Record<string, string>> {
  const app = call.app === 'gateway' ? proc.gateway : proc.scheduler
  const res = await app.inject({ method: 'POST', url: call.url, headers: { 'content-type': 'application/json', ...call.headers }, payload: JSON.stringify(call.body) })
  if (res.statusCode !== 402) throw new Error(`expected a 402 for ${call.url}, got ${res.statusCode} ${res.body}`)
  // A plan costs 5 USD, above the client's default per-payment cap of 1 USD.
  const http = new x402HTTPClient(new x402Client().register('eip155:8453', new ExactEvmScheme(buyer)).setSpendControls(false))
  const required = http.getPaymentRequiredResponse((name) => res.headers[name.toLowerCase()] as string | undefined, res.json())
  if (paymentId !== undefined && required.extensions) appendPaymentIdentifierToExtensions(required.extensions, paymentId)
  return http.encodePaymentSignatureHeader(await http.createPaymentPayload(required))
}

export const createCall = (key: string): Call => ({
  app: 'scheduler',
  url: '/api/v1/tasks',
  body: {
    schedule: { every: 'hourly' },
    runtime: 'python',
    entrypoint: 'main.py',
    source: 'print(1)',
    max_runtime_sec: 10,
    max_sibling_calls: 0,
    max_amount_usdc_micros: Number(TASK_AMOUNT),
  },
  headers: { 'idempotency-key': key, 'x-pay-amount-micros': TASK_AMOUNT.toString() },
})
export const fundCall = (taskId: string, key: string): Call => ({
  app: 'scheduler',
  url: `/api/v1/tasks/${taskId}/fund`,
  body: { top_up_amount_micros: TOP_UP.toString() },
  headers: { 'idempotency-key': key, 'x-pay-amount-micros': TOP_UP.toString() },
})
export const purchaseCall = (token: string): Call => ({ app: 'gateway', url: `/plans/${PLAN}/purchase`, body: {}, headers: { 'svc-agent-authorization': `Bearer ${token}` } })
