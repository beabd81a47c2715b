// The memory service's listener ({memory_url}/api/v1): remember on three rails, deposits,
// and the free owner operations. Access per operation:
// - remember: Authorization: Bearer <plan access token> alone → marketplace rail (one memory-ops
//   unit of a covering plan, no 402); SIGN-IN-WITH-X alone → direct rail (the proven wallet's
//   deposit is debited the embedding cost, 402 insufficient_deposit when short); otherwise the
//   usual 402 for one memory-ops unit (x402 / MPP), the payer owns the record — unless the
//   payer's deposit covers the write: it is then debited as on the direct rail and the payment is
//   never settled (deposit-offer.ts says so in the 402). A retried write
//   (same Idempotency-Key) is answered from the first, before any 402, and never charged twice.
// - deposit: the amount in X-Pay-Amount-Micros, paid with x402 / MPP.
// - recall, expand, account, withdraw: free; the owner is proven with src/payments/owner-proof.ts
//   (SIWX or a $0 MPP proof bound to the request; a plan access token for marketplace owners).
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { createServiceApp, type ServiceAppDeps } from '../catalog/service-app.ts'
import type { AccessWrapper, Handler, OperationOf, OperationRequest } from '../catalog/routes.ts'
import type { CatalogOperation } from '../catalog/openapi.ts'
import type { Payments } from '../payments/index.ts'
import { credentialsOf, paymentCredential } from '../payments/credentials.ts'
import { createOwnerProof } from '../payments/owner-proof.ts'
import { createSiwxVerifier, SIWX_EXTENSION_KEY } from '../payments/siwx.ts'
import { registrationRecipe } from '../payments/access.ts'
import type { KeyValue } from '../platform/kv/index.ts'
import { AppError } from '../platform/errors.ts'
import type { MemoryService } from './service.ts'
import type { MemoryMoney } from './deposits.ts'
import { depositorHint, offerDepositRail } from './deposit-offer.ts'

import { MEMORY_OPERATIONS } from './operations.ts'

export { MEMORY_OPERATIONS }

export interface MemoryAppDeps extends ServiceAppDeps {
  payments: Payments
  kv: KeyValue
  service: MemoryService
  money: MemoryMoney
}

declare module 'fastify' {
  interface FastifyRequest {
    /** The owner proven for an owner operation (a wallet, or `agent:<id>` for a plan holder). */
    memoryOwner?: string
  }
}

type MemoryOperation = (typeof MEMORY_OPERATIONS)[number]

/** What `wrap` (in buildMemoryApp) sets on the request before the handler of operation `Id` runs. */
type SetByAccessRule<Id extends MemoryOperation> = OperationOf<Id>['proof'] extends 'wallet' ? { memoryOwner: string } : unknown

export function buildMemoryApp(deps: MemoryAppDeps): FastifyInstance {
  const { payments, service, money } = deps
  const base = deps.catalog.urls.memory
  const siwx = createSiwxVerifier({ domain: new URL(base).host, store: deps.kv, statement: 'Sign in to the Agent Gateway memory service as the owner of your memories' })
  const ownerProof = createOwnerProof({
    siwx,
    guard: payments.guard,
    payTo: deps.payTo as `0x${string}`,
    holderOf: async (token) => {
      const agent = await payments.agents.findByToken(token)
      if (agent === undefined) {
        throw new AppError('bearer_required', 'Authorization: Bearer carries no known access token; register at POST /auth/register on the gateway', {
          field: 'header.authorization',
          extensions: { recipe: registrationRecipe(deps.catalog.urls.gateway) },
        })
      }
      return `agent:${agent.id}`
    },
    noProofHint: 'Memories written on the marketplace rail: send the plan access token instead (Authorization: Bearer <accessToken>).',
  })
  const proveOwner = (request: FastifyRequest, entry: CatalogOperation): Promise<string> =>
    ownerProof.prove({ method: request.method, url: `${base}${request.url}`, headers: request.headers, operationId: entry.spec.operationId, description: entry.spec.summary })

  const depositor = depositorHint(base)
  const idempotencyKey = (request: FastifyRequest) => credentialsOf(request.headers).idempotencyKey

  const handlers: { [Id in MemoryOperation]: Handler<Id, SetByAccessRule<Id>> } = {
    // Reached through the per-call payment only (the other rails are answered in `wrap`).
    rememberMemory: async (request, reply) => {
      const payment = request.payment
      if (payment === null || payment.payer === null || payment.replayKey === null || payment.bind === undefined) {
        throw new AppError('internal', 'rememberMemory ran without a payment')
      }
      const prepared = await service.prepare(request.body)
      // The payer is the proof's verified signer; its deposit pays when it covers the write.
      const { view } = await service.rememberPaid(
        payment.payer.toLowerCase(),
        prepared,
        { amountMicros: payment.amountMicros, replayKey: payment.replayKey, bind: payment.bind, forgo: payment.forgo },
        idempotencyKey(request),
      )
      reply.code(201)
      return view
    },
    depositMemoryFunds: async (request) => {
      const payment = request.payment
      if (payment === null || payment.payer === null || payment.replayKey === null || payment.bind === undefined) {
        throw new AppError('internal', 'depositMemoryFunds ran without a payment')
      }
      const payer = payment.payer.toLowerCase()
      const replayKey = payment.replayKey
      await money.deposit(payer, { amountMicros: payment.amountMicros, replayKey, bind: payment.bind })
      // The answer shows the deposit as its payment's decision left it (settled with its transaction).
      payment.present = () => money.depositView(payer, replayKey)
      return money.depositView(payer, replayKey)
    },
    recallMemories: async (request) => service.recall(request.memoryOwner, request.body),
    expandMemories: async (request) => service.expand(request.memoryOwner, request.body.ids),
    getMemoryAccount: async (request) => service.account(request.memoryOwner),
    withdrawMemoryDeposit: async (request) => money.withdraw(request.memoryOwner),
  }

  const wrap: AccessWrapper = (entry, handler) => {
    if (entry.spec.operationId === 'rememberMemory') {
      const paid = payments.access.wrap(entry, handler)
      return async function remember(request: OperationRequest<'rememberMemory'>, reply: FastifyReply) {
        const input = request.body
        const key = idempotencyKey(request)
        if (key !== undefined) {
          const replay = await service.replayOf(key, input)
          if (replay !== undefined) {
            reply.code(201)
            return replay
          }
        }
        const credentials = credentialsOf(request.headers)
        const paying = paymentCredential(credentials) !== undefined
        const bearer = credentials.bearer
        if (!paying && bearer !== undefined && (!bearer.valid || bearer.kind === 'access-token')) {
          // Marketplace rail: the plan holder pays one memory-ops unit of plan credit.
          const agent = bearer.valid ? await payments.agents.findByToken(bearer.token) : undefined
          if (agent === undefined) {
            throw new AppError('bearer_required', 'Authorization: Bearer carries no known access token; register at POST /auth/register on the gateway and buy memory-credit-5', {
              field: 'header.authorization',
              extensions: { recipe: registrationRecipe(deps.catalog.urls.gateway) },
            })
          }
          const prepared = await service.prepare(input)
          const { view, standing } = await service.rememberOnPlan(agent.id, prepared, key)
          reply.header('x-plan-id', standing.planId)
          if (standing.remainingMicros !== undefined) reply.header('x-plan-credit-remaining-micros', standing.remainingMicros.toString())
          reply.code(201)
          return view
        }
        if (!paying && credentials.siwx !== undefined) {
          // Direct rail: the proven wallet's deposit pays the embedding cost.
          const wallet = await proveOwner(request, entry)
          const prepared = await service.prepare(input)
          reply.code(201)
          return service.rememberOnDeposit(wallet, prepared, key)
        }
        try {
          return await paid(request, reply)
        } catch (error) {
          // An unpaid write learns about the other two rails from its 402, with a SIWX challenge
          // for this very request (direct rail) and the plans (marketplace rail).
          if (error instanceof AppError && error.code === 'payment_required') {
            offerDepositRail(error, await siwx.challenge(request.method, `${base}${request.url}`), depositor, {
              direct: `Holders of a deposit (POST ${base}/api/v1/deposits): sign the challenge at extensions["${SIWX_EXTENSION_KEY}"] and retry with the SIGN-IN-WITH-X header and no payment; the write is debited ceil(tokens × 100000 / 1e6) micro-USDC from the deposit. A payment from a wallet whose deposit covers the write is debited the same way and never settled.`,
              marketplace: `Plan holders: retry with Authorization: Bearer <accessToken> of an agent holding memory-credit-5 (POST ${deps.catalog.urls.gateway}/plans/memory-credit-5/purchase); one memory-ops unit per write, no 402.`,
            })
          }
          throw error
        }
      }
    }
    if (entry.spec.proof === 'wallet') {
      return async function ownerOperation(request, reply) {
        request.memoryOwner = await proveOwner(request, entry)
        return handler(request, reply)
      }
    }
    return payments.access.wrap(entry, handler)
  }

  return createServiceApp('memory', deps, handlers, wrap)
}
