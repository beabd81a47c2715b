// Facilitator mode (X402_FACILITATOR_URL) on the payment guard: the official x402 facilitator
// (x402Facilitator + @x402/evm's exact scheme) served over HTTP on a real anvil, the real x402
// clients' signing (v2 and v1), and a chain port that can only read (no SETTLER_PRIVATE_KEY). Each
// payment is verified and settled by the facilitator exactly once on-chain; a /settle whose answer
// is lost, or that answers 5xx, is left pending and decided from the chain or by asking the
// facilitator again, never by a broadcast of our own, never twice; an authorization that can no
// longer move is failed and its work taken back, the buyer not charged.
import t from 'tap'
import type { Test } from 'tap'
import { x402Client, x402HTTPClient } from '@x402/core/client'
import type { PaymentPayload } from '@x402/core/types'
import { authorizationTypes } from '@x402/evm'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import { ExactEvmSchemeV1 } from '@x402/evm/exact/v1/client'
import { parseAbiItem, type Address, type Hex, type LocalAccount } from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { AppError } from '../../src/platform/errors.ts'
import { BASE_CHAIN_ID, BASE_USDC, startDevChain } from '../../src/payments/chain/index.ts'
import { readOnlyChain } from '../../src/payments/x402/read-only-chain.ts'
import { freePort } from '../helpers/cli.ts'
import { startTestFacilitator } from '../helpers/x402-facilitator.ts'
import { guardWorld } from '../helpers/guard-world.ts'

const PRICE = 10_000n
const API_KEY = 'fac-test-key'

const dev = await startDevChain()
t.teardown(() => dev.close())
const facilitator = await startTestFacilitator({ rpcUrl: dev.rpcUrl, apiKey: API_KEY, lostAnswerMs: 3_000 })
t.teardown(() => facilitator.close())

/** One gateway process in facilitator mode: its chain port refuses every write. */
function gateway(t: Test, options: { url?: string; headers?: Record<string, string> } = {}) {
  return guardWorld(t, PRICE, {
    chain: readOnlyChain(dev),
    facilitatorUrl: options.url ?? facilitator.url,
    facilitatorHeaders: options.headers ?? { Authorization: `Bearer ${API_KEY}` },
    facilitatorTimeoutMs: 1_000,
  })
}

type Gateway = Awaited<ReturnType<typeof gateway>>

/** The real x402 client's payment header for the 402 of `quote` (v2 PAYMENT-SIGNATURE or v1 X-PAYMENT); `validForS` re-signs it with a short lifetime. */
async function proof(w: Gateway, buyer: LocalAccount, options: { v1?: boolean; validForS?: number } = {}): Promise<Record<string, string>> {
  const challenge = w.payments.guard.paymentRequired(w.quote)
  const header = (name: string) => (options.v1 ? null : (Object.entries(challenge.headers).find(([k]) => k.toLowerCase() === name.toLowerCase())?.[1] ?? null))
  const client = options.v1 ? new x402Client().registerV1('base', new ExactEvmSchemeV1(buyer)) : new x402Client().register('eip155:8453', new ExactEvmScheme(buyer))
  const http = new x402HTTPClient(client)
  const payload: PaymentPayload = await http.createPaymentPayload(http.getPaymentRequiredResponse(header, challenge.extensions))
  if (options.validForS !== undefined) {
    const auth = (payload.payload as { authorization: { from: string; to: string; value: string; validAfter: string; validBefore: string; nonce: string } }).authorization
    auth.validBefore = String(Math.floor(Date.now() / 1000) + options.validForS)
    const message = {
      from: auth.from as Address,
      to: auth.to as Address,
      value: BigInt(auth.value),
      validAfter: BigInt(auth.validAfter),
      validBefore: BigInt(auth.validBefore),
      nonce: auth.nonce as Hex,
    }
    ;(payload.payload as { signature: Hex }).signature = await buyer.signTypedData({
      domain: { name: 'USD Coin', version: '2', chainId: BASE_CHAIN_ID, verifyingContract: BASE_USDC },
      types: authorizationTypes,
      primaryType: 'TransferWithAuthorization',
      message,
    })
  }
  return http.encodePaymentSignatureHeader(payload)
}

async function funded(amount = PRICE): Promise<LocalAccount> {
  const buyer = privateKeyToAccount(generatePrivateKey())
  await dev.mint(buyer.address, amount)
  return buyer
}

const transfer = parseAbiItem('event Transfer(address indexed from, address indexed to, uint256 value)')
/** USDC transfers out of `from` on the chain: how many times the buyer paid. */
async function paidTimes(from: Address): Promise<number> {
  const { createPublicClient, http } = await import('viem')
  const client = createPublicClient({ transport: http(dev.rpcUrl) })
  return (await client.getLogs({ address: BASE_USDC, event: transfer, args: { from }, fromBlock: 0n })).length
}

const settlesOf = (buyer: LocalAccount) => facilitator.settles.filter((call) => call.payer === buyer.address.toLowerCase())

t.test('v2 and v1: verified and settled by the facilitator, once, and confirmed from the chain; our wallet signs nothing', async (t) => {
  const w = await gateway(t)
  for (const v1 of [false, true]) {
    const buyer = await funded()
    const verifiesBefore = facilitator.verifies
    const { key, decision, receipt } = await w.paid(await proof(w, buyer, { v1 }))
    t.equal(decision.status, 'settled', `v${v1 ? 1 : 2}: settled`)
    t.equal(facilitator.verifies - verifiesBefore, 1, 'the facilitator verified it')
    const calls = settlesOf(buyer)
    t.equal(calls.length, 1, 'one /settle')
    t.equal(calls[0]?.version, v1 ? 1 : 2)
    t.equal((await w.row(key))?.reference, calls[0]?.transaction, 'the reference is the facilitator transaction')
    t.ok(receipt[v1 ? 'X-PAYMENT-RESPONSE' : 'PAYMENT-RESPONSE'], 'the receipt header')
    t.same(await Promise.all([dev.balanceOf(buyer.address), paidTimes(buyer.address)]), [0n, 1])
    await w.payments.reconcile()
    t.ok((await w.row(key))?.confirmed_at, 'the confirmation sweep confirmed it on-chain')
  }
  t.equal(await dev.balanceOf(w.payTo), 2n * PRICE)
  t.equal(facilitator.unauthorized, 0, 'X402_FACILITATOR_HEADERS went with every call')
})

t.test('refused by the facilitator (no funds): 402 insufficient_funds, nothing reserved or settled', async (t) => {
  const w = await gateway(t)
  const broke = privateKeyToAccount(generatePrivateKey())
  const error = await w.payments.guard.authorize(await proof(w, broke), w.quote, 'op').catch((e: unknown) => e)
  t.ok(error instanceof AppError && error.status === 402, 'a 402')
  t.equal((error as AppError).extensions?.reason, 'insufficient_funds', (error as Error).message)
  t.equal((await w.db.query('select 1 from payment_reservations')).length, 0, 'nothing reserved')
  t.equal(settlesOf(broke).length, 0)
})

t.test('the facilitator cannot be asked: 503, nothing reserved (unreachable, or refusing our missing key)', async (t) => {
  const buyer = await funded()
  for (const w of [await gateway(t, { url: `http://127.0.0.1:${await freePort()}` }), await gateway(t, { headers: {} })]) {
    const error = await w.payments.guard.authorize(await proof(w, buyer), w.quote, 'op').catch((e: unknown) => e)
    t.ok(error instanceof AppError && error.status === 503, `503 (${(error as Error).message})`)
    t.equal((await w.db.query('select 1 from payment_reservations')).length, 0)
  }
  t.equal(await dev.balanceOf(buyer.address), PRICE, 'not charged')
})

t.test('settled, then the answer is lost: pending, then settled from the chain without a second /settle', async (t) => {
  const w = await gateway(t)
  const buyer = await funded()
  facilitator.fault = ({ payer }) => (payer === buyer.address.toLowerCase() ? 'answerLost' : undefined)
  t.teardown(() => void (facilitator.fault = () => undefined))
  const { key, decision } = await w.paid(await proof(w, buyer))
  t.equal(decision.status, 'pending', 'a timeout is no verdict')
  t.same(w.heard, [], 'the work is not taken back')
  t.equal(await w.payments.reconcile(), 1, 'one pass decides it')
  t.equal((await w.row(key))?.state, 'settled')
  t.same(await w.ledger(key), ['pending', 'reconciled_settled'])
  t.equal((await w.row(key))?.reference, settlesOf(buyer)[0]?.transaction, 'the transaction found from the nonce')
  t.same(w.heard, [`settled ${key}`])
  t.equal(settlesOf(buyer).length, 1, 'the facilitator was not asked again')
  t.same(await Promise.all([dev.balanceOf(buyer.address), paidTimes(buyer.address)]), [0n, 1], 'charged once')
})

t.test('5xx without settling: pending, then the reconciler asks the facilitator again and it settles once', async (t) => {
  const w = await gateway(t)
  const buyer = await funded()
  facilitator.fault = ({ payer, attempt }) => (payer === buyer.address.toLowerCase() && attempt === 1 ? 'failWith5xx' : undefined)
  t.teardown(() => void (facilitator.fault = () => undefined))
  const { key, decision } = await w.paid(await proof(w, buyer))
  t.equal(decision.status, 'pending', 'a 5xx is no verdict')
  t.equal(await dev.balanceOf(buyer.address), PRICE, 'nothing moved yet')
  t.equal(await w.payments.reconcile(), 1)
  t.equal((await w.row(key))?.state, 'settled')
  t.same(
    settlesOf(buyer).map((call) => call.outcome),
    ['5xx', 'answered'],
  )
  t.same(w.heard, [`settled ${key}`])
  t.same(await Promise.all([dev.balanceOf(buyer.address), paidTimes(buyer.address)]), [0n, 1], 'charged once')
  t.equal(await w.payments.reconcile(), 0, 'and it stays decided')
  t.equal(settlesOf(buyer).length, 2)
})

t.test('5xx every time: pending while the authorization is valid, failed once it expired, the buyer not charged', async (t) => {
  const w = await gateway(t)
  const buyer = await funded()
  facilitator.fault = ({ payer }) => (payer === buyer.address.toLowerCase() ? 'failWith5xx' : undefined)
  t.teardown(() => void (facilitator.fault = () => undefined))
  const { key, decision } = await w.paid(await proof(w, buyer, { validForS: 9 }))
  t.equal(decision.status, 'pending')
  t.equal(await w.payments.reconcile(), 0, 'still valid: asked again, not decided')
  t.ok(settlesOf(buyer).length >= 2, 'the facilitator was asked again')
  await new Promise((resolve) => setTimeout(resolve, 10_000))
  // anvil mines only on demand: a block after validBefore is what makes the chain call it dead.
  await fetch(dev.rpcUrl, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'evm_mine', params: [] }) })
  t.equal(await w.payments.reconcile(), 1, 'expired unused: decided')
  t.equal((await w.row(key))?.state, 'released')
  t.same(w.heard, [`failed ${key}`], 'the work is taken back')
  t.same(await Promise.all([dev.balanceOf(buyer.address), paidTimes(buyer.address)]), [PRICE, 0], 'not charged')
})
