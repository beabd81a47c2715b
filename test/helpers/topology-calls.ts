// The topology drill's buyers and their calls, as the load (topology-load.ts, topology-buyers.ts)
// and the invariants (topology-invariants.ts, topology-money.ts) share them: who a buyer is, what it
// was answered (CallRecord, with its time, so each 5xx and each cut-off call can be put in the fault
// window it fell in), and the prices the conservation checks count with.
import { x402Client } from '@x402/core/client'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import { appendPaymentIdentifierToExtensions } from '@x402/extensions/payment-identifier'
import { wrapFetchWithPayment } from '@x402/fetch'
import type { PrivateKeyAccount } from 'viem/accounts'
import type { Topology } from './topology.ts'

/**
 * What each buyer is minted: 100,000 USDC, enough for a long run (a task buyer spends about 30 USDC
 * a minute on plans), so that no valid payment is refused for lack of funds.
 */
export const MINTED = 100_000_000_000n
export const TASK_AMOUNT = 200_000
export const PLAN = 'scheduler-credit-5'
export const PLAN_PRICE = 5_000_000n
export const DEPOSIT = 1_000_000n
/** docs/media.md: 0.08 USD per song candidate. */
export const SONG_PRICE = 80_000n

export type Json = Record<string, any>

/**
 * tasks: x402 v2 (@x402/fetch) tasks and plans; memory: deposits, writes, recalls; v1: the legacy
 * x402-fetch 1.x client, tasks and plans; mcp: the official MCP client on the gateway's /mcp, tasks
 * and plans; songs: song orders on the gateway, some with a candidate that fails.
 */
export type BuyerKind = 'tasks' | 'memory' | 'v1' | 'mcp' | 'songs'

/** A song order as its buyer saw it, checked against media_sales after quiescence. */
export interface SongOrder {
  seed: number
  candidates: number
  /** Candidates the song upstream was scripted to fail (0 with the offline composer). */
  failing: number
  /** HTTP status of the paid answer, 0 when cut off. */
  status: number
  /** When the order was sent and answered (ms since the epoch): a fault inside may fail a candidate. */
  began?: number
  answeredAt?: number
  /** The settlement's transaction: PAYMENT-RESPONSE, or x-payment-reference of an answer whose settlement was still pending. */
  tx?: string
  /** x-payment-status of a 2xx whose settlement was not known yet ('pending'). */
  paymentStatus?: string
  /** The order's result URL (media_sales.result_url; content-addressed, so orders of the same song share it). */
  url?: string
  /** The replay key of the payment the order was answered for (x402:<payer>:<authorization nonce>): names its sale. */
  replayKey?: string
  delivered?: number
  refundMicros?: bigint
  priceMicros?: bigint
}

export interface Buyer {
  account: PrivateKeyAccount
  kind: BuyerKind
  label: string
  token: string
  /** Plan purchases answered 2xx (or 409 payment_identifier_conflict on a retry: bought, not replayable). */
  purchases: number
  /** Payment-identifiers of purchases cut off (or still in progress) during the load: retried after it. */
  unanswered: string[]
  /** Purchases without a payment-identifier (x402 v1) cut off or answered 5xx: they may have bought a plan. */
  uncertain?: number
  /** Tasks this buyer created (answered), to be deleted at the end. */
  tasks: string[]
  /** Song orders (song buyers). */
  orders?: SongOrder[]
}

/** One client call and what came of it. */
export interface CallRecord {
  op: string
  /** Date.now() when the answer (or the cut) arrived, and when the call began. */
  at: number
  began: number
  /** HTTP status, or 0 for a call cut off (the connection reset, no answer). */
  status: number
  /** 5xx only: a problem+json body, and a Retry-After header. */
  problem?: boolean
  retryAfter?: boolean
  code?: string
  buyer: string
}

/** No call of the load waits longer for its answer (a hung replica must not hang the drill). */
export const CALL_TIMEOUT_MS = 60_000
export const timeout = (ms = CALL_TIMEOUT_MS) => AbortSignal.timeout(ms)
export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** Whether `error` is a call that got no answer in time (rather than one cut off). */
export function timedOut(error: unknown): boolean {
  const cause = (error as { cause?: Error }).cause
  return (error as Error).name === 'TimeoutError' || cause?.name === 'TimeoutError'
}

/** How a call that got no answer failed: undefined code = cut off (fetch's TypeError). */
export function failureCode(error: unknown): { code?: string } {
  if (timedOut(error)) return { code: 'timeout' }
  if (error instanceof TypeError) return {}
  return { code: `client error: ${String((error as Error).message ?? error).slice(0, 120)}` }
}

/** @x402/fetch (x402 v2 exact) for `account`; with `id`, its payments carry that payment-identifier; `inner` is the fetch it sends with. */
export function payer(account: PrivateKeyAccount, id?: string, inner: typeof fetch = fetch): typeof fetch {
  const client = new x402Client().register('eip155:8453', new ExactEvmScheme(account)).setSpendControls(false)
  if (id !== undefined) {
    client.onBeforePaymentCreation(async ({ paymentRequired }) => {
      if (paymentRequired.extensions) appendPaymentIdentifierToExtensions(paymentRequired.extensions, id)
    })
  }
  return wrapFetchWithPayment(inner, client)
}

export function purchase(topology: Topology, buyer: Buyer, id: string): Promise<Response> {
  return payer(buyer.account, id)(`${topology.urls.gateway}/plans/${PLAN}/purchase`, {
    method: 'POST',
    headers: { 'svc-agent-authorization': `Bearer ${buyer.token}` },
    signal: timeout(),
  })
}

/** Records `call`'s outcome; the response's body is read (problem+json) and returned. */
export async function record(calls: CallRecord[], op: string, buyer: Buyer, call: () => Promise<Response>): Promise<{ res?: Response; body: Json }> {
  const began = Date.now()
  let res: Response
  try {
    res = await call()
  } catch (error) {
    // Cut off (the connection reset under the call), no answer within CALL_TIMEOUT_MS, or a client
    // that refused to go on (it could not read the 402 it was given): each is named.
    calls.push({ op, at: Date.now(), began, status: 0, buyer: buyer.label, ...failureCode(error) })
    return { body: {} }
  }
  const text = await res.text().catch(() => '')
  let body: Json = {}
  try {
    body = JSON.parse(text) as Json
  } catch {
    // not JSON
  }
  const entry: CallRecord = { op, at: Date.now(), began, status: res.status, buyer: buyer.label }
  if (typeof body.code === 'string') entry.code = body.code
  if (res.status >= 500) {
    entry.problem = (res.headers.get('content-type') ?? '').startsWith('application/problem+json') && typeof body.status === 'number'
    entry.retryAfter = res.headers.get('retry-after') !== null
  }
  calls.push(entry)
  return { res, body }
}
