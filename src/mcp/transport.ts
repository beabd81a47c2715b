// The stateless Streamable HTTP transport of one POST, in its JSON-response form (MCP 2025-06-18
// "Streamable HTTP": a POST of requests answers application/json; of notifications only, 202).
// It implements the SDK's Transport interface for the SDK's Server. The SDK's own
// WebStandardStreamableHTTPServerTransport does the same through a web Request, a ReadableStream
// per POST and zod parses of every message, which doubled the CPU the MCP layer adds to a call
// (docs/mcp.md). What it checks, this checks too: the Accept header, the MCP-Protocol-Version
// header, the JSON-RPC shape of every message.
import { SUPPORTED_PROTOCOL_VERSIONS, type JSONRPCMessage, type MessageExtraInfo } from '@modelcontextprotocol/sdk/types.js'
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js'

export interface HttpAnswer {
  status: number
  /** JSON text, or undefined for 202 with no body. */
  body: string | undefined
}

type Id = string | number

export function jsonRpcError(status: number, code: number, message: string): HttpAnswer {
  return { status, body: JSON.stringify({ jsonrpc: '2.0', error: { code, message }, id: null }) }
}

function isMessage(value: unknown): value is JSONRPCMessage {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false
  const message = value as Record<string, unknown>
  if (message.jsonrpc !== '2.0') return false
  const id = message.id
  const idOk = id === undefined || typeof id === 'string' || (typeof id === 'number' && Number.isFinite(id))
  if (!idOk) return false
  if (typeof message.method === 'string') return message.params === undefined || (typeof message.params === 'object' && message.params !== null)
  return id !== undefined && ('result' in message || 'error' in message)
}

const isRequest = (message: JSONRPCMessage): message is JSONRPCMessage & { id: Id; method: string } => 'method' in message && 'id' in message && message.id !== undefined

/** One POST's transport: hand it to `server.connect`, then `answer` the POST's body once. */
export class PostTransport implements Transport {
  onclose?: () => void
  onerror?: (error: Error) => void
  onmessage?: (message: JSONRPCMessage, extra?: MessageExtraInfo) => void
  private readonly pending = new Map<Id, (message: JSONRPCMessage) => void>()

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

  /** The answer to a POST with these headers and parsed body. */
  async answer(headers: Record<string, string | string[] | undefined>, body: unknown): Promise<HttpAnswer> {
    const accept = String(headers.accept ?? '')
    if (!accept.includes('application/json') || !accept.includes('text/event-stream')) {
      return jsonRpcError(406, -32000, 'Not Acceptable: Client must accept both application/json and text/event-stream')
    }
    const version = headers['mcp-protocol-version']
    if (typeof version === 'string' && !SUPPORTED_PROTOCOL_VERSIONS.includes(version)) {
      return jsonRpcError(400, -32000, `Bad Request: Unsupported protocol version: ${version} (supported versions: ${SUPPORTED_PROTOCOL_VERSIONS.join(', ')})`)
    }
    const batch = Array.isArray(body)
    const messages: unknown[] = batch ? body : [body]
    if (messages.length === 0 || !messages.every(isMessage)) return jsonRpcError(400, -32600, 'Invalid Request: not a JSON-RPC 2.0 message')
    const ids = new Set<Id>()
    const answers: Promise<JSONRPCMessage>[] = []
    for (const message of messages) {
      if (!isRequest(message)) continue
      if (ids.has(message.id)) return jsonRpcError(400, -32600, `Invalid Request: id ${String(message.id)} repeated in one batch`)
      ids.add(message.id)
      answers.push(new Promise((resolve) => this.pending.set(message.id, resolve)))
    }
    for (const message of messages) {
      // The SDK answers a tools/call without a tool name with an internal error (its params parse
      // throws); it is the caller's mistake, so it gets invalid params here.
      if (isRequest(message) && message.method === 'tools/call' && typeof (message as { params?: { name?: unknown } }).params?.name !== 'string') {
        void this.send({ jsonrpc: '2.0', id: message.id, error: { code: -32602, message: 'Invalid params: tools/call needs params.name (a tool name from tools/list)' } })
        continue
      }
      this.deliver(message)
    }
    if (answers.length === 0) return { status: 202, body: undefined }
    const responses = await Promise.all(answers)
    return { status: 200, body: JSON.stringify(responses.length === 1 && !batch ? responses[0] : responses) }
  }
}
