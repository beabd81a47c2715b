// Facilitator mode end to end: the real CLI with X402_FACILITATOR_URL (and its API key in
// X402_FACILITATOR_HEADERS), CHAIN_RPC_URL = a local anvil it only reads (no SETTLER_PRIVATE_KEY),
// the official x402 facilitator served over HTTP on that anvil, and real buyers: @x402/fetch v2 and
// the legacy x402-fetch 1.x, and the official MCP client paying a tool call in _meta. Plans and
// paid tasks each settle exactly once on-chain, through the facilitator. A facilitator that settles and then never answers, and one that answers 5xx without
// settling, leave every buyer whole: charged once, the work kept.
import t from 'tap'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { x402Client } from '@x402/core/client'
import type { PaymentRequired } from '@x402/core/types'
import { decodePaymentResponseHeader } from '@x402/core/http'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import { wrapFetchWithPayment } from '@x402/fetch'
import { createPublicClient, http, parseAbiItem, type Address } from 'viem'
import { generatePrivateKey, privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts'
import { wrapFetchWithPayment as wrapFetchV1 } from 'x402-fetch'
import { BASE_USDC, startDevChain, type StartedDevChain } from '../../src/payments/chain/index.ts'
import { startCli, type CliProcess } from '../helpers/cli.ts'
import { drillTask, metricSum } from '../helpers/crash-drill.ts'
import { startTestFacilitator, type TestFacilitator } from '../helpers/x402-facilitator.ts'

const PAYEE = '0x70997970C51812dc3A010C7d01b50e0d17dc79C8' // anvil #1: receives, never signs
const PLAN = 'scheduler-credit-5'
const PLAN_PRICE = 5_000_000n
const TASK_AMOUNT = 200_000
const API_KEY = 'e2e-facilitator-key'

let chain: StartedDevChain
let facilitator: TestFacilitator
let cli: CliProcess

t.before(async () => {
  chain = await startDevChain()
  facilitator = await startTestFacilitator({ rpcUrl: chain.rpcUrl, apiKey: API_KEY, lostAnswerMs: 6_000 })
  cli = await startCli({
    env: {
      CHAIN_RPC_URL: chain.rpcUrl,
      CHAIN_CONFIRMATIONS: '1',
      PAY_TO_ADDRESS: PAYEE,
      X402_FACILITATOR_URL: facilitator.url,
      X402_FACILITATOR_HEADERS: `Authorization: Bearer ${API_KEY}`,
      X402_FACILITATOR_TIMEOUT_MS: '2000',
    },
  })
})
t.teardown(async () => {
  await cli?.stop('SIGKILL')
  await facilitator?.close()
  await chain?.close()
})

const transfer = parseAbiItem('event Transfer(address indexed from, address indexed to, uint256 value)')
/** The USDC transfers out of `from`: what the chain says the buyer paid, one entry per payment. */
async function payments(from: Address): Promise<bigint[]> {
  const client = createPublicClient({ transport: http(chain.rpcUrl) })
  return (await client.getLogs({ address: BASE_USDC, event: transfer, args: { from }, fromBlock: 0n })).map((log) => log.args.value ?? 0n)
}

async function buyer(amount: bigint): Promise<PrivateKeyAccount> {
  const account = privateKeyToAccount(generatePrivateKey())
  await chain.mint(account.address, amount)
  return account
}

async function register(): Promise<string> {
  const response = await fetch(`${cli.gateway}/auth/register`, { method: 'POST' })
  return ((await response.json()) as { accessToken: string }).accessToken
}

const payV2 = (account: PrivateKeyAccount) => wrapFetchWithPayment(fetch, new x402Client().register('eip155:8453', new ExactEvmScheme(account)).setSpendControls(false))
const payV1 = (account: PrivateKeyAccount) => wrapFetchV1(fetch, account, PLAN_PRICE) as (input: string, init?: RequestInit) => Promise<Response>

const purchase = (pay: (input: string, init?: RequestInit) => Promise<Response>, token: string) =>
  pay(`${cli.gateway}/plans/${PLAN}/purchase`, { method: 'POST', headers: { 'svc-agent-authorization': `Bearer ${token}` } })
const paidTask = (pay: (input: string, init?: RequestInit) => Promise<Response>, key: string) =>
  pay(`${cli.scheduler}/api/v1/tasks`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key, 'x-pay-amount-micros': String(TASK_AMOUNT) },
    body: JSON.stringify(drillTask(TASK_AMOUNT)),
  })

/** The bought plan at work: the token alone creates a task on the scheduler's marketplace rail. */
const marketplaceTask = (token: string, key: string) =>
  fetch(`${cli.scheduler}/api/v1/tasks`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'idempotency-key': key, 'content-type': 'application/json' },
    body: JSON.stringify(drillTask(5_000)),
  })

const settlesOf = (account: PrivateKeyAccount) => facilitator.settles.filter((call) => call.payer === account.address.toLowerCase())

for (const version of ['v2', 'v1'] as const) {
  t.test(`${version} buyer (${version === 'v2' ? '@x402/fetch' : 'x402-fetch 1.x'}): a plan and a paid task, each settled once through the facilitator`, async (t) => {
    const account = await buyer(PLAN_PRICE + BigInt(TASK_AMOUNT))
    const pay = version === 'v2' ? payV2(account) : payV1(account)
    const token = await register()
    const plan = await purchase(pay, token)
    t.equal(plan.status, 200, 'the plan is bought')
    t.match(await plan.json(), { planId: PLAN, status: 'active', creditMicros: '5000000' })
    const receipt = decodePaymentResponseHeader(plan.headers.get(version === 'v2' ? 'payment-response' : 'x-payment-response') ?? '')
    t.equal(receipt.transaction, settlesOf(account)[0]?.transaction, "the receipt names the facilitator's transaction")
    const task = await paidTask(pay, `fac-${version}-${account.address}`)
    t.equal(task.status, 201, 'the paid task is created')
    t.match(await task.json(), { rail: 'direct' })
    t.same(
      settlesOf(account).map((call) => [call.version, call.outcome, call.success]),
      [
        [version === 'v2' ? 2 : 1, 'answered', true],
        [version === 'v2' ? 2 : 1, 'answered', true],
      ],
      'two /settle calls, both settled',
    )
    t.same(await payments(account.address), [PLAN_PRICE, BigInt(TASK_AMOUNT)], 'on-chain: each payment once')
    t.equal(await chain.balanceOf(account.address), 0n)
    t.equal((await marketplaceTask(token, `fac-${version}-market-${account.address}`)).status, 201, 'the plan covers the scheduler')
  })
}

t.test('MCP: a plan bought with a tool call, paid in _meta, settled once through the facilitator', async (t) => {
  const account = await buyer(PLAN_PRICE)
  const token = await register()
  const client = new Client({ name: 'facilitator-e2e', version: '1.0.0' })
  await client.connect(new StreamableHTTPClientTransport(new URL(`${cli.gateway}/mcp`), { requestInit: { headers: { authorization: `Bearer ${token}` } } }))
  t.teardown(() => client.close())
  const call = (meta?: Record<string, unknown>) => client.callTool({ name: 'purchasePlan', arguments: { planId: PLAN }, ...(meta ? { _meta: meta } : {}) })
  const unpaid = await call()
  t.equal(unpaid.isError, true, 'the unpaid call is answered with the payment requirements')
  const payment = await new x402Client()
    .register('eip155:8453', new ExactEvmScheme(account))
    .setSpendControls(false)
    .createPaymentPayload(unpaid.structuredContent as PaymentRequired)
  const paid = await call({ 'x402/payment': payment })
  t.notOk(paid.isError, JSON.stringify(paid.structuredContent))
  t.match(paid.structuredContent, { planId: PLAN, status: 'active' })
  const settles = settlesOf(account)
  t.same(
    settles.map((c) => [c.outcome, c.success]),
    [['answered', true]],
    'one /settle call',
  )
  t.equal((paid._meta?.['x402/payment-response'] as { transaction?: string } | undefined)?.transaction, settles[0]?.transaction, "the result names the facilitator's transaction")
  t.same(await payments(account.address), [PLAN_PRICE], 'on-chain: charged once')
})

t.test('a facilitator that settles and never answers, and one that answers 5xx without settling: every buyer whole', async (t) => {
  const lost = await buyer(PLAN_PRICE)
  const refused = await buyer(PLAN_PRICE)
  facilitator.fault = ({ payer, attempt }) => {
    if (payer === lost.address.toLowerCase()) return 'answerLost'
    if (payer === refused.address.toLowerCase() && attempt === 1) return 'failWith5xx'
    return undefined
  }
  t.teardown(() => void (facilitator.fault = () => undefined))
  const [lostToken, refusedToken] = [await register(), await register()]
  const answers = await Promise.all([purchase(payV2(lost), lostToken), purchase(payV2(refused), refusedToken)])
  for (const answer of answers) {
    t.equal(answer.status, 200, 'answered as bought, not refused')
    t.equal(answer.headers.get('x-payment-status'), 'pending', 'the outcome is unknown yet')
    t.match(await answer.json(), { planId: PLAN, status: 'pending' })
  }
  // The reconciler decides them (at most one 30 s pass): from the chain for the first, by asking
  // the facilitator again for the second.
  const deadline = Date.now() + 75_000
  let open = Number.POSITIVE_INFINITY
  while (Date.now() < deadline) {
    const metrics = await (await fetch(`${cli.gateway}/metrics`)).text()
    open = metricSum(metrics, 'agent_gateway_payments_open', (labels) => /settling|pending|reserved/.test(labels))
    if (open === 0) break
    await new Promise((resolve) => setTimeout(resolve, 1_000))
  }
  t.equal(open, 0, 'every payment decided')
  t.same(
    settlesOf(lost).map((call) => call.outcome),
    ['lost'],
    'settled once, its answer lost; the facilitator was not asked again',
  )
  t.same(
    settlesOf(refused).map((call) => call.outcome),
    ['5xx', 'answered'],
    'refused once, settled when asked again',
  )
  for (const [account, token, name] of [
    [lost, lostToken, 'lost'],
    [refused, refusedToken, 'refused'],
  ] as const) {
    t.same(await payments(account.address), [PLAN_PRICE], `${name}: charged exactly once on-chain`)
    t.equal((await marketplaceTask(token, `fac-fault-${name}-${account.address}`)).status, 201, `${name}: the plan bought is kept`)
  }
})
