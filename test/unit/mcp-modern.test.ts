// MCP 2026-07-28 beside 2025-11-25 on one endpoint: which requests take the new handling, and that
// handling against the revision's text (docs/specification/2026-07-28 of the MCP specification
// repository; each test quotes the lines it checks). The handler is called directly with a small
// tool table and a recording tool caller; test/e2e/mcp-2026.test.ts runs it through the real CLI.
import t from 'tap'
import { SUPPORTED_PROTOCOL_VERSIONS } from '@modelcontextprotocol/sdk/types.js'
import type { ToolResult } from '../../src/mcp/calls.ts'
import { createModernHandler, isModernRequest, LIST_TTL_MS, MODERN_VERSION, type ToolCaller } from '../../src/mcp/modern.ts'
import type { McpTool, ToolDefinition, ToolTable } from '../../src/mcp/tools.ts'
import type { HttpAnswer } from '../../src/mcp/transport.ts'
import { createLogger } from '../../src/platform/logger.ts'

type Json = Record<string, any>

function definition(name: string): ToolDefinition {
  return {
    name,
    title: name,
    description: `${name}. Price: free (0 USD).`,
    inputSchema: { type: 'object', properties: {} },
    annotations: { title: name, readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: true },
    _meta: {},
  }
}
const names = ['getThing', 'get_weather', 'Ünïcode']
const tools = new Map(names.map((name) => [name, { definition: definition(name) } as McpTool]))
const table: ToolTable = { tools, list: { tools: names.map(definition) } }
const SERVER_INFO = { name: 'agent-gateway', version: '1.0.0' }
const CAPABILITIES = { tools: { listChanged: false } }
const handler = createModernHandler({
  table,
  serverInfo: SERVER_INFO,
  capabilities: CAPABILITIES,
  instructions: 'Tools are operations.',
  legacyVersions: SUPPORTED_PROTOCOL_VERSIONS,
  logger: createLogger('silent'),
})

const calls: { name: string; args: Json; meta: Json | undefined }[] = []
const paidResult: ToolResult = {
  content: [{ type: 'text', text: '{"ok":true}' }],
  structuredContent: { ok: true },
  _meta: { 'x402/payment-response': { success: true, transaction: '0xabc' }, 'agent-gateway/http': { status: 200, headers: {} } },
}
const caller: ToolCaller = async (tool, args, meta) => {
  calls.push({ name: tool.definition.name, args, meta })
  return paidResult
}

const META = {
  'io.modelcontextprotocol/protocolVersion': MODERN_VERSION,
  'io.modelcontextprotocol/clientInfo': { name: 'ExampleClient', version: '1.0.0' },
  'io.modelcontextprotocol/clientCapabilities': {},
}

/** Headers a conformant client sends for `method` (streamable-http "Standard Request Headers"). */
function headersFor(method: string, name?: string): Record<string, string> {
  return {
    accept: 'application/json, text/event-stream',
    'content-type': 'application/json',
    'mcp-protocol-version': MODERN_VERSION,
    'mcp-method': method,
    ...(name === undefined ? {} : { 'mcp-name': name }),
  }
}

function request(method: string, params: Json = {}, id: number | string = 1): Json {
  return { jsonrpc: '2.0', id, method, params: { ...params, _meta: { ...META, ...params._meta } } }
}

async function send(body: unknown, headers: Record<string, string | undefined>): Promise<{ status: number; json: Json | undefined }> {
  const answer: HttpAnswer = await handler(headers as Record<string, string>, body, caller)
  return { status: answer.status, json: answer.body === undefined ? undefined : JSON.parse(String(answer.body)) }
}

t.test("routing: this revision's markers pick the new handling; everything else stays 2025-11-25", async (t) => {
  // versioning: "A request carrying modern per-request `_meta` is served statelessly according to
  // this revision. An `initialize` request selects legacy semantics".
  const legacy = SUPPORTED_PROTOCOL_VERSIONS
  t.ok(isModernRequest({}, request('tools/list'), legacy), '_meta protocolVersion 2026-07-28')
  t.ok(isModernRequest({ 'mcp-protocol-version': MODERN_VERSION }, { jsonrpc: '2.0', id: 1, method: 'tools/list' }, legacy), 'the header alone')
  t.ok(isModernRequest({ 'mcp-protocol-version': '1900-01-01' }, { jsonrpc: '2.0', id: 1, method: 'ping' }, legacy), 'an unknown version is answered by the new handling')
  const initialize = { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'c', version: '1' } } }
  t.notOk(isModernRequest({}, initialize, legacy), 'initialize without a header')
  t.notOk(isModernRequest({ 'mcp-protocol-version': '2025-11-25' }, { jsonrpc: '2.0', id: 2, method: 'tools/list' }, legacy), 'the SDK client after initialize')
  t.notOk(isModernRequest({ 'mcp-protocol-version': '2025-06-18' }, { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { _meta: { progressToken: 1 } } }, legacy))
  t.notOk(isModernRequest({}, [{ jsonrpc: '2.0', id: 1, method: 'ping' }], legacy), 'a 2025-03-26 batch')
  t.notOk(isModernRequest({}, 'not an object', legacy))
})

t.test('server/discover: supported versions, capabilities, identity, caching hints', async (t) => {
  // discover: "Servers **MUST** implement it." The result has `resultType`, `supportedVersions`,
  // `capabilities`, `_meta['io.modelcontextprotocol/serverInfo']`, `instructions`, `ttlMs`, `cacheScope`.
  const { status, json } = await send(request('server/discover', {}, 'discover-1'), headersFor('server/discover'))
  t.equal(status, 200)
  t.same(json, {
    jsonrpc: '2.0',
    id: 'discover-1',
    result: {
      resultType: 'complete',
      supportedVersions: [MODERN_VERSION, ...SUPPORTED_PROTOCOL_VERSIONS],
      capabilities: CAPABILITIES,
      instructions: 'Tools are operations.',
      ttlMs: LIST_TTL_MS,
      cacheScope: 'public',
      _meta: { 'io.modelcontextprotocol/serverInfo': SERVER_INFO },
    },
  })
  // basic/index: "Clients **SHOULD** include `io.modelcontextprotocol/clientInfo`" (a SHOULD: its absence is served).
  const { 'io.modelcontextprotocol/clientInfo': _info, ...noInfo } = META
  const body = { jsonrpc: '2.0', id: 2, method: 'server/discover', params: { _meta: noInfo } }
  t.equal((await send(body, headersFor('server/discover'))).status, 200, 'clientInfo is optional')
})

t.test("tools/list: resultType, ttlMs and cacheScope, the tools in the table's order every time", async (t) => {
  // caching: "Servers MUST include caching hints on results with `resultType: "complete"`
  // returned by ... `tools/list`"; "Servers **MUST** provide a `ttlMs` value that is `>= 0`".
  const first = await send(request('tools/list'), headersFor('tools/list'))
  t.equal(first.status, 200)
  t.match(first.json?.result, { resultType: 'complete', ttlMs: LIST_TTL_MS, cacheScope: 'public', _meta: { 'io.modelcontextprotocol/serverInfo': SERVER_INFO } })
  t.ok(first.json?.result.ttlMs >= 0)
  t.notOk('nextCursor' in (first.json?.result ?? {}), 'one page')
  // tools: "Servers **SHOULD** return tools in a deterministic order".
  t.same(
    first.json?.result.tools.map((tool: Json) => tool.name),
    names,
  )
  const second = await send(request('tools/list', {}, 2), headersFor('tools/list'))
  t.same(second.json?.result.tools, first.json?.result.tools, 'the same list, in the same order')
  // pagination: "Invalid cursors SHOULD result in an error with code -32602".
  const cursor = await send(request('tools/list', { cursor: 'abc' }, 3), headersFor('tools/list'))
  t.match(cursor.json, { id: 3, error: { code: -32602, data: { field: 'params.cursor' } } })
})

t.test("tools/call: the tool runs with the call's _meta (payments as today); the result has resultType and serverInfo", async (t) => {
  calls.length = 0
  const payment = { x402Version: 2, payload: { signature: '0x1' } }
  const body = request('tools/call', { name: 'get_weather', arguments: { location: 'Seattle' }, _meta: { 'x402/payment': payment } }, 7)
  const { status, json } = await send(body, headersFor('tools/call', 'get_weather'))
  t.equal(status, 200)
  t.equal(calls.length, 1)
  t.same(calls[0]?.args, { location: 'Seattle' })
  t.same(calls[0]?.meta?.['x402/payment'], payment, 'the payment reaches the tool call as over 2025-11-25')
  // basic/index: "The `result` **MUST** include a `resultType` field"; servers "SHOULD" put serverInfo in "every result's `_meta`".
  t.same(json?.result, {
    ...paidResult,
    resultType: 'complete',
    _meta: { ...paidResult._meta, 'io.modelcontextprotocol/serverInfo': SERVER_INFO },
  })
  const unknown = await send(request('tools/call', { name: 'nope' }, 8), headersFor('tools/call', 'nope'))
  t.match(unknown, { status: 200, json: { id: 8, error: { code: -32602 } } }, 'an unknown tool is invalid params')
  const nameless = await send(request('tools/call', { arguments: {} }, 9), headersFor('tools/call', 'x'))
  t.match(nameless.json, { id: 9, error: { code: -32602, data: { field: 'params.name' } } })
  const arrayArgs = await send(request('tools/call', { name: 'getThing', arguments: [] }, 10), headersFor('tools/call', 'getThing'))
  t.match(arrayArgs.json, { id: 10, error: { code: -32602, data: { field: 'params.arguments' } } })
  t.equal(calls.length, 1, 'no refused call ran')
})

t.test('per-request _meta: a missing required field is -32602 with HTTP 400', async (t) => {
  // basic/index: "A request missing any required field is malformed; the server **MUST** reject it
  // with JSON-RPC error code `-32602` (Invalid params). On HTTP, the response status **MUST** be `400 Bad Request`."
  const cases: [string, Json | undefined][] = [
    ['no _meta', undefined],
    ['no protocolVersion', { 'io.modelcontextprotocol/clientCapabilities': {} }],
    ['no clientCapabilities', { 'io.modelcontextprotocol/protocolVersion': MODERN_VERSION }],
    ['clientCapabilities not an object', { ...META, 'io.modelcontextprotocol/clientCapabilities': [] }],
    ['protocolVersion not a string', { ...META, 'io.modelcontextprotocol/protocolVersion': 20260728 }],
    ['clientInfo without a version', { ...META, 'io.modelcontextprotocol/clientInfo': { name: 'x' } }],
    ['an unknown logLevel', { ...META, 'io.modelcontextprotocol/logLevel': 'loud' }],
  ]
  for (const [label, meta] of cases) {
    const body = { jsonrpc: '2.0', id: 101, method: 'server/discover', params: meta === undefined ? {} : { _meta: meta } }
    const { status, json } = await send(body, headersFor('server/discover'))
    t.equal(status, 400, `${label}: 400`)
    t.match(json, { jsonrpc: '2.0', id: 101, error: { code: -32602, message: /Invalid params/ } }, `${label}: -32602 with the request's id`)
  }
})

t.test('UnsupportedProtocolVersion: -32022, HTTP 400, the supported list and the requested version', async (t) => {
  // versioning: "it **MUST** respond with an UnsupportedProtocolVersionError listing the versions it
  // does support: {code: -32022, data: {supported: [...], requested: "1900-01-01"}}"; streamable-http: "with `400 Bad Request`".
  const body = request('tools/list', { _meta: { 'io.modelcontextprotocol/protocolVersion': '1900-01-01' } }, 301)
  const { status, json } = await send(body, { ...headersFor('tools/list'), 'mcp-protocol-version': '1900-01-01' })
  t.equal(status, 400)
  t.same(json?.error.data, { supported: [MODERN_VERSION, ...SUPPORTED_PROTOCOL_VERSIONS], requested: '1900-01-01' })
  t.match(json, { id: 301, error: { code: -32022, message: /Unsupported protocol version/ } })
  // The header alone naming an unknown version is the same error (not a missing _meta).
  const headerOnly = await send({ jsonrpc: '2.0', id: 302, method: 'tools/list' }, { ...headersFor('tools/list'), 'mcp-protocol-version': 'v999.0.0' })
  t.match(headerOnly, { status: 400, json: { id: 302, error: { code: -32022, data: { requested: 'v999.0.0' } } } })
})

t.test('HeaderMismatch: the standard headers must be present and agree with the body (-32020, HTTP 400)', async (t) => {
  // streamable-http "Server Validation": "Servers ... **MUST** reject requests where the values specified
  // in the headers do not match the corresponding values in the request body"; "return HTTP status
  // `400 Bad Request` and ... `-32020` (HeaderMismatch)"; failures include "A required standard header
  // (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`) is missing".
  const call = request('tools/call', { name: 'get_weather', arguments: {} }, 5)
  const cases: [string, unknown, Record<string, string | undefined>][] = [
    ['version header differs from _meta', request('tools/list', { _meta: { 'io.modelcontextprotocol/protocolVersion': 'v999.0.0' } }), headersFor('tools/list')],
    ['version header missing', request('tools/list'), { ...headersFor('tools/list'), 'mcp-protocol-version': undefined }],
    ['Mcp-Method differs', request('tools/list'), headersFor('prompts/list')],
    ['Mcp-Method missing', request('tools/list'), { ...headersFor('tools/list'), 'mcp-method': undefined }],
    // "Header _values_ (such as method names) are case-sensitive."
    ['Mcp-Method in another case', request('tools/list'), headersFor('Tools/List')],
    ['Mcp-Name differs', call, headersFor('tools/call', 'wrong_tool_name')],
    ['Mcp-Name missing', call, headersFor('tools/call')],
    ['Mcp-Name with a raw non-ASCII byte', call, headersFor('tools/call', 'get_weather\u00e9')],
    ['Mcp-Name with a malformed base64 value', call, headersFor('tools/call', '=?base64?***?=')],
  ]
  calls.length = 0
  for (const [label, body, headers] of cases) {
    const { status, json } = await send(body, headers)
    t.equal(status, 400, `${label}: 400`)
    t.match(json, { error: { code: -32020, message: /^Header mismatch/ } }, `${label}: -32020`)
    t.equal(json?.id, (body as Json).id, `${label}: the request's id`)
  }
  t.equal(calls.length, 0, 'no mismatched call ran')
  const mismatch = await send(call, headersFor('tools/call', 'wrong_tool_name'))
  t.match(mismatch.json?.error.message, "Mcp-Name header value 'wrong_tool_name' does not match body value 'get_weather'")
})

t.test('Mcp-Name: OWS trimmed and the =?base64?…?= form decoded before comparing', async (t) => {
  // streamable-http "Value Encoding": "servers **MUST** decode an encoded `Mcp-Name` ... value before
  // comparing it to the corresponding request body value"; `Mcp-Name: =?base64?{Base64EncodedValue}?=`.
  calls.length = 0
  const encoded = `=?base64?${Buffer.from('Ünïcode').toString('base64')}?=`
  const unicode = await send(request('tools/call', { name: 'Ünïcode' }), headersFor('tools/call', encoded))
  t.equal(unicode.status, 200)
  t.equal(unicode.json?.result.resultType, 'complete')
  const spaced = await send(request('tools/call', { name: 'get_weather' }), headersFor('tools/call', '  get_weather  '))
  t.equal(spaced.status, 200, 'OWS around a field value is not part of it')
  // "clients **MUST** also Base64-encode any plain-ASCII value that matches the sentinel pattern".
  const literal = await send(request('tools/call', { name: 'get_weather' }), headersFor('tools/call', `=?base64?${Buffer.from('get_weather').toString('base64')}?=`))
  t.equal(literal.status, 200)
  t.equal(calls.length, 3)
  // Header names are case-insensitive: Node hands them over lower-cased, which is what the handler reads.
})

t.test("methods this revision removed, and unknown ones: 404 with -32601 and the request's id", async (t) => {
  // streamable-http: "If the server does not implement the requested RPC method, it **MUST** respond
  // with `404 Not Found` and a JSON-RPC error with code `-32601`"; changelog: "Remove `ping`,
  // `logging/setLevel`", "remove the `initialize`/`notifications/initialized` handshake".
  for (const method of ['initialize', 'ping', 'logging/setLevel', 'resources/subscribe', 'prompts/list', 'unknown/method']) {
    const { status, json } = await send(request(method, {}, 500), headersFor(method))
    t.equal(status, 404, `${method}: 404`)
    t.match(json, { id: 500, error: { code: -32601 } }, `${method}: -32601`)
  }
})

t.test('transport rules: Accept, one message per POST, notifications 202, no responses, bad envelopes', async (t) => {
  // streamable-http: "The client **MUST** include an `Accept` header listing both `application/json` and `text/event-stream`".
  const noAccept = await send(request('tools/list'), { ...headersFor('tools/list'), accept: 'application/json' })
  t.equal(noAccept.status, 406)
  // "The body of the HTTP POST **MUST** be a single JSON-RPC _request_ or _notification_."
  const batch = await send([request('tools/list')], headersFor('tools/list'))
  t.match(batch, { status: 400, json: { id: null, error: { code: -32600 } } })
  // "If the server accepts it, the server **MUST** return HTTP status code `202 Accepted` with no body."
  const notification = await send({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { _meta: META } }, headersFor('notifications/cancelled'))
  t.same(notification, { status: 202, json: undefined })
  // "The client **MUST NOT** send JSON-RPC _responses_."
  const response = await send({ jsonrpc: '2.0', id: 1, result: {} }, headersFor('x'))
  t.match(response, { status: 400, json: { error: { code: -32600 } } })
  // basic/index: "Unlike base JSON-RPC, the ID **MUST NOT** be `null`."
  const nullId = await send({ jsonrpc: '2.0', id: null, method: 'tools/list', params: { _meta: META } }, headersFor('tools/list'))
  t.match(nullId, { status: 400, json: { id: null, error: { code: -32600 } } })
  const paramsArray = await send({ jsonrpc: '2.0', id: 4, method: 'tools/list', params: [] }, headersFor('tools/list'))
  t.match(paramsArray, { status: 400, json: { id: 4, error: { code: -32602 } } })
})

t.test("a tool caller that throws is an internal error with the request's id, not a crash", async (t) => {
  const failing: ToolCaller = async () => {
    throw new Error('boom')
  }
  const answer = await handler(headersFor('tools/call', 'getThing'), request('tools/call', { name: 'getThing' }, 11), failing)
  t.equal(answer.status, 500)
  t.match(JSON.parse(String(answer.body)), { id: 11, error: { code: -32603 } })
})
