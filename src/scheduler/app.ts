// The {scheduler_url} application: discovery, the task/run/ledger/account operations of the
// registry (their schemas come from there), the per-run helper endpoint, the signed run-log URLs
// and the siblings' public routes. Access per operation:
// - payment (create, fund): validation and idempotent retries are answered BEFORE the 402, so a
//   retried create never pays twice; the work runs between authorization and settlement, and a
//   settlement that fails after the work reverses the charge; with Authorization: Bearer <plan
//   access token> instead of a payment they run on the marketplace rail (marketplace.ts): no 402,
//   the plan holder's access is checked (401 bearer_required / 403 plan_required), nothing settles;
// - wallet: the owner proof (src/payments/owner-proof.ts): SIGN-IN-WITH-X (CAIP-122, one-time
//   nonce) or a $0 MPP proof, both bound to the request (a $0 x402 authorization is not: 401
//   unbound_proof); an unproven call answers 401 with the SIWX challenge at
//   extensions["sign-in-with-x"]; without either, a plan access token (agw_…) names the holder
//   that owns marketplace-rail tasks;
// - api-key: Authorization: Bearer agk_…; webhook: Authorization: Bearer whsec_….
// Every credential header is read by src/payments/credentials.ts.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { Type } from '@sinclair/typebox'
import { createServiceApp, type ServiceAppDeps } from '../catalog/service-app.ts'
import type { AccessWrapper, OperationHandler } from '../catalog/routes.ts'
import type { CatalogOperation } from '../catalog/openapi.ts'
import type { Payments } from '../payments/index.ts'
import { credentialsOf, paymentCredential, payAmountMicros, tokenOf } from '../payments/credentials.ts'
import { createOwnerProof } from '../payments/owner-proof.ts'
import { createSiwxVerifier, type SiwxVerifier } from '../payments/siwx.ts'
import type { KeyValue } from '../platform/kv/index.ts'
import { AppError } from '../platform/errors.ts'
import { DEFAULT_RATES, ratesView, siblingsView, type SchedulerRates } from './domain/rates.ts'
import type { SchedulerService } from './service.ts'
import type { PlanHolder } from './marketplace.ts'
import { requireExecutor, type ExecutorHealth } from './executor-health.ts'

import { SCHEDULER_OPERATIONS } from './operations.ts'

export { SCHEDULER_OPERATIONS }

export interface SchedulerAppDeps extends ServiceAppDeps {
  payments: Payments
  kv: KeyValue
  service: SchedulerService
  rates?: SchedulerRates
  /** Mounts extra routes (helper endpoint, siblings' public routes) on the scheduler listener. */
  extraRoutes?: (app: FastifyInstance) => void
  /** Local executor: create, fund, run now, trigger and webhook answer 503 (before any 402) while it cannot run scripts. */
  executorHealth?: ExecutorHealth
}

declare module 'fastify' {
  interface FastifyRequest {
    /** The wallet proven for an owner operation (lowercase address). */
    owner?: string
    /** The account of an api-key operation. */
    account?: { id: string; owner: string }
    schedulerPrecheck?: unknown
  }
}

/** The Idempotency-Key of a request, read by credentials.ts (the only header the handlers ask for). */
function header(request: FastifyRequest, _name: 'idempotency-key'): string | undefined {
  return credentialsOf(request.headers).idempotencyKey
}

/** The token of `Authorization: Bearer` (an api key, a webhook secret); undefined when absent or malformed. */
function bearer(request: FastifyRequest): string | undefined {
  return tokenOf(credentialsOf(request.headers).bearer)
}

export function buildSchedulerApp(deps: SchedulerAppDeps): FastifyInstance {
  const { service, payments } = deps
  const rates = deps.rates ?? DEFAULT_RATES
  const base = deps.catalog.urls.scheduler
  const siwx: SiwxVerifier = createSiwxVerifier({ domain: new URL(base).host, store: deps.kv, statement: 'Sign in to the Agent Gateway scheduler as the owner of your tasks' })

  const index = {
    service: 'scheduler',
    version: '1.0.0',
    runtimes: ['python 3.12', 'node 22'],
    links: { openapi: `${base}/openapi.json`, llms: `${base}/llms.txt`, rates: `${base}/api/v1/rates`, siblings: `${base}/api/v1/_siblings` },
    operations: deps.catalog.operationsOn('scheduler').map((entry) => ({
      method: entry.spec.method,
      path: entry.spec.path,
      summary: entry.spec.summary,
      proof: entry.spec.proof,
    })),
  }
  const ratesDocument = ratesView(rates)
  const siblings = siblingsView(rates)

  const resourceUrl = (request: FastifyRequest) => `${base}${request.url}`

  /**
   * The owner of an owner call (src/payments/owner-proof.ts): the wallet proven by SIWX or a
   * single-use $0 MPP proof, each bound to this request, method and URL (a proof made for
   * `GET /api/v1/tasks/t_1` opens neither `DELETE /api/v1/tasks/t_1` nor `GET /api/v1/tasks/t_2`),
   * or the plan holder of a marketplace-rail access token.
   */
  const ownerProof = createOwnerProof({
    siwx,
    guard: payments.guard,
    payTo: deps.payTo as `0x${string}`,
    holderOf: async (_token, call) => (await service.marketplace.holder(call.headers))?.owner,
    noProofHint: 'Tasks created on the marketplace rail: send the plan access token instead (Authorization: Bearer <accessToken>).',
  })
  const proveOwner = (request: FastifyRequest, entry: CatalogOperation): Promise<string> =>
    ownerProof.prove({ method: request.method, url: resourceUrl(request), headers: request.headers, operationId: entry.spec.operationId, description: entry.spec.summary })

  const id = (request: FastifyRequest) => (request.params as { id: string }).id
  const owner = (request: FastifyRequest) => request.owner as string
  const account = (request: FastifyRequest) => request.account as { id: string; owner: string }

  const handlers: Record<(typeof SCHEDULER_OPERATIONS)[number], OperationHandler> = {
    getSchedulerIndex: async () => index,
    getSchedulerRates: async () => ratesDocument,
    listSiblings: async () => siblings,
    createTask: async (request, reply) => {
      const pre = request.schedulerPrecheck as { spec: Parameters<SchedulerService['createTask']>[0]['spec']; hash: string; holder?: PlanHolder }
      if (pre.holder !== undefined) {
        // Marketplace rail: no payment; the plan holder owns the task and its cap is a limit only.
        const { task } = await service.createTask({
          spec: pre.spec,
          hash: pre.hash,
          idempotencyKey: header(request, 'idempotency-key') as string,
          rail: 'marketplace',
          payment: { payer: pre.holder.owner, protocol: 'marketplace', amountMicros: pre.spec.max_amount_usdc_micros, replayKey: null },
        })
        reply.code(201)
        return task
      }
      const payment = request.payment
      if (payment === null || payment.payer === null) throw new AppError('INTERNAL', 'createTask ran without a payment')
      const { id: taskId, task } = await service.createTask({
        spec: pre.spec,
        hash: pre.hash,
        idempotencyKey: header(request, 'idempotency-key') as string,
        payment: { payer: payment.payer, protocol: payment.protocol, amountMicros: payment.amountMicros, replayKey: payment.replayKey, bind: payment.bind },
      })
      // The answer shows the escrow as the payment's decision left it (settled, or still pending).
      payment.present = () => service.currentView(taskId)
      reply.code(201)
      return task
    },
    fundTask: async (request) => {
      const pre = request.schedulerPrecheck as { amount: bigint; holder?: PlanHolder }
      if (pre.holder !== undefined) {
        // Marketplace rail: the cap is raised, nothing is charged (channel marketplace:<owner>).
        const { task } = await service.fundTask({
          taskId: id(request),
          amount: pre.amount,
          idempotencyKey: header(request, 'idempotency-key') as string,
          payment: { payer: pre.holder.owner, protocol: 'marketplace', amountMicros: pre.amount, replayKey: null },
        })
        return task
      }
      const payment = request.payment
      if (payment === null || payment.payer === null) throw new AppError('INTERNAL', 'fundTask ran without a payment')
      const { task } = await service.fundTask({
        taskId: id(request),
        amount: pre.amount,
        idempotencyKey: header(request, 'idempotency-key') as string,
        payment: { payer: payment.payer, protocol: payment.protocol, amountMicros: payment.amountMicros, replayKey: payment.replayKey, bind: payment.bind },
      })
      payment.present = () => service.currentView(id(request))
      return task
    },
    cloneTask: async (request) => service.cloneTask(owner(request), (request.body as { task_id: string }).task_id),
    updateTask: async (request) => service.patchTask(id(request), owner(request), request.body),
    replaceTaskEnv: async (request) => service.replaceEnv(id(request), owner(request), request.body as { env: unknown }),
    pauseTask: async (request) => service.pauseTask(id(request), owner(request)),
    resumeTask: async (request) => service.resumeTask(id(request), owner(request)),
    enableTaskWebhook: async (request) => service.enableWebhook(id(request), owner(request)),
    disableTaskWebhook: async (request) => service.disableWebhook(id(request), owner(request)),
    runTaskWebhook: async (request) => service.runWebhook(id(request), bearer(request)),
    getTask: async (request) => service.getTask(id(request), owner(request)),
    runTaskNow: async (request) => service.runNow(id(request), owner(request)),
    triggerTask: async (request, reply) => {
      reply.code(202)
      return service.triggerTask(id(request), owner(request))
    },
    listTaskRuns: async (request) => service.listRuns(id(request), owner(request), request.query as { cursor?: string; limit?: number }),
    getRun: async (request) => service.getRun(id(request), owner(request)),
    getOwnerUsage: async (request) => service.ownerUsage(owner(request)),
    getTaskLedger: async (request) => service.taskLedger(id(request), owner(request)),
    deleteTask: async (request) => service.deleteTask(id(request), owner(request)),
    getAccount: async (request) => service.getAccount(account(request)),
    listAccountKeys: async (request) => ({ keys: await service.keysOf(account(request).id) }),
    getAccountLedger: async (request) => service.accountLedger(account(request), request.query as { cursor?: string; limit?: number }),
    revokeAccountKey: async (request) => service.revokeKey(account(request), id(request)),
    createAccountKey: async (request, reply) => {
      reply.code(201)
      return service.createKey(owner(request))
    },
  }

  const headerMicros = (request: FastifyRequest): bigint | undefined => payAmountMicros(credentialsOf(request.headers))

  const wrap: AccessWrapper = (entry, handler) => {
    const op = entry.spec.operationId
    if (op === 'createTask' || op === 'fundTask') {
      const paid = payments.access.wrap(entry, handler)
      return async function prepaid(request: FastifyRequest, reply: FastifyReply) {
        const key = header(request, 'idempotency-key') as string
        // The rail of the call: a payment credential = direct (a bearer token beside it only names
        // the buyer, as on every payg call); Authorization: Bearer <access token> alone = marketplace.
        const credential = paymentCredential(credentialsOf(request.headers)) !== undefined
        const holder = credential ? undefined : await service.marketplace.holder(request.headers)
        const pre =
          op === 'createTask'
            ? await service.precheckCreate(request.body, key, headerMicros(request), holder)
            : await service.precheckFund(id(request), request.body as { top_up_amount_micros: unknown }, key, headerMicros(request), { holder, credential })
        if ('existing' in pre) return pre.existing // an idempotent retry: nothing is paid again
        if (holder !== undefined) {
          request.schedulerPrecheck = { ...pre, holder }
          return handler(request, reply) // marketplace rail: never a 402, nothing to settle
        }
        request.schedulerPrecheck = pre
        try {
          return await paid(request, reply)
        } catch (error) {
          // An unpaid create learns about the other rail from its 402.
          if (op === 'createTask' && error instanceof AppError && error.code === 'payment_required') {
            error.extensions.marketplace = {
              how: 'Or create on the marketplace rail: no payment, send Authorization: Bearer <accessToken> of an agent holding a plan that covers the scheduler',
              plans: service.marketplace.planOffers(),
            }
          }
          throw error
        }
      }
    }
    switch (entry.spec.proof) {
      case 'wallet':
        return async function ownerOperation(request, reply) {
          request.owner = await proveOwner(request, entry)
          return handler(request, reply)
        }
      case 'api-key':
        return async function accountOperation(request, reply) {
          if (credentialsOf(request.headers).siwx !== undefined && bearer(request) === undefined) {
            throw new AppError('API_KEY_INVALID', 'Account endpoints take the account API key (Authorization: Bearer agk_…); a wallet proof cannot replace it', {
              field: 'header.authorization',
            })
          }
          request.account = await service.accountForKey(bearer(request))
          return handler(request, reply)
        }
      default:
        return payments.access.wrap(entry, handler)
    }
  }

  // requireExecutor: EXECUTOR_OPERATIONS ask deps.executorHealth first, outside `wrap` (before prepaid's precheck and any 402).
  const app = createServiceApp('scheduler', deps, handlers, requireExecutor(wrap, deps.executorHealth))

  const LogsParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 64, pattern: '^[A-Za-z0-9_-]+$' }) }, { additionalProperties: false })
  const LogsQuery = Type.Object({ sig: Type.String({ minLength: 1, maxLength: 128 }) }, { additionalProperties: false })
  app.get('/api/v1/runs/:id/logs', { schema: { params: LogsParams, querystring: LogsQuery, response: { 200: Type.String() } } }, async (request, reply) => {
    const text = await service.runLogs((request.params as { id: string }).id, (request.query as { sig: string }).sig)
    reply.type('text/plain; charset=utf-8').header('cache-control', 'private, max-age=60')
    return text
  })
  deps.extraRoutes?.(app)
  return app
}
