// x402 proof verification micro-benchmark (tinybench, one thread):
//   1. signature recovery candidates on the same EIP-3009 signature;
//   2. the whole verify path: the reference @x402/evm ExactEvmScheme facilitator verify (local,
//      fake chain answering instantly, simulation on as by default) vs readX402Proof + verifyX402.
//   npx node bench/x402-verify.bench.ts            (BENCH_TIME_MS=2000 per task by default)
import { x402Client, x402HTTPClient } from '@x402/core/client'
import { decodePaymentSignatureHeader } from '@x402/core/http'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import { ExactEvmScheme as ExactEvmFacilitatorScheme } from '@x402/evm/exact/facilitator'
import type { FacilitatorEvmSigner } from '@x402/evm'
import { Bench } from 'tinybench'
import { hashTypedData, recoverAddress, recoverTypedDataAddress } from 'viem'
import type { Hex } from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import type { PriceQuote } from '../src/payments/types.ts'
import {
  TRANSFER_WITH_AUTHORIZATION_TYPES,
  USDC_DOMAIN,
  readX402Proof,
  recoverSigner,
  recoveryBackend,
  recoveryBackends,
  transferWithAuthorizationDigest,
  verifyX402,
  x402Challenge,
  x402RequirementsV2,
} from '../src/payments/x402/index.ts'
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
const proof = readX402Proof({ 'payment-signature': header })!
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
  .add(`verify: readX402Proof + verifyX402 (${recoveryBackend})`, async () => {
    await verifyX402(readX402Proof({ 'payment-signature': header })!, quote, { now: Date.now })
  })

await bench.run()
console.log(`node ${process.version}, ${process.platform}-${process.arch}, active backend: ${recoveryBackend}`)
const rows = bench.tasks.map((task) => {
  const r = task.result as unknown as { latency?: { mean: number }; throughput?: { mean: number }; mean?: number; hz?: number }
  const meanMs = r.latency?.mean ?? r.mean ?? NaN
  return { task: task.name, 'µs/op': Number((meanMs * 1000).toFixed(1)), 'ops/s': Math.round(r.throughput?.mean ?? r.hz ?? 1000 / meanMs) }
})
console.table(rows)
const by = (prefix: string) => rows.find((r) => r.task.startsWith(prefix))!
const viemRow = by('viem recoverTypedDataAddress')
const oursRow = by('verify: readX402Proof')
const refRow = by('verify: reference')
console.log(`recovery speed-up vs viem: ${(viemRow['µs/op'] / by(`recover: ${recoveryBackend === 'native' ? 'secp256k1' : 'tiny'}`)['µs/op']).toFixed(1)}x`)
console.log(`verify path speed-up vs reference facilitator: ${(refRow['µs/op'] / oursRow['µs/op']).toFixed(1)}x`)
