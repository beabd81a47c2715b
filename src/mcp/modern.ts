// MCP 2026-07-28 on the same POST /mcp as 2025-11-25 (a "dual-era" server, basic/versioning):
// no initialize and no session; every request carries its protocol version and client
// capabilities in params._meta, mirrors its method (and tool name) in headers, and every result
// has resultType; server/discover and tools/list carry caching hints. A request without that
// revision's markers (isModernRequest) never reaches this file: the SDK's Server answers it.
import type { Logger } from '../platform/logger.ts'
import type { ToolResult } from './calls.ts'
import type { McpTool, ToolTable } from './tools.ts'
import { acceptsBoth, answerOf, check, type HttpAnswer, type Id, invalidParams, isObject, jsonRpcError, type RpcError, SERVER_ERROR } from './transport.ts'

export const MODERN_VERSION = '2026-07-28'

/** The reserved _meta keys of basic/index "Per-request protocol fields" (and the per-response one). */
export const PROTOCOL_META = {
  protocolVersion: 'io.modelcontextprotocol/protocolVersion',
  clientInfo: 'io.modelcontextprotocol/clientInfo',
  clientCapabilities: 'io.modelcontextprotocol/clientCapabilities',
  logLevel: 'io.modelcontextprotocol/logLevel',
  serverInfo: 'io.modelcontextprotocol/serverInfo',
} as const

/** The codes schema.ts allocates to the MCP specification (-32020 on). */
export const MODERN_ERROR = { headerMismatch: -32020, missingRequiredClientCapability: -32021, unsupportedProtocolVersion: -32022 } as const
const METHOD_NOT_FOUND = -32601
const INVALID_REQUEST = -32600
const INTERNAL_ERROR = -32603

/**
 * How long a client may keep discover and tools/list (caching: "ttlMs"): the list is built once per
 * process, so it changes only with a deploy; five minutes bounds how long a new tool stays unseen.
 */
export const LIST_TTL_MS = 300_000

/** Methods whose Mcp-Name header mirrors a body field (streamable-http "Standard Request Headers"). */
const NAMED: Record<string, 'name' | 'uri'> = { 'tools/call': 'name', 'prompts/get': 'name', 'resources/read': 'uri' }
const LOG_LEVELS = new Set(['debug', 'info', 'notice', 'warning', 'error', 'critical', 'alert', 'emergency'])
const BASE64_SENTINEL = /^=\?base64\?([A-Za-z0-9+/]*={0,2})\?=$/
/** A header value that is neither visible ASCII, space nor tab is refused, not guessed at. */
const UNSAFE_HEADER_VALUE = /[^\t\x20-\x7e]/

export type ToolCaller = (tool: McpTool, args: Record<string, unknown>, meta: Record<string, unknown> | undefined) => Promise<ToolResult>

export interface ModernServer {
  table: ToolTable
  serverInfo: { name: string; version: string }
  capabilities: Record<string, unknown>
  instructions: string
  /** The 2025-11-25-and-earlier revisions the SDK's Server answers on this endpoint. */
  legacyVersions: readonly string[]
  logger: Logger
}

type Headers = Record<string, string | string[] | undefined>

function single(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value.join(', ') : value
}

function declaredVersion(body: unknown): unknown {
  if (!isObject(body) || !isObject(body.params) || !isObject(body.params._meta)) return undefined
  return body.params._meta[PROTOCOL_META.protocolVersion]
}

/**
 * Whether this revision's handling serves the request: its _meta or its MCP-Protocol-Version header
 * names a version other than the legacy ones (versioning: "A request carrying modern per-request
 * `_meta` is served statelessly according to this revision"). An unknown version lands here too, so
 * it is answered with UnsupportedProtocolVersion and the supported list.
 */
export function isModernRequest(headers: Headers, body: unknown, legacyVersions: readonly string[]): boolean {
  const legacy = (version: unknown) => version === undefined || (typeof version === 'string' && legacyVersions.includes(version))
  return !(legacy(single(headers['mcp-protocol-version'])) && legacy(declaredVersion(body)))
}

/** An error answer: status and body (the request's id, as every modern error carries it). */
function failure(status: number, id: Id | null, error: RpcError): HttpAnswer {
  return { status, body: Buffer.from(answerOf(id, error)) }
}

function headerMismatch(id: Id, message: string): HttpAnswer {
  return failure(400, id, { code: MODERN_ERROR.headerMismatch, message: `Header mismatch: ${message}` })
}

/** `'value'` for a message, cut so an echoed header cannot make a large answer. */
function quoted(value: string): string {
  return `'${value.length > 200 ? `${value.slice(0, 200)}…` : value}'`
}

/** A header value per "Value Encoding": trimmed of OWS, Base64 sentinel decoded; undefined when malformed. */
function decodedHeader(raw: string): string | undefined {
  const value = raw.trim()
  if (UNSAFE_HEADER_VALUE.test(value)) return undefined
  const encoded = BASE64_SENTINEL.exec(value)
  if (!encoded) return value
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(Buffer.from(encoded[1] ?? '', 'base64'))
  } catch {
    return undefined
  }
}

/** What is wrong with a request's per-request _meta, as -32602 (basic/index: "MUST reject it with -32602"). */
function metaProblem(meta: unknown): RpcError | undefined {
  const field = (key: string) => `params._meta["${key}"]`
  if (meta === undefined) return invalidParams('params._meta', `is required in MCP ${MODERN_VERSION} (${PROTOCOL_META.protocolVersion}, ${PROTOCOL_META.clientCapabilities})`)
  if (!isObject(meta)) return invalidParams('params._meta', 'must be an object')
  const version = meta[PROTOCOL_META.protocolVersion]
  if (version === undefined) return invalidParams(field(PROTOCOL_META.protocolVersion), 'is required')
  if (typeof version !== 'string') return invalidParams(field(PROTOCOL_META.protocolVersion), 'must be a string')
  const capabilities = meta[PROTOCOL_META.clientCapabilities]
  if (capabilities === undefined) return invalidParams(field(PROTOCOL_META.clientCapabilities), 'is required (an object; {} declares none)')
  if (!isObject(capabilities)) return invalidParams(field(PROTOCOL_META.clientCapabilities), 'must be an object')
  const info = meta[PROTOCOL_META.clientInfo]
  if (info !== undefined && !(isObject(info) && typeof info.name === 'string' && typeof info.version === 'string')) {
    return invalidParams(field(PROTOCOL_META.clientInfo), 'must be {name: string, version: string}')
  }
  const level = meta[PROTOCOL_META.logLevel]
  if (level !== undefined && !(typeof level === 'string' && LOG_LEVELS.has(level))) {
    return invalidParams(field(PROTOCOL_META.logLevel), `must be one of ${[...LOG_LEVELS].join(', ')}`)
  }
  return undefined
}

/** The HeaderMismatch answer when the standard headers disagree with the body, else undefined. */
function headersProblem(headers: Headers, id: Id, method: string, params: Record<string, unknown>, declared: string): HttpAnswer | undefined {
  const version = single(headers['mcp-protocol-version'])
  if (version === undefined) return headerMismatch(id, 'the MCP-Protocol-Version header is required')
  if (version.trim() !== declared) return headerMismatch(id, `MCP-Protocol-Version header value ${quoted(version)} does not match body value ${quoted(declared)}`)
  const methodHeader = single(headers['mcp-method'])
  if (methodHeader === undefined) return headerMismatch(id, 'the Mcp-Method header is required')
  if (methodHeader.trim() !== method) return headerMismatch(id, `Mcp-Method header value ${quoted(methodHeader)} does not match body value ${quoted(method)}`)
  const source = NAMED[method]
  if (!source) return undefined
  const nameHeader = single(headers['mcp-name'])
  if (nameHeader === undefined) return headerMismatch(id, `the Mcp-Name header is required for ${method}`)
  const name = decodedHeader(nameHeader)
  if (name === undefined) return headerMismatch(id, 'the Mcp-Name header holds characters a header cannot carry, or a malformed =?base64?…?= value')
  const body = params[source]
  // A body without the field is the params' error (-32602), reported by the method.
  if (body !== undefined && name !== body) return headerMismatch(id, `Mcp-Name header value ${quoted(name)} does not match body value ${quoted(String(body))}`)
  return undefined
}

/** A result's JSON with an id spliced in: discover and tools/list are serialized once. */
function resultAnswer(id: Id, result: string): HttpAnswer {
  return { status: 200, body: Buffer.from(`{"jsonrpc":"2.0","id":${JSON.stringify(id)},"result":${result}}`) }
}

/** The 2026-07-28 handling of one POST; `call` runs a tool with this POST's context. */
export function createModernHandler(server: ModernServer): (headers: Headers, body: unknown, call: ToolCaller) => Promise<HttpAnswer> {
  const resultMeta = { [PROTOCOL_META.serverInfo]: server.serverInfo }
  const supportedVersions = [MODERN_VERSION, ...server.legacyVersions]
  const cacheable = { ttlMs: LIST_TTL_MS, cacheScope: 'public' as const }
  const discover = JSON.stringify({
    resultType: 'complete',
    supportedVersions,
    capabilities: server.capabilities,
    instructions: server.instructions,
    ...cacheable,
    _meta: resultMeta,
  })
  // The same list for every caller (not per authorization), so intermediaries may share it.
  const toolsList = JSON.stringify({ resultType: 'complete', tools: server.table.list.tools, ...cacheable, _meta: resultMeta })
  const unsupported = (id: Id, requested: string): HttpAnswer =>
    failure(400, id, {
      code: MODERN_ERROR.unsupportedProtocolVersion,
      message: `Unsupported protocol version: ${quoted(requested)} (supported: ${supportedVersions.join(', ')})`,
      data: { supported: supportedVersions, requested },
    })

  async function toolsCall(id: Id, params: Record<string, unknown>, call: ToolCaller): Promise<HttpAnswer> {
    const { name, arguments: args } = params
    if (typeof name !== 'string') return failure(200, id, invalidParams('params.name', 'is required (a string)'))
    if (args !== undefined && !isObject(args)) return failure(200, id, invalidParams('params.arguments', 'must be an object'))
    const tool = server.table.tools.get(name)
    if (!tool) return failure(200, id, { code: -32602, message: `Unknown tool: ${name}; tools/list names every tool`, data: { field: 'params.name' } })
    const result = await call(tool, args ?? {}, params._meta as Record<string, unknown>)
    const body = { ...result, resultType: 'complete', _meta: { ...result._meta, ...resultMeta } }
    return { status: 200, body: Buffer.from(JSON.stringify({ jsonrpc: '2.0', id, result: body })) }
  }

  async function run(id: Id, method: string, params: Record<string, unknown>, call: ToolCaller): Promise<HttpAnswer> {
    switch (method) {
      case 'server/discover':
        return resultAnswer(id, discover)
      case 'tools/list':
        if (params.cursor !== undefined) {
          return failure(200, id, invalidParams('params.cursor', 'is not a cursor of this server (tools/list returns every tool in one page, with no nextCursor)'))
        }
        return resultAnswer(id, toolsList)
      case 'tools/call':
        return toolsCall(id, params, call)
      default:
        // transports: "If the server does not implement the requested RPC method, it MUST respond with 404".
        return failure(404, id, {
          code: METHOD_NOT_FOUND,
          message: `Method not found: ${quoted(method)} (MCP ${MODERN_VERSION} here serves server/discover, tools/list and tools/call; initialize and ping are 2025-11-25's)`,
        })
    }
  }

  return async (headers, body, call) => {
    if (!acceptsBoth(String(headers.accept ?? ''))) {
      return jsonRpcError(406, SERVER_ERROR, 'Not Acceptable: Client must accept both application/json and text/event-stream')
    }
    if (Array.isArray(body)) return jsonRpcError(400, INVALID_REQUEST, `Invalid Request: MCP ${MODERN_VERSION} takes one JSON-RPC message per POST`)
    const checked = check(body)
    if (checked.kind === 'refused') return failure(400, checked.id, checked.error)
    const message = body as Record<string, unknown>
    if (checked.kind === 'other') {
      // transports: "The client MUST NOT send JSON-RPC responses"; a notification is accepted and has no effect here.
      if (!('method' in message)) return jsonRpcError(400, INVALID_REQUEST, 'Invalid Request: a client sends requests and notifications, not responses')
      return { status: 202, body: undefined }
    }
    const { id, method } = checked
    const params = (message.params ?? {}) as Record<string, unknown>
    const meta = params._meta
    const declared = isObject(meta) ? meta[PROTOCOL_META.protocolVersion] : undefined
    const headerVersion = single(headers['mcp-protocol-version'])?.trim()
    // A version named only by the header is still an unsupported version, not a missing field.
    if (declared === undefined && headerVersion !== undefined && headerVersion !== MODERN_VERSION && !server.legacyVersions.includes(headerVersion)) {
      return unsupported(id, headerVersion)
    }
    const metaError = metaProblem(meta)
    if (metaError) return failure(400, id, metaError)
    const version = declared as string
    const mismatch = headersProblem(headers, id, method, params, version)
    if (mismatch) return mismatch
    if (version !== MODERN_VERSION) return unsupported(id, version)
    try {
      return await run(id, method, params, call)
    } catch (error) {
      server.logger.error({ err: error, method }, 'mcp: request failed')
      return failure(500, id, { code: INTERNAL_ERROR, message: 'Internal error: the request could not be answered; retry later' })
    }
  }
}
