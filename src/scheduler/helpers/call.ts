// call(capability, path, body?, method?, max_price_micros?): a first-party sibling by name (flat
// fee from the rate card) or a paid marketplace capability by id (price read from its 402).
//
// Gates, in order:
// 1. tool_list (toolAccess): deny-all (unset, max_sibling_calls 0) or an allowlist without the
//    target → SIBLING_NOT_ALLOWED;
// 2. target kind: a sibling name, else a well-formed capability id with a valid max_price_micros,
//    else PRICE_UNKNOWN; a sibling whose fee is above a given max_price_micros → PRICE_CAP_EXCEEDED;
// 3. one conditional UPDATE takes a call slot and reserves the fee (sibling) or the whole
//    max_price_micros (capability): max_sibling_calls → CALL_CAP_EXCEEDED; the run's spend limit →
//    PRICE_CAP_EXCEEDED. The spend limit is max_sibling_spend_micros, and never more than the
//    ceiling's sibling term (max_sibling_calls x sibling_call_fee_micros): that is what the run's
//    reservation holds for siblings, so a run can never spend money its escrow did not reserve.
// Accounting: a call counts once it passes the gates, whatever happens next, except when the
// service itself cannot serve it (503, e.g. no Chromium): then slot and money are given back. The
// fee is kept only for a sibling status below 400; a capability is charged exactly the price it
// asked (the unused part of max_price_micros is released), only when it answered below 400 after
// payment or confirmed settlement anyway; nothing is charged when the price is above the cap.
import { privateKeyToAccount } from 'viem/accounts'
import type { Hex } from 'viem'
import type { BlobStore } from '../../platform/blobs.ts'
import type { Clock } from '../../platform/clock.ts'
import type { Db } from '../../platform/db/index.ts'
import { AppError, isAppError } from '../../platform/errors.ts'
import type { Logger } from '../../platform/logger.ts'
import { parseMicros, type Micros } from '../../platform/money.ts'
import type { TempoClientFactory } from '../../payments/mpp/tempo-rpc.ts'
import { estimateCeiling, type SchedulerRates } from '../domain/rates.ts'
import { isCapabilityId, toolAccess } from '../domain/validate.ts'
import { EgressRefused, guardedFetch, type EgressPolicy } from '../../platform/egress.ts'
import type { Offer, PaidResponse, PayRequest } from './marketplace.ts'
import { releaseSiblingCall, reserveSiblingCall, type Refusal, type SiblingMeters } from './meters.ts'
import type { HelperRun } from './run.ts'
import { SIBLING_ROUTES, dispatch, type ScreenshotConfig, type SiblingContext, type SiblingResponse } from './siblings/index.ts'
import type { SiblingName } from '../contract/index.ts'

export interface MarketplaceConfig {
  /** Operator's capability directory: id → base URL (default https://publisher/capability). */
  resolve?: (capabilityId: string) => Promise<{ url: string }>
  /** The service's payer wallet (pays x402 and MPP challenges); unset = paid calls fail. */
  payerPrivateKey?: Hex
  /** Tempo RPC for MPP charges; unset = MPP-only capabilities cannot be paid. */
  tempo?: TempoClientFactory
  /** Replaces the guarded fetch (tests only: it skips the address rule). */
  fetch?: typeof fetch
  /** Socket idle timeout towards capabilities (default 30 s). */
  timeoutMs?: number
}

export interface CallDeps {
  db: Db
  clock: Clock
  rates: SchedulerRates
  logger: Logger
  blobs: BlobStore
  publicSchedulerUrl: string
  marketplace: MarketplaceConfig
  egress: EgressPolicy
  egressAllow: readonly string[]
  screenshot: ScreenshotConfig
  inboxDomain: string
}

export interface CallInput {
  capability: string
  path: string
  body?: unknown
  method?: string
  max_price_micros?: unknown
}

export interface CallResult {
  status: number
  body: unknown
}

/** What a run may spend on siblings and capabilities (see header). */
export function siblingSpendLimit(spec: HelperRun['spec'], rates: SchedulerRates): Micros {
  const reserved = estimateCeiling(
    { max_runtime_sec: spec.max_runtime_sec, max_sibling_calls: spec.max_sibling_calls, dependencies: spec.dependencies, llm: spec.llm },
    rates,
  ).siblings_micros
  const own = spec.max_sibling_spend_micros
  return own !== null && own < reserved ? own : reserved
}

function refusalError(refusal: Refusal, run: HelperRun, meters: SiblingMeters, amount: Micros, limit: Micros, field: string): AppError {
  if (refusal === 'run_ended') return new AppError('TOKEN_EXPIRED', `Run ${run.runId} has ended`, { field: 'header.authorization' })
  if (refusal === 'call_cap') {
    return new AppError('CALL_CAP_EXCEEDED', `This run already made its ${run.spec.max_sibling_calls} call(...) invocations (max_sibling_calls)`, {
      extensions: { max_sibling_calls: run.spec.max_sibling_calls, sibling_calls: meters.sibling_calls },
    })
  }
  const bySpec = run.spec.max_sibling_spend_micros !== null && run.spec.max_sibling_spend_micros === limit
  return new AppError(
    'PRICE_CAP_EXCEEDED',
    `This call needs ${amount} micros but the run has ${limit - meters.sibling_spend_micros < 0n ? 0n : limit - meters.sibling_spend_micros} of its ${limit} micros of sibling spend left (${bySpec ? 'max_sibling_spend_micros' : 'max_sibling_calls x sibling_call_fee_micros, the reserved sibling budget'}); nothing was spent`,
    { field, extensions: { spend_limit_micros: limit.toString(), sibling_spend_micros: meters.sibling_spend_micros.toString(), needed_micros: amount.toString() } },
  )
}

/** The call(...) helper for an authenticated run. */
export async function callHelper(deps: CallDeps, run: HelperRun, input: CallInput): Promise<CallResult> {
  const target = input.capability
  const access = toolAccess(run.spec)
  if (access === 'deny_all') {
    throw new AppError('SIBLING_NOT_ALLOWED', 'This task may not call anything: it has no tool_list and max_sibling_calls 0', { field: 'body.capability' })
  }
  if (access === 'allowlist' && !run.spec.tool_list!.includes(target)) {
    throw new AppError('SIBLING_NOT_ALLOWED', `${JSON.stringify(target)} is not in the task's tool_list (${run.spec.tool_list!.join(', ') || 'empty'})`, {
      field: 'body.capability',
    })
  }
  // Dot segments would walk out of a capability's path (acme.com/pdf + /../admin): refused outright.
  const pathOnly = input.path.split(/[?#]/, 1)[0] ?? ''
  if (/(^|\/)(\.|%2e){1,2}(\/|$)/i.test(pathOnly)) {
    throw new AppError('VALIDATION_ERROR', 'body.path may not contain . or .. segments', { field: 'body.path' })
  }
  const method = (input.method ?? (input.body === undefined ? 'GET' : 'POST')).toUpperCase()
  if ((method === 'GET' || method === 'DELETE') && input.body !== undefined) {
    throw new AppError('VALIDATION_ERROR', `A ${method} call carries no body; drop body or use POST`, { field: 'body.body' })
  }
  const isSibling = Object.hasOwn(deps.rates.siblings, target)
  const maxPrice = input.max_price_micros === undefined ? undefined : parseMicros(input.max_price_micros)
  if (isSibling) {
    if (input.max_price_micros !== undefined && maxPrice === undefined) {
      throw new AppError('PRICE_UNKNOWN', 'max_price_micros must be a non-negative integer (micros)', { field: 'body.max_price_micros' })
    }
    return callSibling(deps, run, target as SiblingName, method, input, maxPrice)
  }
  if (!isCapabilityId(target)) {
    throw new AppError(
      'PRICE_UNKNOWN',
      `${JSON.stringify(target)} is neither a first-party sibling (${Object.keys(deps.rates.siblings).join(', ')}) nor a marketplace capability id (publisher/capability)`,
      {
        field: 'body.capability',
      },
    )
  }
  if (maxPrice === undefined || maxPrice === 0n) {
    throw new AppError('PRICE_UNKNOWN', 'A marketplace capability needs max_price_micros: the most this call may pay, a positive integer of micros', {
      field: 'body.max_price_micros',
    })
  }
  return callCapability(deps, run, target, method, input, maxPrice)
}

function siblingContext(deps: CallDeps, run: HelperRun): SiblingContext {
  return {
    db: deps.db,
    blobs: deps.blobs,
    clock: deps.clock,
    logger: deps.logger,
    rates: deps.rates,
    publicSchedulerUrl: deps.publicSchedulerUrl,
    taskId: run.taskId,
    runId: run.runId,
    egress: deps.egress,
    egressAllow: deps.egressAllow,
    screenshot: deps.screenshot,
    inboxDomain: deps.inboxDomain,
  }
}

async function callSibling(deps: CallDeps, run: HelperRun, name: SiblingName, method: string, input: CallInput, maxPrice: Micros | undefined): Promise<CallResult> {
  const fee = deps.rates.siblings[name].fee_micros
  if (maxPrice !== undefined && fee > maxPrice) {
    throw new AppError('PRICE_CAP_EXCEEDED', `${name} costs ${fee} micros per call, above max_price_micros ${maxPrice}; nothing was spent`, {
      field: 'body.max_price_micros',
      extensions: { price_micros: fee.toString() },
    })
  }
  const limit = siblingSpendLimit(run.spec, deps.rates)
  const reserved = await reserveSiblingCall(deps.db, run.runId, fee, run.spec.max_sibling_calls, limit)
  if (!reserved.ok) throw refusalError(reserved.refusal, run, reserved.meters, fee, limit, 'body.capability')
  const url = new URL(input.path, 'http://sibling.invalid')
  let response: SiblingResponse
  try {
    response = await dispatch(name, SIBLING_ROUTES[name], siblingContext(deps, run), {
      method,
      pathname: url.pathname,
      query: url.searchParams,
      body: input.body,
    })
  } catch (err) {
    // Ours to blame (503): give the slot back too. Anything else: counted, not charged.
    const ours = isAppError(err) && err.status === 503
    await releaseSiblingCall(deps.db, run.runId, fee, ours)
    throw err
  }
  if (response.status >= 400) await releaseSiblingCall(deps.db, run.runId, fee, false)
  return response
}

/** The target's body as the task sees it: JSON parsed, text as a string, other bytes as {content_type, data_base64}. */
async function bodyOf(response: Response): Promise<unknown> {
  const type = response.headers.get('content-type') ?? ''
  const bytes = Buffer.from(await response.arrayBuffer())
  if (bytes.length === 0) return null
  if (/[/+]json\b/i.test(type) || type === '') {
    try {
      return JSON.parse(bytes.toString('utf8'))
    } catch {
      if (type !== '') return bytes.toString('utf8')
    }
  }
  if (type === '' || /^text\//i.test(type) || /\b(xml|javascript|x-www-form-urlencoded)\b/i.test(type)) return bytes.toString('utf8')
  return { content_type: type, data_base64: bytes.toString('base64') }
}

function paymentFailed(detail: string, extensions: Record<string, unknown> = {}): AppError {
  return new AppError('SIBLING_PAYMENT_FAILED', detail, { extensions })
}

async function callCapability(deps: CallDeps, run: HelperRun, capability: string, method: string, input: CallInput, maxPrice: Micros): Promise<CallResult> {
  const limit = siblingSpendLimit(run.spec, deps.rates)
  const reserved = await reserveSiblingCall(deps.db, run.runId, maxPrice, run.spec.max_sibling_calls, limit)
  if (!reserved.ok) throw refusalError(reserved.refusal, run, reserved.meters, maxPrice, limit, 'body.max_price_micros')
  let charged = 0n
  try {
    const result = await payAndCall(deps, run, capability, method, input, maxPrice)
    charged = result.charged
    return { status: result.status, body: result.body }
  } finally {
    // Whatever happened, release the part of the reservation that was not spent.
    await releaseSiblingCall(deps.db, run.runId, maxPrice - charged, false)
  }
}

/** The marketplace's client side (x402's and MPP's paying clients), loaded by the first marketplace call. */
let marketplaceClient: Promise<typeof import('./marketplace.ts')> | undefined

async function payAndCall(deps: CallDeps, run: HelperRun, capability: string, method: string, input: CallInput, maxPrice: Micros): Promise<CallResult & { charged: Micros }> {
  const { defaultCapabilityUrl, joinTargetUrl, payMpp, payX402, readOffers } = await (marketplaceClient ??= import('./marketplace.ts'))
  let base: string
  try {
    base = deps.marketplace.resolve ? (await deps.marketplace.resolve(capability)).url : defaultCapabilityUrl(capability)
  } catch (err) {
    throw paymentFailed(`Capability ${capability} could not be resolved: ${(err as Error).message}`)
  }
  const url = joinTargetUrl(base, input.path)
  const doFetch = deps.marketplace.fetch ?? guardedFetch(deps.egress, deps.marketplace.timeoutMs === undefined ? {} : { timeoutMs: deps.marketplace.timeoutMs })
  const request: PayRequest = {
    url,
    fetch: doFetch,
    init: {
      method,
      headers: { accept: 'application/json', ...(input.body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(input.body === undefined ? {} : { body: JSON.stringify(input.body) }),
    },
  }
  const reach = async <T>(what: string, fn: () => Promise<T>): Promise<T> => {
    try {
      return await fn()
    } catch (err) {
      if (isAppError(err)) throw err
      const reason = err instanceof EgressRefused ? err.message : `${(err as Error).message}`
      throw paymentFailed(`${what} ${url} failed: ${reason}`, { url })
    }
  }
  const probe = await reach('Reaching', () => doFetch(url, request.init))
  if (probe.status !== 402) return { status: probe.status, body: await bodyOf(probe), charged: 0n }

  const probeBody = await bodyOf(probe)
  const { offers, seen } = readOffers(probe.headers, probeBody, deps.clock.nowMs())
  if (offers.length === 0) {
    throw new AppError(
      'CAPABILITY_PROTOCOL_UNSUPPORTED',
      seen.length === 0
        ? `${capability} answered 402 without an x402 or MPP challenge`
        : `${capability} offers ${seen.join(' and ')} but no payable option (x402 exact in a USD stablecoin, or MPP tempo/charge in USDC or pathUSD)`,
      { extensions: { url } },
    )
  }
  const payable = offers.filter((o) => o.protocol === 'x402' || deps.marketplace.tempo !== undefined)
  const cheapest = (payable[0] ?? offers[0])!
  if (cheapest.priceMicros > maxPrice) {
    throw new AppError('PRICE_CAP_EXCEEDED', `${capability} asks ${cheapest.priceMicros} micros, above max_price_micros ${maxPrice}; nothing was spent`, {
      field: 'body.max_price_micros',
      extensions: { price_micros: cheapest.priceMicros.toString(), protocol: cheapest.protocol },
    })
  }
  if (payable.length === 0) throw paymentFailed(`${capability} can only be paid with MPP and this service has no Tempo RPC configured`)
  const key = deps.marketplace.payerPrivateKey
  if (key === undefined) throw paymentFailed('This service has no payer wallet configured for marketplace capabilities')
  const offer: Offer = cheapest
  const account = privateKeyToAccount(key)
  const paid: PaidResponse = await reach('Paying', () => (offer.protocol === 'x402' ? payX402(offer, account, request) : payMpp(offer, account, deps.marketplace.tempo!, request)))
  const status = paid.response.status
  const body = await bodyOf(paid.response)
  const charged = status < 400 ? (paid.settled === false ? 0n : offer.priceMicros) : paid.settled === true ? offer.priceMicros : 0n
  await deps.db.query(
    `insert into scheduler_capability_payments (task_id, run_id, capability, url, protocol, price_micros, charged, status_code, reference, created_at)
     values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
    [run.taskId, run.runId, capability, url, offer.protocol, offer.priceMicros, charged > 0n, status, paid.reference, deps.clock.now()],
  )
  deps.logger.info({ runId: run.runId, capability, protocol: offer.protocol, priceMicros: offer.priceMicros.toString(), status, charged: charged.toString() }, 'marketplace call')
  if (status === 402) {
    const reason = typeof body === 'object' && body !== null && 'error' in body ? String((body as { error: unknown }).error) : `status ${status}`
    throw paymentFailed(`${capability} refused the ${offer.protocol} payment: ${reason}`, { url, protocol: offer.protocol })
  }
  return { status, body, charged }
}
