// x402 challenge / decode / verify against the REAL x402 clients (@x402/core x402Client +
// @x402/evm ExactEvmScheme v2 and ExactEvmSchemeV1, @x402/fetch wrapFetchWithPayment). Offline.
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import type { Test } from 'tap'
import { x402Client, x402HTTPClient } from '@x402/core/client'
import { decodePaymentRequiredHeader, encodePaymentRequiredHeader } from '@x402/core/http'
import { PaymentRequiredV1Schema, PaymentRequiredV2Schema } from '@x402/core/schemas'
import type { PaymentPayload, PaymentRequired } from '@x402/core/types'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import { ExactEvmSchemeV1 } from '@x402/evm/exact/v1/client'
import { wrapFetchWithPayment } from '@x402/fetch'
import { declarePaymentIdentifierExtension } from '@x402/extensions/payment-identifier'
import { hashTypedData, recoverTypedDataAddress, toHex } from 'viem'
import type { Address, Hex } from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import type { PrivateKeyAccount } from 'viem/accounts'
import type { ChainPort } from '../../src/payments/chain/index.ts'
import { credentialsOf, paymentCredential, type HeaderBag } from '../../src/payments/credentials.ts'
import { PaymentRejected } from '../../src/payments/types.ts'
import type { PriceQuote } from '../../src/payments/types.ts'
import type { AppError } from '../../src/platform/errors.ts'
import {
  TRANSFER_WITH_AUTHORIZATION_TYPES,
  USDC_DOMAIN,
  decodeX402Proof,
  readPaymentIdentifier,
  recoverSigner,
  recoveryBackend,
  recoveryBackends,
  transferWithAuthorizationDigest,
  transferWithAuthorizationDigestHex,
  verifyX402,
  x402Challenge,
  x402RequirementsV1,
  x402ProofOf,
  x402RequirementsV2,
} from '../../src/payments/x402/index.ts'
import type { TransferAuthorization, X402Proof } from '../../src/payments/x402/index.ts'
import { x402Method } from '../../src/payments/x402/method.ts'
import { addressOfPrivateKey } from '../../src/payments/x402/recover.ts'

const USDC = '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913'
const PAY_TO = '0x1111111111111111111111111111111111111111' as Address
const quote: PriceQuote = {
  amountMicros: 10_000n,
  resourceUrl: 'https://gw.example/v1/search',
  route: 'GET /v1/search',
  description: 'Search the catalog',
  payTo: PAY_TO,
}
const otherRoute: PriceQuote = { ...quote, amountMicros: 20_000n, resourceUrl: 'https://gw.example/v1/run', route: 'POST /v1/run' }
const samePriceOtherRoute: PriceQuote = { ...quote, resourceUrl: 'https://gw.example/v1/other', route: 'GET /v1/other' }

const account = privateKeyToAccount(generatePrivateKey())
const intruder = privateKeyToAccount(generatePrivateKey())
const now = () => Date.now()

/** `loose`: any EVM network and asset (to produce proofs for challenges that are not ours). */
function v2Client(acct: PrivateKeyAccount = account, loose = false): x402HTTPClient {
  const c = new x402Client().register(loose ? 'eip155:*' : 'eip155:8453', new ExactEvmScheme(acct))
  return new x402HTTPClient(loose ? c.setSpendControls(false) : c)
}
function v1Client(acct: PrivateKeyAccount = account, loose = false): x402HTTPClient {
  const c = new x402Client().registerV1('base', new ExactEvmSchemeV1(acct))
  return new x402HTTPClient(loose ? c.registerV1('base-sepolia', new ExactEvmSchemeV1(acct)).setSpendControls(false) : c)
}

/** The 402 as a client sees it: v2 from the header (header+body present), v1 from the body alone. */
function parsed402(q: PriceQuote, version: 1 | 2): PaymentRequired {
  const c = x402Challenge(q)
  const http = version === 2 ? v2Client() : v1Client()
  const headers = version === 2 ? c.headers : {}
  return http.getPaymentRequiredResponse((name) => headers[name.toUpperCase()] ?? null, JSON.parse(JSON.stringify(c.body)))
}

/** A real client's payment header for the challenge of `q`. */
async function payHeader(q: PriceQuote, version: 1 | 2, mutate?: (pr: PaymentRequired) => void, acct = account) {
  const pr = parsed402(q, version)
  mutate?.(pr)
  const http = version === 2 ? v2Client(acct, !!mutate) : v1Client(acct, !!mutate)
  const payload = await http.createPaymentPayload(pr)
  const headers = http.encodePaymentSignatureHeader(payload)
  return { headers, payload, value: Object.values(headers)[0]! }
}

function b64(x: unknown): string {
  return Buffer.from(typeof x === 'string' ? x : JSON.stringify(x), 'utf8').toString('base64')
}
function unb64(s: string): Record<string, any> {
  return JSON.parse(Buffer.from(s, 'base64').toString('utf8'))
}

async function rejects(t: Test, p: Promise<unknown> | (() => unknown), reason: string, msg: string) {
  try {
    await (typeof p === 'function' ? p() : p)
    t.fail(`${msg}: expected ${reason}, but it passed`)
  } catch (err) {
    t.ok(err instanceof PaymentRejected, `${msg}: PaymentRejected`)
    t.equal((err as PaymentRejected).reason, reason, msg)
  }
}

/** The request's x402 proof as the guard reads it: its one payment credential, decoded once. */
function requestProof(headers: HeaderBag): X402Proof | undefined {
  const credential = paymentCredential(credentialsOf(headers))
  return credential?.protocol === 'x402' ? x402ProofOf(credential) : undefined
}

async function verifyHeader(value: string, q: PriceQuote = quote, opts: Partial<Parameters<typeof verifyX402>[2]> = {}) {
  const proof = decodeX402Proof(value)
  return verifyX402(proof, q, { now, ...opts })
}
async function verifyV1Header(value: string, q: PriceQuote = quote, opts: Partial<Parameters<typeof verifyX402>[2]> = {}) {
  const proof = decodeX402Proof(value, 'x-payment')
  return verifyX402(proof, q, { now, ...opts })
}

t.test('challenge: v2 PAYMENT-REQUIRED is exactly encodePaymentRequiredHeader of the spec object', async (t) => {
  const c = x402Challenge(quote)
  const expected = {
    x402Version: 2,
    error: 'Payment required',
    resource: { url: quote.resourceUrl, description: quote.description, mimeType: 'application/json' },
    accepts: [
      {
        scheme: 'exact',
        network: 'eip155:8453',
        amount: '10000',
        asset: USDC,
        payTo: PAY_TO,
        maxTimeoutSeconds: 300,
        extra: { name: 'USD Coin', version: '2' },
      },
    ],
    // A priced quote without discovery parts or an offer signer declares only payment-identifier.
    extensions: { 'payment-identifier': declarePaymentIdentifierExtension(false) },
  }
  t.equal(c.headers['PAYMENT-REQUIRED'], encodePaymentRequiredHeader(expected as PaymentRequired))
  t.same(decodePaymentRequiredHeader(c.headers['PAYMENT-REQUIRED']!), expected)
  t.ok(PaymentRequiredV2Schema.safeParse(expected).success)
  t.same(x402RequirementsV2(quote), expected.accepts[0])
  t.equal(x402RequirementsV2(quote, { maxTimeoutSeconds: 60 }).maxTimeoutSeconds, 60)
})

t.test('challenge: v1 body', async (t) => {
  const c = x402Challenge(quote, { outputSchema: { input: { type: 'http', method: 'GET' }, output: null } })
  const expected = {
    x402Version: 1,
    error: 'Payment required',
    accepts: [
      {
        scheme: 'exact',
        network: 'base',
        maxAmountRequired: '10000',
        resource: quote.resourceUrl,
        description: quote.description,
        mimeType: 'application/json',
        payTo: PAY_TO,
        maxTimeoutSeconds: 300,
        asset: USDC,
        outputSchema: { input: { type: 'http', method: 'GET' }, output: null },
        extra: { name: 'USD Coin', version: '2' },
      },
    ],
  }
  t.same(c.body, expected)
  t.same(Object.keys((c.body.accepts as object[])[0]!), Object.keys(expected.accepts[0]!), 'key order')
  t.ok(PaymentRequiredV1Schema.safeParse(c.body).success)
  t.notOk('outputSchema' in x402RequirementsV1(quote), 'outputSchema omitted unless given')
  t.throws(() => x402Challenge({ ...quote, amountMicros: -1n }), RangeError)
  t.throws(() => x402Challenge(quote, { maxTimeoutSeconds: 0 }), RangeError)
})

t.test('the real client parses our 402: v2 via the header, v1 via the body', async (t) => {
  const pr2 = parsed402(quote, 2)
  t.equal(pr2.x402Version, 2)
  t.same(pr2.accepts[0], x402RequirementsV2(quote))
  const pr1 = parsed402(quote, 1)
  t.equal(pr1.x402Version, 1)
  t.same(pr1.accepts[0], x402RequirementsV1(quote))
  // A v2-only client handed the full 402 takes the header even though a v1 body is present.
  const c = x402Challenge(quote)
  t.equal(v2Client().getPaymentRequiredResponse((n) => c.headers[n] ?? null, c.body).x402Version, 2)
})

t.test('valid v2 proof verifies', async (t) => {
  const { headers, payload } = await payHeader(quote, 2)
  t.ok('PAYMENT-SIGNATURE' in headers, 'v2 client sends PAYMENT-SIGNATURE')
  const proof = requestProof(headers)!
  t.equal(proof.version, 2)
  t.equal(proof.header, 'payment-signature')
  t.same(proof.accepted, x402RequirementsV2(quote))
  t.equal(proof.resource?.url, quote.resourceUrl)
  const auth = (payload.payload as { authorization: Record<string, string> }).authorization
  const v = await verifyX402(proof, quote, { now })
  t.equal(v.version, 2)
  t.equal(v.payer, account.address)
  t.equal(v.amountMicros, 10_000n)
  t.equal(v.replayKey, `${account.address}:${auth.nonce}`.toLowerCase())
  t.equal(v.expiresAtMs, Number(auth.validBefore) * 1000)
  // Still valid just at the 6 s margin, expired one second later.
  const vb = Number(auth.validBefore)
  t.ok(await verifyX402(proof, quote, { now: () => (vb - 6) * 1000 }))
  await rejects(t, verifyX402(proof, quote, { now: () => (vb - 5) * 1000 }), 'expired', 'validBefore < now + 6')
})

t.test('valid v1 proof verifies', async (t) => {
  const { headers, value } = await payHeader(quote, 1)
  t.ok('X-PAYMENT' in headers, 'v1 client sends X-PAYMENT')
  const proof = requestProof({ 'X-Payment': value })!
  t.equal(proof.version, 1)
  t.equal(proof.network, 'base')
  t.equal(proof.accepted, undefined)
  const v = await verifyX402(proof, quote, { now })
  t.equal(v.version, 1)
  t.equal(v.payer, account.address)
  t.equal(v.amountMicros, 10_000n)
})

t.test('end to end with @x402/fetch against a local server answering our challenge', async (t) => {
  for (const version of [2, 1] as const) {
    const seen: Record<string, string | undefined>[] = []
    const server = createServer((req, res) => {
      seen.push({ sig: req.headers['payment-signature'] as string, xp: req.headers['x-payment'] as string })
      const proof = (() => {
        try {
          return requestProof(req.headers)
        } catch (err) {
          return err as PaymentRejected
        }
      })()
      if (proof === undefined) {
        const c = x402Challenge(quote)
        // v1-only server: body only; v2 server: header + v1 body.
        res.writeHead(402, { 'content-type': 'application/json', ...(version === 2 ? c.headers : {}) })
        res.end(JSON.stringify(c.body))
        return
      }
      if (proof instanceof PaymentRejected) {
        res.writeHead(400).end(proof.reason)
        return
      }
      verifyX402(proof, quote, { now }).then(
        (v) => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ payer: v.payer, version: v.version })),
        (err: PaymentRejected) => res.writeHead(402).end(err.reason),
      )
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    const port = (server.address() as AddressInfo).port
    const client = new x402Client().register('eip155:8453', new ExactEvmScheme(account)).registerV1('base', new ExactEvmSchemeV1(account))
    const payFetch = wrapFetchWithPayment(fetch, client)
    const res = await payFetch(`http://127.0.0.1:${port}/v1/search`)
    const body = (await res.json()) as { payer: string; version: number }
    server.close()
    t.equal(res.status, 200, `v${version}: paid retry accepted`)
    t.same(body, { payer: account.address, version })
    t.equal(seen.length, 2)
    t.ok(version === 2 ? seen[1]!.sig : seen[1]!.xp, `v${version}: retried with ${version === 2 ? 'PAYMENT-SIGNATURE' : 'X-PAYMENT'}`)
  }
})

t.test('decode: header handling', async (t) => {
  const { value } = await payHeader(quote, 2)
  t.equal(requestProof({}), undefined, 'no credential → undefined')
  t.equal(requestProof({ 'payment-signature': '' }), undefined, 'an empty header is no credential')
  t.equal(requestProof({ 'PAYMENT-SIGNATURE': value })!.version, 2, 'plain record, any case')
  const v2InXPayment = requestProof({ 'x-payment': value })!
  t.equal(v2InXPayment.version, 2, 'dispatch on decoded x402Version, not header name')
  t.equal(v2InXPayment.header, 'x-payment')
  t.ok(await verifyX402(v2InXPayment, quote, { now }))
  const both = t.throws(() => requestProof({ 'payment-signature': value, 'x-payment': value }), 'both headers') as unknown as AppError
  t.match({ code: both.code, status: both.status, extensions: both.extensions }, { code: 'payment_malformed', status: 400, extensions: { reason: 'multiple_credentials' } })
  t.equal(requestProof({ 'x-payment': [value, value] })!.version, 2, 'a repeated header counts by its first value')
  t.equal(requestProof({ 'x-payment': [value] })!.version, 2)
})

t.test('decode: once per request credential, its signer recovered once', async (t) => {
  const { value } = await payHeader(quote, 2)
  const credential = paymentCredential(credentialsOf({ 'payment-signature': value }))!
  const proof = x402ProofOf(credential)
  t.equal(x402ProofOf(credential), proof, 'the same proof every time')
  t.equal(x402ProofOf(paymentCredential(credentialsOf({ 'payment-signature': value }))!).version, 2, 'another request decodes its own')
  t.not(x402ProofOf(paymentCredential(credentialsOf({ 'payment-signature': value }))!), proof)
  t.equal(proof.signer(), account.address.toLowerCase())
  // Remembered: fields changed after the first recovery are not recovered over again.
  proof.authorization.nonce = `0x${'00'.repeat(32)}`
  t.equal(proof.signer(), account.address.toLowerCase(), 'recovered once')
  t.equal(decodeX402Proof(await signedV2({}, intruder)).signer(), intruder.address.toLowerCase(), 'whoever signed, not from')
  const good = unb64(value)
  t.equal(decodeX402Proof(b64({ ...good, payload: { ...good.payload, signature: `0x${'ab'.repeat(64)}` } })).signer(), null, 'no EOA signature: null')

  const bad = paymentCredential(credentialsOf({ 'payment-signature': 'not base64!!' }))!
  const first = t.throws(() => x402ProofOf(bad))
  t.equal(
    t.throws(() => x402ProofOf(bad)),
    first,
    'a refusal is kept: the same PaymentRejected',
  )
  t.ok(first instanceof PaymentRejected)
  t.equal((first as unknown as PaymentRejected).reason, 'malformed')
})

t.test('the payment-identifier read and the x402 method verify one decoded proof', async (t) => {
  const method = x402Method({ chain: {} as ChainPort, now })
  const { value } = await payHeader(quote, 2)
  const headers = { 'payment-signature': value }
  t.equal(readPaymentIdentifier(headers, PAY_TO), undefined, 'no id in this payload')
  const credential = paymentCredential(credentialsOf(headers))!
  t.equal((await method.verify(credential.value, quote, credential)).payer, account.address)
  // A mark only the request's decoded proof carries: verify reads that proof, not a new decoding.
  x402ProofOf(credential).authorization.value += 1n
  await rejects(t, method.verify(credential.value, quote, credential), 'wrong_amount', 'the decoded proof is the one verified')
  t.equal((await method.verify(value, quote)).payer, account.address, 'without the credential: decoded afresh')
  // Verification refuses a padded value as sent (the payment-identifier read trims it).
  const padded = paymentCredential(credentialsOf({ 'payment-signature': ` ${value}` }))!
  await rejects(t, method.verify(padded.value, quote, padded), 'malformed', 'padded value')
})

t.test('decode: malformed input', async (t) => {
  const { value } = await payHeader(quote, 2)
  const good = unb64(value)
  const cases: [string, string][] = [
    ['empty', ''],
    ['not base64', 'not base64!!'],
    ['unpadded base64', value.replace(/=+$/, '') + (value.endsWith('=') ? '' : 'A')],
    ['base64url alphabet', `${b64('{"x402Version":2,"a":"??>>"}').replace(/\+/g, '-').replace(/\//g, '_')}_-_-`],
    ['junk inside', `${value.slice(0, 8)}*${value.slice(9)}`],
    ['base64 of non-JSON', b64('hello, world')],
    ['base64 of non-UTF-8', Buffer.from([0xff, 0xfe, 0x7b, 0x7d]).toString('base64')],
    ['JSON array', b64([1, 2])],
    ['JSON string', b64('"x"')],
    ['no x402Version', b64({ scheme: 'exact' })],
    ['v2 without accepted', b64({ ...good, accepted: undefined })],
    ['v2 without payload', b64({ ...good, payload: undefined })],
    ['v2 non-CAIP-2 network', b64({ ...good, accepted: { ...good.accepted, network: 'base' } })],
    ['value as number', b64({ ...good, payload: { ...good.payload, authorization: { ...good.payload.authorization, value: 10000 } } })],
    ['value with leading zero', b64({ ...good, payload: { ...good.payload, authorization: { ...good.payload.authorization, value: '010000' } } })],
    ['value > uint256', b64({ ...good, payload: { ...good.payload, authorization: { ...good.payload.authorization, value: (1n << 256n).toString() } } })],
    ['negative validAfter', b64({ ...good, payload: { ...good.payload, authorization: { ...good.payload.authorization, validAfter: '-1' } } })],
    ['bad from', b64({ ...good, payload: { ...good.payload, authorization: { ...good.payload.authorization, from: '0x1234' } } })],
    ['bad nonce', b64({ ...good, payload: { ...good.payload, authorization: { ...good.payload.authorization, nonce: '0x00' } } })],
    ['signature not hex', b64({ ...good, payload: { ...good.payload, signature: 'zz' } })],
    ['v1 without payload', b64({ x402Version: 1, scheme: 'exact', network: 'base' })],
    ['too long', 'A'.repeat(20_000)],
  ]
  for (const [name, header] of cases) {
    await rejects(t, () => decodeX402Proof(header), 'malformed', name)
  }
  await rejects(t, () => decodeX402Proof(b64({ ...good, x402Version: 3 })), 'unsupported_version', 'x402Version 3')
})

t.test('verify: wrong network', async (t) => {
  const v2 = await payHeader(quote, 2, (pr) => {
    pr.accepts[0]!.network = 'eip155:84532'
  })
  await rejects(t, verifyHeader(v2.value), 'wrong_network', 'v2 Base Sepolia')
  const v1 = await payHeader(quote, 1, (pr) => {
    pr.accepts[0]!.network = 'base-sepolia' as never
  })
  await rejects(t, verifyV1Header(v1.value), 'wrong_network', 'v1 base-sepolia')
})

t.test('verify: unsupported scheme and wrong asset', async (t) => {
  const v1 = unb64((await payHeader(quote, 1)).value)
  await rejects(t, verifyV1Header(b64({ ...v1, scheme: 'upto' })), 'unsupported_scheme', 'v1 upto')
  const v2 = unb64((await payHeader(quote, 2)).value)
  await rejects(t, verifyHeader(b64({ ...v2, accepted: { ...v2.accepted, scheme: 'upto' } })), 'unsupported_scheme', 'v2 upto')
  const otherAsset = await payHeader(quote, 2, (pr) => {
    pr.accepts[0]!.asset = '0x50c5725949A6F0c72E6C4a641F24049A917DB0Cb' // DAI on Base
  })
  await rejects(t, verifyHeader(otherAsset.value), 'wrong_asset', 'v2 other asset')
  await rejects(t, verifyHeader(b64({ ...v2, accepted: { ...v2.accepted, extra: { name: 'USDC', version: '2' } } })), 'wrong_asset', 'v2 other EIP-712 domain')
})

t.test('verify: wrong payee', async (t) => {
  const elsewhere: PriceQuote = { ...quote, payTo: '0x2222222222222222222222222222222222222222' }
  await rejects(t, verifyHeader((await payHeader(elsewhere, 2)).value), 'wrong_payee', 'v2 (accepted.payTo)')
  await rejects(t, verifyV1Header((await payHeader(elsewhere, 1)).value), 'wrong_payee', 'v1 (authorization.to)')
  // v2 whose `accepted` is patched back to ours: caught by authorization.to.
  const p = unb64((await payHeader(elsewhere, 2)).value)
  await rejects(t, verifyHeader(b64({ ...p, accepted: x402RequirementsV2(quote) })), 'wrong_payee', 'v2 (authorization.to)')
  // Payee compared case-insensitively: a lowercase payTo in the quote still matches.
  t.ok(await verifyHeader((await payHeader(quote, 2)).value, { ...quote, payTo: PAY_TO.toLowerCase() as Address }))
})

t.test('verify: amount must be exact (off by one micro either way)', async (t) => {
  for (const delta of [-1n, 1n]) {
    const q = { ...quote, amountMicros: quote.amountMicros + delta }
    await rejects(t, verifyHeader((await payHeader(q, 2)).value), 'wrong_amount', `v2 ${delta} micro (accepted.amount)`)
    await rejects(t, verifyV1Header((await payHeader(q, 1)).value), 'wrong_amount', `v1 ${delta} micro`)
    const p = unb64((await payHeader(q, 2)).value)
    await rejects(t, verifyHeader(b64({ ...p, accepted: x402RequirementsV2(quote) })), 'wrong_amount', `v2 ${delta} micro (authorization.value)`)
  }
})

t.test('verify: expired and not yet valid', async (t) => {
  const v2 = await payHeader(quote, 2)
  const later = Date.now() + 301_000
  await rejects(t, verifyHeader(v2.value, quote, { now: () => later }), 'expired', 'v2 after validBefore')
  const v1 = await payHeader(quote, 1)
  await rejects(t, verifyV1Header(v1.value, quote, { now: () => later }), 'expired', 'v1 after validBefore')
  const shortLived = await payHeader(quote, 2, (pr) => {
    pr.accepts[0]!.maxTimeoutSeconds = 3
  })
  await rejects(t, verifyHeader(shortLived.value, quote, { maxTimeoutSeconds: 3 }), 'expired', 'validBefore inside the 6 s margin')
  // v1 clients sign validAfter = now - 600.
  await rejects(t, verifyV1Header(v1.value, quote, { now: () => Date.now() - 700_000 }), 'not_yet_valid', 'v1 before validAfter')
  // A (correctly signed) v2 authorization that starts in the future.
  const future = await signedV2({ validAfter: BigInt(Math.floor(Date.now() / 1000) + 60) })
  await rejects(t, verifyHeader(future), 'not_yet_valid', 'v2 validAfter in the future')
})

/** A v2 proof header whose authorization we sign ourselves (client-equivalent), with overrides. */
async function signedV2(over: Partial<TransferAuthorization> = {}, signer: PrivateKeyAccount = account): Promise<string> {
  const auth: TransferAuthorization = {
    from: account.address,
    to: PAY_TO,
    value: quote.amountMicros,
    validAfter: 0n,
    validBefore: BigInt(Math.floor(Date.now() / 1000) + 300),
    nonce: toHex(crypto.getRandomValues(new Uint8Array(32))),
    ...over,
  }
  const signature = await signer.signTypedData({
    domain: USDC_DOMAIN,
    types: TRANSFER_WITH_AUTHORIZATION_TYPES,
    primaryType: 'TransferWithAuthorization',
    message: auth,
  })
  return wireV2(auth, signature)
}
function wireV2(auth: TransferAuthorization, signature: Hex, q: PriceQuote = quote): string {
  const payload: PaymentPayload = {
    x402Version: 2,
    resource: { url: q.resourceUrl, description: q.description, mimeType: 'application/json' },
    accepted: x402RequirementsV2(q),
    payload: {
      authorization: {
        from: auth.from,
        to: auth.to,
        value: auth.value.toString(),
        validAfter: auth.validAfter.toString(),
        validBefore: auth.validBefore.toString(),
        nonce: auth.nonce,
      },
      signature,
    },
    extensions: {},
  }
  return b64(payload)
}

t.test('verify: signatures', async (t) => {
  t.ok(await verifyHeader(await signedV2()), 'self-signed control passes')
  await rejects(t, verifyHeader(await signedV2({}, intruder)), 'invalid_signature', 'signed by another key')

  // Tampered value: signed for 1 micro, value (and accepted.amount) raised to the price.
  const cheap = unb64((await payHeader({ ...quote, amountMicros: 1n }, 2)).value)
  cheap.payload.authorization.value = '10000'
  cheap.accepted = x402RequirementsV2(quote)
  await rejects(t, verifyHeader(b64(cheap)), 'invalid_signature', 'v2 tampered value')
  const cheapV1 = unb64((await payHeader({ ...quote, amountMicros: 1n }, 1)).value)
  cheapV1.payload.authorization.value = '10000'
  await rejects(t, verifyV1Header(b64(cheapV1)), 'invalid_signature', 'v1 tampered value')

  // from swapped to someone else: recovers to the real signer, not `from`.
  const p = unb64((await payHeader(quote, 2)).value)
  p.payload.authorization.from = intruder.address
  await rejects(t, verifyHeader(b64(p)), 'invalid_signature', 'from swapped')

  // Nonce / validBefore tampered.
  const q = unb64((await payHeader(quote, 2)).value)
  q.payload.authorization.validBefore = String(Number(q.payload.authorization.validBefore) + 1)
  await rejects(t, verifyHeader(b64(q)), 'invalid_signature', 'validBefore tampered')

  // Malleated twin (s → n − s, v flipped): viem accepts it, USDC would not; we refuse.
  const good = unb64((await payHeader(quote, 2)).value)
  const sig = Buffer.from(good.payload.signature.slice(2), 'hex')
  const n = 0xfffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141n
  const s = BigInt(`0x${sig.subarray(32, 64).toString('hex')}`)
  const twin = Buffer.concat([sig.subarray(0, 32), Buffer.from((n - s).toString(16).padStart(64, '0'), 'hex'), Buffer.from([sig[64] === 27 ? 28 : 27])])
  const twinHex = `0x${twin.toString('hex')}` as Hex
  const a = good.payload.authorization
  const message = { ...a, value: BigInt(a.value), validAfter: BigInt(a.validAfter), validBefore: BigInt(a.validBefore) }
  t.equal(
    await recoverTypedDataAddress({ domain: USDC_DOMAIN, types: TRANSFER_WITH_AUTHORIZATION_TYPES, primaryType: 'TransferWithAuthorization', message, signature: twinHex }),
    account.address,
    'viem recovers the high-s twin',
  )
  await rejects(t, verifyHeader(b64({ ...good, payload: { ...good.payload, signature: twinHex } })), 'invalid_signature', 'high-s twin')

  // Other lengths (contract wallets) and garbage v.
  await rejects(t, verifyHeader(b64({ ...good, payload: { ...good.payload, signature: `0x${'ab'.repeat(64)}` } })), 'invalid_signature', '64-byte signature')
  const badV = Buffer.from(sig)
  badV[64] = 29
  await rejects(t, verifyHeader(b64({ ...good, payload: { ...good.payload, signature: `0x${badV.toString('hex')}` } })), 'invalid_signature', 'v = 29')
  const zero = `0x${'00'.repeat(64)}1b`
  await rejects(t, verifyHeader(b64({ ...good, payload: { ...good.payload, signature: zero } })), 'invalid_signature', 'r = s = 0')
})

t.test('verify: a proof made for another route', async (t) => {
  await rejects(t, verifyHeader((await payHeader(otherRoute, 2)).value), 'wrong_route', 'v2 other route (resource and price differ)')
  const otherPriceSameUrl: PriceQuote = { ...quote, amountMicros: 20_000n }
  await rejects(t, verifyHeader((await payHeader(otherPriceSameUrl, 2)).value), 'wrong_amount', 'v2 other price')
  await rejects(t, verifyHeader((await payHeader(samePriceOtherRoute, 2)).value), 'wrong_route', 'v2 same price, other resource')
  await rejects(t, verifyV1Header((await payHeader(otherRoute, 1)).value), 'wrong_amount', 'v1 other route (price differs)')
  // v1 proofs carry no resource: a same-price, same-payee proof is indistinguishable (the replay
  // key still makes it spendable once).
  t.ok(await verifyV1Header((await payHeader(samePriceOtherRoute, 1)).value), 'v1 same price: not bindable')
  // v2 maxTimeoutSeconds other than offered.
  const longer = await payHeader(quote, 2, (pr) => {
    pr.accepts[0]!.maxTimeoutSeconds = 3600
  })
  await rejects(t, verifyHeader(longer.value), 'wrong_route', 'v2 maxTimeoutSeconds not offered')
})

t.test('verify: on-chain nonce check', async (t) => {
  const { value } = await payHeader(quote, 2)
  const calls: [string, string][] = []
  const chain = (used: boolean) => ({
    isAuthorizationUsed: async (from: Address, nonce: Hex) => {
      calls.push([from, nonce])
      return used
    },
  })
  t.ok(await verifyHeader(value, quote, { chain: chain(false) }))
  await rejects(t, verifyHeader(value, quote, { chain: chain(true) }), 'nonce_already_used', 'nonce used on chain')
  t.equal(calls[0]![0], account.address, 'checksummed from')
  t.equal(calls[0]![1], unb64(value).payload.authorization.nonce)
  // Not consulted for proofs that fail earlier.
  calls.length = 0
  await rejects(t, verifyHeader(await signedV2({}, intruder), quote, { chain: chain(false) }), 'invalid_signature', 'bad sig')
  t.equal(calls.length, 0)
})

t.test('EIP-712 digest equals viem hashTypedData for random and edge messages', async (t) => {
  const max = (1n << 256n) - 1n
  const rnd = (bytes: number) => BigInt(toHex(crypto.getRandomValues(new Uint8Array(bytes))))
  let same = 0
  const total = 300
  for (let i = 0; i < total; i++) {
    const edge = i % 3 === 0 ? 0n : i % 3 === 1 ? max : rnd(1 + (i % 32))
    const message: TransferAuthorization = {
      from: privateKeyToAccount(generatePrivateKey()).address,
      to: toHex(crypto.getRandomValues(new Uint8Array(20))),
      value: i % 2 ? edge : rnd(8),
      validAfter: i % 5 ? rnd(4) : edge,
      validBefore: i % 7 ? rnd(5) : max,
      nonce: toHex(crypto.getRandomValues(new Uint8Array(32))),
    }
    const viem = hashTypedData({ domain: USDC_DOMAIN, types: TRANSFER_WITH_AUTHORIZATION_TYPES, primaryType: 'TransferWithAuthorization', message })
    if (transferWithAuthorizationDigestHex(message) === viem) same++
  }
  t.equal(same, total)
})

t.test('a private key gives the address viem gives it', async (t) => {
  for (let i = 0; i < 50; i++) {
    const key = generatePrivateKey()
    if (addressOfPrivateKey(key) !== privateKeyToAccount(key).address) t.fail(`key ${i}: ${addressOfPrivateKey(key)}`)
  }
  t.equal(addressOfPrivateKey(`0x${'00'.repeat(31)}01`), '0x7E5F4552091A69125d5DfCb7b8C2659029395Bdf', 'the key 1: the generator point')
  t.throws(() => addressOfPrivateKey('0x1234'), /32 bytes/)
  t.throws(() => addressOfPrivateKey(`0x${'00'.repeat(32)}`), /not a valid secp256k1 private key/)
  t.throws(() => addressOfPrivateKey(`0x${'ff'.repeat(32)}`), /not a valid secp256k1 private key/, 'not below the group order')
})

t.test('recovery backends agree with viem for many random keys', async (t) => {
  if (process.platform === 'linux' && process.arch === 'x64') {
    t.equal(recoveryBackend, 'native', 'libsecp256k1 N-API binary loads (no silent fallback)')
  }
  t.ok(recoveryBackends.wasm, 'WASM backend present')
  const backends = Object.entries(recoveryBackends)
  const agree: Record<string, number> = {}
  const refused: Record<string, number> = {}
  const total = 100
  for (let i = 0; i < total; i++) {
    const acct = privateKeyToAccount(generatePrivateKey())
    const message: TransferAuthorization = {
      from: acct.address,
      to: PAY_TO,
      value: BigInt(i * 1000 + 1),
      validAfter: 0n,
      validBefore: 2_000_000_000n,
      nonce: toHex(crypto.getRandomValues(new Uint8Array(32))),
    }
    const typed = { domain: USDC_DOMAIN, types: TRANSFER_WITH_AUTHORIZATION_TYPES, primaryType: 'TransferWithAuthorization', message } as const
    const signature = await acct.signTypedData(typed)
    const viemAddr = (await recoverTypedDataAddress({ ...typed, signature })).toLowerCase()
    const digest = transferWithAuthorizationDigest(message)
    const sig = Buffer.from(signature.slice(2), 'hex')
    for (const [name, fn] of backends) {
      if (recoverSigner(digest, sig, fn) === viemAddr && viemAddr === acct.address.toLowerCase()) agree[name] = (agree[name] ?? 0) + 1
    }
    // A flipped digest recovers someone else (or nothing) on every backend.
    const wrong = Buffer.from(digest)
    wrong[0]! ^= 1
    for (const [name, fn] of backends) {
      if (recoverSigner(wrong, sig, fn) !== viemAddr) refused[name] = (refused[name] ?? 0) + 1
    }
  }
  for (const [name] of backends) {
    t.equal(agree[name], total, `${name} agrees with viem on ${total} keys`)
    t.equal(refused[name], total, `${name}: a wrong digest never recovers the signer`)
  }
})

t.test('decodeX402Proof normalizes both versions', async (t) => {
  const v1: X402Proof = decodeX402Proof((await payHeader(quote, 1)).value, 'x-payment')
  t.equal(typeof v1.authorization.value, 'bigint')
  t.equal(typeof v1.authorization.validAfter, 'bigint')
  t.equal(v1.payload.x402Version, 1)
  t.match(v1.signature, /^0x[0-9a-f]{130}$/)
})
