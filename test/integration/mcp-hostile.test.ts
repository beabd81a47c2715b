// POST /mcp against hostile JSON-RPC, on the real route (registerMcpRoute, the SDK's Server, the
// real registry's tool table) with raw fetch: a batch past the message limit is refused at once; a
// batch within it is answered in full, its answer bounded, without holding the event loop; a batch
// in a revision without batches is refused; every malformed message gets an answer (no socket is
// left waiting); bad params are -32602 naming the field; Accept is read as a list of media types.
import t from 'tap'
import type { FastifyInstance } from 'fastify'
import { createCatalog } from '../../src/catalog/catalog.ts'
import { registry } from '../../src/catalog/registry.ts'
import { createOperationDispatcher } from '../../src/mcp/dispatcher.ts'
import { registerMcpRoute } from '../../src/mcp/server.ts'
import { MAX_BATCH_ANSWER_BYTES, MAX_BATCH_MESSAGES } from '../../src/mcp/transport.ts'
import { createHttpApp } from '../../src/platform/http.ts'
import { createLogger } from '../../src/platform/logger.ts'
import { createMetrics } from '../../src/platform/metrics.ts'
import { IMPLEMENTED_OPERATIONS } from '../../src/runtime.ts'

type Json = Record<string, any>

const ACCEPT = 'application/json, text/event-stream'
/** A malformed message must be answered well before a client gives up on it. */
const ANSWER_WITHIN_MS = 5_000
/** The longest the event loop may be held while one hostile POST is answered. */
const MAX_STALL_MS = 50

let app: FastifyInstance
let base: string

t.before(async () => {
  const logger = createLogger('silent')
  const urls = { gateway: 'http://127.0.0.1:1', scheduler: 'http://127.0.0.1:1', memory: 'http://127.0.0.1:1' }
  const catalog = createCatalog(registry, { urls, implemented: IMPLEMENTED_OPERATIONS })
  const bodyLimitBytes = 16 * 1024 * 1024
  app = createHttpApp({ name: 'gateway', logger, metrics: createMetrics({ defaultMetrics: false }), bodyLimitBytes })
  registerMcpRoute(app, { catalog, dispatcher: createOperationDispatcher({ local: new Map([['gateway', app]]), urls }), bodyLimitBytes, logger })
  await app.listen({ port: 0, host: '127.0.0.1' })
  const address = app.server.address()
  base = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`
  // Loaded and compiled before anything is timed (the first fetch loads undici, the first POST compiles the route).
  await post([toolsList(0), toolsList(1)])
})
t.teardown(() => app?.close())

async function post(body: unknown, headers: Record<string, string> = {}): Promise<{ status: number; text: string }> {
  const response = await fetch(`${base}/mcp`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: ACCEPT, ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
    signal: AbortSignal.timeout(ANSWER_WITHIN_MS),
  })
  return { status: response.status, text: await response.text() }
}

const toolsList = (id: number) => ({ jsonrpc: '2.0', id, method: 'tools/list' })

/**
 * Runs `work` while timing the longest turn of this process's event loop (it serves and asks), in
 * CPU time of the main thread between two timer ticks: wall time on a shared machine would time
 * the neighbours too.
 */
async function longestTurn<T>(work: () => Promise<T>): Promise<{ result: T; longestMs: number }> {
  let longestMs = 0
  let last = process.threadCpuUsage()
  let watching = true
  let timer: NodeJS.Timeout | undefined
  const tick = () => {
    const now = process.threadCpuUsage()
    longestMs = Math.max(longestMs, (now.user - last.user + now.system - last.system) / 1000)
    last = now
    if (watching) timer = setTimeout(tick, 1)
  }
  timer = setTimeout(tick, 1)
  try {
    return { result: await work(), longestMs }
  } finally {
    watching = false
    clearTimeout(timer)
  }
}

t.test(`a batch of more than ${MAX_BATCH_MESSAGES} messages is refused at once, whatever it holds`, async (t) => {
  const body = JSON.stringify(Array.from({ length: 2_000 }, (_, i) => toolsList(i)))
  const { result, longestMs } = await longestTurn(() => post(body))
  t.ok(longestMs < MAX_STALL_MS, `answered without running it: the event loop was held at most ${longestMs.toFixed(1)} ms (CPU) at a time`)
  t.equal(result.status, 400)
  t.match(JSON.parse(result.text), { jsonrpc: '2.0', id: null, error: { code: -32600, message: new RegExp(`at most ${MAX_BATCH_MESSAGES}`) } })
})

t.test(`a batch of ${MAX_BATCH_MESSAGES} tools/list (2025-03-26): every id answered, the answer bounded, the event loop free`, async (t) => {
  const ids = Array.from({ length: MAX_BATCH_MESSAGES }, (_, i) => i)
  const one = (await post(toolsList(0))).text
  for (const version of [undefined, '2025-03-26']) {
    const headers: Record<string, string> = version ? { 'mcp-protocol-version': version } : {}
    const { result, longestMs } = await longestTurn(() => post(ids.map(toolsList), headers))
    t.equal(result.status, 200, `protocol ${version ?? '(no header: 2025-03-26)'}`)
    const bytes = Buffer.byteLength(result.text)
    t.ok(bytes <= MAX_BATCH_ANSWER_BYTES + Buffer.byteLength(one), `the answer is bounded (${bytes} bytes)`)
    const answers = JSON.parse(result.text) as Json[]
    t.same(
      answers.map((answer) => answer.id),
      ids,
      'one answer per request, in order',
    )
    const listed = answers.filter((answer) => answer.result)
    const refused = answers.filter((answer) => answer.error)
    t.ok(listed.length > 0, `${listed.length} tool lists`)
    t.equal(listed.length + refused.length, ids.length)
    t.ok(
      refused.every((answer) => answer.error.code === -32000 && /answers passed \d+ bytes/.test(answer.error.message)),
      `${refused.length} answers past the budget are errors saying so`,
    )
    t.ok(longestMs < MAX_STALL_MS, `the event loop was held at most ${longestMs.toFixed(1)} ms (CPU) at a time`)
  }
})

t.test('a batch in a revision without batches (2025-06-18 on) is refused; one message is answered', async (t) => {
  for (const version of ['2025-06-18', '2025-11-25']) {
    const batch = await post([toolsList(1), toolsList(2)], { 'mcp-protocol-version': version })
    t.equal(batch.status, 400, version)
    t.match(JSON.parse(batch.text), { jsonrpc: '2.0', id: null, error: { code: -32600, message: new RegExp(`${version}.*batch`) } })
    const single = await post(toolsList(3), { 'mcp-protocol-version': version })
    t.equal(single.status, 200)
    t.match(JSON.parse(single.text), { id: 3, result: { tools: [] } })
  }
})

t.test('initialize inside a 2025-03-26 batch is refused; the rest of the batch is answered', async (t) => {
  const initialize = { jsonrpc: '2.0', id: 7, method: 'initialize', params: { protocolVersion: '2025-03-26', capabilities: {}, clientInfo: { name: 'batcher', version: '1' } } }
  const answer = await post([initialize, toolsList(8)])
  t.equal(answer.status, 200)
  const [first, second] = JSON.parse(answer.text) as Record<string, any>[]
  t.match(first, { jsonrpc: '2.0', id: 7, error: { code: -32600, message: /initialize.*batch/ } }, 'initialize refused with its id')
  t.match(second, { id: 8, result: { tools: [] } }, 'the other request is answered')
})

const invalidRequest = { status: 400, answer: { jsonrpc: '2.0', id: null, error: { code: -32600 } } }
const invalidParams = (id: number | null, field: string) => ({
  status: id === null ? 400 : 200,
  answer: { jsonrpc: '2.0', id, error: { code: -32602, message: new RegExp(field.replaceAll('.', '\\.')), data: { field } } },
})
const MALFORMED: [string, string, { status: number; answer: Json }][] = [
  ['a fractional id', '{"jsonrpc":"2.0","id":1.5,"method":"tools/list"}', invalidRequest],
  ['an id past the safe integers', '{"jsonrpc":"2.0","id":1e300,"method":"tools/list"}', invalidRequest],
  ['a null id', '{"jsonrpc":"2.0","id":null,"method":"tools/list"}', invalidRequest],
  ['an object id', '{"jsonrpc":"2.0","id":{},"method":"tools/list"}', invalidRequest],
  ['jsonrpc 1.0', '{"jsonrpc":"1.0","id":1,"method":"tools/list"}', invalidRequest],
  ['a member JSON-RPC does not define', '{"jsonrpc":"2.0","id":1,"method":"tools/list","_meta":"x"}', invalidRequest],
  ['a method that is not a string', '{"jsonrpc":"2.0","id":1,"method":5}', invalidRequest],
  ['both a method and a result', '{"jsonrpc":"2.0","id":1,"method":"ping","result":{}}', invalidRequest],
  ['a response without an id', '{"jsonrpc":"2.0","result":{}}', invalidRequest],
  ['an error response with a fractional code', '{"jsonrpc":"2.0","id":1,"error":{"code":1.5,"message":"x"}}', invalidRequest],
  ['params as an array', '{"jsonrpc":"2.0","id":1,"method":"tools/list","params":[]}', invalidParams(1, 'params')],
  ['params null', '{"jsonrpc":"2.0","id":2,"method":"tools/list","params":null}', invalidParams(2, 'params')],
  ['params._meta a number', '{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"_meta":5}}', invalidParams(3, 'params._meta')],
  ['params._meta a string', '{"jsonrpc":"2.0","id":4,"method":"tools/list","params":{"_meta":"x"}}', invalidParams(4, 'params._meta')],
  ['an object progressToken', '{"jsonrpc":"2.0","id":5,"method":"tools/list","params":{"_meta":{"progressToken":{}}}}', invalidParams(5, 'params._meta.progressToken')],
  ['a fractional progressToken', '{"jsonrpc":"2.0","id":6,"method":"ping","params":{"_meta":{"progressToken":0.5}}}', invalidParams(6, 'params._meta.progressToken')],
  [
    'a related task without a task id',
    '{"jsonrpc":"2.0","id":7,"method":"ping","params":{"_meta":{"io.modelcontextprotocol/related-task":{}}}}',
    invalidParams(7, 'params._meta.io.modelcontextprotocol/related-task.taskId'),
  ],
  ['a notification with params as an array', '{"jsonrpc":"2.0","method":"notifications/initialized","params":[]}', invalidParams(null, 'params')],
  ['tools/list with a numeric cursor', '{"jsonrpc":"2.0","id":8,"method":"tools/list","params":{"cursor":5}}', invalidParams(8, 'params.cursor')],
  ['tools/call without a name', '{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"arguments":{}}}', invalidParams(9, 'params.name')],
  ['tools/call with arguments an array', '{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"getTask","arguments":[1,2]}}', invalidParams(10, 'params.arguments')],
  ['tools/call with arguments a string', '{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"getTask","arguments":"x"}}', invalidParams(11, 'params.arguments')],
  [
    'initialize without a protocol version',
    '{"jsonrpc":"2.0","id":12,"method":"initialize","params":{"capabilities":{},"clientInfo":{"name":"c","version":"1"}}}',
    invalidParams(12, 'params.protocolVersion'),
  ],
]

t.test('every malformed message is answered: -32600 with id null, or -32602 naming the field', async (t) => {
  for (const [name, body, expected] of MALFORMED) {
    const answer = await post(body).catch((error: Error) => ({ status: 0, text: `no answer: ${error.name}` }))
    t.equal(answer.status, expected.status, `${name}: HTTP ${expected.status}`)
    let parsed: Json
    try {
      parsed = JSON.parse(answer.text)
    } catch {
      t.fail(`${name}: a JSON-RPC answer, not ${JSON.stringify(answer.text)}`)
      continue
    }
    t.match(parsed, expected.answer, name)
    if (parsed.error?.code === -32602) t.notMatch(parsed.error.message, /invalid_type|\[\s*\{/, `${name}: a sentence, not a schema dump`)
  }
  // A tool call's arguments that are not an object say so plainly.
  const array = JSON.parse((await post(MALFORMED.find(([name]) => name === 'tools/call with arguments an array')?.[1])).text)
  t.match(array.error.message, /params\.arguments must be an object/)
})

t.test('malformed messages in a batch: one answer each, beside the valid request', async (t) => {
  // An initialize is refused in any batch (its own test above), so it is left out here.
  const batchable = MALFORMED.filter(([, body]) => !body.includes('"method":"initialize"'))
  const bodies = batchable.map(([, body]) => JSON.parse(body))
  const answer = await post([...bodies, toolsList(99)])
  t.equal(answer.status, 200)
  const answers = JSON.parse(answer.text) as Json[]
  const expected = batchable.map(([, , e]) => e.answer)
  t.equal(answers.length, expected.length + 1, 'one answer per message')
  t.match(answers.slice(0, expected.length), expected)
  t.match(answers.at(-1), { id: 99, result: { tools: [] } })
})

t.test('Accept is a list of media types: both JSON and SSE must be listed, with q > 0', async (t) => {
  for (const [accept, status] of [
    ['application/json', 406],
    ['text/event-stream', 406],
    ['*/*', 406],
    ['application/json-seq, text/event-stream', 406],
    ['application/json, text/event-stream-x', 406],
    ['application/json, text/event-stream;q=0', 406],
    ['application/json;q=0.0, text/event-stream', 406],
    [ACCEPT, 200],
    ['Application/JSON, Text/Event-Stream', 200],
    ['text/event-stream; q=0.5, application/json; charset=utf-8', 200],
  ] as const) {
    const answer = await post(toolsList(1), { accept })
    t.equal(answer.status, status, accept)
    if (status === 406) t.match(JSON.parse(answer.text), { jsonrpc: '2.0', id: null, error: { code: -32000, message: /Not Acceptable/ } })
  }
})

t.test('arguments nested past the JSON depth bound are refused as the body is parsed, never a 5xx', async (t) => {
  const nested = (levels: number) => '{"a":'.repeat(levels) + '1' + '}'.repeat(levels)
  for (const levels of [5_000, 100_000]) {
    const body = `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"rememberMemory","arguments":{"content":"x","metadata":${nested(levels)}}}}`
    const { status, text } = await post(body)
    t.equal(status, 400, `${levels} levels: 400`)
    t.match(JSON.parse(text), { jsonrpc: '2.0', error: { code: -32600, message: /nests objects and arrays more than/ } }, `${levels} levels: -32600`)
  }
})
