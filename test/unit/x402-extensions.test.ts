// The x402 v2 extensions of our 402s, checked with the extensions' own functions: bazaar
// declarations of every sold operation (validateDiscoveryExtension, validateDiscoveryExtensionSpec,
// extractDiscoveryInfo as a facilitator indexes them), offer-receipt offers and receipts
// (verifyOfferSignatureEIP712 / verifyReceiptSignatureEIP712, and signatures identical to what
// viem's signTypedData makes), and the payment-identifier reading (extension's id rules).
import t from 'tap'
import { x402Client } from '@x402/core/client'
import { decodePaymentRequiredHeader } from '@x402/core/http'
import { PaymentRequiredV2Schema } from '@x402/core/schemas'
import type { PaymentPayload } from '@x402/core/types'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import {
  extractDiscoveryInfo,
  extractDiscoveryInfoV1,
  isDiscoverableV1,
  validateDiscoveryExtension,
  validateDiscoveryExtensionSpec,
  type DiscoveryExtension,
} from '@x402/extensions/bazaar'
import type { PaymentRequirementsV1 } from '@x402/core/types/v1'
import {
  canonicalize,
  decodeSignedOffers,
  extractOffersFromPaymentRequired,
  hashOfferTypedData,
  hashReceiptTypedData,
  signOfferEIP712,
  signReceiptEIP712,
  verifyOfferSignatureEIP712,
  verifyReceiptMatchesOffer,
  verifyReceiptSignatureEIP712,
  type EIP712SignedOffer,
} from '@x402/extensions/offer-receipt'
import { appendPaymentIdentifierToExtensions, generatePaymentId, PAYMENT_IDENTIFIER } from '@x402/extensions/payment-identifier'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { registry } from '../../src/catalog/registry.ts'
import type { CatalogOperation } from '../../src/catalog/openapi.ts'
import type { AppError } from '../../src/platform/errors.ts'
import { loadConfig } from '../../src/platform/config.ts'
import { BAZAAR_BUDGET_BYTES, discoveryOf } from '../../src/payments/x402/bazaar.ts'
import { x402Challenge, x402PaymentRequiredV2 } from '../../src/payments/x402/challenge.ts'
import { createOfferReceiptSigner, hashOffer, hashReceipt, parseSigningKeys } from '../../src/payments/x402/offer-receipt.ts'
import { canonicalJson } from '../../src/platform/canonical-json.ts'
import { PAYMENT_ID_FIELD, readPaymentIdentifier } from '../../src/payments/x402/payment-identifier.ts'
import { x402ProofOf } from '../../src/payments/x402/decode.ts'
import { credentialsOf, paymentCredential } from '../../src/payments/credentials.ts'
import type { PriceQuote } from '../../src/payments/types.ts'

const PAY_TO = '0x00000000000000000000000000000000000000aa'
const sold = registry.services.flatMap((service) =>
  service.operations
    .filter((spec) => spec.proof === 'payment' || (spec.proof === 'wallet' && spec.server === 'gateway'))
    .map((spec): CatalogOperation => ({ spec, service, serverUrl: 'https://gw.test', implemented: true, paymentInfo: {} as CatalogOperation['paymentInfo'] })),
)

function quoteFor(entry: CatalogOperation, pathParams?: Record<string, string>): PriceQuote {
  const path = pathParams ? entry.spec.path.replace(/\{(\w+)\}/g, (_, name: string) => pathParams[name] ?? name) : entry.spec.path
  const discovery = discoveryOf(entry)
  return {
    amountMicros: 5_000_000n,
    resourceUrl: `https://gw.test${path}`,
    route: `${entry.spec.method} ${entry.spec.path}`,
    description: entry.spec.summary,
    payTo: PAY_TO,
    ...(discovery ? { discovery } : {}),
    ...(pathParams ? { pathParams } : {}),
  }
}

t.test('bazaar: every sold operation declares valid discovery metadata within budget', async (t) => {
  t.ok(sold.length >= 8, `${sold.length} sold operations`)
  for (const entry of sold) {
    const discovery = discoveryOf(entry)
    if (!discovery) {
      t.fail(`${entry.spec.operationId}: no bazaar declaration`)
      continue
    }
    t.equal(discoveryOf(entry), discovery, `${entry.spec.operationId}: computed once`)
    const extension = discovery.bazaar
    t.strictSame(validateDiscoveryExtension(extension), { valid: true }, `${entry.spec.operationId}: info matches its schema`)
    t.equal(validateDiscoveryExtensionSpec(extension as unknown as Record<string, unknown>).valid, true, `${entry.spec.operationId}: spec-valid`)
    t.ok(Buffer.byteLength(JSON.stringify(extension)) <= BAZAAR_BUDGET_BYTES, `${entry.spec.operationId}: within ${BAZAAR_BUDGET_BYTES} bytes`)
    t.equal((extension.info.input as { method?: string }).method, entry.spec.method)
  }
})

t.test('bazaar: a facilitator extracts our declaration from a paid payload, path parameters included', async (t) => {
  const entry = sold.find((e) => e.spec.operationId === 'purchasePlan')
  if (!entry) throw new Error('purchasePlan not sold')
  const required = x402PaymentRequiredV2(quoteFor(entry, { planId: 'scheduler-credit-5' }))
  t.ok(PaymentRequiredV2Schema.safeParse(required).success, 'the v2 PaymentRequired schema accepts it')
  t.equal(required.resource.serviceName, 'Plan purchase')
  t.same(required.resource.tags, ['plans'])
  const bazaar = required.extensions?.bazaar as DiscoveryExtension & { routeTemplate?: string }
  t.equal(bazaar.routeTemplate, '/plans/:planId/purchase')
  t.same((bazaar.info.input as { pathParams?: unknown }).pathParams, { planId: 'scheduler-credit-5' })
  t.strictSame(validateDiscoveryExtension(bazaar), { valid: true }, 'still valid with the concrete path parameters')
  // What a client echoes back (x402Client merges the declared extensions into its payload).
  const payload: PaymentPayload = { x402Version: 2, resource: required.resource, accepted: required.accepts[0]!, payload: {}, extensions: required.extensions }
  const found = extractDiscoveryInfo(payload, required.accepts[0]!)
  t.ok(found, 'discoverable')
  t.equal(found?.resourceUrl, 'https://gw.test/plans/:planId/purchase', 'catalogued under its route template')
  t.equal((found as { method?: string } | null)?.method, 'POST')
})

t.test('bazaar v1: the v1 accepts[] entry carries the same discovery in outputSchema', async (t) => {
  for (const entry of sold) {
    const quote = quoteFor(entry)
    const [v1] = (x402Challenge(quote).body as { accepts: PaymentRequirementsV1[] }).accepts
    t.ok(isDiscoverableV1(v1!), `${entry.spec.operationId}: discoverable in v1`)
    const info = extractDiscoveryInfoV1(v1!) as { input: { method: string } }
    t.equal(info.input.method, entry.spec.method)
  }
})

t.test('offer-receipt: offers and receipts verify with the extension and match viem signatures', async (t) => {
  const keys = [generatePrivateKey(), generatePrivateKey()]
  const [active, older] = keys.map((key) => privateKeyToAccount(key))
  let nowMs = 1_800_000_000_000
  const signer = createOfferReceiptSigner(parseSigningKeys(keys.join(',')), { now: () => nowMs, offerValiditySeconds: 300 })
  t.same(signer.signerAddresses, [active!.address, older!.address], 'the whole ring is published, active first')
  t.equal(signer.kid, `did:pkh:eip155:1:${active!.address}`)

  const entry = sold.find((e) => e.spec.operationId === 'generateSongs')!
  const challenge = x402Challenge(quoteFor(entry), { offerReceipt: signer })
  const required = decodePaymentRequiredHeader(challenge.headers['PAYMENT-REQUIRED']!)
  const offers = extractOffersFromPaymentRequired(required)
  t.equal(offers.length, 1, 'one offer per accepts[] entry')
  const offer = offers[0] as EIP712SignedOffer
  const verified = await verifyOfferSignatureEIP712(offer)
  t.equal(verified.signer, active!.address, 'recovers the active key')
  t.match(verified.payload, { resourceUrl: 'https://gw.test/api/v1/audio/songs/songmodel-3-pro', amount: '5000000', payTo: PAY_TO, network: 'eip155:8453' })
  t.equal(verified.payload.validUntil, nowMs / 1000 + 300)
  t.equal(offer.signature, await signOfferEIP712(offer.payload, (p) => active!.signTypedData(p as never)), 'identical to viem signTypedData (RFC 6979)')

  // Cached: the next 402 reuses the signed offer until a minute before it expires.
  nowMs += 200_000
  t.equal(extractOffersFromPaymentRequired(x402PaymentRequiredV2(quoteFor(entry), { offerReceipt: signer }))[0]?.signature, offer.signature, 'cached')
  nowMs += 50_000
  const fresh = extractOffersFromPaymentRequired(x402PaymentRequiredV2(quoteFor(entry), { offerReceipt: signer }))[0] as EIP712SignedOffer
  t.not(fresh.signature, offer.signature, 're-signed near expiry')
  t.equal(fresh.payload.validUntil, nowMs / 1000 + 300)

  const payer = privateKeyToAccount(generatePrivateKey()).address
  const receipt = signer.receipt({ resourceUrl: verified.payload.resourceUrl, payer, network: 'eip155:8453', transaction: `0x${'ab'.repeat(32)}` }).info.receipt
  const checked = await verifyReceiptSignatureEIP712(receipt)
  t.equal(checked.signer, active!.address)
  t.equal(receipt.signature, await signReceiptEIP712(receipt.payload, (p) => active!.signTypedData(p as never)))
  const [decoded] = decodeSignedOffers([fresh])
  t.ok(verifyReceiptMatchesOffer(receipt, decoded!, [payer], 10 ** 10), 'receipt matches the offer and payer')
  t.equal(hashOffer(fresh.payload), hashOfferTypedData(fresh.payload), "our offer hash is the extension's")
  t.equal(hashReceipt(receipt.payload), hashReceiptTypedData(receipt.payload), "our receipt hash is the extension's")
  t.throws(() => parseSigningKeys('0x12'), /OFFER_RECEIPT_SIGNING_KEY/)
  t.same(loadConfig({ OFFER_RECEIPT_SIGNING_KEY: ` ${keys[0]} , ${keys[1]}` }, '/srv').offerReceiptSigningKeys, keys, 'the config ring, active first')
  t.equal(loadConfig({}, '/srv').offerReceiptSigningKeys, undefined, 'unset: generated and kept in the database')
  t.throws(
    () => loadConfig({ OFFER_RECEIPT_SIGNING_KEY: `${keys[0]},nope` }, '/srv'),
    { variable: 'OFFER_RECEIPT_SIGNING_KEY', message: /OFFER_RECEIPT_SIGNING_KEY/ },
    'a bad key in the ring',
  )
})

t.test('payment-identifier: declared optional on priced 402s only; the client id is read and checked', async (t) => {
  const entry = sold.find((e) => e.spec.operationId === 'generateSongs')!
  const declared = x402PaymentRequiredV2(quoteFor(entry)).extensions?.[PAYMENT_IDENTIFIER] as { info: { required: boolean } }
  t.equal(declared.info.required, false)
  t.notOk(x402PaymentRequiredV2({ ...quoteFor(entry), amountMicros: 0n }).extensions?.[PAYMENT_IDENTIFIER], '$0 proofs declare none')

  // A real client payload carrying an id, as x402Client builds it from our 402.
  const account = privateKeyToAccount(generatePrivateKey())
  const required = x402PaymentRequiredV2(quoteFor(entry))
  const client = new x402Client().register('eip155:8453', new ExactEvmScheme(account)).setSpendControls(false)
  const id = generatePaymentId()
  client.onBeforePaymentCreation(async ({ paymentRequired }) => {
    appendPaymentIdentifierToExtensions(paymentRequired.extensions ?? {}, id)
  })
  const payload = await client.createPaymentPayload(structuredClone(required))
  const header = Buffer.from(JSON.stringify(payload)).toString('base64')
  t.same(readPaymentIdentifier({ 'payment-signature': header }, PAY_TO), { id, payer: account.address.toLowerCase() })
  t.equal(readPaymentIdentifier({ 'payment-signature': header }, '0x00000000000000000000000000000000000000bb'), undefined, 'made out to someone else: proves nothing')
  t.same(readPaymentIdentifier({ 'payment-signature': ` ${header} ` }, PAY_TO), { id, payer: account.address.toLowerCase() }, 'a padded value is read trimmed')
  // The read decodes the request's credential once; the guard's verification gets the same proof.
  const headers = { 'payment-signature': header }
  t.same(readPaymentIdentifier(headers, PAY_TO), { id, payer: account.address.toLowerCase() })
  const proof = x402ProofOf(paymentCredential(credentialsOf(headers))!)
  t.equal(proof, x402ProofOf(paymentCredential(credentialsOf(headers))!), 'one decoded proof per request')
  t.equal(proof.signer(), account.address.toLowerCase())

  const bad = structuredClone(payload)
  ;(bad.extensions?.[PAYMENT_IDENTIFIER] as { info: { id: string } }).info.id = 'short'
  const error = t.throws(() => readPaymentIdentifier({ 'payment-signature': Buffer.from(JSON.stringify(bad)).toString('base64') })) as unknown as AppError
  t.equal(error.code, 'payment_identifier_invalid')
  t.equal(error.status, 400)
  t.equal(error.field, PAYMENT_ID_FIELD)

  const echoed = structuredClone(payload)
  delete (echoed.extensions?.[PAYMENT_IDENTIFIER] as { info: { id?: string } }).info.id
  t.equal(readPaymentIdentifier({ 'payment-signature': Buffer.from(JSON.stringify(echoed)).toString('base64') }), undefined, 'our declaration echoed without an id: no id')

  // A malformed extension is refused, never read as "no id" (each retry would be charged again).
  const malformed: [string, unknown, string][] = [
    ['a string', 'pay_0123456789abcdef', `header.payment-signature.extensions.${PAYMENT_IDENTIFIER}`],
    ['an array', [{ info: { id } }], `header.payment-signature.extensions.${PAYMENT_IDENTIFIER}`],
    ['info: null', { info: null }, `header.payment-signature.extensions.${PAYMENT_IDENTIFIER}.info`],
    ['info: an array', { info: [id] }, `header.payment-signature.extensions.${PAYMENT_IDENTIFIER}.info`],
    ['info: a string', { info: id }, `header.payment-signature.extensions.${PAYMENT_IDENTIFIER}.info`],
  ]
  for (const [what, extension, field] of malformed) {
    const wrong = structuredClone(payload) as unknown as { extensions: Record<string, unknown> }
    wrong.extensions[PAYMENT_IDENTIFIER] = extension
    const refused = t.throws(() => readPaymentIdentifier({ 'payment-signature': Buffer.from(JSON.stringify(wrong)).toString('base64') }), what) as unknown as AppError
    t.match({ code: refused.code, status: refused.status, field: refused.field }, { code: 'payment_identifier_invalid', status: 400, field }, what)
  }

  const none = structuredClone(payload)
  delete none.extensions
  t.equal(readPaymentIdentifier({ 'payment-signature': Buffer.from(JSON.stringify(none)).toString('base64') }), undefined, 'no extension: no id')
  t.equal(readPaymentIdentifier({}), undefined)
})

t.test('payment-identifier: the body fingerprint is canonical JSON (RFC 8785 key order)', async (t) => {
  const body = { z: 1, a: [{ y: 'é', b: null }, 2.5, true], m: { k: 'v', e: {} }, '\u00e9': 'x', A: -0.001 }
  t.equal(canonicalJson(body), canonicalize(body), "equals the extension's JCS canonicalize")
  t.equal(canonicalJson({ b: 1, a: 2 }), canonicalJson({ a: 2, b: 1 }), 'key order does not matter')
})
