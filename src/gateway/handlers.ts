// Handlers of the gateway's own operations: registration, claims, plan purchase, advisor quote.
// Access rules (402, 401/403, wallet proofs) are applied around them by the payments module.
import type { FastifyInstance } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import { Type } from '@sinclair/typebox'
import type { Catalog } from '../catalog/catalog.ts'
import { buildGuide } from '../catalog/advisor.ts'
import type { Handlers, OperationHandler, OperationId } from '../catalog/routes.ts'
import { AppError } from '../platform/errors.ts'
import { parseMicros } from '../platform/money.ts'
import { warnMailUndelivered, type Mailer } from '../platform/mailer.ts'
import type { Payments } from '../payments/index.ts'
import type { Address } from '../payments/types.ts'

export interface GatewayHandlerDeps {
  catalog: Catalog
  payments: Payments
  mailer: Mailer
}

function paymentOf(request: Parameters<OperationHandler>[0]) {
  if (!request.payment) throw new Error('handler reached without its access rule')
  return request.payment
}

export function gatewayHandlers(deps: GatewayHandlerDeps) {
  const { catalog, payments, mailer } = deps
  const { agents } = payments
  const allPlans = catalog.registry.services.flatMap((service) => service.plans)
  const metered = catalog.registry.services.filter((service) => (service.meter?.includedUnits ?? 0) > 0)

  const handlers = {
    registerAgent: async (_request, reply) => {
      const registration = await agents.register()
      reply.code(201)
      return { ...registration, tokenType: 'Bearer' }
    },

    startAgentClaim: async (request, reply) => {
      const agent = paymentOf(request).agent
      if (!agent) throw new Error('agent-bearer rule did not name the agent')
      const { email } = request.body
      const { code, expiresAt } = await agents.startClaim(agent.id, email)
      await mailer.send({
        to: email,
        subject: 'Confirm you own this Agent Gateway agent',
        text: [
          `An AI agent (${agent.id}) asked you to claim it on ${catalog.urls.gateway}.`,
          'Claimed agents get the free included units (for example the first song).',
          '',
          `Your code: ${code}`,
          '',
          `Confirm with: curl -X POST ${catalog.urls.gateway}/auth/claim/verify -H 'content-type: application/json' -d '{"code":"${code}"}'`,
          `The code expires at ${expiresAt.toISOString()}. If you did not expect this, ignore it.`,
        ].join('\n'),
      })
      reply.code(202)
      return { agentId: agent.id, email, expiresAt: expiresAt.toISOString(), delivery: 'sent' }
    },

    verifyAgentClaim: async (request) => {
      const { code } = request.body
      const agent = await agents.completeClaim(code)
      const includedUnits = []
      for (const service of metered) {
        const meter = service.meter
        if (!meter) continue
        const left = await agents.includedUnitsLeft(agent.id, meter.name, meter.includedUnits)
        includedUnits.push({ service: service.slug, meter: meter.name, unit: meter.unit, included: meter.includedUnits, left })
      }
      return { agentId: agent.id, claimedEmail: agent.claimedEmail ?? '', includedUnits }
    },

    purchasePlan: async (request) => {
      const payment = paymentOf(request)
      const planId = request.params.planId
      const plan = allPlans.find((candidate) => candidate.id === planId)
      if (!plan || !payment.agent || !payment.replayKey) throw new Error('plan purchase reached without plan, buyer or payment')
      const agentId = payment.agent.id
      const replayKey = payment.replayKey
      // Provisional until the payment settles; the decision (here or, after a crash, the
      // reconciler's) activates or cancels it in its own transaction.
      const activated = await agents.activatePlan({ agentId, plan, replayKey, bind: payment.bind })
      const view = (status: 'active' | 'pending', endsAt: Date | null) => {
        const response: Record<string, unknown> = { planId: plan.id, agentId, status, kind: plan.kind }
        if (activated.creditMicros !== null) response.creditMicros = activated.creditMicros.toString()
        if (endsAt) response.expiresAt = endsAt.toISOString()
        if (plan.callsPerPeriod !== undefined) response.callsRemaining = plan.callsPerPeriod
        return response
      }
      payment.present = async (decision) => {
        const purchase = await agents.purchaseOf(replayKey)
        return view(decision.status === 'settled' ? 'active' : 'pending', purchase?.endsAt ?? activated.endsAt)
      }
      return view('pending', activated.endsAt)
    },

    postAgentQuote: async (request) => {
      const body = request.body
      const budgetMicros = body.budgetMicros === undefined ? undefined : parseMicros(body.budgetMicros)
      if (body.budgetMicros !== undefined && budgetMicros === undefined) {
        throw new AppError('validation_error', 'budgetMicros must be a non-negative integer of micros', { field: 'body.budgetMicros' })
      }
      return buildGuide(catalog, { goal: body.goal, budgetMicros, requirements: body.requirements })
    },
  } satisfies Partial<Handlers<OperationId>>
  return handlers
}

/** An EVM address: the pattern is what makes the `0x…` static type true. */
const EvmAddress = (options: { description?: string } = {}) => Type.Unsafe<Address>(Type.String({ pattern: '^0x[0-9a-fA-F]{40}$', ...options }))

const FaucetRequest = Type.Object(
  {
    address: EvmAddress({ description: 'EVM address to fund with test USDC' }),
    amountMicros: Type.Union([Type.String({ pattern: '^[1-9][0-9]{0,12}$' }), Type.Integer({ minimum: 1, maximum: 1_000_000_000_000 })], {
      description: 'Test USDC in micros (at most 1,000,000 USDC)',
    }),
  },
  { additionalProperties: false },
)

/**
 * Dev-only routes of the embedded default: the faucet, balances and the mail outbox are served only
 * on the local dev chain (`payments.devChain`), never with a real chain (CHAIN_RPC_URL), whatever
 * SMTP_URL or HOST say: the outbox shows claim codes and signed log links. With a real chain and no
 * SMTP_URL mail is not delivered at all; that is said once, at warn.
 */
export function registerDevRoutes(app: FastifyInstance, deps: { payments: Payments; mailer: Mailer }): void {
  const devChain = deps.payments.devChain
  if (devChain === undefined) {
    warnMailUndelivered(deps.mailer, app.log)
    return
  }
  const routes = app.withTypeProvider<TypeBoxTypeProvider>()
  routes.post(
    '/dev/faucet',
    {
      schema: {
        body: FaucetRequest,
        response: {
          200: Type.Object({ address: Type.String(), amountMicros: Type.String(), balanceMicros: Type.String(), txHash: Type.String() }, { additionalProperties: false }),
        },
      },
    },
    async (request) => {
      const body = request.body
      const amount = parseMicros(body.amountMicros)
      if (amount === undefined || amount === 0n) throw new AppError('validation_error', 'amountMicros must be a positive integer', { field: 'body.amountMicros' })
      const txHash = await devChain.mint(body.address, amount)
      const balance = await devChain.balanceOf(body.address)
      return { address: body.address, amountMicros: amount.toString(), balanceMicros: balance.toString(), txHash }
    },
  )
  routes.get(
    '/dev/balances/:address',
    {
      schema: {
        params: Type.Object({ address: EvmAddress() }),
        response: { 200: Type.Object({ address: Type.String(), balanceMicros: Type.String() }, { additionalProperties: false }) },
      },
    },
    async (request) => {
      const { address } = request.params
      return { address, balanceMicros: (await devChain.balanceOf(address)).toString() }
    },
  )
  if (deps.mailer.kind === 'outbox') {
    app.get('/dev/outbox', { schema: { response: { 200: Type.Object({ messages: Type.Array(Type.Object({}, { additionalProperties: true })) }) } } }, async () => ({
      messages: deps.mailer.outbox(),
    }))
  }
}
