// A settlement broadcast while the RPC node is out of reach (docs/reliability.md, finding 4): the
// payment guard on PGlite, a REAL anvil behind a front that can cut connections (what the node
// going down looks like to the RPC adapter), and the REAL x402 client's signing. The broadcast's
// outcome is unknown, so the payment is recorded 'pending' with the locally computed hash; once
// the node answers again and does not know that transaction, one reconciler pass broadcasts the
// buyer's authorization again and the sale the buyer was answered for stands. A transaction the
// node does know (in its mempool) is waited for, never sent twice.
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import type { Test } from 'tap'
import { x402Client, x402HTTPClient } from '@x402/core/client'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import { authorizationTypes } from '@x402/evm'
import type { Address, Hex, LocalAccount } from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import type { Payments } from '../../src/payments/index.ts'
import type { PriceQuote } from '../../src/payments/types.ts'
import { CARRIER_LOOKUP_WINDOW_S, x402Reconciler } from '../../src/payments/x402/method.ts'
import { BASE_CHAIN_ID, BASE_USDC, createRpcChain, startDevChain } from '../../src/payments/chain/index.ts'
import { guardWorld } from '../helpers/guard-world.ts'

const SETTLER_KEY: Hex = '0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d'
const PRICE = 10_000n

const dev = await startDevChain()
t.teardown(() => dev.close())

async function rpc<T = unknown>(method: string, params: unknown[] = []): Promise<T> {
  const res = await fetch(dev.rpcUrl, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }) })
  const body = (await res.json()) as { result?: T; error?: { message: string } }
  if (body.error) throw new Error(`${method}: ${body.error.message}`)
  return body.result as T
}

/**
 * The RPC node as the service reaches it: `cutSends` drops eth_sendRawTransaction without an
 * answer (the node went down as the transaction was sent: it never got it), `down` drops everything.
 */
async function rpcFront(t: Test) {
  const state = { cutSends: false, down: false, dropCalls: 0, dropLogs: false, emptyLogs: false }
  const server = createServer(async (req, res) => {
    const chunks: Buffer[] = []
    for await (const chunk of req) chunks.push(chunk as Buffer)
    const body = Buffer.concat(chunks)
    const sends = body.includes('eth_sendRawTransaction')
    const dropCall = state.dropCalls > 0 && body.includes('"eth_call"')
    if (dropCall) state.dropCalls -= 1
    if (state.down || (state.cutSends && sends) || dropCall || (state.dropLogs && body.includes('"eth_getLogs"'))) {
      req.socket.destroy()
      return
    }
    if (state.emptyLogs && body.includes('"eth_getLogs"')) {
      // A node that answers but has no log of the block yet (one catching up after a restart).
      const { id } = JSON.parse(body.toString()) as { id: unknown }
      res.writeHead(200, { 'content-type': 'application/json' })
      return void res.end(JSON.stringify({ jsonrpc: '2.0', id, result: [] }))
    }
    const upstream = await fetch(dev.rpcUrl, { method: 'POST', headers: { 'content-type': 'application/json' }, body })
    res.writeHead(upstream.status, { 'content-type': 'application/json' })
    res.end(Buffer.from(await upstream.arrayBuffer()))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())))
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, state }
}

/** Payments of one process whose chain adapter reaches the node through `rpcUrl`. */
async function paymentsVia(t: Test, rpcUrl: string) {
  const chain = createRpcChain({ rpcUrl, privateKey: SETTLER_KEY, chainId: BASE_CHAIN_ID, usdc: BASE_USDC, pollingIntervalMs: 20, requestTimeoutMs: 1_000 })
  t.teardown(() => chain.close())
  const world = await guardWorld(t, PRICE, { chain, settleTimeoutMs: 300 })
  // Where the reservation stands: its state and reference (what these tests compare whole).
  const row = async (key: string) => {
    const found = await world.row(key)
    return found && { state: found.state, reference: found.reference }
  }
  return { ...world, row, chain }
}

/** The real x402 v2 client's PAYMENT-SIGNATURE for the 402 of `quote`. */
async function proof(payments: Payments, buyer: LocalAccount, quote: PriceQuote): Promise<Record<string, string>> {
  const challenge = payments.guard.paymentRequired(quote)
  const header = (name: string) => Object.entries(challenge.headers).find(([k]) => k.toLowerCase() === name.toLowerCase())?.[1] ?? null
  const http = new x402HTTPClient(new x402Client().register('eip155:8453', new ExactEvmScheme(buyer)))
  return http.encodePaymentSignatureHeader(await http.createPaymentPayload(http.getPaymentRequiredResponse(header, challenge.extensions)))
}

/** A paid request of `buyer` (the real client's proof): its spend key and decision. */
async function paidRequest(w: Awaited<ReturnType<typeof paymentsVia>>, buyer: LocalAccount) {
  const { key, decision } = await w.paid(await proof(w.payments, buyer, w.quote))
  return { key, decision }
}

async function funded(): Promise<LocalAccount> {
  const buyer = privateKeyToAccount(generatePrivateKey())
  await dev.mint(buyer.address, PRICE)
  return buyer
}

t.test('broadcast lost with the RPC node: pending, then settled by the first reconciler pass once the node answers', async (t) => {
  const front = await rpcFront(t)
  const w = await paymentsVia(t, front.url)
  const buyer = await funded()

  front.state.cutSends = true
  const { key, decision } = await paidRequest(w, buyer)
  t.equal(decision.status, 'pending', 'the buyer is answered; the outcome is unknown')
  const recorded = (await w.row(key))?.reference as Hex
  t.match(recorded, /^0x[0-9a-f]{64}$/, 'the locally computed hash is recorded')

  front.state.down = true
  t.equal(await w.payments.reconcile(), 0, 'the node out of reach: nothing decided')
  t.equal((await w.row(key))?.state, 'pending')

  front.state.down = false
  front.state.cutSends = false
  t.equal(await w.chain.transactionKnown(recorded), false, 'the node never got our transaction')
  t.equal(await w.payments.reconcile(), 1, 'one pass decides it')
  const after = await w.row(key)
  t.equal(after?.state, 'settled')
  // The nonce was never used, so the new broadcast may well be the same transaction, byte for byte.
  t.equal(await w.chain.settlementStatus(after?.reference as Hex), 'confirmed', 'its reference is the mined broadcast')
  t.same(await w.ledger(key), ['pending', 'reconciled_settled'])
  t.same(w.heard, [`settled ${key}`], 'the work stands; never taken back')
  t.same(await Promise.all([dev.balanceOf(buyer.address), dev.balanceOf(w.payTo)]), [0n, PRICE])
  t.equal(await w.payments.reconcile(), 0, 'and it stays decided')
})

t.test('the RPC node down before anything is sent: pending (never a refused payment), settled once the node answers', async (t) => {
  const front = await rpcFront(t)
  const w = await paymentsVia(t, front.url)
  const buyer = await funded()

  front.state.down = true
  const { key, decision } = await paidRequest(w, buyer)
  t.equal(decision.status, 'pending', 'a node that does not answer says nothing about the payment: not failed')
  t.same(w.heard, [], 'the work is not taken back')
  t.equal(await w.payments.reconcile(), 0, 'still out of reach: nothing decided')

  front.state.down = false
  t.equal(await w.payments.reconcile(), 1, 'one pass once it answers')
  t.equal((await w.row(key))?.state, 'settled')
  t.same(w.heard, [`settled ${key}`])

  // The node drops the settlement's simulation (eth_call, with the adapter's retries) and answers
  // again right after: an unanswered simulation is no verdict on the payment either.
  const second = await funded()
  front.state.dropCalls = 3
  const again = await paidRequest(w, second)
  t.equal(again.decision.status, 'pending', 'not refused: the node said nothing about it')
  t.equal(await w.payments.reconcile(), 1)
  t.equal((await w.row(again.key))?.state, 'settled')
  t.same(await Promise.all([dev.balanceOf(second.address), dev.balanceOf(w.payTo)]), [0n, 2n * PRICE])
  t.same(w.heard, [`settled ${key}`, `settled ${again.key}`])
  t.equal(await dev.balanceOf(buyer.address), 0n)
})

t.test('our transaction waiting in the mempool: the reconciler waits and sends nothing', async (t) => {
  const w = await paymentsVia(t, dev.rpcUrl)
  const buyer = await funded()
  await rpc('evm_setAutomine', [false])
  let automine = false
  t.teardown(async () => {
    if (!automine) await rpc('evm_setAutomine', [true])
  })
  const { key, decision } = await paidRequest(w, buyer)
  t.equal(decision.status, 'pending', 'receipt not seen within the settle timeout')
  const recorded = (await w.row(key))?.reference as Hex
  t.equal(await w.chain.transactionKnown(recorded), true)
  t.equal(await w.payments.reconcile(), 0, 'nothing decided while it waits')
  t.equal(BigInt((await rpc<{ pending: Hex }>('txpool_status')).pending), 1n, 'and nothing broadcast again')

  await rpc('evm_mine')
  await rpc('evm_setAutomine', [true])
  automine = true
  t.equal(await w.payments.reconcile(), 1)
  t.same(await w.row(key), { state: 'settled', reference: recorded })
  t.same(await Promise.all([dev.balanceOf(buyer.address), dev.balanceOf(w.payTo)]), [0n, PRICE])
})

t.test('x402Reconciler: a pending row whose transaction the node does not know is broadcast again', async (t) => {
  const w = await paymentsVia(t, dev.rpcUrl)
  const buyer = await funded()
  const auth = { from: buyer.address, to: w.payTo as Address, value: PRICE, validAfter: 0n, validBefore: BigInt(Math.floor(Date.now() / 1000) + 300), nonce: generatePrivateKey() }
  const signature = await buyer.signTypedData({
    domain: { name: 'USD Coin', version: '2', chainId: BASE_CHAIN_ID, verifyingContract: BASE_USDC },
    types: authorizationTypes,
    primaryType: 'TransferWithAuthorization',
    message: auth,
  })
  const detail = { ...auth, value: auth.value.toString(), validAfter: '0', validBefore: auth.validBefore.toString(), signature }
  const lost = generatePrivateKey() // a hash the node never saw
  const verdict = await x402Reconciler(w.chain, Date.now)({ replayKey: 'k', state: 'pending', reference: lost, detail, since: new Date() })
  t.equal(verdict.status, 'settled')
  t.equal(await dev.isAuthorizationUsed(buyer.address, auth.nonce), true)
  t.equal(await dev.balanceOf(w.payTo), PRICE)
})

t.test('x402Reconciler: a used authorization whose transaction cannot be looked up yet waits for it, never settles without it', async (t) => {
  const front = await rpcFront(t)
  const w = await paymentsVia(t, front.url)
  const buyer = await funded()
  const auth = { from: buyer.address, to: w.payTo as Address, value: PRICE, validAfter: 0n, validBefore: BigInt(Math.floor(Date.now() / 1000) + 300), nonce: generatePrivateKey() }
  const signature = await buyer.signTypedData({
    domain: { name: 'USD Coin', version: '2', chainId: BASE_CHAIN_ID, verifyingContract: BASE_USDC },
    types: authorizationTypes,
    primaryType: 'TransferWithAuthorization',
    message: auth,
  })
  const landed = await w.chain.settleAuthorization(auth, signature)
  t.equal(landed.status, 'confirmed', 'the authorization is used on-chain (our broadcast, its answer lost)')
  const detail = { ...auth, value: auth.value.toString(), validAfter: '0', validBefore: auth.validBefore.toString(), signature }
  const reconcile = x402Reconciler(w.chain, Date.now)
  front.state.dropLogs = true
  const waiting = await reconcile({ replayKey: 'k', state: 'pending', reference: '', detail, since: new Date() })
  t.same(waiting, { status: 'pending' }, 'the carrying transaction cannot be found now: decided later, with its hash')
  front.state.dropLogs = false
  front.state.emptyLogs = true
  const unseen = await reconcile({ replayKey: 'k', state: 'pending', reference: '', detail, since: new Date() })
  t.same(unseen, { status: 'pending' }, 'the node answers but no log names the carrier yet: decided later, with its hash')
  const longPast = (Number(auth.validBefore) + CARRIER_LOOKUP_WINDOW_S + 1) * 1000
  const late = await x402Reconciler(w.chain, () => longPast)({ replayKey: 'k', state: 'pending', reference: '', detail, since: new Date() })
  t.same(late, { status: 'settled', reference: '' }, 'past the lookup window: settled without it (the money moved), never pending for ever')
  const ours = `0x${'ab'.repeat(32)}`
  const recorded = await reconcile({ replayKey: 'k', state: 'pending', reference: ours, detail, since: new Date() })
  t.same(recorded, { status: 'settled', reference: ours }, 'with a transaction of ours on record: settled with it (a node restarted without its logs), not left pending')
  front.state.emptyLogs = false
  const verdict = await reconcile({ replayKey: 'k', state: 'pending', reference: '', detail, since: new Date() })
  t.same(verdict, { status: 'settled', reference: landed.status === 'confirmed' ? landed.txHash : '' }, 'settled with the transaction that carried it')
})
