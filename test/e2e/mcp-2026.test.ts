// MCP 2026-07-28 and 2025-11-25 against the same `npm start` /mcp, through the real CLI: a client
// hand-written from the 2026-07-28 text (plain fetch: no initialize, per-request _meta, the
// MCP-Protocol-Version / Mcp-Method / Mcp-Name headers) discovers the server, lists the tools and
// pays a memory write with the real x402 client on the dev chain; the official SDK client (which
// speaks 2025-11-25) does the same on the same server, and its answers keep their 2025-11-25 form.
import t from 'tap'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { x402Client } from '@x402/core/client'
import type { PaymentRequired } from '@x402/core/types'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import { generatePrivateKey, privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts'
import { startCli, type CliProcess } from '../helpers/cli.ts'
import { balanceOf, faucet } from '../helpers/dev-chain.ts'

const VERSION = '2026-07-28'
type Json = Record<string, any>

let cli: CliProcess
t.before(async () => {
  cli = await startCli()
})
t.teardown(() => cli?.stop('SIGKILL'))

/** A header-safe Mcp-Name, else the =?base64?…?= form (streamable-http "Value Encoding"). */
function mcpName(value: string): string {
  const safe = /^[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?$/.test(value) && !(value.startsWith('=?base64?') && value.endsWith('?='))
  return safe ? value : `=?base64?${Buffer.from(value, 'utf8').toString('base64')}?=`
}

let nextId = 1
/** One 2026-07-28 request: its own POST with the standard headers and the per-request _meta. */
async function rpc(method: string, params: Json = {}, version = VERSION): Promise<{ status: number; body: Json }> {
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    accept: 'application/json, text/event-stream',
    'mcp-protocol-version': version,
    'mcp-method': method,
  }
  if (method === 'tools/call') headers['mcp-name'] = mcpName(params.name)
  const meta = {
    'io.modelcontextprotocol/protocolVersion': VERSION,
    'io.modelcontextprotocol/clientInfo': { name: 'hand-written-2026', version: '0.0.1' },
    'io.modelcontextprotocol/clientCapabilities': {},
    ...params._meta,
  }
  const response = await fetch(`${cli.gateway}/mcp`, {
    method: 'POST',
    headers,
    body: JSON.stringify({ jsonrpc: '2.0', id: nextId++, method, params: { ...params, _meta: meta } }),
  })
  return { status: response.status, body: (await response.json()) as Json }
}

function payer(account: PrivateKeyAccount): x402Client {
  return new x402Client().register('eip155:8453', new ExactEvmScheme(account)).setSpendControls(false)
}

t.test('a 2026-07-28 client discovers, lists and pays a tool', async (t) => {
  const discovered = await rpc('server/discover')
  t.equal(discovered.status, 200)
  const discovery = discovered.body.result
  t.match(discovery, { resultType: 'complete', capabilities: { tools: {} }, cacheScope: 'public', _meta: { 'io.modelcontextprotocol/serverInfo': { name: 'agent-gateway' } } })
  t.ok(discovery.supportedVersions.includes(VERSION) && discovery.supportedVersions.includes('2025-11-25'), 'both revisions are supported')
  t.type(discovery.ttlMs, 'number')

  const listed = await rpc('tools/list')
  t.equal(listed.status, 200)
  const list = listed.body.result
  t.match(list, { resultType: 'complete', cacheScope: 'public' })
  t.ok(list.ttlMs >= 0)
  const names = list.tools.map((tool: Json) => tool.name) as string[]
  t.same(names, [...names].sort(), 'deterministic: sorted by name')
  t.same((await rpc('tools/list')).body.result.tools, list.tools, 'and the same on the next request')
  t.ok(names.includes('rememberMemory'))

  const buyer = privateKeyToAccount(generatePrivateKey())
  await faucet(cli.gateway, buyer.address, 1_000_000n)
  const args = { content: `The user prefers dark mode ${crypto.randomUUID()}` }
  const unpaid = await rpc('tools/call', { name: 'rememberMemory', arguments: args })
  t.equal(unpaid.status, 200)
  t.match(unpaid.body.result, { resultType: 'complete', isError: true, structuredContent: { x402Version: 2 } }, 'the x402 payment-required result, as over 2025-11-25')
  const required = unpaid.body.result.structuredContent as PaymentRequired
  const price = BigInt(required.accepts[0]?.amount ?? '0')
  t.ok(price > 0n)
  const payment = await payer(buyer).createPaymentPayload(required)
  const paid = await rpc('tools/call', { name: 'rememberMemory', arguments: args, _meta: { 'x402/payment': payment } })
  t.equal(paid.status, 200)
  const result = paid.body.result
  t.notOk(result.isError, JSON.stringify(result.structuredContent))
  t.equal(result.resultType, 'complete')
  t.match(result._meta, {
    'x402/payment-response': { success: true, transaction: /^0x[0-9a-f]{64}$/ },
    'agent-gateway/http': { status: 201 },
    'io.modelcontextprotocol/serverInfo': { name: 'agent-gateway' },
  })
  t.equal(await balanceOf(cli.gateway, buyer.address), 1_000_000n - price, 'paid once')

  // The revision's refusals, through the real route.
  const ping = await rpc('ping')
  t.match(ping, { status: 404, body: { error: { code: -32601 } } }, 'ping is gone in 2026-07-28')
  const mismatch = await fetch(`${cli.gateway}/mcp`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': VERSION,
      'mcp-method': 'tools/call',
      'mcp-name': 'getTask',
    },
    body: JSON.stringify({
      jsonrpc: '2.0',
      id: 99,
      method: 'tools/call',
      params: { name: 'rememberMemory', arguments: args, _meta: { 'io.modelcontextprotocol/protocolVersion': VERSION, 'io.modelcontextprotocol/clientCapabilities': {} } },
    }),
  })
  t.equal(mismatch.status, 400)
  t.match(await mismatch.json(), { id: 99, error: { code: -32020 } })
  const disagreeing = await rpc('tools/list', { _meta: { 'io.modelcontextprotocol/protocolVersion': '2099-01-01' } })
  t.match(disagreeing, { status: 400, body: { error: { code: -32020 } } }, 'the header (2026-07-28) disagrees with the _meta version')
  const unsupported = await rpc('tools/list', { _meta: { 'io.modelcontextprotocol/protocolVersion': '2099-01-01' } }, '2099-01-01')
  t.match(unsupported, { status: 400, body: { error: { code: -32022, data: { requested: '2099-01-01', supported: discovery.supportedVersions } } } })
  t.equal(await balanceOf(cli.gateway, buyer.address), 1_000_000n - price, 'nothing refused was charged')
})

t.test('the 2025-11-25 SDK client does the same against the same server, answered as before', async (t) => {
  const client = new Client({ name: 'agw-e2e', version: '1.0.0' })
  await client.connect(new StreamableHTTPClientTransport(new URL(`${cli.gateway}/mcp`)))
  t.teardown(() => client.close())
  t.equal(client.getServerVersion()?.name, 'agent-gateway', 'initialize still answers')
  const { tools } = await client.listTools()
  const modern = (await rpc('tools/list')).body.result.tools as Json[]
  t.same(
    tools.map((tool) => tool.name),
    modern.map((tool) => tool.name),
    'the same tools in the same order for both revisions',
  )
  await client.ping()

  const buyer = privateKeyToAccount(generatePrivateKey())
  await faucet(cli.gateway, buyer.address, 1_000_000n)
  const args = { content: `The user prefers light mode ${crypto.randomUUID()}` }
  const unpaid = (await client.callTool({ name: 'rememberMemory', arguments: args })) as Json
  t.equal(unpaid.isError, true)
  const required = unpaid.structuredContent as PaymentRequired
  const price = BigInt(required.accepts[0]?.amount ?? '0')
  const paid = (await client.callTool({ name: 'rememberMemory', arguments: args, _meta: { 'x402/payment': await payer(buyer).createPaymentPayload(required) } })) as Json
  t.notOk(paid.isError, JSON.stringify(paid.structuredContent))
  t.match(paid._meta?.['x402/payment-response'], { success: true })
  t.equal(await balanceOf(cli.gateway, buyer.address), 1_000_000n - price, 'paid once')

  // On the wire, a 2025-11-25 answer has none of 2026-07-28's fields.
  const raw = await fetch(`${cli.gateway}/mcp`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
  })
  const legacy = ((await raw.json()) as Json).result
  t.ok(Array.isArray(legacy.tools))
  t.notOk('resultType' in legacy || 'ttlMs' in legacy || 'cacheScope' in legacy, 'no resultType, ttlMs or cacheScope')
  const discover = await fetch(`${cli.gateway}/mcp`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'server/discover' }),
  })
  t.match(await discover.json(), { id: 2, error: { code: -32601 } }, 'server/discover is not a 2025-11-25 method')
})
