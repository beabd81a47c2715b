// The gateway's MCP endpoint end to end, through the real CLI with the official MCP client
// (@modelcontextprotocol/sdk Client + StreamableHTTPClientTransport) and the real x402 client
// (@x402/core x402Client + @x402/evm ExactEvmScheme) paying on the embedded local EVM (anvil):
// tools come from the registry with schemas and prices; an unpaid call gets the x402 v2 MCP
// payment-required result with the HTTP 402's own requirements; a plan bought over MCP is settled
// once and a replay is refused; the plan's bearer opens a plan tool; a paid scheduler task is
// created, run and read over MCP with a SIGN-IN-WITH-X owner proof in _meta; a song is bought
// when the media tools are installed; bad arguments and unknown tools are refused properly.
import t, { type Test } from 'tap'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { x402Client } from '@x402/core/client'
import { decodePaymentRequiredHeader } from '@x402/core/http'
import type { PaymentPayload, PaymentRequired } from '@x402/core/types'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import { appendPaymentIdentifierToExtensions } from '@x402/extensions/payment-identifier'
import { createSIWxPayload, encodeSIWxHeader } from '@x402/extensions/sign-in-with-x'
import { McpClient } from 'mppx/mcp/client'
import { tempo } from 'mppx/client'
import { createClient, http as viemHttp } from 'viem'
import { tempo as tempoChain } from 'viem/tempo/chains'
import { generatePrivateKey, privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts'
import { sandboxAvailable } from '../../controllers/local/sandbox.ts'
import { startCli, type CliProcess } from '../helpers/cli.ts'
import { balanceOf, faucet } from '../helpers/dev-chain.ts'
import { startTempoRpc, type TempoRpcResponder } from '../helpers/tempo-rpc.ts'

const PLAN = 'scheduler-credit-5'
const PLAN_PRICE = 5_000_000n
const PAYEE = '0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266'

type Json = Record<string, any>
interface ToolResult {
  isError?: boolean
  structuredContent?: Json
  content: { type: string; text: string }[]
  _meta?: Json
}

let cli: CliProcess
let rpc: TempoRpcResponder
const sandbox = await sandboxAvailable()

t.before(async () => {
  // MPP settles through the Tempo RPC port: a scripted JSON-RPC responder (no Tempo node here).
  rpc = await startTempoRpc()
  cli = await startCli({ env: { TEMPO_RPC_URL: rpc.url } })
})
t.teardown(async () => {
  await cli?.stop('SIGKILL')
  await rpc?.close()
})

async function json(response: Response): Promise<Json> {
  return (await response.json()) as Json
}

async function register(): Promise<string> {
  return (await json(await fetch(`${cli.gateway}/auth/register`, { method: 'POST' }))).accessToken
}

/** An MCP client on the gateway's /mcp, optionally sending headers on every HTTP request. */
async function mcp(t: Test, headers: Record<string, string> = {}): Promise<Client> {
  const client = new Client({ name: 'agw-e2e', version: '1.0.0' })
  await client.connect(new StreamableHTTPClientTransport(new URL(`${cli.gateway}/mcp`), { requestInit: { headers } }))
  t.teardown(() => client.close())
  return client
}

async function call(client: Client, name: string, args: Json, meta?: Json): Promise<ToolResult> {
  return (await client.callTool({ name, arguments: args, ...(meta ? { _meta: meta } : {}) })) as ToolResult
}

/**
 * A payment payload from the real x402 client, as a client without the payment-identifier
 * extension makes it (the declarations are echoed back, no id): a replay meets the nonce check.
 * With `paymentId`, the client attaches it as the extension's own helper does.
 */
async function pay(account: PrivateKeyAccount, required: PaymentRequired, paymentId?: string): Promise<PaymentPayload> {
  const client = new x402Client().register('eip155:8453', new ExactEvmScheme(account)).setSpendControls(false)
  const payload = await client.createPaymentPayload(required)
  if (paymentId) payload.extensions = appendPaymentIdentifierToExtensions({ ...(payload.extensions ?? {}) }, paymentId)
  return payload
}

/** An owner tool call: answers the 401 SIWX challenge from the result with a proof in _meta. */
async function owner(client: Client, account: PrivateKeyAccount, name: string, args: Json): Promise<ToolResult> {
  const first = await call(client, name, args)
  const challenge = first.structuredContent?.extensions?.['sign-in-with-x']
  if (!first.isError || first.structuredContent?.status !== 401 || !challenge) return first
  const chain = challenge.supportedChains[0]
  const proof = await createSIWxPayload({ ...challenge.info, chainId: chain.chainId, type: chain.type }, account, challenge.info.uri)
  return call(client, name, args, { 'agent-gateway/sign-in-with-x': encodeSIWxHeader(proof) })
}

t.test('tools/list: gateway, scheduler and memory operations with their schemas and prices', async (t) => {
  const client = await mcp(t)
  const { tools } = await client.listTools()
  const byName = new Map(tools.map((tool) => [tool.name, tool]))
  for (const name of ['purchasePlan', 'generateSongs', 'registerAgent', 'createTask', 'getTask', 'runTaskNow', 'rememberMemory', 'recallMemories']) {
    t.ok(byName.has(name), `${name} is a tool`)
  }
  const songs = byName.get('generateSongs')
  t.match(songs?.description, /Price: 0\.080000 USD per song \(x402\/MPP\)/)
  t.match(songs?.inputSchema, { type: 'object', required: ['prompt'], properties: { prompt: { type: 'string' }, candidateCount: {} } })
  t.match(songs?._meta?.['agent-gateway/payment-info'], { access: 'payg', protocols: ['x402', 'mpp'], network: 'eip155:8453' })
  const task = byName.get('createTask')
  t.match(task?.inputSchema.properties, { 'idempotency-key': {}, 'x-pay-amount-micros': {}, runtime: {}, source: {} }, 'headers and body fields are arguments')
  t.ok(task?.inputSchema.required?.includes('idempotency-key'))
  t.match(task?.description, /x-pay-amount-micros argument/)
  const getTask = byName.get('getTask')
  t.match(getTask?.annotations, { readOnlyHint: true, destructiveHint: false })
  t.match(getTask?.inputSchema, { required: ['id'], additionalProperties: false })
  t.match(byName.get('purchasePlan')?.outputSchema, {
    type: 'object',
    anyOf: [{ type: 'object' }, { required: ['x402Version', 'accepts'] }, { required: ['type', 'title', 'status', 'detail', 'code'] }],
  })
  t.match(byName.get('rememberMemory')?.description, /Price: 0\.001000 USD/)
})

t.test('a plan bought over MCP: the 402 requirements, settled once on-chain, the replay refused, the bearer opens a plan tool', async (t) => {
  const buyer = privateKeyToAccount(generatePrivateKey())
  await faucet(cli.gateway, buyer.address, 20_000_000n)
  const token = await register()
  const client = await mcp(t, { authorization: `Bearer ${token}` })

  const unpaid = await call(client, 'purchasePlan', { planId: PLAN })
  t.equal(unpaid.isError, true)
  const required = unpaid.structuredContent as PaymentRequired
  t.equal(required.x402Version, 2)
  const http = await fetch(`${cli.gateway}/plans/${PLAN}/purchase`, { method: 'POST', headers: { authorization: `Bearer ${token}` } })
  t.equal(http.status, 402)
  const httpRequired = decodePaymentRequiredHeader(http.headers.get('payment-required') ?? '')
  t.same(required.accepts, httpRequired.accepts, 'the same accepts as the HTTP 402')
  t.same(required.resource, httpRequired.resource)
  const wrapped = JSON.parse(unpaid.content[0]?.text ?? '{}')
  t.same(wrapped['x402/error'].data, required, 'content[0].text carries the x402/error wrapper')
  t.equal(wrapped['x402/error'].code, 402)
  t.match(unpaid._meta?.['org.paymentauth/payment-required'], { httpStatus: 402, challenges: [{ method: 'tempo', intent: 'charge' }] }, 'the MPP challenge too')

  const payeeBefore = await balanceOf(cli.gateway, PAYEE)
  const payment = await pay(buyer, required)
  const paid = await call(client, 'purchasePlan', { planId: PLAN }, { 'x402/payment': payment })
  t.notOk(paid.isError, JSON.stringify(paid.structuredContent))
  t.match(paid.structuredContent, { planId: PLAN, status: 'active', creditMicros: '5000000' })
  t.match(paid._meta?.['x402/payment-response'], { success: true, transaction: /^0x[0-9a-f]{64}$/, network: 'eip155:8453' })
  t.equal(paid._meta?.['x402/payment-response'].payer.toLowerCase(), buyer.address.toLowerCase())
  t.equal(await balanceOf(cli.gateway, buyer.address), 15_000_000n, 'the buyer paid the plan price once')
  t.equal((await balanceOf(cli.gateway, PAYEE)) - payeeBefore, PLAN_PRICE, 'the payee received it once')

  const replay = await call(client, 'purchasePlan', { planId: PLAN }, { 'x402/payment': payment })
  t.equal(replay.isError, true)
  t.match(replay._meta?.['agent-gateway/problem'], { code: 'payment_invalid', reason: 'nonce_already_used' })
  t.ok(Array.isArray(replay.structuredContent?.accepts), 'a fresh payment-required result')
  t.equal(await balanceOf(cli.gateway, buyer.address), 15_000_000n, 'nothing settled a second time')

  // The plan's bearer (the MCP request's Authorization) opens the scheduler's marketplace rail.
  const task = await call(client, 'createTask', {
    'idempotency-key': crypto.randomUUID(),
    runtime: 'python',
    entrypoint: 'main.py',
    source: 'print("hi")',
    max_runtime_sec: 10,
    max_sibling_calls: 0,
    max_amount_usdc_micros: 5_000,
  })
  if (sandbox.ok) {
    t.notOk(task.isError, JSON.stringify(task.structuredContent))
    t.match(task.structuredContent, { rail: 'marketplace', status: 'active' })
    t.equal(task._meta?.['agent-gateway/http'].status, 201)
  } else {
    t.match(task.structuredContent, { status: 503 }, `the scheduler refuses before any payment: ${sandbox.reason}`)
  }
  // The per-call key works for a client that cannot set HTTP headers.
  const anonymous = await mcp(t)
  const perCall = await call(anonymous, 'getReviewSession', { reviewId: crypto.randomUUID() }, { 'agent-gateway/authorization': `Bearer ${token}` })
  t.match(perCall.structuredContent, { status: 404 }, 'the bearer from _meta identifies the agent (404, not 401)')
  const without = await call(anonymous, 'getReviewSession', { reviewId: crypto.randomUUID() })
  t.match(without.structuredContent, { status: 401 })
})

t.test('a payment identifier over MCP: a retried paid call gets the first answer, charged once; another body with the same id is refused', async (t) => {
  const buyer = privateKeyToAccount(generatePrivateKey())
  await faucet(cli.gateway, buyer.address, 1_000_000n)
  const client = await mcp(t)
  const args = { content: `The user prefers dark mode ${crypto.randomUUID()}` }
  const unpaid = await call(client, 'rememberMemory', args)
  t.equal(unpaid.isError, true)
  const required = unpaid.structuredContent as PaymentRequired
  t.ok(required.extensions?.['payment-identifier'], 'the 402 declares payment-identifier')
  const price = BigInt(required.accepts[0]?.amount ?? '0')
  const id = `mcp_${crypto.randomUUID().replaceAll('-', '')}`
  const first = await call(client, 'rememberMemory', args, { 'x402/payment': await pay(buyer, required, id) })
  t.notOk(first.isError, JSON.stringify(first.structuredContent))
  t.equal(await balanceOf(cli.gateway, buyer.address), 1_000_000n - price, 'paid once')
  // The retry signs a new authorization (a client that lost the answer): the first answer comes back.
  const retried = await call(client, 'rememberMemory', args, { 'x402/payment': await pay(buyer, required, id) })
  t.notOk(retried.isError, JSON.stringify(retried.structuredContent))
  t.same(retried.structuredContent, first.structuredContent, 'the original result')
  t.equal(retried._meta?.['agent-gateway/http'].headers['x-payment-identifier-replay'], 'true', 'marked as a replay, as the HTTP answer is')
  t.notOk(first._meta?.['agent-gateway/http'].headers['x-payment-identifier-replay'], 'the first answer is not')
  t.equal(await balanceOf(cli.gateway, buyer.address), 1_000_000n - price, 'never charged twice')
  const other = await call(client, 'rememberMemory', { content: 'something else' }, { 'x402/payment': await pay(buyer, required, id) })
  t.equal(other.isError, true)
  t.match(other.structuredContent, { status: 409, code: 'payment_identifier_conflict' })
  t.equal(await balanceOf(cli.gateway, buyer.address), 1_000_000n - price)
})

t.test('MPP over MCP: the mppx MCP client pays the payment-required result with a credential in _meta', async (t) => {
  const account = privateKeyToAccount(generatePrivateKey())
  const token = await register()
  const client = await mcp(t, { authorization: `Bearer ${token}` })
  const paying = McpClient.wrap(client, {
    methods: [tempo({ account, getClient: () => createClient({ chain: tempoChain, transport: viemHttp(rpc.url, { retryCount: 0 }) }) })],
  })
  const broadcastsBefore = rpc.broadcasts.length
  const bought = await paying.callTool({ name: 'purchasePlan', arguments: { planId: PLAN } })
  t.notOk(bought.isError, JSON.stringify(bought.structuredContent))
  t.match(bought.structuredContent, { planId: PLAN, status: 'active' })
  t.match(bought.receipt, { status: 'success', method: 'tempo', challengeId: /./ })
  t.equal(rpc.broadcasts.length - broadcastsBefore, 1, 'one transaction broadcast')
})

t.test('a paid scheduler task over MCP: created with x402, run and read with a wallet proof', { skip: sandbox.ok ? false : sandbox.reason }, async (t) => {
  const wallet = privateKeyToAccount(generatePrivateKey())
  await faucet(cli.gateway, wallet.address, 3_000_000n)
  const client = await mcp(t)
  const args = {
    'idempotency-key': crypto.randomUUID(),
    'x-pay-amount-micros': '1000000',
    runtime: 'node',
    entrypoint: 'main.mjs',
    source: "console.log('hello over mcp')\n",
    max_runtime_sec: 20,
    max_sibling_calls: 0,
    max_amount_usdc_micros: 1_000_000,
  }
  const unpaid = await call(client, 'createTask', args)
  t.equal(unpaid.isError, true)
  t.equal(unpaid.structuredContent?.accepts?.[0]?.amount, '1000000', 'the 402 asks for the named escrow')
  const created = await call(client, 'createTask', args, { 'x402/payment': await pay(wallet, unpaid.structuredContent as PaymentRequired) })
  t.notOk(created.isError, JSON.stringify(created.structuredContent))
  t.match(created.structuredContent, { rail: 'direct', status: 'active', balance_micros: '1000000' })
  t.ok(created._meta?.['x402/payment-response']?.success)
  t.equal(await balanceOf(cli.gateway, wallet.address), 2_000_000n, 'the escrow left the wallet once')
  const id = created.structuredContent?.id as string

  const anonymous = await call(client, 'getTask', { id })
  t.match(anonymous.structuredContent, { status: 401, code: 'wallet_proof_required' })
  const run = await owner(client, wallet, 'runTaskNow', { id })
  t.notOk(run.isError, JSON.stringify(run.structuredContent))
  t.match(run.structuredContent, { status: 'succeeded', exit_code: 0, stdout: /hello over mcp/ })
  const read = await owner(client, wallet, 'getTask', { id })
  t.match(read.structuredContent, { id, rail: 'direct' })
  t.ok(BigInt(read.structuredContent?.balance_micros) < 1_000_000n, 'the run was paid from the escrow')
})

t.test('a song paid over MCP', async (t) => {
  const buyer = privateKeyToAccount(generatePrivateKey())
  await faucet(cli.gateway, buyer.address, 1_000_000n)
  const client = await mcp(t)
  const order = { prompt: 'calm piano with soft strings', candidateCount: 1, durationSec: 30, seed: 3 }
  const unpaid = await call(client, 'generateSongs', order)
  if (unpaid.structuredContent?.code === 'media_unavailable') {
    t.skip(`media prerequisites missing: ${unpaid.structuredContent.detail}`, () => {})
    return
  }
  t.equal(unpaid.structuredContent?.accepts?.[0]?.amount, '80000')
  const song = await call(client, 'generateSongs', order, { 'x402/payment': await pay(buyer, unpaid.structuredContent as PaymentRequired) })
  t.notOk(song.isError, JSON.stringify(song.structuredContent)?.slice(0, 500))
  t.match(song.structuredContent, { mimeType: 'audio/mpeg', price_usdc: '0.080000', url: /^http/ })
  t.ok(song._meta?.['x402/payment-response']?.success)
  t.equal(await balanceOf(cli.gateway, buyer.address), 920_000n, 'the buyer paid one song')
  t.equal((await fetch(song.structuredContent?.url)).status, 200)
})

t.test('roles in separate processes: the gateway forwards tool calls to the memory process over HTTP', async (t) => {
  const memory = await startCli({ args: ['serve', 'memory'] })
  t.teardown(() => memory.stop('SIGKILL'))
  const gateway = await startCli({ args: ['serve', 'gateway'], env: { PUBLIC_MEMORY_URL: memory.memory } })
  t.teardown(() => gateway.stop('SIGKILL'))
  const client = new Client({ name: 'agw-e2e', version: '1.0.0' })
  await client.connect(new StreamableHTTPClientTransport(new URL(`${gateway.gateway}/mcp`)))
  t.teardown(() => client.close())
  const unpaid = (await client.callTool({ name: 'rememberMemory', arguments: { content: 'The user prefers dark mode' } })) as ToolResult
  t.equal(unpaid.isError, true)
  const http = await fetch(`${memory.memory}/api/v1/memories`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ content: 'The user prefers dark mode' }),
  })
  t.equal(http.status, 402)
  const httpRequired = decodePaymentRequiredHeader(http.headers.get('payment-required') ?? '')
  t.equal(unpaid.structuredContent?.resource?.url, `${memory.memory}/api/v1/memories`, 'the memory process answered')
  t.same(unpaid.structuredContent?.accepts, httpRequired.accepts)
  const wallet = privateKeyToAccount(generatePrivateKey())
  const recalled = await owner(client, wallet, 'recallMemories', { query: 'editor theme' })
  t.notOk(recalled.isError, JSON.stringify(recalled.structuredContent))
  t.equal(recalled._meta?.['agent-gateway/http'].status, 200, 'the wallet proof in _meta reached the memory process')
})

t.test('refusals: bad arguments name the field, unknown tools and hostile bodies are JSON-RPC errors', async (t) => {
  const client = await mcp(t)
  const bad = await call(client, 'generateSongs', { prompt: 'x', candidateCount: 'three' })
  t.equal(bad.isError, true)
  t.match(bad.structuredContent, { status: 400, code: 'validation_error', field: 'body.candidateCount' })
  const missing = await call(client, 'getTask', {})
  t.match(missing.structuredContent, { status: 400, field: 'arguments.id' })
  const extra = await call(client, 'getTask', { id: 't_1', colour: 'red' })
  t.match(extra.structuredContent, { status: 400, field: 'arguments.colour' })
  const malformed = await call(client, 'purchasePlan', { planId: PLAN }, { 'x402/payment': 'not a payload' })
  t.match(malformed.structuredContent, { status: 400, code: 'payment_malformed' })
  await t.rejects(client.callTool({ name: 'noSuchTool', arguments: {} }), { code: -32602 })

  const post = (body: string) =>
    fetch(`${cli.gateway}/mcp`, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' }, body })
  const notJson = await post('{"jsonrpc":')
  t.equal(notJson.status, 400)
  t.match(await json(notJson), { jsonrpc: '2.0', error: { code: -32700 }, id: null })
  const scalar = await post('42')
  t.match(await json(scalar), { error: { code: -32600 } })
  const nameless = await post('{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"arguments":{}}}')
  t.match(await json(nameless), { jsonrpc: '2.0', id: 9, error: { code: -32602 } })
  const notRpc = await post('{"hello":"world"}')
  t.equal(notRpc.status, 400)
  t.match(await json(notRpc), { jsonrpc: '2.0', error: {} })
  const get = await fetch(`${cli.gateway}/mcp`, { headers: { accept: 'text/event-stream' } })
  t.equal(get.status, 405)
  t.equal(get.headers.get('allow'), 'POST')
  t.equal((await fetch(`${cli.gateway}/healthz`)).status, 200, 'the gateway still answers')
})
