// Access control of registry operations by their proof kind: priced 402s (x402 / MPP) with free
// included units for claimed agents, plan access by bearer token (401 / 403, never 402), and
// free $0 wallet proofs. Wraps an operation handler; the handler never sees unpaid calls.
import type { FastifyReply, FastifyRequest } from 'fastify'
import { AppError } from '../platform/errors.ts'
import { formatUsd } from '../platform/money.ts'
import type { Logger } from '../platform/logger.ts'
import type { CatalogOperation } from '../catalog/openapi.ts'
import type { OperationHandler, OperationRequest, PlanPricedOperation } from '../catalog/routes.ts'
import type { PlanSpec, Registry } from '../catalog/types.ts'
import type { PaymentGuard, AuthorizedPayment } from './guard.ts'
import type { Agent, AgentStore } from './agents.ts'
import { accessTokenCredential, credentialsOf, PAY_AMOUNT_HEADER, payAmountInvalid } from './credentials.ts'
import type { Decision } from './outcomes.ts'
import type { Address, PriceQuote, Protocol } from './types.ts'
import type { Queryable } from '../platform/db/index.ts'
import { discoveryOf } from './x402/bazaar.ts'
import type { HeldIdentifier, PaymentIdentifiers } from './x402/payment-identifier.ts'
import { capturedAnswer, claimIdentifier, inProgress, replayAnswer } from './x402/idempotent.ts'

/** What a paid handler learns about the payment behind its call. */
export interface PaymentContext {
  protocol: Protocol | 'included' | 'plan' | 'none'
  payer: Address | null
  amountMicros: bigint
  agent: Agent | null
  /** Free included units consumed by this call. */
  includedUnits: number
  /** Units of the meter this call was priced for (per-unit pricing), free ones included. */
  units?: number
  /** The spend key of the payment (unique per payment), when a payment was made. */
  replayKey: string | null
  /**
   * Set when money is paid: binds the handler's durable work to the payment, called inside the
   * transaction that writes the work, naming the outcome handler (outcomes.ts) that activates or
   * reverses it once the settlement is known — in this request or, after a crash, the reconciler.
   */
  bind?: (tx: Queryable, effect: string) => Promise<void>
  /**
   * Set when money is paid with a proof nothing has broadcast yet: inside the transaction of work
   * paid from a balance the payer holds with us, ends the payment unsettled (never broadcast,
   * never usable again; guard.ts). The answer then carries no payment headers. Never with bind.
   */
  forgo?: (tx: Queryable, effect: string) => Promise<void>
  /** Renders the answer once the payment is decided (default: the handler's result as it is). */
  present?: (decision: Decision) => Promise<unknown>
  /**
   * Set by a handler whose delivered work turned out to cost nothing (the free units covered
   * everything it delivered): the payment is released instead of settled. Never after bind.
   */
  waived?: boolean
}

declare module 'fastify' {
  interface FastifyRequest {
    payment: PaymentContext | null
  }
}

export interface AccessDeps {
  guard: PaymentGuard
  agents: AgentStore
  registry: Registry
  payTo: Address
  gatewayUrl: string
  logger: Logger
  /** x402 payment-identifier store (absent: ids are ignored, every request is new). */
  identifiers?: PaymentIdentifiers | undefined
}

/** Per-operation price override (e.g. the scheduler's X-Pay-Amount-Micros must equal a body field). */
export type QuoteFunction = (request: FastifyRequest) => bigint | Promise<bigint>

export function registrationRecipe(gatewayUrl: string): Record<string, unknown> {
  return {
    register: { method: 'POST', url: `${gatewayUrl}/auth/register`, body: null, returns: '{agentId, accessToken}' },
    guide: `${gatewayUrl}/auth.md`,
    // biome-ignore lint/suspicious/noThenProperty: a recipe step for agents, not a thenable (never awaited)
    then: 'Buy a covering plan at POST /plans/{planId}/purchase and retry with Authorization: Bearer <accessToken>.',
  }
}

export function planOffer(plan: PlanSpec, gatewayUrl: string): Record<string, unknown> {
  return {
    id: plan.id,
    kind: plan.kind,
    title: plan.title,
    price: { amountMicros: plan.priceMicros.toString(), amountUsd: formatUsd(plan.priceMicros) },
    purchase: `${gatewayUrl}/plans/${plan.id}/purchase`,
  }
}

export function createAccessControl(deps: AccessDeps) {
  const { guard, agents, registry } = deps
  const allPlans = registry.services.flatMap((service) => service.plans)

  async function agentOf(request: FastifyRequest, required: boolean): Promise<Agent | null> {
    const credential = accessTokenCredential(credentialsOf(request.headers))
    if (credential === undefined) return null
    // A bearer that breaks the token syntax is answered like an unknown token.
    const agent = credential.valid ? await agents.findByToken(credential.token) : undefined
    if (!agent && required) {
      throw new AppError('bearer_required', 'The access token is not recognised; register again at POST /auth/register', {
        extensions: { recipe: registrationRecipe(deps.gatewayUrl) },
      })
    }
    if (!agent) {
      throw new AppError('bearer_required', 'Svc-Agent-Authorization carries an unknown access token', {
        field: 'header.svc-agent-authorization',
        extensions: { recipe: registrationRecipe(deps.gatewayUrl) },
      })
    }
    return agent
  }

  function quoteOf(entry: CatalogOperation, request: FastifyRequest, amountMicros: bigint): PriceQuote {
    const path = request.url.split('?')[0] ?? ''
    return {
      amountMicros,
      resourceUrl: entry.serverUrl + path,
      route: `${entry.spec.method} ${entry.spec.path}`,
      description: entry.spec.summary,
      payTo: deps.payTo,
      ...discoveryParts(entry, request),
    }
  }

  function discoveryParts(entry: CatalogOperation, request: FastifyRequest): Pick<PriceQuote, 'discovery' | 'pathParams'> {
    const discovery = discoveryOf(entry)
    // Any operation's path parameters: the router's strings, which every params schema of the registry keeps strings.
    const params = request.params as Record<string, string> | undefined
    return { ...(discovery ? { discovery } : {}), ...(params && Object.keys(params).length > 0 ? { pathParams: params } : {}) }
  }

  /**
   * Runs the handler after `payment` is authorized; then settles and decides the payment (which
   * activates or reverses the work the handler bound to it); releases everything on failure.
   * `undo`: in-process steps of free units or plan debits, for work that failed or was not paid.
   */
  async function runPaid(
    request: FastifyRequest,
    reply: FastifyReply,
    authorized: AuthorizedPayment | undefined,
    undo: (() => Promise<void>)[],
    handler: OperationHandler,
    identifier?: HeldIdentifier,
  ): Promise<unknown> {
    let result: unknown
    try {
      result = await handler(request, reply)
    } catch (error) {
      await authorized?.release(error instanceof Error ? error.message : undefined)
      for (const step of undo) await step()
      throw error
    }
    if (reply.statusCode >= 400) {
      await authorized?.release(`the operation answered ${reply.statusCode}`)
      for (const step of undo) await step()
      return result
    }
    if (authorized?.forgone) {
      // Paid from a balance in the work's own transaction: nothing to settle (a no-op when it committed).
      await authorized.release('paid from a balance held with us')
      return result
    }
    if (authorized && request.payment?.waived) {
      await authorized.release('the delivered work cost nothing')
      return result
    }
    if (authorized) {
      // The answer is kept before the money moves: a retry after a crash from here on gets it.
      await identifier?.prepare(capturedAnswer(reply, result))
      let settled: Awaited<ReturnType<AuthorizedPayment['commit']>>
      try {
        settled = await authorized.commit()
      } catch (error) {
        for (const step of undo) await step()
        throw error
      }
      const { decision, headers } = settled
      if (decision.status === 'failed') {
        // The work bound to the payment was reversed in the decision's transaction.
        for (const step of undo) await step()
        throw guard.paymentRequired(authorized.quote, 'settlement_failed', `Settlement failed: ${decision.reason}. Nothing was charged.`)
      }
      for (const [name, value] of Object.entries(headers)) reply.header(name, value)
      reply.header('cache-control', 'private')
      if (request.payment?.present) result = await request.payment.present(decision)
    }
    return result
  }

  /** What a paid handler gets to bind its work with. */
  function bindOf(authorized: AuthorizedPayment | undefined): PaymentContext['bind'] {
    return authorized && !authorized.payment.zeroValue ? (tx, effect) => authorized.bind(tx, effect) : undefined
  }

  function payg(entry: CatalogOperation, handler: OperationHandler, quote?: QuoteFunction): OperationHandler {
    const { spec, service } = entry
    const pricing = spec.pricing
    const meter = service.meter
    if (pricing.kind === 'amount-header' && pricing.header.toLowerCase() !== PAY_AMOUNT_HEADER.toLowerCase()) {
      throw new Error(`${spec.operationId}: amount-header pricing reads ${PAY_AMOUNT_HEADER}, not ${pricing.header}`)
    }
    return async function paidOperation(request, reply) {
      const agent = await agentOf(request, false)
      let units = 1
      let amount: bigint
      if (quote) {
        amount = await quote(request)
      } else if (pricing.kind === 'per-unit') {
        if (!meter) throw new Error(`${spec.operationId}: per-unit pricing without a meter`)
        // Any per-unit operation's body, read by the field names its pricing gives: checked below, not typed.
        const body = request.body as Record<string, unknown> | undefined
        const raw = pricing.unitsFromBody ? body?.[pricing.unitsFromBody] : undefined
        units = typeof raw === 'number' && Number.isInteger(raw) && raw > 0 ? raw : (pricing.defaultUnits ?? 1)
        const text = pricing.unitsFromText ? body?.[pricing.unitsFromText.field] : undefined
        if (pricing.unitsFromText && typeof text === 'string') units = Math.max(1, Math.ceil([...text].length / pricing.unitsFromText.perCharacters))
        amount = BigInt(units) * meter.unitPriceMicros
      } else if (pricing.kind === 'amount-header') {
        const read = credentialsOf(request.headers).payAmount
        if (read === undefined || !read.valid || read.micros === 0n) throw payAmountInvalid()
        amount = read.micros
      } else if (pricing.kind === 'plan-price') {
        // This pricing is that of the plan-priced operations: their params schemas name planId.
        const planId = (request as OperationRequest<PlanPricedOperation>).params.planId
        const plan = allPlans.find((candidate) => candidate.id === planId)
        if (!plan) throw new AppError('unknown_plan', `No plan "${planId}"; see /manifest.json`, { field: 'path.planId' })
        if (!agent) {
          throw new AppError('bearer_required', 'Name the buyer: send Svc-Agent-Authorization: Bearer <accessToken> (register at POST /auth/register)', {
            extensions: { recipe: registrationRecipe(deps.gatewayUrl) },
          })
        }
        amount = plan.priceMicros
      } else {
        amount = 0n
      }

      // Free included units: only for agents a human has claimed (SPEC "Free included units").
      let freeUnits = 0
      const accountKey = agent?.claimedEmail ? agent.id : undefined
      if (accountKey && meter && meter.includedUnits > 0 && pricing.kind === 'per-unit' && !quote) {
        const left = await agents.includedUnitsLeft(accountKey, meter.name, meter.includedUnits)
        freeUnits = Math.min(left, units)
      }
      const chargeable = amount - BigInt(freeUnits) * (meter?.unitPriceMicros ?? 0n)
      const priceQuote = quoteOf(entry, request, chargeable)

      const claim = chargeable > 0n ? await claimIdentifier(deps.identifiers, request, entry, deps.payTo) : undefined
      if (claim?.kind === 'replay') return replayAnswer(reply, claim.response)
      const held = claim?.kind === 'claimed' ? claim : undefined
      let result: unknown
      try {
        result = await paidCall(request, reply, { entry, agent, amount, chargeable, priceQuote, freeUnits, accountKey, units, identifier: held }, handler)
      } catch (error) {
        await held?.release()
        throw error
      }
      if (held) {
        // Only a delivered, paid answer is kept; anything else frees the id for a retry.
        const paid = request.payment?.replayKey && !request.payment.waived && reply.statusCode < 400
        await (paid ? held.complete(capturedAnswer(reply, result), request.payment?.replayKey) : held.release())
      }
      return result
    }
  }

  interface PaidCall {
    entry: CatalogOperation
    agent: Agent | null
    amount: bigint
    chargeable: bigint
    priceQuote: PriceQuote
    freeUnits: number
    accountKey: string | undefined
    units: number
    /** The request's payment identifier claim, bound to the payment once it is reserved. */
    identifier: HeldIdentifier | undefined
  }

  /** Authorizes the payment, takes the free units, runs the handler and settles (runPaid). */
  async function paidCall(request: FastifyRequest, reply: FastifyReply, call: PaidCall, handler: OperationHandler): Promise<unknown> {
    const { entry, agent, amount, chargeable, priceQuote, freeUnits, accountKey, units, identifier } = call
    const { spec, service } = entry
    const meter = service.meter
    const undo: (() => Promise<void>)[] = []
    let authorized: AuthorizedPayment | undefined
    if (chargeable > 0n) authorized = await guard.authorize(request.headers, priceQuote, spec.operationId, { agentId: agent?.id })
    if (authorized && identifier && !(await identifier.link(authorized.payment.replayKey))) {
      // A retry took this request's claim over (its lease lapsed while it waited): it answers.
      await authorized.release('the payment identifier was taken over by a retry')
      throw inProgress(false)
    }
    for (let taken = 0; taken < freeUnits; taken += 1) {
      const claim = await agents.takeIncludedUnit({
        accountKey: accountKey as string,
        meter: meter?.name as string,
        includedUnits: meter?.includedUnits ?? 0,
        operationId: spec.operationId,
      })
      if (!claim) {
        // Another call took the free unit first: the price went up, so ask again.
        await authorized?.release()
        for (const step of undo) await step()
        throw guard.paymentRequired(
          quoteOf(entry, request, amount - BigInt(taken) * (meter?.unitPriceMicros ?? 0n)),
          'included_unit_taken',
          'The free unit was used by a concurrent call; pay the full price.',
        )
      }
      undo.push(claim.undo)
    }
    request.payment = {
      protocol: authorized ? authorized.payment.protocol : freeUnits > 0 ? 'included' : 'none',
      payer: authorized?.payment.payer ?? null,
      amountMicros: chargeable,
      agent,
      includedUnits: freeUnits,
      units,
      replayKey: authorized?.payment.replayKey ?? null,
      bind: bindOf(authorized),
      ...(authorized?.forgo ? { forgo: authorized.forgo } : {}),
    }
    return runPaid(request, reply, authorized, undo, handler, identifier)
  }

  function plan(entry: CatalogOperation, handler: OperationHandler): OperationHandler {
    const { spec, service } = entry
    const cost = service.meter?.unitPriceMicros ?? 0n
    const covering = service.plans
    return async function planOperation(request, reply) {
      if (accessTokenCredential(credentialsOf(request.headers)) === undefined) {
        throw new AppError('bearer_required', `${spec.method} ${spec.path} is sold on plans: send Authorization: Bearer <accessToken>`, {
          extensions: { recipe: registrationRecipe(deps.gatewayUrl), plans: covering.map((p) => planOffer(p, deps.gatewayUrl)) },
        })
      }
      const agent = await agentOf(request, true)
      if (!agent) throw new Error('unreachable: agentOf(required) returned null')
      const debit = await agents.debitPlan({ agentId: agent.id, service: service.slug, plans: covering, costMicros: cost, operationId: spec.operationId, requestId: request.id })
      if (!debit) {
        throw new AppError('plan_required', `No active plan of yours covers ${service.slug}; buy one of the listed plans`, {
          extensions: { plans: covering.map((p) => planOffer(p, deps.gatewayUrl)) },
        })
      }
      request.payment = { protocol: 'plan', payer: null, amountMicros: cost, agent, includedUnits: 0, replayKey: null }
      reply.header('x-plan-id', debit.standing.planId)
      if (debit.standing.remainingMicros !== undefined) reply.header('x-plan-credit-remaining-micros', debit.standing.remainingMicros.toString())
      if (debit.standing.remainingCalls !== undefined) reply.header('x-plan-calls-remaining', String(debit.standing.remainingCalls))
      return runPaid(request, reply, undefined, [debit.undo], handler)
    }
  }

  /** Free operations that still need a single-use $0 wallet proof (x402 or MPP). */
  function walletProof(entry: CatalogOperation, handler: OperationHandler): OperationHandler {
    return async function walletProvenOperation(request, reply) {
      const quote = quoteOf(entry, request, 0n)
      const authorized = await guard.authorize(request.headers, quote, entry.spec.operationId)
      if (!authorized.payment.zeroValue) {
        await authorized.release()
        throw guard.paymentRequired(quote, 'wrong_amount', 'This operation takes a $0 proof; nothing is charged')
      }
      request.payment = {
        protocol: authorized.payment.protocol,
        payer: authorized.payment.payer,
        amountMicros: 0n,
        agent: null,
        includedUnits: 0,
        replayKey: authorized.payment.replayKey,
      }
      return runPaid(request, reply, authorized, [], handler)
    }
  }

  return {
    /** Wraps `handler` with the access rule of its operation. */
    wrap(entry: CatalogOperation, handler: OperationHandler, options: { quote?: QuoteFunction } = {}): OperationHandler {
      switch (entry.spec.proof) {
        case 'payment':
          return payg(entry, handler, options.quote)
        case 'plan-bearer':
          return plan(entry, handler)
        case 'wallet':
          // Scheduler and memory owners prove their wallet with SIWX in their own modules.
          return entry.spec.server === 'gateway' ? walletProof(entry, handler) : handler
        case 'agent-bearer':
          return async function agentOperation(request, reply) {
            const agent = await agentOf(request, true)
            if (!agent) {
              throw new AppError('bearer_required', 'Send the access token from POST /auth/register as Authorization: Bearer', {
                extensions: { recipe: registrationRecipe(deps.gatewayUrl) },
              })
            }
            request.payment = { protocol: 'none', payer: null, amountMicros: 0n, agent, includedUnits: 0, replayKey: null }
            return handler(request, reply)
          }
        default:
          return handler
      }
    },
  }
}

export type AccessControl = ReturnType<typeof createAccessControl>
