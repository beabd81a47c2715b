// Paid marketplace capabilities reached by call(capabilityId, path, ...).
//
// Resolution: `publisher/capability` → `https://publisher/capability`, joined with the call's path
// (`acme.com/pdf-render` + `/render?x=1` → `https://acme.com/pdf-render/render?x=1`), unless the
// operator's resolver (deps.marketplace.resolve) names another base URL for the id.
//
// A 402 from the target is read for every challenge we can pay: x402 `exact` (v2 PAYMENT-REQUIRED
// header, else the v1 JSON body) in a USD stablecoin @x402/evm knows (USDC on Base, ...), and MPP
// `tempo`/`charge` (WWW-Authenticate: Payment) in Tempo USDC or pathUSD. Prices are converted to
// micros; the cheapest offer wins (x402 on a tie). Paying is done by the official clients with the
// service's payer wallet: @x402/core's x402Client + @x402/evm's exact scheme (EIP-3009 signature)
// and mppx's client `tempo.charge` (a Tempo transaction the server broadcasts).
import { x402Client, x402HTTPClient } from '@x402/fetch'
import type { PaymentRequired, PaymentRequirements } from '@x402/fetch'
import { findDefaultAsset } from '@x402/evm'
import { registerExactEvmScheme } from '@x402/evm/exact/client'
import type { Challenge } from 'mppx'
import type { PrivateKeyAccount } from 'viem/accounts'
import type { Micros } from '../../platform/money.ts'
import type { TempoClientFactory } from '../../payments/mpp/tempo-rpc.ts'
import { mppxClient, mppxRoot } from '../../payments/mpp/lazy.ts'

/** TIP-20 USD tokens (6 decimals) an MPP charge may ask for: Tempo USDC and pathUSD. */
export const MPP_USD_CURRENCIES: ReadonlySet<string> = new Set(['0x20c000000000000000000000b9537d11c60e8b50', '0x20c0000000000000000000000000000000000000'])
const TIP20_DECIMALS = 6

export interface X402Offer {
  readonly protocol: 'x402'
  readonly version: number
  readonly priceMicros: Micros
  /** The whole challenge, and the one accepts[] entry priced here. */
  readonly paymentRequired: PaymentRequired
  readonly requirement: PaymentRequirements
}

export interface MppOffer {
  readonly protocol: 'mpp'
  readonly priceMicros: Micros
  readonly challenge: Challenge.Challenge
}

export type Offer = X402Offer | MppOffer

export interface ReadOffers {
  /** Payable offers, cheapest first. */
  readonly offers: Offer[]
  /** Protocols the 402 spoke at all, payable or not (for the error message). */
  readonly seen: Array<'x402' | 'mpp'>
}

/** The capability's base URL by the default rule (see header). */
export function defaultCapabilityUrl(capabilityId: string): string {
  const slash = capabilityId.indexOf('/')
  return `https://${capabilityId.slice(0, slash)}/${capabilityId.slice(slash + 1)}`
}

/** base + path, with exactly one slash between them; the path keeps its query string. */
export function joinTargetUrl(base: string, path: string): string {
  return `${base.replace(/\/+$/, '')}/${path.replace(/^\/+/, '')}`
}

/** `amount` base units of a token with `decimals` → micros, rounded up (never under-count a price). */
export function toMicros(amount: bigint, decimals: number): Micros {
  if (decimals === 6) return amount
  if (decimals < 6) return amount * 10n ** BigInt(6 - decimals)
  const divisor = 10n ** BigInt(decimals - 6)
  return (amount + divisor - 1n) / divisor
}

const DIGITS = /^[0-9]{1,78}$/

function x402Offers(headers: Headers, body: unknown): { offers: X402Offer[]; seen: boolean } {
  let paymentRequired: PaymentRequired
  try {
    paymentRequired = new x402HTTPClient(new x402Client()).getPaymentRequiredResponse((name) => headers.get(name), body)
  } catch {
    return { offers: [], seen: false }
  }
  const offers: X402Offer[] = []
  for (const entry of Array.isArray(paymentRequired.accepts) ? paymentRequired.accepts : []) {
    const req = entry as PaymentRequirements & { maxAmountRequired?: unknown }
    if (req.scheme !== 'exact' || typeof req.network !== 'string' || typeof req.asset !== 'string') continue
    const amount = paymentRequired.x402Version === 1 ? req.maxAmountRequired : req.amount
    if (typeof amount !== 'string' || !DIGITS.test(amount)) continue
    let asset: { decimals: number } | undefined
    try {
      asset = findDefaultAsset(req.asset, req.network) as { decimals: number } | undefined
    } catch {
      asset = undefined
    }
    if (asset === undefined || !Number.isInteger(asset.decimals)) continue
    offers.push({ protocol: 'x402', version: paymentRequired.x402Version, priceMicros: toMicros(BigInt(amount), asset.decimals), paymentRequired, requirement: req })
  }
  return { offers, seen: true }
}

function mppOffers(headers: Headers, nowMs: number): { offers: MppOffer[]; seen: boolean } {
  let challenges: Challenge.Challenge[]
  try {
    challenges = mppxRoot().Challenge.fromHeadersList(headers)
  } catch {
    return { offers: [], seen: false }
  }
  const offers: MppOffer[] = []
  for (const challenge of challenges) {
    if (challenge.method !== 'tempo' || challenge.intent !== 'charge') continue
    const request = challenge.request as { amount?: unknown; currency?: unknown }
    if (typeof request.amount !== 'string' || !DIGITS.test(request.amount)) continue
    if (typeof request.currency !== 'string' || !MPP_USD_CURRENCIES.has(request.currency.toLowerCase())) continue
    if (challenge.expires !== undefined && Date.parse(challenge.expires) <= nowMs) continue
    offers.push({ protocol: 'mpp', priceMicros: toMicros(BigInt(request.amount), TIP20_DECIMALS), challenge })
  }
  return { offers, seen: challenges.length > 0 }
}

/** Every payable offer of a 402 (headers and parsed JSON body), cheapest first. */
export function readOffers(headers: Headers, body: unknown, nowMs: number): ReadOffers {
  const x402 = x402Offers(headers, body)
  const mpp = mppOffers(headers, nowMs)
  const offers: Offer[] = [...x402.offers, ...mpp.offers]
  // Stable sort: x402 (listed first) wins a tie.
  offers.sort((a, b) => (a.priceMicros < b.priceMicros ? -1 : a.priceMicros > b.priceMicros ? 1 : 0))
  const seen: Array<'x402' | 'mpp'> = []
  if (x402.seen) seen.push('x402')
  if (mpp.seen) seen.push('mpp')
  return { offers, seen }
}

export interface PaidResponse {
  readonly response: Response
  /**
   * The target's word on settlement: true (PAYMENT-RESPONSE success / a Payment-Receipt), false
   * (a settle response saying it failed), null (it said nothing).
   */
  readonly settled: boolean | null
  /** Transaction hash or receipt reference, when the target gave one. */
  readonly reference: string | null
}

export interface PayRequest {
  readonly url: string
  readonly init: { method: string; headers: Record<string, string>; body?: string }
  readonly fetch: typeof fetch
}

/** Signs the chosen x402 requirement with the payer and sends the paid request. */
export async function payX402(offer: X402Offer, account: PrivateKeyAccount, request: PayRequest): Promise<PaidResponse> {
  const client = new x402Client()
  registerExactEvmScheme(client, { signer: account })
  // Our own caps (max_price_micros, the run's spend limit) already bound this payment.
  client.setSpendControls(false)
  const http = new x402HTTPClient(client)
  const payload = await client.createPaymentPayload({ ...offer.paymentRequired, accepts: [offer.requirement] })
  const response = await request.fetch(request.url, {
    ...request.init,
    headers: { ...request.init.headers, ...http.encodePaymentSignatureHeader(payload) },
  })
  let settled: boolean | null = null
  let reference: string | null = null
  try {
    const settle = http.getPaymentSettleResponse((name) => response.headers.get(name))
    settled = settle.success === true
    reference = typeof settle.transaction === 'string' && settle.transaction !== '' ? settle.transaction : null
  } catch {
    // No settle header: the target did not say.
  }
  return { response, settled, reference }
}

/** Creates an mppx credential for the chosen challenge and sends the paid request. */
export async function payMpp(offer: MppOffer, account: PrivateKeyAccount, getClient: TempoClientFactory, request: PayRequest): Promise<PaidResponse> {
  const { Challenge, Receipt } = mppxRoot()
  const { Mppx, tempo } = mppxClient()
  const mppx = Mppx.create({ methods: [tempo.charge({ account, getClient })], polyfill: false, fetch: request.fetch })
  // Only the chosen challenge, so the client cannot pick another one.
  const challengeOnly = new Response(null, { status: 402, headers: { 'www-authenticate': Challenge.serialize(offer.challenge) } })
  const credential = await mppx.createCredential(challengeOnly)
  const response = await request.fetch(request.url, {
    ...request.init,
    headers: { ...request.init.headers, authorization: credential },
  })
  let settled: boolean | null = null
  let reference: string | null = null
  try {
    const receipt = Receipt.fromResponse(response)
    settled = receipt.status === 'success'
    reference = receipt.reference
  } catch {
    // No receipt header.
  }
  return { response, settled, reference }
}
