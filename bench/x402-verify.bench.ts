// x402 proof verification micro-benchmark (tinybench, one thread):
//   1. signature recovery candidates on the same EIP-3009 signature;
//   2. the whole verify path: the reference @x402/evm ExactEvmScheme facilitator verify (local,
//      fake chain answering instantly, simulation on as by default) vs decodeX402Proof + verifyX402;
//   3. the x402 work of one paid call as the access layer does it (fresh request headers each time):
//      the payment-identifier read, then the guard's x402 method verify, without and with an id.
//   npx node bench/x402-verify.bench.ts            (BENCH_TIME_MS=2000 per task by default)
import { x402Client, x402HTTPClient } from '@x402/core/client'
import { appendPaymentIdentifierToExtensions, generatePaymentId } from '@x402/extensions/payment-identifier'
import { decodePaymentSignatureHeader } from '@x402/core/http'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import { ExactEvmScheme as ExactEvmFacilitatorScheme } from '@x402/evm/exact/facilitator'
import type { FacilitatorEvmSigner } from '@x402/evm'
import { Bench } from 'tinybench'
import { hashTypedData, recoverAddress, recoverTypedDataAddress } from 'viem'
import type { Hex } from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import type { ChainPort } from '../src/payments/chain/index.ts'
import { credentialsOf, paymentCredential } from '../src/payments/credentials.ts'
import type { PriceQuote } from '../src/payments/types.ts'
import {
  TRANSFER_WITH_AUTHORIZATION_TYPES,
  USDC_DOMAIN,
  decodeX402Proof,
  readPaymentIdentifier,
  recoverSigner,
  recoveryBackend,
  recoveryBackends,
  transferWithAuthorizationDigest,
  verifyX402,
  x402Challenge,
  x402RequirementsV2,
} from '../src/payments/x402/index.ts'
import { x402Method } from '../src/payments/x402/method.ts'
import { USDC_BASE_ADDRESS } from '../src/payments/networks.ts'

const time = Number(process.env.BENCH_TIME_MS ?? 2000)
const quote: PriceQuote = {
  amountMicros: 10_000n,
  resourceUrl: 'https://gw.example/v1/search',
  route: 'GET /v1/search',
  description: 'bench',
  payTo: '0x1111111111111111111111111111111111111111',
}

// A real v2 proof from the real client, for our challenge.
const account = privateKeyToAccount(generatePrivateKey())
const http = new x402HTTPClient(new x402Client().register('eip155:8453', new ExactEvmScheme(account)))
const challenge = x402Challenge(quote)
const paymentRequired = http.getPaymentRequiredResponse((n) => challenge.headers[n] ?? null, challenge.body)
const paymentPayload = await http.createPaymentPayload(paymentRequired)
const header = http.encodePaymentSignatureHeader(paymentPayload)['PAYMENT-SIGNATURE']!
const proof = decodeX402Proof(header)
// The same payment from a client that sends a payment identifier.
const idClient = new x402Client().register('eip155:8453', new ExactEvmScheme(account))
idClient.onBeforePaymentCreation(async ({ paymentRequired: required }) => {
  appendPaymentIdentifierToExtensions(required.extensions ?? {}, generatePaymentId())
})
const headerWithId = new x402HTTPClient(idClient).encodePaymentSignatureHeader(await idClient.createPaymentPayload(structuredClone(paymentRequired)))['PAYMENT-SIGNATURE']!
// Verification touches no chain; only settle would.
const method = x402Method({ chain: {} as ChainPort, now: Date.now })

/** What access.ts and the guard do with one request's headers: read its payment id, then verify. */
async function paidCallX402(value: string): Promise<void> {
  const headers = { 'payment-signature': value }
  readPaymentIdentifier(headers, quote.payTo)
  const credential = paymentCredential(credentialsOf(headers))!
  await method.verify(credential.value, quote, credential)
}
const auth = proof.authorization
const typed = {
  domain: USDC_DOMAIN,
  types: TRANSFER_WITH_AUTHORIZATION_TYPES,
  primaryType: 'TransferWithAuthorization',
  message: auth,
} as const
const signature = proof.signature
const sigBytes = Buffer.from(signature.slice(2), 'hex')
const digest = transferWithAuthorizationDigest(auth)
const digestHex = hashTypedData(typed)
const expected = account.address.toLowerCase()

// Reference facilitator on a fake chain: EOA payer (no code), USDC deployed, simulation succeeds.
const fakeSigner = {
  getAddresses: () => ['0x9999999999999999999999999999999999999999'],
  getCode: async ({ address }: { address: string }) => (address.toLowerCase() === USDC_BASE_ADDRESS.toLowerCase() ? '0x6080' : '0x'),
  readContract: async () => undefined,
  verifyTypedData: async () => true,
  writeContract: async () => '0x',
  sendTransaction: async () => '0x',
  waitForTransactionReceipt: async () => ({ status: 'success' }),
} as unknown as FacilitatorEvmSigner
const reference = new ExactEvmFacilitatorScheme(fakeSigner)
const requirements = x402RequirementsV2(quote)

// Sanity: every candidate recovers the signer; both verify paths accept.
const checks: [string, string | null | undefined][] = [
  ['viem', (await recoverTypedDataAddress({ ...typed, signature })).toLowerCase()],
  ...Object.entries(recoveryBackends).map(([n, fn]) => [n, recoverSigner(digest, sigBytes, fn)] as [string, string | null]),
]
for (const [name, got] of checks) if (got !== expected) throw new Error(`${name} recovered ${got}, expected ${expected}`)
const ref = await reference.verify(decodePaymentSignatureHeader(header), requirements)
if (!ref.isValid) throw new Error(`reference verify failed: ${ref.invalidReason} ${ref.invalidMessage ?? ''}`)
await verifyX402(proof, quote, { now: Date.now })
if (readPaymentIdentifier({ 'payment-signature': headerWithId }, quote.payTo)?.payer !== expected) throw new Error('the payment id was not read')
await paidCallX402(header)
await paidCallX402(headerWithId)

const bench = new Bench({ time, warmupTime: 300 })
bench
  .add('viem recoverTypedDataAddress (hash + noble recover)', async () => {
    await recoverTypedDataAddress({ ...typed, signature })
  })
  .add('viem hashTypedData', () => {
    hashTypedData(typed)
  })
  .add('our EIP-712 digest (viem keccak256)', () => {
    transferWithAuthorizationDigest(auth)
  })
  .add('recover: viem recoverAddress (noble, pure JS)', async () => {
    await recoverAddress({ hash: digestHex, signature: signature as Hex })
  })
for (const [name, fn] of Object.entries(recoveryBackends)) {
  bench.add(`recover: ${name === 'native' ? 'secp256k1 N-API (libsecp256k1)' : 'tiny-secp256k1 WASM (libsecp256k1)'}`, () => {
    recoverSigner(digest, sigBytes, fn)
  })
}
bench
  .add('verify: reference @x402/evm ExactEvmScheme.verify (decode + verify)', async () => {
    await reference.verify(decodePaymentSignatureHeader(header), requirements)
  })
  .add(`verify: decodeX402Proof + verifyX402 (${recoveryBackend})`, async () => {
    await verifyX402(decodeX402Proof(header), quote, { now: Date.now })
  })
  .add('paid call: readPaymentIdentifier + x402Method.verify, no payment id', async () => {
    await paidCallX402(header)
  })
  .add('paid call: readPaymentIdentifier + x402Method.verify, with a payment id', async () => {
    await paidCallX402(headerWithId)
  })

await bench.run()

/** CPU µs (user + system) per call: unlike wall time, not inflated by other processes on the machine. */
async function cpuMicrosPerOp(fn: () => Promise<void>, calls: number): Promise<number> {
  for (let i = 0; i < calls / 10; i += 1) await fn()
  const start = process.cpuUsage()
  for (let i = 0; i < calls; i += 1) await fn()
  const used = process.cpuUsage(start)
  return (used.user + used.system) / calls
}
const cpuCalls = Number(process.env.BENCH_CPU_CALLS ?? 3000)
const cpu = {
  'decodeX402Proof + verifyX402': await cpuMicrosPerOp(async () => {
    await verifyX402(decodeX402Proof(header), quote, { now: Date.now })
  }, cpuCalls),
  'paid call, no payment id': await cpuMicrosPerOp(() => paidCallX402(header), cpuCalls),
  'paid call, with a payment id': await cpuMicrosPerOp(() => paidCallX402(headerWithId), cpuCalls),
}
console.log(`node ${process.version}, ${process.platform}-${process.arch}, active backend: ${recoveryBackend}`)
const rows = bench.tasks.map((task) => {
  const r = task.result as unknown as { latency?: { mean: number; p50: number }; throughput?: { mean: number }; mean?: number; hz?: number }
  const meanMs = r.latency?.mean ?? r.mean ?? NaN
  // The median as well: on a shared machine the mean carries every preemption.
  return {
    task: task.name,
    'µs/op': Number((meanMs * 1000).toFixed(1)),
    'p50 µs': Number(((r.latency?.p50 ?? NaN) * 1000).toFixed(1)),
    'ops/s': Math.round(r.throughput?.mean ?? r.hz ?? 1000 / meanMs),
  }
})
console.table(rows)
console.table(Object.entries(cpu).map(([task, micros]) => ({ task, 'CPU µs/op': Number(micros.toFixed(1)) })))
const by = (prefix: string) => rows.find((r) => r.task.startsWith(prefix))!
const viemRow = by('viem recoverTypedDataAddress')
const oursRow = by('verify: decodeX402Proof')
const refRow = by('verify: reference')
console.log(`recovery speed-up vs viem: ${(viemRow['µs/op'] / by(`recover: ${recoveryBackend === 'native' ? 'secp256k1' : 'tiny'}`)['µs/op']).toFixed(1)}x`)
console.log(`verify path speed-up vs reference facilitator: ${(refRow['µs/op'] / oursRow['µs/op']).toFixed(1)}x`)
