// DNS rebinding and cross-site writes against `npm start` (the real CLI, every role on loopback): a
// request whose Host is a domain of someone else's (what a browser sends after that domain was
// re-pointed at 127.0.0.1) is refused 421 problem+json naming header.host on every listener
// before any route, prepared document or 402; a state-changing request from another site's page
// is refused 403 naming header.origin; the service's own names, loopback names and same-origin
// pages keep working. The official conformance scenario is in mcp-conformance.test.ts.
import { request as httpRequest } from 'node:http'
import t from 'tap'
import { type CliProcess, startCli } from '../helpers/cli.ts'

interface Answer {
  status: number
  type: string
  body: string
}

/** A raw HTTP request (fetch cannot set Host). */
function send(base: string, method: string, pathname: string, headers: Record<string, string>, body?: string): Promise<Answer> {
  const url = new URL(pathname, base)
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      { host: url.hostname, port: url.port, method, path: url.pathname + url.search, headers: { ...headers, ...(body ? { 'content-length': Buffer.byteLength(body) } : {}) } },
      (res) => {
        let text = ''
        res.setEncoding('utf8')
        res.on('data', (chunk: string) => (text += chunk))
        res.on('end', () => resolve({ status: res.statusCode ?? 0, type: String(res.headers['content-type'] ?? ''), body: text }))
      },
    )
    req.on('error', reject)
    req.end(body)
  })
}

let cli: CliProcess
t.before(async () => {
  cli = await startCli()
})
t.teardown(() => cli?.stop())

const mcpInit = JSON.stringify({
  jsonrpc: '2.0',
  id: 1,
  method: 'initialize',
  params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'host-guard', version: '1' } },
})
const mcpHeaders = { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25' }

t.test('a rebinding Host is refused on every listener, before routes, documents and 402s', async (t) => {
  const cases: [string, string, string, string?][] = [
    [cli.gateway, 'POST', '/mcp', mcpInit],
    [cli.gateway, 'GET', '/.well-known/x402'],
    [cli.gateway, 'GET', '/openapi.json'],
    [cli.gateway, 'POST', '/dev/faucet', JSON.stringify({ address: '0x0000000000000000000000000000000000000001', amountMicros: '1' })],
    [cli.gateway, 'POST', '/auth/register'],
    [cli.scheduler, 'GET', '/api/v1/rates'],
    [cli.scheduler, 'POST', '/api/v1/tasks', '{}'],
    [cli.memory, 'GET', '/healthz'],
  ]
  for (const [base, method, pathname, body] of cases) {
    const port = new URL(base).port
    const answer = await send(base, method, pathname, { ...mcpHeaders, host: `evil.example.com:${port}`, origin: 'http://evil.example.com' }, body)
    t.equal(answer.status, 421, `${method} ${pathname} on :${port}`)
    t.match(answer.type, /application\/problem\+json/)
    t.match(JSON.parse(answer.body), { code: 'host_not_allowed', field: 'header.host', status: 421 })
  }
})

t.test('our own hosts keep working; a cross-site write is refused, a same-origin one is not', async (t) => {
  const port = new URL(cli.gateway).port
  for (const host of [`127.0.0.1:${port}`, `localhost:${port}`]) {
    const answer = await send(cli.gateway, 'POST', '/mcp', { ...mcpHeaders, host, origin: `http://${host}` }, mcpInit)
    t.equal(answer.status, 200, `initialize with Host ${host}`)
  }
  const crossSite = await send(cli.gateway, 'POST', '/auth/register', { host: `127.0.0.1:${port}`, origin: 'https://evil.example.com' })
  t.equal(crossSite.status, 403)
  t.match(JSON.parse(crossSite.body), { code: 'origin_not_allowed', field: 'header.origin' })
  const fromOtherLocalApp = await send(cli.gateway, 'POST', '/auth/register', { host: `127.0.0.1:${port}`, origin: 'http://127.0.0.1:1' })
  t.equal(fromOtherLocalApp.status, 403, 'another local page is another site')
  const sameOrigin = await send(cli.gateway, 'POST', '/auth/register', { host: `127.0.0.1:${port}`, origin: `http://127.0.0.1:${port}` })
  t.equal(sameOrigin.status, 201, 'the paywall page of this origin registers')
  const sibling = await send(cli.scheduler, 'GET', '/api/v1/rates', { host: new URL(cli.scheduler).host, origin: 'https://evil.example.com' })
  t.equal(sibling.status, 200, 'reads from another origin pass the guard (CORS keeps their answers from that page)')
})
