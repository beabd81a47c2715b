// MPP (`tempo`/`charge`) end to end with the real mppx client: a tiny node:http server issues
// challenges with createMpp().challenge(), checks credentials with verify(), reserves replayKey
// in a Set (standing in for the guard's DB reservation) and settles through the scripted Tempo
// RPC responder (test/helpers/tempo-rpc.ts). Nothing leaves 127.0.0.1.
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import { Challenge, PaymentRequest, Receipt } from 'mppx'
import { Mppx, tempo } from 'mppx/client'
import { createClient, http as viemHttp, keccak256 } from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { tempo as tempoChain } from 'viem/tempo/chains'
import { openKeyValue } from '../../src/platform/kv/index.ts'
import { createMpp, TEMPO_USDC, tempoClientFromUrl } from '../../src/payments/mpp/index.ts'
import { PaymentRejected, type PriceQuote, type VerifiedPayment } from '../../src/payments/types.ts'
import { startTempoRpc } from '../helpers/tempo-rpc.ts'

const RECIPIENT = '0x1111111111111111111111111111111111111111' as const
const SECRET = 'test-secret-key-0123456789abcdef-0123456789'
const REALM = 'gateway.test'
const TTL_MS = 300_000

const rpc = await startTempoRpc()
t.teardown(() => rpc.close())
const kv = await openKeyValue({ kind: 'memory' })
t.teardown(() => kv.close())

let skewMs = 0
const mpp = createMpp({
  secretKey: SECRET,
  realm: REALM,
  recipient: RECIPIENT,
  challengeTtlMs: TTL_MS,
  getClient: tempoClientFromUrl(rpc.url, { timeoutMs: 1_000 }),
  store: kv,
  now: () => Date.now() + skewMs,
})

// ---- the resource server ---------------------------------------------------------------------
const prices = new Map<string, bigint>([
  ['/paid', 80_000n],
  ['/other', 80_000n],
  ['/advice', 0n],
])
function quoteFor(path: string): PriceQuote {
  const amountMicros = prices.get(path)
  if (amountMicros === undefined) throw new Error(`no price for ${path}`)
  return {
    amountMicros,
    resourceUrl: `https://gateway.test${path}`,
    route: `GET ${path}`,
    description: `demo ${path}`,
    payTo: RECIPIENT,
  }
}
const reserved = new Set<string>()
const served: VerifiedPayment[] = []

const server = http.createServer(async (req, res) => {
  const path = new URL(req.url ?? '/', 'http://x').pathname
  const quote = quoteFor(path)
  const refuse = (reason: string): void => {
    res.writeHead(402, { ...mpp.challenge(quote).headers, 'content-type': 'application/json' })
    res.end(JSON.stringify({ reason }))
  }
  const authorization = req.headers.authorization
  if (authorization === undefined) return refuse('payment_required')
  let payment: VerifiedPayment
  try {
    payment = await mpp.verify(authorization, quote)
  } catch (err) {
    if (err instanceof PaymentRejected) return refuse(err.reason)
    res.writeHead(500)
    res.end(String(err))
    return
  }
  if (reserved.has(payment.replayKey)) return refuse('nonce_already_used')
  reserved.add(payment.replayKey)
  served.push(payment)
  if (payment.zeroValue) {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ payer: payment.payer }))
    return
  }
  const outcome = await payment.settle()
  if (outcome.status !== 'settled') {
    reserved.delete(payment.replayKey)
    return refuse('settlement_failed')
  }
  res.writeHead(200, { ...outcome.headers, 'content-type': 'application/json' })
  res.end(JSON.stringify({ ok: true }))
})
await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()))
t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())))
const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`

// ---- the paying agent (real mppx client) -----------------------------------------------------
const account = privateKeyToAccount(generatePrivateKey())
const sentAuthorizations: string[] = []
const recordingFetch: typeof globalThis.fetch = async (input, init) => {
  const authorization = new Headers(init?.headers).get('authorization')
  if (authorization !== null) sentAuthorizations.push(authorization)
  return globalThis.fetch(input, init)
}
const agent = Mppx.create({
  methods: [
    tempo({
      account,
      getClient: () => createClient({ chain: tempoChain, transport: viemHttp(rpc.url, { retryCount: 0 }) }),
    }),
  ],
  polyfill: false,
  fetch: recordingFetch,
})

/** A fresh credential for `path`, made by the real client from the server's 402. */
async function credentialFor(path: string): Promise<string> {
  const unpaid = await globalThis.fetch(`${base}${path}`)
  if (unpaid.status !== 402) throw new Error(`expected 402, got ${unpaid.status}`)
  return agent.createCredential(unpaid)
}

async function rawGet(path: string, authorization: string): Promise<{ status: number; reason?: string }> {
  const res = await globalThis.fetch(`${base}${path}`, { headers: { authorization } })
  const body = (await res.json()) as { reason?: string }
  return { status: res.status, ...(body.reason === undefined ? {} : { reason: body.reason }) }
}

/** Rewrites the JSON inside `Payment <base64url>`. */
function tamper(authorization: string, edit: (credential: { challenge: Record<string, unknown> }) => void): string {
  const encoded = authorization.replace(/^Payment\s+/i, '')
  const credential = JSON.parse(Buffer.from(encoded, 'base64url').toString('utf8')) as {
    challenge: Record<string, unknown>
  }
  edit(credential)
  return `Payment ${Buffer.from(JSON.stringify(credential)).toString('base64url')}`
}

async function rejection(promise: Promise<unknown>): Promise<string> {
  try {
    await promise
  } catch (err) {
    if (err instanceof PaymentRejected) return err.reason
    throw err
  }
  throw new Error('expected a PaymentRejected')
}

// ---- tests -----------------------------------------------------------------------------------

t.test('challenge is an mppx Payment challenge bound to route, amount and expiry', async (t) => {
  const before = Date.now()
  const header = mpp.challenge(quoteFor('/paid')).headers['WWW-Authenticate']
  t.ok(header, 'WWW-Authenticate is set')
  t.match(header, /^Payment id="[^"]+", realm="gateway\.test", method="tempo", intent="charge", request="/)
  const challenge = Challenge.deserialize(header!)
  t.ok(Challenge.verify(challenge, { secretKey: SECRET }), 'HMAC id verifies with our key')
  t.notOk(Challenge.verify(challenge, { secretKey: `${SECRET}-other` }), 'and not with another key')
  t.same(challenge.request, {
    amount: '80000',
    currency: TEMPO_USDC,
    recipient: RECIPIENT,
    methodDetails: { chainId: 4217 },
  })
  t.same(PaymentRequest.deserialize(challenge.opaque!), { route: 'GET /paid' }, 'route travels in opaque')
  const expires = Date.parse(challenge.expires!)
  t.ok(expires >= before + TTL_MS - 1_000 && expires <= Date.now() + TTL_MS + 1_000, 'expires ≈ now + ttl')
  t.throws(() => createMpp({ secretKey: 'short', realm: REALM, recipient: RECIPIENT, getClient: () => 0 as never, store: kv }))
})

t.test('a paid charge settles once and returns Payment-Receipt', async (t) => {
  const broadcastsBefore = rpc.broadcasts.length
  const res = await agent.fetch(`${base}/paid`)
  t.equal(res.status, 200)
  const header = res.headers.get('payment-receipt')
  t.ok(header, 'Payment-Receipt header')
  const receipt = Receipt.deserialize(header!)
  t.equal(receipt.method, 'tempo')
  t.equal(receipt.status, 'success')
  t.equal(rpc.broadcasts.length, broadcastsBefore + 1, 'exactly one broadcast')
  const raw = rpc.broadcasts.at(-1)!
  t.equal(receipt.reference.toLowerCase(), keccak256(raw), 'receipt references the broadcast tx')
  const payment = served.at(-1)!
  t.equal(payment.protocol, 'mpp')
  t.equal(payment.amountMicros, 80_000n)
  t.equal(payment.payer, account.address)
  t.equal(payment.zeroValue, false)
  t.equal(payment.replayKey, `mpp:tx:${keccak256(raw)}`)
  t.equal(payment.detail.mode, 'pull')

  // The same credential again: refused (already claimed), and nothing is broadcast.
  const replayed = sentAuthorizations.at(-1)!
  const again = await rawGet('/paid', replayed)
  t.equal(again.status, 402)
  t.equal(again.reason, 'nonce_already_used')
  t.equal(rpc.broadcasts.length, broadcastsBefore + 1, 'replay broadcast nothing')
})

t.test('verify consumes nothing; settle() broadcasts at most once', async (t) => {
  const authorization = await credentialFor('/paid')
  const quote = quoteFor('/paid')
  const broadcastsBefore = rpc.broadcasts.length
  const first = await mpp.verify(authorization, quote)
  const second = await mpp.verify(authorization, quote)
  t.equal(first.replayKey, second.replayKey, 'same credential, same replay key')
  t.equal(rpc.broadcasts.length, broadcastsBefore, 'verify broadcast nothing')
  const [a, b] = await Promise.all([first.settle(), first.settle()])
  t.equal(a.status, 'settled')
  t.same(a, b, 'second settle() returns the same outcome')
  t.equal(rpc.broadcasts.length, broadcastsBefore + 1, 'one broadcast')
  // Another VerifiedPayment of the same credential cannot settle it again.
  const other = await second.settle()
  t.equal(other.status, 'failed')
  t.equal(rpc.broadcasts.length, broadcastsBefore + 1)
  t.equal(await rejection(mpp.verify(authorization, quote)), 'nonce_already_used')
})

t.test('a push credential (tx hash) verifies and settles without a second broadcast', async (t) => {
  const unpaid = await globalThis.fetch(`${base}/paid`)
  const before = rpc.broadcasts.length
  const authorization = await agent.createCredential(unpaid, { mode: 'push' })
  t.equal(rpc.broadcasts.length, before + 1, 'the agent broadcast it itself')
  const hash = keccak256(rpc.broadcasts.at(-1)!)
  const payment = await mpp.verify(authorization, quoteFor('/paid'))
  t.equal(payment.detail.mode, 'push')
  t.equal(payment.replayKey, `mpp:tx:${hash}`, 'push and pull share the tx-hash key space')
  t.equal(payment.payer, account.address)
  const outcome = await payment.settle()
  t.equal(outcome.status, 'settled')
  if (outcome.status === 'settled') t.equal(outcome.reference, hash)
  t.equal(rpc.broadcasts.length, before + 1, 'settling a push payment broadcasts nothing')
  t.equal(await rejection(mpp.verify(authorization, quoteFor('/paid'))), 'nonce_already_used')
})

t.test('a forged challenge id is refused', async (t) => {
  const authorization = await credentialFor('/paid')
  const forgedId = tamper(authorization, (c) => {
    c.challenge.id = 'ysH9oHJSwCIsEb4CxGKL7HM1f-ZvMUo8I54MXGZ2vRc'
  })
  t.equal(await rejection(mpp.verify(forgedId, quoteFor('/paid'))), 'challenge_forged')
  // Rewriting the request (cheaper amount) breaks the HMAC too.
  const cheaper = tamper(authorization, (c) => {
    const request = JSON.parse(Buffer.from(String(c.challenge.request), 'base64url').toString('utf8'))
    request.amount = '1'
    c.challenge.request = Buffer.from(JSON.stringify(request)).toString('base64url')
  })
  t.equal(await rejection(mpp.verify(cheaper, quoteFor('/paid'))), 'challenge_forged')
  const res = await rawGet('/paid', forgedId)
  t.same(res, { status: 402, reason: 'challenge_forged' })
})

t.test('an expired challenge is refused (injected clock)', async (t) => {
  const authorization = await credentialFor('/paid')
  const broadcastsBefore = rpc.broadcasts.length
  skewMs = TTL_MS + 1_000
  t.teardown(() => {
    skewMs = 0
  })
  t.equal(await rejection(mpp.verify(authorization, quoteFor('/paid'))), 'challenge_expired')
  const res = await rawGet('/paid', authorization)
  t.same(res, { status: 402, reason: 'challenge_expired' })
  t.equal(rpc.broadcasts.length, broadcastsBefore)
})

t.test('a credential for another route or amount is refused', async (t) => {
  const authorization = await credentialFor('/paid')
  t.same(await rawGet('/other', authorization), { status: 402, reason: 'wrong_route' })
  t.equal(await rejection(mpp.verify(authorization, quoteFor('/advice'))), 'wrong_route')
  prices.set('/paid', 90_000n)
  t.teardown(() => {
    prices.set('/paid', 80_000n)
  })
  t.equal(await rejection(mpp.verify(authorization, quoteFor('/paid'))), 'wrong_amount')
})

t.test('a $0 proof verifies with zeroValue and is single-use via its replayKey', async (t) => {
  const broadcastsBefore = rpc.broadcasts.length
  const unpaid = await globalThis.fetch(`${base}/advice`)
  const challenge = Challenge.fromResponse(unpaid)
  t.equal(challenge.request.amount, '0')
  const res = await agent.fetch(`${base}/advice`)
  t.equal(res.status, 200)
  t.same(await res.json(), { payer: account.address })
  const payment = served.at(-1)!
  t.equal(payment.zeroValue, true)
  t.equal(payment.amountMicros, 0n)
  t.equal(payment.detail.mode, 'proof')
  t.match(payment.replayKey, /^mpp:proof:/)
  const proof = sentAuthorizations.at(-1)!
  const sent = JSON.parse(Buffer.from(proof.replace(/^Payment\s+/, ''), 'base64url').toString('utf8'))
  t.equal(sent.payload.type, 'proof', 'the real client answered with a proof')
  t.equal(payment.replayKey, `mpp:proof:${sent.challenge.id}`)

  // verify alone still accepts it (nothing consumed) ...
  const again = await mpp.verify(proof, quoteFor('/advice'))
  t.equal(again.replayKey, payment.replayKey)
  // ... but the reservation refuses the reuse.
  t.same(await rawGet('/advice', proof), { status: 402, reason: 'nonce_already_used' })
  t.equal(rpc.broadcasts.length, broadcastsBefore, 'proofs broadcast nothing')

  // settle() on a proof claims it in mppx's store; afterwards verify refuses it by itself.
  const settled = await again.settle()
  t.equal(settled.status, 'settled')
  if (settled.status === 'settled') {
    t.equal(settled.reference, sent.challenge.id)
    t.equal(Receipt.deserialize(settled.headers['Payment-Receipt']!).reference, sent.challenge.id)
  }
  t.equal(await rejection(mpp.verify(proof, quoteFor('/advice'))), 'nonce_already_used')

  // A proof whose source names someone else than the signer does not verify.
  const fresh = await credentialFor('/advice')
  const swapped = JSON.parse(Buffer.from(fresh.replace(/^Payment\s+/, ''), 'base64url').toString('utf8'))
  swapped.source = `did:pkh:eip155:4217:${privateKeyToAccount(generatePrivateKey()).address}`
  const forgedSource = `Payment ${Buffer.from(JSON.stringify(swapped)).toString('base64url')}`
  t.equal(await rejection(mpp.verify(forgedSource, quoteFor('/advice'))), 'invalid_signature')
})

t.test('malformed headers are refused as malformed', async (t) => {
  const quote = quoteFor('/paid')
  for (const header of [
    '',
    'Payment',
    'Payment !!!not-base64!!!',
    'Bearer abc',
    `Payment ${Buffer.from('{"challenge":{}}').toString('base64url')}`,
    `Payment ${Buffer.from('[1,2,3]').toString('base64url')}`,
  ]) {
    t.equal(await rejection(mpp.verify(header, quote)), 'malformed', JSON.stringify(header))
  }
  // A genuine challenge with a nonsense payload.
  const authorization = await credentialFor('/paid')
  const garbage = JSON.parse(Buffer.from(authorization.replace(/^Payment\s+/, ''), 'base64url').toString('utf8'))
  garbage.payload = { type: 'transaction', signature: '0x1234' }
  t.equal(await rejection(mpp.verify(`Payment ${Buffer.from(JSON.stringify(garbage)).toString('base64url')}`, quote)), 'malformed')
  t.same(await rawGet('/paid', 'Payment %%%'), { status: 402, reason: 'malformed' })
})

t.test('RPC faults: simulation revert, broadcast revert, refusal and timeout', async (t) => {
  const quote = quoteFor('/paid')

  rpc.fail('eth_call', 'revert')
  t.equal(await rejection(mpp.verify(await credentialFor('/paid'), quote)), 'insufficient_funds', 'simulation revert')

  // Mined but reverted: the tx went out, no transfer happened → failed.
  let payment = await mpp.verify(await credentialFor('/paid'), quote)
  let before = rpc.broadcasts.length
  rpc.fail('eth_sendRawTransactionSync', 'revert')
  let outcome = await payment.settle()
  t.equal(outcome.status, 'failed', 'reverted on chain')
  t.equal(rpc.broadcasts.length, before + 1)

  // The node refuses the transaction: nothing was broadcast → failed.
  payment = await mpp.verify(await credentialFor('/paid'), quote)
  before = rpc.broadcasts.length
  rpc.fail('eth_sendRawTransactionSync', 'rpc-error')
  outcome = await payment.settle()
  t.equal(outcome.status, 'failed', 'refused by the node')
  t.equal(rpc.broadcasts.length, before)

  // Sent, but the answer never comes: pending, referenced by the tx hash for reconciliation.
  const sentButLost = await credentialFor('/paid')
  payment = await mpp.verify(sentButLost, quote)
  before = rpc.broadcasts.length
  rpc.fail('eth_sendRawTransactionSync', 'timeout')
  outcome = await payment.settle()
  t.same(outcome, { status: 'pending', reference: payment.detail.txHash })
  t.equal(rpc.broadcasts.length, before + 1)
  t.equal(await rejection(mpp.verify(sentButLost, quote)), 'nonce_already_used', 'claimed despite timeout')
})
