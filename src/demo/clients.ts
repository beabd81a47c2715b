// The demo's HTTP clients, as an agent outside the server has them: plain fetch with a deadline,
// an x402 client (@x402/fetch + @x402/core/client + @x402/evm exact scheme, signing with a viem
// account) that reports what the 402 asked and what settled, and owner calls answered with a
// SIGN-IN-WITH-X proof (@x402/extensions/sign-in-with-x). Every answer keeps a one-line
// description of the request, so a failing step can say what was asked and what came back.
import { x402Client } from '@x402/core/client'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import { createSIWxPayload, encodeSIWxHeader, type SIWxExtension } from '@x402/extensions/sign-in-with-x'
import { decodePaymentResponseHeader, wrapFetchWithPayment } from '@x402/fetch'
import type { PrivateKeyAccount } from 'viem/accounts'
import { clip } from './output.ts'

export type Json = Record<string, unknown>

/** A step that cannot go on: what went wrong, the request, the answer, and what to do. */
export class StepFailure extends Error {
  readonly asked: string | undefined
  readonly got: string | undefined
  readonly hint: string | undefined

  constructor(message: string, details: { asked?: string; got?: string; hint?: string } = {}) {
    super(message)
    this.name = 'StepFailure'
    this.asked = details.asked
    this.got = details.got
    this.hint = details.hint
  }
}

export interface Reply {
  /** "POST http://…/api/v1/tasks (json {…})": the request, for messages. */
  asked: string
  status: number
  headers: Headers
  text: string
  /** The body parsed as a JSON object, if it is one. */
  body: Json
  url: string
}

export interface RequestOptions {
  headers?: Record<string, string>
  /** An object is sent as JSON; a string as it is. */
  body?: unknown
  timeoutMs?: number
}

const DEFAULT_TIMEOUT_MS = 60_000

function describeRequest(method: string, url: string, options: RequestOptions): string {
  const names = Object.keys(options.headers ?? {}).filter((name) => name.toLowerCase() !== 'content-type')
  const headers = names.length > 0 ? ` [${names.join(', ')}]` : ''
  const body =
    options.body === undefined
      ? ''
      : ` ${clip(typeof options.body === 'string' ? options.body : JSON.stringify(options.body, (_key, value) => (typeof value === 'string' && value.length > 80 ? `${value.slice(0, 40)}…(${value.length} chars)` : value)), 300)}`
  return `${method} ${url}${headers}${body}`
}

/** "503 Service Unavailable: {…}": an answer, for messages. */
export function describeReply(reply: Pick<Reply, 'status' | 'text' | 'headers'>): string {
  const type = reply.headers.get('content-type') ?? ''
  const text = reply.text === '' ? '(empty body)' : clip(reply.text, 600)
  return `${reply.status}${type ? ` (${type.split(';')[0]})` : ''}: ${text}`
}

function requestInit(method: string, options: RequestOptions): RequestInit {
  const headers = new Headers(options.headers)
  let body: string | undefined
  if (typeof options.body === 'string') body = options.body
  else if (options.body !== undefined) {
    body = JSON.stringify(options.body)
    if (!headers.has('content-type')) headers.set('content-type', 'application/json')
  }
  return { method, headers, body, signal: AbortSignal.timeout(options.timeoutMs ?? DEFAULT_TIMEOUT_MS) }
}

/** Turns fetch's own errors (nothing listening, a deadline) into a failure that names the address. */
function transportFailure(error: unknown, asked: string, url: string, timeoutMs: number): StepFailure {
  const origin = new URL(url).origin
  const cause = (error as { cause?: { code?: string; message?: string } }).cause
  if ((error as Error).name === 'TimeoutError') return new StepFailure(`no answer from ${origin} within ${timeoutMs / 1000} s`, { asked })
  if (cause?.code === 'ECONNREFUSED' || cause?.code === 'ENOTFOUND' || cause?.code === 'EAI_AGAIN') {
    return new StepFailure(`nothing answers at ${origin} (${cause.code})`, { asked })
  }
  return new StepFailure(`the request failed: ${cause?.message ?? (error as Error).message}`, { asked })
}

async function toReply(response: Response, asked: string): Promise<Reply> {
  const text = await response.text()
  let body: Json = {}
  try {
    const parsed = JSON.parse(text) as unknown
    if (parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed)) body = parsed as Json
  } catch {
    // not JSON: the text is kept for messages
  }
  return { asked, status: response.status, headers: response.headers, text, body, url: response.url }
}

/** One plain HTTP request. */
export async function send(method: string, url: string, options: RequestOptions = {}): Promise<Reply> {
  const asked = describeRequest(method, url, options)
  try {
    return await toReply(await fetch(url, requestInit(method, options)), asked)
  } catch (error) {
    throw transportFailure(error, asked, url, options.timeoutMs ?? DEFAULT_TIMEOUT_MS)
  }
}

/** The reply if its status is one of `statuses`; otherwise a failure quoting request and answer. */
export function expectStatus(reply: Reply, statuses: number[], what: string, hint?: string): Reply {
  if (statuses.includes(reply.status)) return reply
  const code = typeof reply.body.code === 'string' ? ` (${reply.body.code})` : ''
  throw new StepFailure(`${what}: expected HTTP ${statuses.join(' or ')}, got ${reply.status}${code}`, { asked: reply.asked, got: describeReply(reply), hint })
}

export interface Paid extends Reply {
  /** What the 402 asked, in micros of the asset (USDC: 6 decimals). */
  priceMicros: bigint | undefined
  /** The settlement transaction from the PAYMENT-RESPONSE receipt, when the answer carries one. */
  tx: string | undefined
}

/**
 * A request paid with x402 if it answers 402: the client reads the PAYMENT-REQUIRED challenge,
 * signs an EIP-3009 authorization for exactly the amount asked, and retries. Spend controls stay
 * on (the default assets only, i.e. real USDC) with a per-payment cap.
 */
export async function paidSend(account: PrivateKeyAccount, method: string, url: string, options: RequestOptions & { maxUsd: number }): Promise<Paid> {
  const asked = `${describeRequest(method, url, options)} (paid with x402)`
  let priceMicros: bigint | undefined
  const client = new x402Client()
    .register('eip155:8453', new ExactEvmScheme(account))
    .setSpendControls({ maxAmountPerPayment: `$${options.maxUsd}` })
    .onBeforePaymentCreation(async ({ selectedRequirements }) => {
      priceMicros = BigInt(selectedRequirements.amount)
    })
  const paying = wrapFetchWithPayment(fetch, client)
  let response: Response
  try {
    response = await paying(url, requestInit(method, options))
  } catch (error) {
    if ((error as Error).name === 'TimeoutError' || (error as { cause?: unknown }).cause !== undefined) {
      throw transportFailure(error, asked, url, options.timeoutMs ?? DEFAULT_TIMEOUT_MS)
    }
    throw new StepFailure(`the x402 client would not pay: ${(error as Error).message}`, { asked })
  }
  const reply = await toReply(response, asked)
  const receipt = response.headers.get('payment-response')
  let tx: string | undefined
  if (receipt) {
    try {
      const decoded = decodePaymentResponseHeader(receipt)
      tx = decoded.transaction || undefined
    } catch {
      // an unreadable receipt: the body may still name the transaction
    }
  }
  return { ...reply, priceMicros, tx }
}

/**
 * An owner call: the unproven request answers 401 with a SIGN-IN-WITH-X challenge for exactly
 * this method and URL; sign it with the wallet and send the request again with the proof.
 */
export async function ownerSend(account: PrivateKeyAccount, method: string, url: string, options: RequestOptions = {}): Promise<Reply> {
  const first = await send(method, url, options)
  if (first.status !== 401) return first
  const challenge = (first.body.extensions as Record<string, SIWxExtension> | undefined)?.['sign-in-with-x']
  if (!challenge) return first
  const chain = challenge.supportedChains.find((candidate) => candidate.chainId.startsWith('eip155:'))
  if (!chain) throw new StepFailure('the wallet-proof challenge offers no EVM chain', { asked: first.asked, got: describeReply(first) })
  const payload = await createSIWxPayload({ ...challenge.info, chainId: chain.chainId, type: chain.type }, account, url)
  const proven = await send(method, url, { ...options, headers: { ...options.headers, 'sign-in-with-x': encodeSIWxHeader(payload) } })
  return { ...proven, asked: `${proven.asked} (with a SIGN-IN-WITH-X proof)` }
}

/** A string field of a JSON answer, or a failure naming it. */
export function field(reply: Reply, name: string): string {
  const value = reply.body[name]
  if (typeof value === 'string' && value !== '') return value
  throw new StepFailure(`the answer has no "${name}"`, { asked: reply.asked, got: describeReply(reply) })
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))
