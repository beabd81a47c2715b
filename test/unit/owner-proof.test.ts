// The owner proof (src/payments/owner-proof.ts) on its own: the real SIWX verifier and client
// (@x402/extensions), a recording stand-in for the payment guard (the $0 MPP path through the
// real guard and mppx is test/integration/scheduler-owner-proof.test.ts).
import t from 'tap'
import type { Test } from 'tap'
import { createSIWxPayload, encodeSIWxHeader } from '@x402/extensions/sign-in-with-x'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { AppError } from '../../src/platform/errors.ts'
import { openKeyValue } from '../../src/platform/kv/index.ts'
import { createSiwxVerifier } from '../../src/payments/siwx.ts'
import { createOwnerProof, routeOf, type OwnerCall, type OwnerProofDeps } from '../../src/payments/owner-proof.ts'
import type { AuthorizedPayment, PaymentGuard } from '../../src/payments/guard.ts'
import type { PriceQuote } from '../../src/payments/types.ts'

const URL_A = 'https://api.example.test/api/v1/tasks/t_1?view=full'
const PAY_TO = '0x000000000000000000000000000000000000c0de' as const
const wallet = privateKeyToAccount(generatePrivateKey())

const kv = await openKeyValue({ kind: 'memory' })
t.teardown(() => kv.close())
const siwx = createSiwxVerifier({ domain: 'api.example.test', store: kv })

interface GuardLog {
  authorized: { quote: PriceQuote; operationId: string }[]
  committed: number
  released: number
}

/** A guard whose authorize accepts any credential as a proof of `amount` by `payer`. */
function fakeGuard(amount: bigint, payer = '0xAbCdEf0000000000000000000000000000000001'): { guard: PaymentGuard; log: GuardLog } {
  const log: GuardLog = { authorized: [], committed: 0, released: 0 }
  const guard = {
    paymentRequired: () => new AppError('payment_required'),
    reconcile: async () => 0,
    async authorize(_headers, quote, operationId) {
      log.authorized.push({ quote, operationId })
      return {
        payment: {
          protocol: 'mpp',
          version: 1,
          payer,
          amountMicros: amount,
          replayKey: 'k',
          zeroValue: amount === 0n,
          detail: {},
          settle: async () => ({ status: 'failed', reason: 'n/a' }),
        },
        bind: async () => {},
        async commit() {
          log.committed += 1
          return { decision: { status: 'settled', reference: null }, headers: {} }
        },
        async release() {
          log.released += 1
        },
      } as unknown as AuthorizedPayment
    },
  } satisfies PaymentGuard
  return { guard, log }
}

function proof(deps: Partial<OwnerProofDeps> = {}) {
  return createOwnerProof({ siwx, guard: fakeGuard(0n).guard, payTo: PAY_TO, ...deps })
}

async function refused(t: Test, promise: Promise<unknown>): Promise<AppError> {
  try {
    await promise
  } catch (error) {
    t.ok(error instanceof AppError, 'an AppError')
    return error as AppError
  }
  t.fail('expected a refusal')
  throw new Error('unreachable')
}

const call = (headers: Record<string, string> = {}, method = 'GET', url = URL_A): OwnerCall => ({ method, url, headers })

async function siwxHeader(method: string, url: string): Promise<string> {
  const challenge = await siwx.challenge(method, url)
  const chain = challenge.supportedChains[0]!
  return encodeSIWxHeader(await createSIWxPayload({ ...challenge.info, chainId: chain.chainId, type: chain.type }, wallet, url))
}

t.test('SIGN-IN-WITH-X for this method and URL: the wallet, lowercase; once', async (t) => {
  const owner = proof()
  const header = await siwxHeader('GET', URL_A)
  t.equal(await owner.prove(call({ 'sign-in-with-x': header })), wallet.address.toLowerCase())
  const replay = await refused(t, owner.prove(call({ 'sign-in-with-x': header })))
  t.match(replay, { code: 'wallet_proof_required', status: 401, field: 'header.sign-in-with-x' })
  t.equal(replay.extensions.reason, 'nonce_used')
  t.ok((replay.extensions.extensions as Record<string, any>)['sign-in-with-x'].info.nonce, 'with a fresh challenge')
})

t.test('SIGN-IN-WITH-X for another method is refused (wrong_method), with a challenge for this request', async (t) => {
  const header = await siwxHeader('GET', URL_A)
  const error = await refused(t, proof().prove(call({ 'sign-in-with-x': header }, 'DELETE')))
  t.equal(error.extensions.reason, 'wrong_method')
  t.match((error.extensions.extensions as Record<string, any>)['sign-in-with-x'].info, { uri: URL_A, statement: /Authorize one DELETE request/ })
})

t.test('SIWX is checked first: a payment credential or token beside it is not looked at', async (t) => {
  const { guard, log } = fakeGuard(0n)
  const header = await siwxHeader('GET', URL_A)
  const owner = await proof({ guard, holderOf: async () => 'agent:nobody' }).prove(
    call({ 'sign-in-with-x': header, 'payment-signature': 'a', 'x-payment': 'b', authorization: 'Bearer agw_x' }),
  )
  t.equal(owner, wallet.address.toLowerCase())
  t.equal(log.authorized.length, 0)
})

t.test('a $0 x402 authorization is no owner proof: 401 unbound_proof, nothing verified', async (t) => {
  const { guard, log } = fakeGuard(0n)
  for (const header of ['payment-signature', 'x-payment']) {
    const error = await refused(t, proof({ guard }).prove(call({ [header]: 'eyJ4NDAyVmVyc2lvbiI6Mn0=' })))
    t.match(error, { code: 'wallet_proof_required', status: 401, field: 'header' })
    t.equal(error.extensions.reason, 'unbound_proof')
    t.match(error.message, /not bound to the request/)
    t.ok((error.extensions.extensions as Record<string, any>)['sign-in-with-x'].info.nonce)
  }
  t.equal(log.authorized.length, 0, 'the guard never saw it')
})

t.test('two payment credentials: the 400 multiple_credentials', async (t) => {
  const error = await refused(t, proof().prove(call({ 'payment-signature': 'a', authorization: 'Payment id="x"' })))
  t.match(error, { code: 'payment_malformed', status: 400 })
  t.equal(error.extensions.reason, 'multiple_credentials')
})

t.test('a $0 MPP proof: authorized for this method and exact path, consumed, the payer lowercase', async (t) => {
  const { guard, log } = fakeGuard(0n)
  const owner = await proof({ guard }).prove({ ...call({ authorization: 'Payment id="x"' }, 'DELETE'), operationId: 'deleteTask', description: 'Delete a task' })
  t.equal(owner, '0xabcdef0000000000000000000000000000000001')
  t.same(log.authorized, [
    { quote: { amountMicros: 0n, resourceUrl: URL_A, route: 'DELETE /api/v1/tasks/t_1?view=full', description: 'Delete a task', payTo: PAY_TO }, operationId: 'deleteTask' },
  ])
  t.equal(log.committed, 1)
  t.equal(routeOf('GET', 'https://h.test/a/b'), 'GET /a/b')
})

t.test('a priced MPP proof is released, never settled, and refused', async (t) => {
  const { guard, log } = fakeGuard(5n)
  const error = await refused(t, proof({ guard }).prove(call({ authorization: 'Payment id="x"' })))
  t.match(error, { code: 'wallet_proof_required', status: 401 })
  t.equal(log.released, 1)
  t.equal(log.committed, 0)
})

t.test('an access token names the owner through holderOf; nothing else does', async (t) => {
  const asked: string[] = []
  const holderOf = async (token: string) => {
    asked.push(token)
    return token === 'agw_alice' ? 'agent:agt_alice' : undefined
  }
  const hint = 'Tasks created on the marketplace rail: send the plan access token instead (Authorization: Bearer <accessToken>).'
  t.equal(await proof({ holderOf, noProofHint: hint }).prove(call({ authorization: 'Bearer agw_alice' })), 'agent:agt_alice')

  for (const authorization of ['Bearer agk_key', 'Bearer whsec_secret', 'Bearer agw_a b', 'Basic eDp5']) {
    const error = await refused(t, proof({ holderOf, noProofHint: hint }).prove(call({ authorization })))
    t.match(error, { code: 'wallet_proof_required', status: 401 }, `${authorization}: not an access token`)
    t.ok(error.message.endsWith(hint), 'the 401 says how holders prove it')
  }
  t.same(asked, ['agw_alice'], 'holderOf is asked for access tokens only')

  const unknown = await refused(
    t,
    proof({
      holderOf: async () => {
        throw new AppError('bearer_required', 'unknown token')
      },
    }).prove(call({ authorization: 'Bearer agw_forged' })),
  )
  t.equal(unknown.code, 'bearer_required', "holderOf's own refusal stands")

  const without = await refused(t, proof().prove(call({ authorization: 'Bearer agw_alice' })))
  t.equal(without.code, 'wallet_proof_required', 'without holderOf a token proves nothing')
})

t.test('no proof: 401 wallet_proof_required with the challenge for this request', async (t) => {
  const error = await refused(t, proof().prove(call({}, 'POST')))
  t.match(error, { code: 'wallet_proof_required', status: 401 })
  t.equal(error.extensions.reason, undefined)
  t.match((error.extensions.extensions as Record<string, any>)['sign-in-with-x'].info, { uri: URL_A, statement: /Authorize one POST request/ })
})
