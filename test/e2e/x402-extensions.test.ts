// The x402 v2 extensions end to end through the real CLI (embedded default: local EVM), with the
// real @x402/fetch client and the extensions' own client functions and validators:
// - payment-identifier (attached with the extension's appendPaymentIdentifierToExtensions in the
//   client's onBeforePaymentCreation hook): a retried purchase with the same id gets the original
//   answer and pays once; the same id with another body or path is 409; concurrent duplicates
//   charge once;
// - bazaar: the 402's declaration passes validateDiscoveryExtension and extractDiscoveryInfo (v1:
//   extractDiscoveryInfoV1 on the body's outputSchema);
// - offer-receipt: the offer and the receipt verify (verifyOfferSignatureEIP712,
//   verifyReceiptSignatureEIP712, verifyReceiptMatchesOffer) to the configured signing key, the
//   first of a rotation ring.
import t from 'tap'
import { mkdtempSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { x402Client } from '@x402/core/client'
import { decodePaymentRequiredHeader, decodePaymentResponseHeader } from '@x402/core/http'
import type { PaymentPayload } from '@x402/core/types'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import { wrapFetchWithPayment } from '@x402/fetch'
import { extractDiscoveryInfo, extractDiscoveryInfoV1, validateDiscoveryExtension, type DiscoveryExtension } from '@x402/extensions/bazaar'
import type { PaymentRequirementsV1 } from '@x402/core/types/v1'
import {
  decodeSignedOffers,
  extractOffersFromPaymentRequired,
  extractReceiptFromResponse,
  verifyOfferSignatureEIP712,
  verifyReceiptMatchesOffer,
  verifyReceiptSignatureEIP712,
  type EIP712SignedOffer,
  type EIP712SignedReceipt,
} from '@x402/extensions/offer-receipt'
import { appendPaymentIdentifierToExtensions, generatePaymentId, PAYMENT_IDENTIFIER } from '@x402/extensions/payment-identifier'
import { generatePrivateKey, privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts'
import { startCli, type CliProcess } from '../helpers/cli.ts'
import { balanceOf, faucet } from '../helpers/dev-chain.ts'

const PLAN = 'scheduler-credit-5'
const OTHER_PLAN = 'memory-credit-5'
const PLAN_PRICE = 5_000_000n
const SIGNING_KEYS = [generatePrivateKey(), generatePrivateKey()]
const SIGNER = privateKeyToAccount(SIGNING_KEYS[0]!).address

let cli: CliProcess
const dataDir = mkdtempSync(path.join(os.tmpdir(), 'agw-x402ext-'))

t.before(async () => {
  cli = await startCli({ dataDir, env: { OFFER_RECEIPT_SIGNING_KEY: SIGNING_KEYS.join(',') } })
})
t.teardown(async () => {
  await cli?.stop('SIGKILL')
})

async function register(): Promise<string> {
  const response = await fetch(`${cli.gateway}/auth/register`, { method: 'POST' })
  return ((await response.json()) as { accessToken: string }).accessToken
}

/** @x402/fetch with the payment-identifier extension: every payment this client makes carries `id()`. */
function payingFetch(buyer: PrivateKeyAccount, id: () => string, sent: PaymentPayload[] = []): typeof fetch {
  const client = new x402Client().register('eip155:8453', new ExactEvmScheme(buyer)).setSpendControls(false)
  client.onBeforePaymentCreation(async ({ paymentRequired }) => {
    if (paymentRequired.extensions) appendPaymentIdentifierToExtensions(paymentRequired.extensions, id())
  })
  client.onAfterPaymentCreation(async ({ paymentPayload }) => {
    sent.push(paymentPayload)
  })
  return wrapFetchWithPayment(fetch, client)
}

function purchase(pay: typeof fetch, token: string, plan = PLAN, body?: unknown): Promise<Response> {
  return pay(`${cli.gateway}/plans/${plan}/purchase`, {
    method: 'POST',
    headers: { 'svc-agent-authorization': `Bearer ${token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  })
}

t.test('the 402 declares bazaar, payment-identifier and a signed offer; each checks out with its extension', async (t) => {
  const token = await register()
  const unpaid = await fetch(`${cli.gateway}/plans/${PLAN}/purchase`, { method: 'POST', headers: { 'svc-agent-authorization': `Bearer ${token}` } })
  t.equal(unpaid.status, 402)
  const required = decodePaymentRequiredHeader(unpaid.headers.get('payment-required') ?? '')
  t.same(Object.keys(required.extensions ?? {}).sort(), ['bazaar', 'offer-receipt', 'payment-identifier'])

  const bazaar = required.extensions?.bazaar as DiscoveryExtension
  t.strictSame(validateDiscoveryExtension(bazaar), { valid: true }, 'bazaar declaration valid per the extension')
  const payload: PaymentPayload = { x402Version: 2, resource: required.resource, accepted: required.accepts[0]!, payload: {}, extensions: required.extensions }
  const discovered = extractDiscoveryInfo(payload, required.accepts[0]!)
  t.match(discovered, { resourceUrl: `${cli.gateway}/plans/:planId/purchase`, method: 'POST', x402Version: 2 }, 'a facilitator indexes it')
  t.match(required.resource, { serviceName: 'Plan purchase', tags: ['plans'] })

  t.match(required.extensions?.[PAYMENT_IDENTIFIER], { info: { required: false } })

  const offers = extractOffersFromPaymentRequired(required)
  t.equal(offers.length, 1)
  const verified = await verifyOfferSignatureEIP712(offers[0] as EIP712SignedOffer)
  t.equal(verified.signer, SIGNER, 'the offer is signed by the first key of OFFER_RECEIPT_SIGNING_KEY')
  // Verifiers learn which signers are ours from the discovery documents: the whole ring.
  const manifest = (await (await fetch(`${cli.gateway}/manifest.json`)).json()) as { protocols: { x402: { offerReceipt?: { signers: string[] } } } }
  t.same(
    manifest.protocols.x402.offerReceipt,
    { format: 'eip712', signers: SIGNING_KEYS.map((key) => privateKeyToAccount(key).address) },
    'the manifest publishes every key of the ring',
  )
  t.match(verified.payload, { resourceUrl: `${cli.gateway}/plans/${PLAN}/purchase`, amount: PLAN_PRICE.toString(), network: 'eip155:8453' })

  const v1 = (await unpaid.json()) as { x402Version: number; accepts: PaymentRequirementsV1[] }
  t.equal(v1.x402Version, 1)
  t.match(extractDiscoveryInfoV1(v1.accepts[0]!), { input: { type: 'http', method: 'POST' } }, 'v1 discovery in outputSchema')
})

t.test('payment-identifier: a retry gets the original answer and pays once; another request with the id is 409', async (t) => {
  const buyer = privateKeyToAccount(generatePrivateKey())
  await faucet(cli.gateway, buyer.address, 30_000_000n)
  const token = await register()
  const id = generatePaymentId()
  const sent: PaymentPayload[] = []
  const pay = payingFetch(buyer, () => id, sent)

  const first = await purchase(pay, token)
  t.equal(first.status, 200)
  const firstBody = await first.text()
  t.match(JSON.parse(firstBody), { planId: PLAN, status: 'active' })
  t.equal(await balanceOf(cli.gateway, buyer.address), 25_000_000n, 'paid once')
  t.equal((sent[0]?.extensions?.[PAYMENT_IDENTIFIER] as { info: { id: string } }).info.id, id, 'the client sent the id')

  // The receipt: signed by our key, matching the offer the client accepted and its wallet.
  const receipt = extractReceiptFromResponse(first) as EIP712SignedReceipt
  t.ok(receipt, 'PAYMENT-RESPONSE carries an offer-receipt receipt')
  const checked = await verifyReceiptSignatureEIP712(receipt)
  t.equal(checked.signer, SIGNER)
  const settlement = decodePaymentResponseHeader(first.headers.get('payment-response') ?? '')
  t.equal(checked.payload.transaction, settlement.transaction)
  const unpaid = await fetch(`${cli.gateway}/plans/${PLAN}/purchase`, { method: 'POST', headers: { 'svc-agent-authorization': `Bearer ${token}` } })
  const [offer] = decodeSignedOffers(extractOffersFromPaymentRequired(decodePaymentRequiredHeader(unpaid.headers.get('payment-required') ?? '')))
  t.ok(verifyReceiptMatchesOffer(receipt, offer!, [buyer.address]), 'receipt matches offer and payer')

  const retry = await purchase(pay, token)
  t.equal(retry.status, 200)
  t.equal(await retry.text(), firstBody, 'the same answer')
  t.equal(retry.headers.get('payment-response'), first.headers.get('payment-response'), 'the same receipt')
  t.equal(retry.headers.get('x-payment-identifier-replay'), 'true')
  t.equal(sent.length, 2, 'the client signed again')
  t.equal(await balanceOf(cli.gateway, buyer.address), 25_000_000n, 'the retry charged nothing')

  const otherBody = await purchase(pay, token, PLAN, { note: 'another request' })
  t.equal(otherBody.status, 409)
  t.match(await otherBody.json(), { code: 'payment_identifier_conflict', field: `header.payment-signature.extensions.${PAYMENT_IDENTIFIER}.info.id` })
  const otherPath = await purchase(pay, token, OTHER_PLAN)
  t.equal(otherPath.status, 409)
  t.equal(await balanceOf(cli.gateway, buyer.address), 25_000_000n, 'nothing charged for the conflicts')

  // Another payer presenting the id cannot read the answer.
  const thief = privateKeyToAccount(generatePrivateKey())
  await faucet(cli.gateway, thief.address, 10_000_000n)
  const stolen = await purchase(
    payingFetch(thief, () => id),
    token,
  )
  t.equal(stolen.status, 409)
  t.equal(await balanceOf(cli.gateway, thief.address), 10_000_000n)

  // A new id buys again.
  const again = await purchase(
    payingFetch(buyer, () => generatePaymentId()),
    token,
  )
  t.equal(again.status, 200)
  t.equal(await balanceOf(cli.gateway, buyer.address), 20_000_000n)
})

t.test('payment-identifier: concurrent duplicates charge once', async (t) => {
  const buyer = privateKeyToAccount(generatePrivateKey())
  await faucet(cli.gateway, buyer.address, 50_000_000n)
  const token = await register()
  const id = generatePaymentId()
  const pay = payingFetch(buyer, () => id)
  const answers = await Promise.all(Array.from({ length: 6 }, () => purchase(pay, token)))
  const statuses = answers.map((answer) => answer.status)
  t.ok(
    statuses.every((status) => status === 200 || status === 409),
    `only 200 or 409: ${statuses.join(',')}`,
  )
  t.ok(statuses.includes(200), 'one bought it')
  for (const answer of answers.filter((a) => a.status === 409)) {
    t.match(await answer.json(), { code: 'payment_in_progress', retryable: true })
    t.ok(Number(answer.headers.get('retry-after')) > 0, 'Retry-After')
  }
  t.equal(await balanceOf(cli.gateway, buyer.address), 45_000_000n, 'charged exactly once')
  const after = await purchase(pay, token)
  t.equal(after.status, 200, 'a later retry gets the answer')
  t.equal(await balanceOf(cli.gateway, buyer.address), 45_000_000n)
})

t.test('a client that sends no id pays per request as before', async (t) => {
  const buyer = privateKeyToAccount(generatePrivateKey())
  await faucet(cli.gateway, buyer.address, 10_000_000n)
  const token = await register()
  const plain = wrapFetchWithPayment(fetch, new x402Client().register('eip155:8453', new ExactEvmScheme(buyer)).setSpendControls(false))
  t.equal((await purchase(plain, token)).status, 200)
  t.equal((await purchase(plain, token)).status, 200)
  t.equal(await balanceOf(cli.gateway, buyer.address), 0n, 'two purchases, two charges')
})
