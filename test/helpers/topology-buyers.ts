// The topology drill's other buyers (topology-load.ts runs them beside the x402 v2 task and memory
// buyers), each a real client through the fronts:
// - x402 v1 buyers: the legacy `x402-fetch` 1.x client (X-PAYMENT from the 402's JSON body, network
//   "base"), creating and deleting paid tasks and buying plans. v1 has no payment-identifier, so a
//   purchase cut off is counted as uncertain, not retried.
// - MCP buyers: the official @modelcontextprotocol/sdk client on the gateway's /mcp, paying over the
//   x402 v2 MCP transport (the payment-required tool result signed, sent again in
//   _meta["x402/payment"]): createTask (the gateway forwards it to the scheduler front),
//   purchasePlan with a payment-identifier (retried after the load, like the HTTP ones), deleteTask
//   with a SIGN-IN-WITH-X proof in _meta.
// - Song buyers: x402 v2 song orders on the gateway (30 s, 1 or 2 candidates), one every
//   DRILL_SONG_EVERY_S; with the drill's song upstream (topology-songs.ts) every other 2-candidate
//   order has one candidate that fails, so the partial refund runs. Each delivered URL is fetched
//   back through the front's /media route.
import { randomBytes } from 'node:crypto'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { x402Client } from '@x402/core/client'
import { decodePaymentResponseHeader, decodePaymentSignatureHeader } from '@x402/core/http'
import type { PaymentPayload, PaymentRequired } from '@x402/core/types'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import { appendPaymentIdentifierToExtensions } from '@x402/extensions/payment-identifier'
import { createSIWxPayload, encodeSIWxHeader } from '@x402/extensions/sign-in-with-x'
import type { PrivateKeyAccount } from 'viem/accounts'
import { wrapFetchWithPayment as wrapFetchV1 } from 'x402-fetch'
import { drillTask } from './crash-drill.ts'
import { ownerCall } from './owner-call.ts'
import type { Topology } from './topology.ts'
import { type Buyer, type CallRecord, failureCode, type Json, PLAN, PLAN_PRICE, payer, record, type SongOrder, sleep, TASK_AMOUNT, timeout } from './topology-calls.ts'
import { failsAt, songUpstreamInUse } from './topology-songs.ts'

export interface WorkerContext {
  topology: Topology
  calls: CallRecord[]
  random: () => number
  paceMs: number
  maxCalls: number
  stopping(): boolean
}

const going = (ctx: WorkerContext) => !ctx.stopping() && ctx.calls.length < ctx.maxCalls
const taskBody = () => drillTask(TASK_AMOUNT)
const idempotencyKey = () => `topo-${randomBytes(8).toString('hex')}`

// ------------------------------------------------------------------------------------ x402 v1

/** x402-fetch 1.x: its own cap (a plan costs 5 USDC); headers must be a plain object (it spreads them). */
const payV1 = (account: PrivateKeyAccount) => wrapFetchV1(fetch, account, PLAN_PRICE) as (input: string, init?: RequestInit) => Promise<Response>

export async function v1Worker(ctx: WorkerContext, buyer: Buyer): Promise<void> {
  const { scheduler, gateway } = ctx.topology.urls
  const pay = payV1(buyer.account)
  while (going(ctx)) {
    const dice = ctx.random()
    if (dice < 0.25) {
      const { res } = await record(ctx.calls, 'v1.plan.purchase', buyer, () =>
        pay(`${gateway}/plans/${PLAN}/purchase`, { method: 'POST', headers: { authorization: `Bearer ${buyer.token}` }, signal: timeout() }),
      )
      if (res?.ok) buyer.purchases += 1
      else if (!res || res.status >= 500) buyer.uncertain = (buyer.uncertain ?? 0) + 1
    } else if (dice < 0.45 && buyer.tasks.length > 0) {
      const task = buyer.tasks.shift() as string
      const { res } = await record(ctx.calls, 'v1.task.delete', buyer, () => ownerCall(buyer.account, `${scheduler}/api/v1/tasks/${task}`, { method: 'DELETE', signal: timeout() }))
      if (!res?.ok && res?.status !== 404) buyer.tasks.push(task)
    } else {
      const { res, body } = await record(ctx.calls, 'v1.task.create', buyer, () =>
        pay(`${scheduler}/api/v1/tasks`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'idempotency-key': idempotencyKey(), 'x-pay-amount-micros': String(TASK_AMOUNT) },
          body: JSON.stringify(taskBody()),
          signal: timeout(),
        }),
      )
      if (res?.ok && typeof body.id === 'string') buyer.tasks.push(body.id)
    }
    await sleep(ctx.paceMs)
  }
}

// ------------------------------------------------------------------------------------ MCP

interface ToolResult {
  isError?: boolean
  structuredContent?: Json
  _meta?: Json
}

/** One MCP client per buyer, and the last HTTP answer its transport saw (for a call that threw). */
interface McpBuyer {
  client: Client
  last?: { status: number; problem: boolean; retryAfter: boolean }
}
const mcpBuyers = new WeakMap<Buyer, McpBuyer>()

/** Connects `buyer`'s MCP client (initialize, tools/list: the official client checks every result against the tool's output schema). */
export async function connectMcp(topology: Topology, buyer: Buyer): Promise<void> {
  const state: McpBuyer = { client: new Client({ name: 'agw-topology-drill', version: '1.0.0' }) }
  const watched = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    const res = await fetch(input, init)
    const type = res.headers.get('content-type') ?? ''
    const problem =
      res.status >= 400 &&
      type.startsWith('application/problem+json') &&
      typeof (
        (await res
          .clone()
          .json()
          .catch(() => ({}))) as Json
      ).status === 'number'
    state.last = { status: res.status, problem, retryAfter: res.headers.get('retry-after') !== null }
    return res
  }
  // No bearer on the transport: it would go with every call, and a bearer puts createTask on the
  // plan (marketplace) rail; purchasePlan gets it per call in _meta.
  const transport = new StreamableHTTPClientTransport(new URL(`${topology.urls.gateway}/mcp`), { fetch: watched })
  await state.client.connect(transport, { timeout: 30_000 })
  await state.client.listTools(undefined, { timeout: 30_000 })
  mcpBuyers.set(buyer, state)
}

function mcpOf(buyer: Buyer): McpBuyer {
  const state = mcpBuyers.get(buyer)
  if (!state) throw new Error(`${buyer.label} has no MCP client (connectMcp first)`)
  return state
}

const callTool = (state: McpBuyer, name: string, args: Json, meta?: Json) =>
  state.client.callTool({ name, arguments: args, ...(meta ? { _meta: meta } : {}) }, undefined, { timeout: 60_000 }) as Promise<ToolResult>

/** A paid tool call as an x402 MCP client makes it: unpaid first, then the payment-required result signed. */
async function paidTool(state: McpBuyer, account: PrivateKeyAccount, name: string, args: Json, options: { paymentId?: string; meta?: Json } = {}): Promise<ToolResult> {
  const { paymentId, meta } = options
  const first = await callTool(state, name, args, meta)
  const required = first.structuredContent as PaymentRequired | undefined
  if (!first.isError || !Array.isArray(required?.accepts)) return first
  const client = new x402Client().register('eip155:8453', new ExactEvmScheme(account)).setSpendControls(false)
  const payment: PaymentPayload = await client.createPaymentPayload(required as PaymentRequired)
  if (paymentId) payment.extensions = appendPaymentIdentifierToExtensions({ ...(payment.extensions ?? {}) }, paymentId)
  return callTool(state, name, args, { ...meta, 'x402/payment': payment })
}

/** An owner tool call: the 401 result's SIGN-IN-WITH-X challenge answered in _meta. */
async function ownerTool(state: McpBuyer, account: PrivateKeyAccount, name: string, args: Json): Promise<ToolResult> {
  const first = await callTool(state, name, args)
  const challenge = first.structuredContent?.extensions?.['sign-in-with-x']
  if (!first.isError || first.structuredContent?.status !== 401 || !challenge) return first
  const chain = challenge.supportedChains[0]
  const proof = await createSIWxPayload({ ...challenge.info, chainId: chain.chainId, type: chain.type }, account, challenge.info.uri)
  return callTool(state, name, args, { 'agent-gateway/sign-in-with-x': encodeSIWxHeader(proof) })
}

/** The operation's status of a tool result (agent-gateway/http), as a CallRecord has it. */
function toolStatus(result: ToolResult): { status: number; code?: string; problem?: boolean; retryAfter?: boolean } {
  const http = result._meta?.['agent-gateway/http'] as { status?: number; headers?: Record<string, string> } | undefined
  const status = typeof http?.status === 'number' ? http.status : result.isError ? 500 : 200
  const content = result.structuredContent ?? {}
  const code = typeof content.code === 'string' ? content.code : (result._meta?.['agent-gateway/problem']?.code as string | undefined)
  const out: { status: number; code?: string; problem?: boolean; retryAfter?: boolean } = { status, ...(code ? { code } : {}) }
  if (status >= 500) {
    out.problem = result.isError === true && typeof content.status === 'number'
    out.retryAfter = http?.headers?.['retry-after'] !== undefined
  }
  return out
}

/** Records a tool call; a call that threw is the HTTP answer its transport saw, or cut off. */
async function recordTool(calls: CallRecord[], op: string, buyer: Buyer, call: (state: McpBuyer) => Promise<ToolResult>): Promise<ToolResult | undefined> {
  const state = mcpOf(buyer)
  state.last = undefined
  const began = Date.now()
  try {
    const result = await call(state)
    calls.push({ op, at: Date.now(), began, buyer: buyer.label, ...toolStatus(result) })
    return result
  } catch (error) {
    // Set by the transport's fetch while the call ran (TypeScript cannot see that).
    const last = state.last as McpBuyer['last']
    const code = (error as { code?: number }).code === -32001 ? { code: 'timeout' } : failureCode(error)
    if (last && last.status >= 400) {
      calls.push({ op, at: Date.now(), began, buyer: buyer.label, status: last.status, ...(last.status >= 500 ? { problem: last.problem, retryAfter: last.retryAfter } : {}) })
    } else calls.push({ op, at: Date.now(), began, buyer: buyer.label, status: 0, ...code })
    return undefined
  }
}

/** A plan is bought for the agent the bearer names; the payment carries the payment-identifier `id`. */
const planPayment = (buyer: Buyer, id: string) => ({ paymentId: id, meta: { 'agent-gateway/authorization': `Bearer ${buyer.token}` } })

/**
 * A purchasePlan over MCP with `id`, as a Response (status = the operation's, body = the result's
 * content), so that the quiescence's retry loop treats it as the HTTP purchases.
 */
export async function mcpPurchase(buyer: Buyer, id: string): Promise<Response> {
  const result = await paidTool(mcpOf(buyer), buyer.account, 'purchasePlan', { planId: PLAN }, planPayment(buyer, id))
  const { status } = toolStatus(result)
  const retry = result._meta?.['agent-gateway/http']?.headers?.['retry-after'] as string | undefined
  return new Response(JSON.stringify(result.structuredContent ?? {}), { status, headers: retry ? { 'retry-after': retry } : {} })
}

export async function mcpWorker(ctx: WorkerContext, buyer: Buyer): Promise<void> {
  while (going(ctx)) {
    const dice = ctx.random()
    if (dice < 0.25) {
      const id = `pay_topo_mcp_${randomBytes(12).toString('hex')}`
      const result = await recordTool(ctx.calls, 'mcp.plan.purchase', buyer, (state) => paidTool(state, buyer.account, 'purchasePlan', { planId: PLAN }, planPayment(buyer, id)))
      const status = result ? toolStatus(result) : undefined
      if (status && status.status >= 200 && status.status < 300) buyer.purchases += 1
      else if (!status || status.status >= 500 || (status.status === 409 && status.code === 'payment_in_progress')) buyer.unanswered.push(id)
    } else if (dice < 0.45 && buyer.tasks.length > 0) {
      const task = buyer.tasks.shift() as string
      const result = await recordTool(ctx.calls, 'mcp.task.delete', buyer, (state) => ownerTool(state, buyer.account, 'deleteTask', { id: task }))
      const status = result ? toolStatus(result).status : 0
      if (status !== 200 && status !== 404) buyer.tasks.push(task)
    } else {
      const args = { 'idempotency-key': idempotencyKey(), 'x-pay-amount-micros': String(TASK_AMOUNT), ...taskBody() }
      const result = await recordTool(ctx.calls, 'mcp.task.create', buyer, (state) => paidTool(state, buyer.account, 'createTask', args))
      const id = result?.structuredContent?.id
      if (result && !result.isError && typeof id === 'string') buyer.tasks.push(id)
    }
    await sleep(ctx.paceMs)
  }
}

// ------------------------------------------------------------------------------------ songs

/** Song orders in a cycle: 1 candidate; 2 of which (with the drill's upstream) the second fails; 2 delivered. */
function nextOrder(n: number, random: () => number, partial: boolean): Pick<SongOrder, 'seed' | 'candidates' | 'failing'> {
  const base = 10 * (1 + Math.floor(random() * 100_000))
  const kind = n % 3
  if (kind === 0) return { seed: base + 5, candidates: 1, failing: 0 }
  if (kind === 1 && partial) return { seed: base, candidates: 2, failing: [base, base + 1].filter(failsAt).length }
  return { seed: base + 2, candidates: 2, failing: 0 }
}

export async function songWorker(ctx: WorkerContext, buyer: Buyer, everyMs: number): Promise<void> {
  const { gateway } = ctx.topology.urls
  // The authorization nonce of the last payment sent: with the payer it is the sale's replay key.
  let sentNonce: string | undefined
  const noteNonce: typeof fetch = (input, init) => {
    const header = (input instanceof Request ? input.headers : new Headers(init?.headers)).get('payment-signature')
    if (header) sentNonce = (decodePaymentSignatureHeader(header).payload as { authorization?: { nonce?: string } }).authorization?.nonce?.toLowerCase()
    return fetch(input, init)
  }
  const pay = payer(buyer.account, undefined, noteNonce)
  const partial = songUpstreamInUse(ctx.topology)
  buyer.orders = buyer.orders ?? []
  for (let n = 0; going(ctx); n += 1) {
    const began = Date.now()
    const order: SongOrder = { ...nextOrder(n, ctx.random, partial), status: 0 }
    buyer.orders.push(order)
    sentNonce = undefined
    const { res, body } = await record(ctx.calls, 'song.order', buyer, () =>
      pay(`${gateway}/api/v1/audio/songs/songmodel-3-pro`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ prompt: 'chill lofi with a mellow piano', candidateCount: order.candidates, durationSec: 30, seed: order.seed, instrumental: true }),
        // A song takes tens of seconds on this machine, more while the media role restarts.
        signal: timeout(180_000),
      }),
    )
    order.status = res?.status ?? 0
    order.began = began
    order.answeredAt = Date.now()
    if (res?.ok) {
      const settled = res.headers.get('payment-response')
      if (settled) order.tx = decodePaymentResponseHeader(settled).transaction?.toLowerCase()
      else order.tx = res.headers.get('x-payment-reference')?.toLowerCase() || undefined
      order.paymentStatus = res.headers.get('x-payment-status') ?? undefined
      if (sentNonce !== undefined) order.replayKey = `x402:${buyer.account.address.toLowerCase()}:${sentNonce}`
      if (typeof body.url === 'string') order.url = body.url
      order.delivered = Array.isArray(body.candidates) ? body.candidates.length : order.candidates - Number(body.generationFailures ?? 0)
      order.refundMicros = BigInt(res.headers.get('x-refund-micros') ?? '0')
      order.priceMicros = BigInt(Math.round(Number(body.price_usdc) * 1_000_000))
      if (typeof body.url === 'string') {
        await record(ctx.calls, 'song.fetch', buyer, () => fetch(body.url as string, { signal: timeout() }))
      }
    }
    while (going(ctx) && Date.now() - began < everyMs) await sleep(250)
  }
}
