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
import type { FastifyInstance, FastifyRequest } from 'fastify'
import { Type } from '@sinclair/typebox'
import { createServiceApp, type ServiceAppDeps } from '../catalog/service-app.ts'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import type { AccessWrapper, Handler, OperationHandler, OperationOf, OperationRequest } from '../catalog/routes.ts'
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

/** What createTask's access rule checked before payment: the spec to create, and the plan holder on the marketplace rail. */
interface CreatePrecheck {
  spec: Parameters<SchedulerService['createTask']>[0]['spec']
  hash: string
  holder?: PlanHolder
}

/** What fundTask's access rule checked before payment: the top-up, and the plan holder on the marketplace rail. */
interface FundPrecheck {
  amount: bigint
  holder?: PlanHolder
}

interface SchedulerAccount {
  id: string
  owner: string
}

declare module 'fastify' {
  interface FastifyRequest {
    /** The wallet proven for an owner operation (lowercase address). */
    owner?: string
    /** The account of an api-key operation. */
    account?: SchedulerAccount
    schedulerPrecheck?: CreatePrecheck | FundPrecheck
  }
}

type SchedulerOperation = (typeof SCHEDULER_OPERATIONS)[number]

/** What `wrap` (in buildSchedulerApp) sets on the request before the handler of operation `Id` runs. */
type SetByAccessRule<Id extends SchedulerOperation> = Id extends 'createTask'
  ? { schedulerPrecheck: CreatePrecheck }
  : Id extends 'fundTask'
    ? { schedulerPrecheck: FundPrecheck }
    : OperationOf<Id>['proof'] extends 'wallet'
      ? { owner: string }
      : OperationOf<Id>['proof'] extends 'api-key'
        ? { account: SchedulerAccount }
        : unknown

type SchedulerHandlers = { [Id in SchedulerOperation]: Handler<Id, SetByAccessRule<Id>> }

/** The operations paid into a task's escrow, whose access rule runs a precheck before any 402. */
type PrepaidOperation = 'createTask' | 'fundTask'

/** A prepaid operation's checks before payment: the checked call, or the answer of an idempotent retry. */
type Precheck<Id extends PrepaidOperation> = (
  request: OperationRequest<Id>,
  idempotencyKey: string,
  requester: { holder: PlanHolder | undefined; credential: boolean },
) => Promise<(Id extends 'createTask' ? CreatePrecheck : FundPrecheck) | { existing: Record<string, unknown> }>

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

  const handlers: SchedulerHandlers = {
    getSchedulerIndex: async () => index,
    getSchedulerRates: async () => ratesDocument,
    listSiblings: async () => siblings,
    createTask: async (request, reply) => {
      const pre = request.schedulerPrecheck
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
      const pre = request.schedulerPrecheck
      if (pre.holder !== undefined) {
        // Marketplace rail: the cap is raised, nothing is charged (channel marketplace:<owner>).
        const { task } = await service.fundTask({
          taskId: request.params.id,
          amount: pre.amount,
          idempotencyKey: header(request, 'idempotency-key') as string,
          payment: { payer: pre.holder.owner, protocol: 'marketplace', amountMicros: pre.amount, replayKey: null },
        })
        return task
      }
      const payment = request.payment
      if (payment === null || payment.payer === null) throw new AppError('INTERNAL', 'fundTask ran without a payment')
      const { task } = await service.fundTask({
        taskId: request.params.id,
        amount: pre.amount,
        idempotencyKey: header(request, 'idempotency-key') as string,
        payment: { payer: payment.payer, protocol: payment.protocol, amountMicros: payment.amountMicros, replayKey: payment.replayKey, bind: payment.bind },
      })
      payment.present = () => service.currentView(request.params.id)
      return task
    },
    cloneTask: async (request) => service.cloneTask(request.owner, request.body.task_id),
    updateTask: async (request) => service.patchTask(request.params.id, request.owner, request.body),
    replaceTaskEnv: async (request) => service.replaceEnv(request.params.id, request.owner, request.body),
    pauseTask: async (request) => service.pauseTask(request.params.id, request.owner),
    resumeTask: async (request) => service.resumeTask(request.params.id, request.owner),
    enableTaskWebhook: async (request) => service.enableWebhook(request.params.id, request.owner),
    disableTaskWebhook: async (request) => service.disableWebhook(request.params.id, request.owner),
    runTaskWebhook: async (request) => service.runWebhook(request.params.id, bearer(request)),
    getTask: async (request) => service.getTask(request.params.id, request.owner),
    runTaskNow: async (request) => service.runNow(request.params.id, request.owner),
    triggerTask: async (request, reply) => {
      reply.code(202)
      return service.triggerTask(request.params.id, request.owner)
    },
    listTaskRuns: async (request) => service.listRuns(request.params.id, request.owner, request.query),
    getRun: async (request) => service.getRun(request.params.id, request.owner),
    getOwnerUsage: async (request) => service.ownerUsage(request.owner),
    getTaskLedger: async (request) => service.taskLedger(request.params.id, request.owner),
    deleteTask: async (request) => service.deleteTask(request.params.id, request.owner),
    getAccount: async (request) => service.getAccount(request.account),
    listAccountKeys: async (request) => ({ keys: await service.keysOf(request.account.id) }),
    getAccountLedger: async (request) => service.accountLedger(request.account, request.query),
    revokeAccountKey: async (request) => service.revokeKey(request.account, request.params.id),
    createAccountKey: async (request, reply) => {
      reply.code(201)
      return service.createKey(request.owner)
    },
  }

  const headerMicros = (request: FastifyRequest): bigint | undefined => payAmountMicros(credentialsOf(request.headers))

  const prechecks: { [Id in PrepaidOperation]: Precheck<Id> } = {
    createTask: (request, key, { holder }) => service.precheckCreate(request.body, key, headerMicros(request), holder),
    fundTask: (request, key, requester) => service.precheckFund(request.params.id, request.body, key, headerMicros(request), requester),
  }

  /**
   * The access rule of create and fund: the precheck (validation, idempotent retries) answers
   * before any 402, then the call runs on the marketplace rail or behind its payment.
   */
  function prepaid<Id extends PrepaidOperation>(entry: CatalogOperation, handler: OperationHandler, precheck: Precheck<Id>): Handler<Id> {
    const paid = payments.access.wrap(entry, handler)
    return async function prepaid(request, reply) {
      const key = header(request, 'idempotency-key') as string
      // The rail of the call: a payment credential = direct (a bearer token beside it only names
      // the buyer, as on every payg call); Authorization: Bearer <access token> alone = marketplace.
      const credential = paymentCredential(credentialsOf(request.headers)) !== undefined
      const holder = credential ? undefined : await service.marketplace.holder(request.headers)
      const pre = await precheck(request, key, { holder, credential })
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
        if (entry.spec.operationId === 'createTask' && error instanceof AppError && error.code === 'payment_required') {
          error.extensions.marketplace = {
            how: 'Or create on the marketplace rail: no payment, send Authorization: Bearer <accessToken> of an agent holding a plan that covers the scheduler',
            plans: service.marketplace.planOffers(),
          }
        }
        throw error
      }
    }
  }

  const wrap: AccessWrapper = (entry, handler) => {
    const op = entry.spec.operationId
    if (op === 'createTask') return prepaid(entry, handler, prechecks.createTask)
    if (op === 'fundTask') return prepaid(entry, handler, prechecks.fundTask)
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
  const routes = app.withTypeProvider<TypeBoxTypeProvider>()
  routes.get('/api/v1/runs/:id/logs', { schema: { params: LogsParams, querystring: LogsQuery, response: { 200: Type.String() } } }, async (request, reply) => {
    const text = await service.runLogs(request.params.id, request.query.sig)
    reply.type('text/plain; charset=utf-8').header('cache-control', 'private, max-age=60')
    return text
  })
  deps.extraRoutes?.(app)
  return app
}
