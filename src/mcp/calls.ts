// One tool call as one HTTP request to its operation, and the answer as one tool result. The
// payment transports are header mappings, nothing more: the x402 PaymentPayload in
// _meta["x402/payment"] becomes PAYMENT-SIGNATURE (X-PAYMENT for x402Version 1), the MPP credential
// in _meta["org.paymentauth/credential"] becomes `Authorization: Payment …`; a 402 becomes the
// payment-required result (x402 v2 MCP transport + mppx's tool-result form); receipts go to
// result._meta. Verification, reservation, settlement and the ledger stay in the route's guard.
import type { PaymentPayload } from '@x402/core/types'
import type { Credential } from 'mppx'
import { mppxRoot as mppx } from '../payments/mpp/lazy.ts'
import { decodeHeaderJson, encodeHeaderJson } from '../payments/x402/header-json.ts'
import { AppError, isAppError } from '../platform/errors.ts'
import type { Logger } from '../platform/logger.ts'
import type { DispatchRequest, DispatchResponse, OperationDispatcher } from './dispatcher.ts'
import { BODY_ARGUMENT, type McpTool } from './tools.ts'

/** _meta keys a tool call may carry (x402 and MPP keys are theirs; ours are namespaced). */
export const META = {
  x402Payment: 'x402/payment',
  x402Response: 'x402/payment-response',
  mppCredential: 'org.paymentauth/credential',
  mppPaymentRequired: 'org.paymentauth/payment-required',
  mppReceipt: 'org.paymentauth/receipt',
  /** A full Authorization header value for this call (`Bearer <token>`), over the MCP request's own. */
  authorization: 'agent-gateway/authorization',
  /** A SIGN-IN-WITH-X header value for this call (base64, as encodeSIWxHeader makes it). */
  signInWithX: 'agent-gateway/sign-in-with-x',
  /** The operation's HTTP status and the response headers a caller may need (plan standing, payment status). */
  http: 'agent-gateway/http',
} as const

/** Headers of the MCP HTTP request that a tool call carries on to its operation. */
const FORWARDED = ['authorization', 'svc-agent-authorization', 'sign-in-with-x', 'user-agent'] as const
/**
 * Response headers worth handing back in result._meta (the body has the rest): every plan and
 * payment header by its prefix, so a new one (x-payment-identifier-replay, x-payment-reference)
 * cannot be left out, and these by name.
 */
const REPORTED_PREFIXES = ['x-plan-', 'x-payment-'] as const
const REPORTED = new Set(['location', 'retry-after'])
/** Decoded into result._meta[META.x402Response] instead. */
const RECEIPT_HEADER = 'x-payment-response'

function reported(name: string): boolean {
  return REPORTED.has(name) || (name !== RECEIPT_HEADER && REPORTED_PREFIXES.some((prefix) => name.startsWith(prefix)))
}

export interface CallContext {
  /** Headers of the MCP HTTP request (lower-case names). */
  headers: Record<string, string | string[] | undefined>
  /** The MCP request's client address and x-forwarded-for, kept for the operation. */
  forwardedFor: string
  requestId: string
}

export interface ToolResult {
  [key: string]: unknown
  content: { type: 'text'; text: string }[]
  structuredContent?: Record<string, unknown>
  isError?: boolean
  _meta?: Record<string, unknown>
}

function header(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value
}

function invalid(message: string, field: string): AppError {
  return new AppError('validation_error', message, { field })
}

function scalar(value: unknown, field: string): string {
  if (typeof value === 'string') return value
  if (typeof value === 'number' || typeof value === 'boolean') return String(value)
  throw invalid(`${field} must be a string, number or boolean`, field)
}

/** A value an HTTP header can carry (no control characters), else a validation error naming it. */
function headerValue(value: unknown, field: string): string {
  const text = scalar(value, field)
  if (/[^\t\x20-\x7e\x80-\xff]/.test(text)) throw invalid(`${field} holds a character an HTTP header cannot carry`, field)
  return text
}

/**
 * The operation's request for `args` and `meta`. Throws AppError (validation_error, payment_malformed)
 * for what cannot be put in a request; everything else is left to the route's own validation.
 */
export function requestOf(tool: McpTool, args: Record<string, unknown>, meta: Record<string, unknown> | undefined, context: CallContext): DispatchRequest {
  const { spec } = tool.entry
  const map = tool.args
  const used = new Set<string>()
  let path = spec.path
  for (const name of map.path) {
    const value = args[name]
    if (value === undefined || value === '') throw invalid(`arguments.${name} is required (path parameter of ${spec.method} ${spec.path})`, `arguments.${name}`)
    const segment = scalar(value, `arguments.${name}`)
    // encodeURIComponent keeps dots: a URL parser would fold these into another route's path.
    if (segment === '.' || segment === '..') throw invalid(`arguments.${name} cannot be "${segment}"`, `arguments.${name}`)
    path = path.replace(`{${name}}`, encodeURIComponent(segment))
    used.add(name)
  }
  const query = new URLSearchParams()
  for (const name of map.query) {
    const value = args[name]
    used.add(name)
    if (value === undefined) continue
    for (const item of Array.isArray(value) ? value : [value]) query.append(name, scalar(item, `arguments.${name}`))
  }
  const headers: Record<string, string> = { 'x-forwarded-for': context.forwardedFor, 'x-request-id': context.requestId }
  for (const name of FORWARDED) {
    const value = header(context.headers[name])
    if (value !== undefined) headers[name] = value
  }
  for (const name of map.headers) {
    const value = args[name]
    used.add(name)
    if (value !== undefined) headers[name] = headerValue(value, `arguments.${name}`)
  }
  let body: Record<string, unknown> | undefined
  if (map.body?.mode === 'nested') {
    used.add(BODY_ARGUMENT)
    const value = args[BODY_ARGUMENT]
    if (value !== undefined && (typeof value !== 'object' || value === null || Array.isArray(value))) throw invalid('arguments.body must be an object', 'arguments.body')
    body = (value as Record<string, unknown> | undefined) ?? {}
  } else if (map.body?.mode === 'flat') {
    body = {}
    for (const [name, value] of Object.entries(args)) if (!used.has(name)) body[name] = value
  }
  for (const name of Object.keys(args)) {
    // A flat body takes the rest (its schema says whether extras are allowed); otherwise an unknown argument is an error.
    if (!used.has(name) && map.body?.mode !== 'flat') throw invalid(`arguments.${name} is not an argument of ${spec.operationId}`, `arguments.${name}`)
  }
  applyMeta(headers, meta)
  const search = query.toString()
  const request: DispatchRequest = { server: spec.server, method: spec.method, url: search ? `${path}?${search}` : path, headers }
  if (body !== undefined) {
    headers['content-type'] = 'application/json'
    request.body = JSON.stringify(body)
  }
  return request
}

function applyMeta(headers: Record<string, string>, meta: Record<string, unknown> | undefined): void {
  if (!meta) return
  const authorization = meta[META.authorization]
  if (typeof authorization === 'string') headers.authorization = headerValue(authorization, `_meta.${META.authorization}`)
  const siwx = meta[META.signInWithX]
  if (typeof siwx === 'string') headers['sign-in-with-x'] = headerValue(siwx, `_meta.${META.signInWithX}`)
  const x402 = meta[META.x402Payment]
  if (x402 !== undefined) {
    if (typeof x402 !== 'object' || x402 === null || typeof (x402 as { x402Version?: unknown }).x402Version !== 'number') {
      throw new AppError('payment_malformed', `_meta["${META.x402Payment}"] must be an x402 PaymentPayload object`, {
        field: `_meta.${META.x402Payment}`,
        extensions: { reason: 'malformed' },
      })
    }
    const payload = x402 as PaymentPayload
    headers[payload.x402Version === 1 ? 'x-payment' : 'payment-signature'] = encodeHeaderJson(payload)
  }
  const mpp = meta[META.mppCredential]
  if (mpp !== undefined) {
    let value: string
    try {
      value = mppx().Credential.serialize(mpp as Credential.Credential)
    } catch {
      throw new AppError('payment_malformed', `_meta["${META.mppCredential}"] must be an MPP credential {challenge, payload}`, {
        field: `_meta.${META.mppCredential}`,
        extensions: { reason: 'malformed' },
      })
    }
    // Both in one call are two credentials: the guard refuses them (multiple_credentials).
    if (headers.authorization?.toLowerCase().startsWith('bearer ')) headers['svc-agent-authorization'] ??= headers.authorization
    headers.authorization = value
  }
}

function text(value: unknown): { type: 'text'; text: string }[] {
  return [{ type: 'text', text: typeof value === 'string' ? value : JSON.stringify(value) }]
}

function parseJson(body: string): unknown {
  try {
    return JSON.parse(body)
  } catch {
    return undefined
  }
}

function httpMeta(response: DispatchResponse): Record<string, unknown> {
  const headers: Record<string, string> = {}
  for (const [name, value] of Object.entries(response.headers)) if (reported(name)) headers[name] = value
  return { status: response.status, headers }
}

/** MPP challenges of a 402 (WWW-Authenticate: Payment …), in mppx's MCP payment-required form. */
function mppPaymentRequired(response: DispatchResponse, problem: unknown): Record<string, unknown> | undefined {
  const value = response.headers['www-authenticate']
  if (!value) return undefined
  try {
    const challenges = mppx().Challenge.deserializeList(value)
    return challenges.length > 0 ? { httpStatus: 402, challenges, problem } : undefined
  } catch {
    return undefined
  }
}

function receiptsOf(response: DispatchResponse, meta: Record<string, unknown> | undefined): Record<string, unknown> {
  const out: Record<string, unknown> = {}
  const x402 = response.headers['payment-response'] ?? response.headers[RECEIPT_HEADER]
  if (x402) out[META.x402Response] = decodeHeaderJson(x402)
  const mpp = response.headers['payment-receipt']
  if (mpp) {
    const credential = meta?.[META.mppCredential] as { challenge?: { id?: unknown } } | undefined
    out[META.mppReceipt] = { ...mppx().Receipt.deserialize(mpp), challengeId: credential?.challenge?.id }
  }
  return out
}

/** The problem without the x402 v1 body it shares a 402's JSON with (the result carries v2 already). */
function problemOf(object: Record<string, unknown> | undefined): Record<string, unknown> | undefined {
  if (!object) return undefined
  const { x402Version: _version, error: _error, accepts: _accepts, ...problem } = object
  return problem
}

/** The tool result of an operation's HTTP answer. */
export function resultOf(response: DispatchResponse, meta: Record<string, unknown> | undefined): ToolResult {
  const parsed = parseJson(response.body)
  const object = typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed) ? (parsed as Record<string, unknown>) : undefined
  const resultMeta: Record<string, unknown> = { [META.http]: httpMeta(response) }
  if (response.status >= 200 && response.status < 300) {
    Object.assign(resultMeta, receiptsOf(response, meta))
    const result: ToolResult = { content: text(parsed === undefined ? response.body : parsed), _meta: resultMeta }
    if (object) result.structuredContent = object
    return result
  }
  const required = response.status === 402 ? response.headers['payment-required'] : undefined
  if (required) {
    // The x402 v2 MCP transport: PaymentRequired as structuredContent and, wrapped, as the text.
    const paymentRequired = decodeHeaderJson(required) as Record<string, unknown>
    const message = typeof object?.detail === 'string' ? object.detail : 'Payment required'
    const problem = problemOf(object)
    const mpp = mppPaymentRequired(response, problem)
    if (mpp) resultMeta[META.mppPaymentRequired] = mpp
    resultMeta['agent-gateway/problem'] = problem
    return {
      isError: true,
      structuredContent: paymentRequired,
      content: text({ 'x402/error': { code: 402, message, data: paymentRequired } }),
      _meta: resultMeta,
    }
  }
  // Any other refusal: the problem+json as it is (code, field, detail, and any challenge it carries).
  const problem = object ?? { status: response.status, detail: response.body.slice(0, 2000) }
  const mpp = response.status === 402 ? mppPaymentRequired(response, problem) : undefined
  if (mpp) resultMeta[META.mppPaymentRequired] = mpp
  return { isError: true, structuredContent: problem, content: text(problem), _meta: resultMeta }
}

/** A refusal made before any request (an argument that cannot be placed): a problem like the route's. */
export function problemResult(error: AppError, instance: string): ToolResult {
  const problem = error.toProblem(instance) as unknown as Record<string, unknown>
  // The headers a route's answer would report (a 503's Retry-After), as resultOf reports them.
  const headers = Object.fromEntries(
    Object.entries(error.headers)
      .filter(([name]) => reported(name.toLowerCase()))
      .map(([name, value]) => [name.toLowerCase(), value]),
  )
  return { isError: true, structuredContent: problem, content: text(problem), _meta: { [META.http]: { status: error.status, headers } } }
}

/**
 * One call of a known tool, as both protocol revisions run it: a refusal before any request or a
 * role that cannot be reached is a problem result, never a JSON-RPC error (the call reached a tool).
 */
export async function callTool(
  tool: McpTool,
  args: Record<string, unknown>,
  meta: Record<string, unknown> | undefined,
  context: CallContext,
  deps: { dispatcher: OperationDispatcher; logger: Logger },
): Promise<ToolResult> {
  const name = tool.definition.name
  try {
    return resultOf(await deps.dispatcher.dispatch(requestOf(tool, args, meta, context)), meta)
  } catch (error) {
    if (isAppError(error)) return problemResult(error, `mcp://tool/${name}`)
    deps.logger.error({ err: error, tool: name }, 'mcp: tool call failed')
    return problemResult(new AppError('unavailable', `${name} could not be reached; nothing was charged by this call. Retry later.`), `mcp://tool/${name}`)
  }
}
