// The stateless Streamable HTTP transport of one POST, in its JSON-response form (MCP 2025-06-18
// "Streamable HTTP": a POST of requests answers application/json; of notifications only, 202).
// It implements the SDK's Transport interface for the SDK's Server. The SDK's own
// WebStandardStreamableHTTPServerTransport does the same through a web Request, a ReadableStream
// per POST and zod parses of every message, which doubled the CPU the MCP layer adds to a call
// (docs/mcp.md). What it checks, this checks too (the Accept header, the MCP-Protocol-Version
// header, the batch size), and more: the SDK drops a message its schemas refuse without a word,
// and answers params its handler's schema refuses with an internal error, so each message's
// envelope and params are checked here and every refused one is answered. A batch runs a few
// requests at a time, gives the event loop back between messages and stops answering at a byte
// budget: one POST cannot hold the process.
import { setImmediate as nextTurn } from 'node:timers/promises'
import {
  DEFAULT_NEGOTIATED_PROTOCOL_VERSION,
  ErrorCode,
  RELATED_TASK_META_KEY,
  SUPPORTED_PROTOCOL_VERSIONS,
  type JSONRPCMessage,
  type MessageExtraInfo,
} from '@modelcontextprotocol/sdk/types.js'
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js'

export interface HttpAnswer {
  status: number
  /** JSON, as UTF-8 (a socket takes bytes without encoding them in one go), or undefined for 202 with no body. */
  body: Buffer | undefined
}

export type Id = string | number

/** Messages in one batch: the SDK's own web transport refuses more (its MAX_BATCH_SIZE). */
export const MAX_BATCH_MESSAGES = 100
/** Bytes of a batch's answers (about 17 tools/list results): an answer past it, and every later one, is a JSON-RPC error. */
export const MAX_BATCH_ANSWER_BYTES = 4 * 1024 * 1024
/** Requests of one batch running at once: a batch of tool calls cannot crowd out other callers. */
export const MAX_BATCH_IN_FLIGHT = 4
/** The first revision whose POST body is one message: 2025-06-18 removed JSON-RPC batches. */
const BATCHLESS_SINCE = '2025-06-18'
/** JSON-RPC's implementation-defined server error: the code the SDK's transport gives its own refusals. */
export const SERVER_ERROR = -32000
/** What a batch's answers are joined with. */
const [OPEN, COMMA, CLOSE] = ['[', ',', ']'].map((text) => Buffer.from(text)) as [Buffer, Buffer, Buffer]

export interface RpcError {
  code: number
  message: string
  data?: Record<string, unknown>
}

/** One zod issue, as far as a readable message needs it. */
interface SchemaIssue {
  code: string
  path: PropertyKey[]
  message: string
  expected?: unknown
}

/** A request schema of the SDK (zod): the one its handler parses the request with. */
export interface RequestSchema {
  safeParse(value: unknown): { success: boolean; error?: { issues: SchemaIssue[] } }
}

export function answerOf(id: Id | null, error: RpcError): string {
  return JSON.stringify({ jsonrpc: '2.0', id, error })
}

export function jsonRpcError(status: number, code: number, message: string): HttpAnswer {
  return { status, body: Buffer.from(answerOf(null, { code, message })) }
}

/**
 * Whether an Accept header lists both media types the client must accept (application/json and
 * text/event-stream), each by name with q > 0: a wildcard lists neither, and a type is compared
 * whole and case-insensitively, not as a substring.
 */
export function acceptsBoth(accept: string): boolean {
  let json = false
  let eventStream = false
  for (const range of accept.split(',')) {
    const [type = '', ...parameters] = range.split(';').map((part) => part.trim().toLowerCase())
    const quality = parameters.find((parameter) => parameter.startsWith('q='))
    if (quality !== undefined && !(Number(quality.slice(2)) > 0)) continue
    if (type === 'application/json') json = true
    else if (type === 'text/event-stream') eventStream = true
  }
  return json && eventStream
}

export const isObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value)
/** JSON-RPC ids and progress tokens, as the SDK's schemas take them (an integer past 2^53 is not one). */
const isIdValue = (value: unknown): value is Id => typeof value === 'string' || Number.isSafeInteger(value)

const MEMBERS = {
  request: new Set(['jsonrpc', 'id', 'method', 'params']),
  result: new Set(['jsonrpc', 'id', 'result']),
  error: new Set(['jsonrpc', 'id', 'error']),
}

/** A message as this transport sorted it: to run, to hand on, or answered with an error now. */
export type Checked = { kind: 'request'; id: Id; method: string } | { kind: 'other' } | { kind: 'refused'; id: Id | null; error: RpcError }

const invalidRequest = (reason: string): Checked => ({ kind: 'refused', id: null, error: { code: ErrorCode.InvalidRequest, message: `Invalid Request: ${reason}` } })

export function invalidParams(field: string, reason: string): RpcError {
  return { code: ErrorCode.InvalidParams, message: `Invalid params: ${field} ${reason}`, data: { field } }
}

/** What is wrong with a _meta (the SDK's RequestMetaSchema), as a field and a reason. */
function metaProblem(meta: unknown, field: string): [string, string] | undefined {
  if (meta === undefined) return undefined
  if (!isObject(meta)) return [field, 'must be an object']
  if (meta.progressToken !== undefined && !isIdValue(meta.progressToken)) return [`${field}.progressToken`, 'must be a string or an integer']
  const task = meta[RELATED_TASK_META_KEY]
  if (task === undefined) return undefined
  if (!isObject(task)) return [`${field}.${RELATED_TASK_META_KEY}`, 'must be an object']
  if (typeof task.taskId !== 'string') return [`${field}.${RELATED_TASK_META_KEY}.taskId`, 'must be a string']
  return undefined
}

function unknownMember(message: Record<string, unknown>, members: Set<string>): string | undefined {
  return Object.keys(message).find((name) => !members.has(name))
}

/**
 * Sorts one message as the SDK's JSONRPCMessageSchema would: what it takes is a request (with a
 * valid id) or something to hand on; what it would drop is refused: -32600 with id null (JSON-RPC
 * 2.0: the id of an invalid request cannot be trusted), or -32602 for the params of a request.
 */
export function check(message: unknown): Checked {
  if (!isObject(message) || message.jsonrpc !== '2.0') return invalidRequest('not a JSON-RPC 2.0 message')
  const { id } = message
  if (id !== undefined && !isIdValue(id)) return invalidRequest('id must be a string or an integer')
  if ('method' in message) {
    if (typeof message.method !== 'string') return invalidRequest('method must be a string')
    const extra = unknownMember(message, MEMBERS.request)
    if (extra !== undefined) return invalidRequest(`"${extra}" is not a member of a JSON-RPC request`)
    // A notification's refusal has nothing to answer to: id null.
    const answerId = id ?? null
    const { params } = message
    if (params !== undefined && !isObject(params)) return { kind: 'refused', id: answerId, error: invalidParams('params', 'must be an object') }
    const meta = metaProblem(params?._meta, 'params._meta')
    if (meta) return { kind: 'refused', id: answerId, error: invalidParams(...meta) }
    return id === undefined ? { kind: 'other' } : { kind: 'request', id, method: message.method }
  }
  if (id === undefined && !('error' in message)) return invalidRequest('a response needs an id')
  if ('result' in message) {
    const extra = unknownMember(message, MEMBERS.result)
    if (extra !== undefined) return invalidRequest(`"${extra}" is not a member of a JSON-RPC response`)
    if (!isObject(message.result)) return invalidRequest('result must be an object')
    const meta = metaProblem(message.result._meta, 'result._meta')
    return meta ? invalidRequest(meta.join(' ')) : { kind: 'other' }
  }
  if ('error' in message) {
    const extra = unknownMember(message, MEMBERS.error)
    if (extra !== undefined) return invalidRequest(`"${extra}" is not a member of a JSON-RPC error response`)
    const { error } = message
    if (!isObject(error) || !Number.isSafeInteger(error.code) || typeof error.message !== 'string') return invalidRequest('error must be {code: integer, message: string}')
    return { kind: 'other' }
  }
  return invalidRequest('neither a request, a notification nor a response')
}

const TYPE_NAMES: Record<string, string> = {
  object: 'an object',
  record: 'an object',
  array: 'an array',
  string: 'a string',
  number: 'a number',
  int: 'an integer',
  boolean: 'a boolean',
}

function kindOf(value: unknown): string {
  if (value === null) return 'null'
  if (Array.isArray(value)) return 'an array'
  return TYPE_NAMES[typeof value] ?? typeof value
}

/** The first issue of a failed params parse, as a sentence naming the field (not the schema's dump). */
function paramsError(issues: SchemaIssue[], message: unknown): RpcError {
  const issue = issues[0]
  if (!issue) return invalidParams('params', 'are not valid')
  const field = issue.path.map(String).join('.')
  let value: unknown = message
  for (const key of issue.path) value = isObject(value) ? value[String(key)] : undefined
  const expected = TYPE_NAMES[String(issue.expected)] ?? String(issue.expected)
  let reason = `is not valid (${issue.message})`
  if (issue.code === 'invalid_type') reason = value === undefined ? `is required (${expected})` : `must be ${expected}, not ${kindOf(value)}`
  return invalidParams(field, reason)
}

/** One POST's transport: hand it to `server.connect`, then `answer` the POST's body once. */
export class PostTransport implements Transport {
  onclose?: () => void
  onerror?: (error: Error) => void
  onmessage?: (message: JSONRPCMessage, extra?: MessageExtraInfo) => void
  private readonly pending = new Map<Id, (message: JSONRPCMessage) => void>()
  /** The schema of each method the server answers, by method: its params are checked here first. */
  private readonly requests: ReadonlyMap<string, RequestSchema>

  constructor(requests: ReadonlyMap<string, RequestSchema> = new Map()) {
    this.requests = requests
  }

  async start(): Promise<void> {}

  async close(): Promise<void> {
    this.pending.clear()
    this.onclose?.()
  }

  async send(message: JSONRPCMessage): Promise<void> {
    // Only responses to this POST's requests have somewhere to go: without a stream, server
    // notifications and requests (progress, logging, sampling) are dropped, as stateless JSON mode does.
    if (!('id' in message) || message.id === undefined || 'method' in message) return
    const resolve = this.pending.get(message.id)
    if (resolve) {
      this.pending.delete(message.id)
      resolve(message)
    }
  }

  /**
   * Hands a message to the SDK's Protocol, which tells requests from responses by trying its zod
   * schemas in turn: for a request, two failed parses, each building an Error. Their stack traces
   * are half of that cost and are never read, so none are captured while it classifies (the call is
   * synchronous; the handler itself runs later, with stacks).
   */
  private deliver(message: JSONRPCMessage): void {
    const limit = Error.stackTraceLimit
    Error.stackTraceLimit = 0
    try {
      this.onmessage?.(message)
    } finally {
      Error.stackTraceLimit = limit
    }
  }

  /** The SDK's answer to a request, or invalid params when its method's schema refuses them. */
  private run(message: JSONRPCMessage, request: { id: Id; method: string }): Promise<JSONRPCMessage> {
    const parsed = this.requests.get(request.method)?.safeParse(message)
    if (parsed && !parsed.success) return Promise.resolve({ jsonrpc: '2.0', id: request.id, error: paramsError(parsed.error?.issues ?? [], message) })
    const answer = new Promise<JSONRPCMessage>((resolve) => this.pending.set(request.id, resolve))
    this.deliver(message)
    return answer
  }

  /** The answer to a POST with these headers and parsed body. */
  async answer(headers: Record<string, string | string[] | undefined>, body: unknown): Promise<HttpAnswer> {
    if (!acceptsBoth(String(headers.accept ?? ''))) {
      return jsonRpcError(406, SERVER_ERROR, 'Not Acceptable: Client must accept both application/json and text/event-stream')
    }
    const version = headers['mcp-protocol-version']
    if (typeof version === 'string' && !SUPPORTED_PROTOCOL_VERSIONS.includes(version)) {
      return jsonRpcError(400, SERVER_ERROR, `Bad Request: Unsupported protocol version: ${version} (supported versions: ${SUPPORTED_PROTOCOL_VERSIONS.join(', ')})`)
    }
    const batch = Array.isArray(body)
    if (batch) {
      // Without the header, the revision is 2025-03-26 (the transport spec's rule), which takes batches.
      const revision = typeof version === 'string' ? version : DEFAULT_NEGOTIATED_PROTOCOL_VERSION
      if (revision >= BATCHLESS_SINCE) {
        return jsonRpcError(400, ErrorCode.InvalidRequest, `Invalid Request: MCP ${revision} takes one JSON-RPC message per POST (batches were removed in ${BATCHLESS_SINCE})`)
      }
      if (body.length === 0) return jsonRpcError(400, ErrorCode.InvalidRequest, 'Invalid Request: an empty batch')
      if (body.length > MAX_BATCH_MESSAGES) return jsonRpcError(400, ErrorCode.InvalidRequest, `Invalid Request: a batch holds at most ${MAX_BATCH_MESSAGES} messages`)
    }
    const messages: unknown[] = batch ? body : [body]
    const checked = messages.map(check)
    const ids = new Set<Id>()
    for (const item of checked) {
      if (item.kind !== 'request') continue
      if (ids.has(item.id)) return jsonRpcError(400, ErrorCode.InvalidRequest, `Invalid Request: id ${String(item.id)} repeated in one batch`)
      ids.add(item.id)
    }

    // The answers by message, serialized and encoded as each arrives (no long stringify at the end).
    const answers: (Buffer | undefined)[] = []
    let bytes = 0
    let full = false
    let answeredRequest = false
    const tooLarge = (id: Id) =>
      answerOf(id, { code: SERVER_ERROR, message: `Answer too large: this batch's answers passed ${MAX_BATCH_ANSWER_BYTES} bytes; send this request in a POST of its own` })
    const keep = (index: number, id: Id | null, text: string) => {
      // The first answer always fits: one message alone is never cut.
      let kept = Buffer.from(text)
      const cut = id !== null && bytes > 0 && bytes + kept.length > MAX_BATCH_ANSWER_BYTES
      if (cut) kept = Buffer.from(tooLarge(id))
      full ||= cut
      bytes += kept.length
      answers[index] = kept
      if (id !== null) answeredRequest = true
    }
    const inFlight = new Set<Promise<void>>()
    for (const [index, item] of checked.entries()) {
      // Another caller's turn between two messages of a batch.
      if (index > 0) await nextTurn()
      if (item.kind === 'refused') {
        keep(index, item.id, answerOf(item.id, item.error))
        continue
      }
      const message = messages[index] as JSONRPCMessage
      if (item.kind === 'other') {
        this.deliver(message)
        continue
      }
      if (batch && (message as { method?: unknown }).method === 'initialize') {
        // 2025-03-26: "The initialize request MUST NOT be part of a JSON-RPC batch".
        keep(index, item.id, answerOf(item.id, { code: ErrorCode.InvalidRequest, message: 'Invalid Request: initialize must be sent alone, not inside a JSON-RPC batch' }))
        continue
      }
      while (inFlight.size >= MAX_BATCH_IN_FLIGHT) await Promise.race(inFlight)
      // Past the budget, a request is answered without being run.
      if (full) {
        keep(index, item.id, tooLarge(item.id))
        continue
      }
      const done: Promise<void> = this.run(message, item).then((response) => {
        inFlight.delete(done)
        keep(index, item.id, JSON.stringify(response))
      })
      inFlight.add(done)
    }
    await Promise.all(inFlight)
    const sent = answers.filter((answer) => answer !== undefined)
    if (sent.length === 0) return { status: 202, body: undefined }
    // Only refusals (id null) is a POST the server cannot accept: an HTTP error, as the transport spec asks.
    return { status: answeredRequest ? 200 : 400, body: batch ? Buffer.concat(sent.flatMap((answer, i) => [i === 0 ? OPEN : COMMA, answer]).concat(CLOSE)) : sent[0] }
  }
}
