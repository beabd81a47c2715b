// The one credential reader (src/payments/credentials.ts): every credential header of a request,
// read once into a typed object; problems kept as values until a caller needs that part.
import t from 'tap'
import type { Test } from 'tap'
import { AppError } from '../../src/platform/errors.ts'
import { accessTokenCredential, credentialsOf, parseBearer, payAmountMicros, paymentCredential, readCredentials, tokenKind, tokenOf } from '../../src/payments/credentials.ts'

function refusal(t: Test, fn: () => unknown): AppError {
  try {
    fn()
  } catch (error) {
    t.ok(error instanceof AppError, 'an AppError')
    return error as AppError
  }
  t.fail('expected a refusal')
  throw new Error('unreachable')
}

t.test('nothing sent: an empty reading', async (t) => {
  t.same(readCredentials({}), { payments: [], bearer: undefined, agentBearer: undefined, siwx: undefined, payAmount: undefined, idempotencyKey: undefined })
})

t.test('every header, once', async (t) => {
  const read = readCredentials({
    'payment-signature': 'eyJ2Ijoy',
    'svc-agent-authorization': 'Bearer agw_buyer',
    authorization: 'Bearer agw_holder',
    'sign-in-with-x': 'c2l3eA==',
    'x-pay-amount-micros': '5000',
    'idempotency-key': 'k-1',
    'content-type': 'application/json',
  })
  t.same(read.payments, [{ protocol: 'x402', value: 'eyJ2Ijoy', header: 'payment-signature' }])
  t.same(read.bearer, { valid: true, token: 'agw_holder', kind: 'access-token' })
  t.same(read.agentBearer, { valid: true, token: 'agw_buyer', kind: 'access-token' })
  t.equal(read.siwx, 'c2l3eA==')
  t.same(read.payAmount, { valid: true, micros: 5000n })
  t.equal(read.idempotencyKey, 'k-1')
})

t.test('header names are case-insensitive; a repeated header counts by its first value', async (t) => {
  const read = readCredentials({ Authorization: ['Bearer agk_first', 'Bearer agk_second'], 'IDEMPOTENCY-KEY': ['a', 'b'], 'X-Payment': 'v1proof' })
  t.equal(tokenOf(read.bearer), 'agk_first')
  t.equal(read.idempotencyKey, 'a')
  t.same(read.payments, [{ protocol: 'x402', value: 'v1proof', header: 'x-payment' }])
})

t.test('bearer: case-insensitive scheme, strict b64token syntax', async (t) => {
  for (const value of ['Bearer agw_abc', 'bearer agw_abc', 'BEARER agw_abc', 'Bearer   agw_abc', 'Bearer agw_abc  ']) {
    t.same(parseBearer(value), { valid: true, token: 'agw_abc', kind: 'access-token' }, JSON.stringify(value))
  }
  t.same(parseBearer('Bearer a-b.c_d~e+f/g=='), { valid: true, token: 'a-b.c_d~e+f/g==', kind: 'other' }, 'every b64token character, padding at the end')
  for (const value of ['Bearer', 'Bearer ', 'Bearer a b', 'Bearer agw_x!', 'Bearer agw_é', 'Bearer\tagw_abc', 'Bearer a=b', 'Bearer "agw_abc"']) {
    t.same(parseBearer(value), { valid: false, reason: 'malformed' }, `${JSON.stringify(value)} is malformed`)
  }
  for (const value of [undefined, '', 'Basic dXNlcjpwYXNz', 'Bearerish agw_abc', 'Payment id="x"', 'agw_abc']) {
    t.equal(parseBearer(value), undefined, `${JSON.stringify(value)} is no bearer`)
  }
  t.equal(tokenOf({ valid: false, reason: 'malformed' }), undefined, 'a malformed bearer has no token')
})

t.test('token kinds by prefix', async (t) => {
  t.equal(tokenKind('agw_x'), 'access-token')
  t.equal(tokenKind('agk_x'), 'api-key')
  t.equal(tokenKind('whsec_x'), 'webhook-secret')
  t.equal(tokenKind('run_x'), 'run-token')
  t.equal(tokenKind('sk-test'), 'other')
})

t.test('payment credentials: x402 v2, v1 and MPP; two at once is the 400, only when asked', async (t) => {
  const mpp = readCredentials({ authorization: 'payment id="c1", credential="x"' })
  t.same(
    mpp.payments,
    [{ protocol: 'mpp', value: 'payment id="c1", credential="x"', header: 'authorization' }],
    'the MPP scheme is case-insensitive; the whole header is the credential',
  )
  t.equal(mpp.bearer, undefined, 'an MPP proof is not a bearer')
  t.same(paymentCredential(mpp), mpp.payments[0])

  t.same(readCredentials({ 'payment-signature': '', 'x-payment': '' }).payments, [], 'empty x402 headers are no credential')
  t.same(readCredentials({ authorization: 'Payment' }).payments, [], 'a Payment scheme without parameters is no credential')

  const both = readCredentials({ 'payment-signature': 'a', 'x-payment': 'b', authorization: 'Payment id="c"' })
  t.equal(both.payments.length, 3, 'reading never throws')
  const error = refusal(t, () => paymentCredential(both))
  t.equal(error.code, 'payment_malformed')
  t.equal(error.status, 400)
  t.equal(error.field, 'header')
  t.same(error.extensions, { reason: 'multiple_credentials' })

  const x402AndBearer = readCredentials({ 'payment-signature': 'a', authorization: 'Bearer agw_buyer' })
  t.equal(paymentCredential(x402AndBearer)?.protocol, 'x402', 'a bearer beside an x402 proof is no second credential')
  t.equal(tokenOf(x402AndBearer.bearer), 'agw_buyer')
})

t.test('X-Pay-Amount-Micros: absent, micros, or the 400 naming the header', async (t) => {
  t.equal(payAmountMicros(readCredentials({})), undefined)
  t.equal(payAmountMicros(readCredentials({ 'x-pay-amount-micros': '18446744073709551615' })), 18446744073709551615n, 'no float on the way')
  t.equal(payAmountMicros(readCredentials({ 'x-pay-amount-micros': '0' })), 0n, 'zero is a number (routes decide whether it is allowed)')
  for (const raw of ['', '-1', '1.5', '0x10', ' 5', '05', 'five']) {
    const read = readCredentials({ 'x-pay-amount-micros': raw })
    t.same(read.payAmount, { valid: false, raw }, `${JSON.stringify(raw)} is kept as malformed`)
    const error = refusal(t, () => payAmountMicros(read))
    t.equal(error.code, 'validation_error')
    t.equal(error.status, 400)
    t.equal(error.field, 'header.x-pay-amount-micros')
  }
})

t.test('the access token: Svc-Agent-Authorization first, then Authorization', async (t) => {
  t.equal(tokenOf(accessTokenCredential(readCredentials({ 'svc-agent-authorization': 'Bearer agw_a', authorization: 'Bearer agw_b' }))), 'agw_a')
  t.equal(tokenOf(accessTokenCredential(readCredentials({ authorization: 'Bearer agw_b' }))), 'agw_b')
  t.equal(tokenOf(accessTokenCredential(readCredentials({ 'svc-agent-authorization': 'Basic x', authorization: 'Bearer agw_b' }))), 'agw_b', 'another scheme names nobody')
  t.same(
    accessTokenCredential(readCredentials({ 'svc-agent-authorization': 'Bearer a b', authorization: 'Bearer agw_b' })),
    { valid: false, reason: 'malformed' },
    'a malformed one is not skipped',
  )
  t.equal(accessTokenCredential(readCredentials({ authorization: 'Payment id="x"' })), undefined, 'an MPP proof names no buyer')
})

t.test('SIGN-IN-WITH-X is kept as sent, even empty (the verifier refuses it as malformed)', async (t) => {
  t.equal(readCredentials({ 'sign-in-with-x': '' }).siwx, '')
})

t.test('credentialsOf reads a header object once', async (t) => {
  const headers: Record<string, string> = { authorization: 'Bearer agw_a' }
  const first = credentialsOf(headers)
  t.equal(credentialsOf(headers), first, 'the same reading for the same request headers')
  t.not(credentialsOf({ ...headers }), first, 'another request, another reading')
  t.not(readCredentials(headers), first, 'readCredentials itself is pure')
})
