// Both dispatchers are real: a role in this process is reached with inject into its app, a role
// elsewhere with an HTTP request to its URL. And the POST transport answers JSON-RPC the way the
// Streamable HTTP transport does in JSON mode (batches, notifications, refusals).
import t from 'tap'
import { createServer, type IncomingMessage } from 'node:http'
import Fastify from 'fastify'
import { setImmediate as nextTurn } from 'node:timers/promises'
import { JSONRPCMessageSchema, type JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js'
import { createOperationDispatcher } from '../../src/mcp/dispatcher.ts'
import { MAX_BATCH_ANSWER_BYTES, MAX_BATCH_IN_FLIGHT, MAX_BATCH_MESSAGES, PostTransport, type HttpAnswer } from '../../src/mcp/transport.ts'

const request = {
  server: 'scheduler',
  method: 'POST',
  url: '/api/v1/things?x=1',
  headers: { 'content-type': 'application/json', 'x-forwarded-for': '203.0.113.7' },
  body: '{"a":1}',
} as const

t.test('a role in this process: inject into its app', async (t) => {
  const app = Fastify()
  app.post('/api/v1/things', async (req, reply) => {
    reply.header('x-plan-id', 'p1').code(201)
    return { query: req.query, body: req.body, forwarded: req.headers['x-forwarded-for'] }
  })
  t.teardown(() => app.close())
  const dispatcher = createOperationDispatcher({ local: new Map([['scheduler', app]]), urls: { gateway: 'http://unused', scheduler: 'http://unused', memory: 'http://unused' } })
  const response = await dispatcher.dispatch({ ...request, headers: { ...request.headers } })
  t.equal(response.status, 201)
  t.equal(response.headers['x-plan-id'], 'p1')
  t.same(JSON.parse(response.body), { query: { x: '1' }, body: { a: 1 }, forwarded: '203.0.113.7' })
})

t.test('a role elsewhere: an HTTP request to its URL', async (t) => {
  let seen: { method?: string; url?: string; forwarded?: string; body: string } = { body: '' }
  const server = createServer((req: IncomingMessage, res) => {
    let body = ''
    req.on('data', (chunk: Buffer) => (body += chunk.toString()))
    req.on('end', () => {
      seen = { method: req.method, url: req.url, forwarded: req.headers['x-forwarded-for'] as string, body }
      res.writeHead(402, { 'content-type': 'application/problem+json', 'payment-required': 'abc' })
      res.end('{"status":402}')
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => server.close())
  const address = server.address()
  const base = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}/prefix`
  const dispatcher = createOperationDispatcher({ local: new Map(), urls: { gateway: base, scheduler: base, memory: base } })
  const response = await dispatcher.dispatch({ ...request, headers: { ...request.headers } })
  t.same(seen, { method: 'POST', url: '/prefix/api/v1/things?x=1', forwarded: '203.0.113.7', body: '{"a":1}' })
  t.equal(response.status, 402)
  t.equal(response.headers['payment-required'], 'abc')
  t.equal(response.body, '{"status":402}')
})

const accept = { accept: 'application/json, text/event-stream' }
const body = (answer: HttpAnswer) => JSON.parse(String(answer.body ?? 'null'))

t.test('the POST transport: requests answered, batches in order, notifications 202, bad messages refused', async (t) => {
  const echo = (transport: PostTransport) => {
    transport.onmessage = (message) => {
      if ('id' in message && 'method' in message) void transport.send({ jsonrpc: '2.0', id: message.id, result: { method: message.method } })
    }
    return transport
  }
  const one = await echo(new PostTransport()).answer(accept, { jsonrpc: '2.0', id: 7, method: 'tools/list' })
  t.same({ status: one.status, body: body(one) }, { status: 200, body: { jsonrpc: '2.0', id: 7, result: { method: 'tools/list' } } })
  const batch = await echo(new PostTransport()).answer(accept, [
    { jsonrpc: '2.0', id: 'b', method: 'ping' },
    { jsonrpc: '2.0', method: 'notifications/initialized' },
    { jsonrpc: '2.0', id: 'a', method: 'tools/list' },
  ])
  t.same(
    body(batch).map((r: { id: string }) => r.id),
    ['b', 'a'],
  )
  t.same(await echo(new PostTransport()).answer(accept, { jsonrpc: '2.0', method: 'notifications/initialized' }), { status: 202, body: undefined })
  for (const bad of [
    { hello: 1 },
    [],
    { jsonrpc: '2.0', id: {}, method: 'x' },
    { jsonrpc: '1.0', id: 1, method: 'x' },
    [
      { jsonrpc: '2.0', id: 1, method: 'a' },
      { jsonrpc: '2.0', id: 1, method: 'b' },
    ],
  ]) {
    const answer = await echo(new PostTransport()).answer(accept, bad)
    t.equal(answer.status, 400, JSON.stringify(bad))
    t.match(body(answer), { jsonrpc: '2.0', error: { code: -32600 }, id: null })
  }
  t.equal((await new PostTransport().answer({ accept: 'application/json' }, { jsonrpc: '2.0', id: 1, method: 'x' })).status, 406)
  t.equal((await new PostTransport().answer({ ...accept, 'mcp-protocol-version': '1999-01-01' }, { jsonrpc: '2.0', id: 1, method: 'x' })).status, 400)
})

/** A transport whose "server" answers each request with `result` after `delayMs`, counting what it was handed. */
function echoing(result: (message: JSONRPCMessage) => Record<string, unknown> = (m) => ({ method: 'method' in m ? m.method : '' }), delayMs = 0) {
  const transport = new PostTransport()
  const seen = { delivered: 0, inFlight: 0, maxInFlight: 0 }
  transport.onmessage = (message) => {
    seen.delivered += 1
    if (!('id' in message && 'method' in message)) return
    seen.inFlight += 1
    seen.maxInFlight = Math.max(seen.maxInFlight, seen.inFlight)
    setTimeout(() => {
      seen.inFlight -= 1
      void transport.send({ jsonrpc: '2.0', id: message.id, result: result(message) })
    }, delayMs)
  }
  return { transport, seen }
}

t.test('the POST transport hands the SDK exactly the messages its schema takes, and answers every other one', async (t) => {
  const ids: unknown[] = [0, 7, -3, 2 ** 53 - 1, 2 ** 53, 1.5, 1e300, '', 'a', null, {}, [], true]
  const metas: unknown[] = [
    5,
    'x',
    [],
    null,
    {},
    { progressToken: 't' },
    { progressToken: 9 },
    { progressToken: {} },
    { progressToken: 0.5 },
    { progressToken: null },
    { 'io.modelcontextprotocol/related-task': { taskId: 'x' } },
    { 'io.modelcontextprotocol/related-task': {} },
    { 'io.modelcontextprotocol/related-task': { taskId: 5 } },
    { 'io.modelcontextprotocol/related-task': 'x' },
    { other: 1 },
  ]
  const params: unknown[] = [undefined, {}, [], null, 5, 'x', { cursor: 'c' }, ...metas.map((_meta) => ({ _meta }))]
  const results: unknown[] = [{}, [], null, 5, { tools: [] }, ...metas.map((_meta) => ({ _meta }))]
  const errors: unknown[] = [
    { code: 1, message: 'x' },
    { code: 1.5, message: 'x' },
    { code: 1 },
    { code: 1, message: 5 },
    { code: 1, message: 'x', data: [1] },
    { code: 1, message: 'x', more: 1 },
    null,
    [],
  ]
  const corpus: unknown[] = [42, 'x', null, { jsonrpc: '2.0' }, { jsonrpc: '1.0', id: 1, method: 'm' }, { id: 1, method: 'm' }, { jsonrpc: 2, id: 1, method: 'm' }]
  const omit = (value: Record<string, unknown>) => Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined))
  for (const id of [...ids, undefined]) {
    for (const p of params) corpus.push(omit({ jsonrpc: '2.0', id, method: 'tools/list', params: p }))
    for (const method of [5, null, undefined]) corpus.push(omit({ jsonrpc: '2.0', id, method }))
    for (const result of results) corpus.push(omit({ jsonrpc: '2.0', id, result }))
    for (const error of errors) corpus.push(omit({ jsonrpc: '2.0', id, error }))
    corpus.push(
      omit({ jsonrpc: '2.0', id, method: 'ping', extra: 1 }),
      omit({ jsonrpc: '2.0', id, method: 'ping', result: {} }),
      omit({ jsonrpc: '2.0', id, result: {}, error: { code: 1, message: 'x' } }),
    )
  }
  let taken = 0
  for (const message of corpus) {
    const { transport, seen } = echoing()
    const answer = await transport.answer(accept, message)
    const sdk = JSONRPCMessageSchema.safeParse(message).success
    if (sdk) taken += 1
    t.equal(seen.delivered, sdk ? 1 : 0, `${JSON.stringify(message)}: ${sdk ? 'handed to the SDK' : 'refused before the SDK'}`)
    if (!sdk) {
      t.ok(answer.status === 400 || answer.status === 200, `${JSON.stringify(message)}: answered (${answer.status})`)
      t.match(body(answer), { jsonrpc: '2.0', error: { code: /^-3260[02]$/ } })
    }
  }
  t.ok(taken > 50 && taken < corpus.length - 50, `${taken} of ${corpus.length} messages are the SDK's`)
})

t.test(`batches: at most ${MAX_BATCH_MESSAGES} messages, none in revisions without batches, ${MAX_BATCH_IN_FLIGHT} at a time, a turn for others between messages`, async (t) => {
  const list = (id: number) => ({ jsonrpc: '2.0', id, method: 'tools/list' })
  const over = await echoing().transport.answer(
    accept,
    Array.from({ length: MAX_BATCH_MESSAGES + 1 }, (_, i) => list(i)),
  )
  t.equal(over.status, 400)
  t.match(body(over), { id: null, error: { code: -32600, message: `Invalid Request: a batch holds at most ${MAX_BATCH_MESSAGES} messages` } })
  for (const version of ['2025-06-18', '2025-11-25']) {
    const { transport, seen } = echoing()
    const answer = await transport.answer({ ...accept, 'mcp-protocol-version': version }, [list(1)])
    t.equal(answer.status, 400, `${version}: a batch of one is still a batch`)
    t.equal(seen.delivered, 0)
  }
  const { transport, seen } = echoing(undefined, 2)
  let turns = 0
  let watching = true
  void (async () => {
    while (watching) {
      await nextTurn()
      turns += 1
    }
  })()
  const full = await transport.answer(
    { ...accept, 'mcp-protocol-version': '2025-03-26' },
    Array.from({ length: MAX_BATCH_MESSAGES }, (_, i) => list(i)),
  )
  watching = false
  t.equal(full.status, 200)
  t.same(
    body(full).map((answer: { id: number }) => answer.id),
    Array.from({ length: MAX_BATCH_MESSAGES }, (_, i) => i),
  )
  t.equal(seen.maxInFlight, MAX_BATCH_IN_FLIGHT, 'requests of one batch run a few at a time')
  t.ok(turns >= MAX_BATCH_MESSAGES - 1, `others had ${turns} turns while it ran`)
})

t.test(`a batch's answers stop at ${MAX_BATCH_ANSWER_BYTES} bytes: the rest are errors, and are not run`, async (t) => {
  const big = 'x'.repeat(1024 * 1024)
  const { transport, seen } = echoing(() => ({ big }))
  const count = 20
  const answer = await transport.answer(
    accept,
    Array.from({ length: count }, (_, i) => ({ jsonrpc: '2.0', id: i, method: 'tools/list' })),
  )
  t.equal(answer.status, 200)
  t.ok((answer.body?.length ?? 0) <= MAX_BATCH_ANSWER_BYTES + big.length + 100, 'bounded')
  const answers = body(answer) as { id: number; result?: unknown; error?: { code: number; message: string } }[]
  t.equal(answers.length, count, 'every request answered')
  const sent = answers.filter((a) => a.result).length
  t.ok(sent >= 3 && sent <= 4, `${sent} results fit`)
  for (const refused of answers.filter((a) => a.error)) t.match(refused.error, { code: -32000, message: /answers passed \d+ bytes/ })
  t.ok(seen.delivered <= sent + MAX_BATCH_IN_FLIGHT, `only ${seen.delivered} were run`)
  const alone = await echoing(() => ({ big: 'y'.repeat(MAX_BATCH_ANSWER_BYTES) })).transport.answer(accept, { jsonrpc: '2.0', id: 1, method: 'tools/list' })
  t.match(body(alone), { id: 1, result: {} }, 'one answer alone is never cut')
})
