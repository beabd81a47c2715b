// Both dispatchers are real: a role in this process is reached with inject into its app, a role
// elsewhere with an HTTP request to its URL. And the POST transport answers JSON-RPC the way the
// Streamable HTTP transport does in JSON mode (batches, notifications, refusals).
import t from 'tap'
import { createServer, type IncomingMessage } from 'node:http'
import Fastify from 'fastify'
import { createOperationDispatcher } from '../../src/mcp/dispatcher.ts'
import { PostTransport } from '../../src/mcp/transport.ts'

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

t.test('the POST transport: requests answered, batches in order, notifications 202, bad messages refused', async (t) => {
  const echo = (transport: PostTransport) => {
    transport.onmessage = (message) => {
      if ('id' in message && 'method' in message) void transport.send({ jsonrpc: '2.0', id: message.id, result: { method: message.method } })
    }
    return transport
  }
  const one = await echo(new PostTransport()).answer(accept, { jsonrpc: '2.0', id: 7, method: 'tools/list' })
  t.same({ status: one.status, body: JSON.parse(one.body ?? '') }, { status: 200, body: { jsonrpc: '2.0', id: 7, result: { method: 'tools/list' } } })
  const batch = await echo(new PostTransport()).answer(accept, [
    { jsonrpc: '2.0', id: 'b', method: 'ping' },
    { jsonrpc: '2.0', method: 'notifications/initialized' },
    { jsonrpc: '2.0', id: 'a', method: 'tools/list' },
  ])
  t.same(
    JSON.parse(batch.body ?? '').map((r: { id: string }) => r.id),
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
    t.match(JSON.parse(answer.body ?? ''), { jsonrpc: '2.0', error: { code: -32600 }, id: null })
  }
  t.equal((await new PostTransport().answer({ accept: 'application/json' }, { jsonrpc: '2.0', id: 1, method: 'x' })).status, 406)
  t.equal((await new PostTransport().answer({ ...accept, 'mcp-protocol-version': '1999-01-01' }, { jsonrpc: '2.0', id: 1, method: 'x' })).status, 400)
})
