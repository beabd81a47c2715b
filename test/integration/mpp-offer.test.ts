// Where MPP is offered, with the real mppx client against the real payments assembly
// (openPayments: guard, x402 and MPP methods) on PGlite and an in-memory USDC:
//   - without a Tempo RPC (the embedded default): a priced 402 carries no WWW-Authenticate:
//     Payment and an MPP credential for it is refused as not offered; a $0 quote is still offered
//     over MPP and its proof verifies locally, signature only, with no RPC call anywhere;
//   - with a Tempo RPC (the scripted test double): MPP charges are advertised and settle, and a
//     $0 proof still costs no RPC call;
//   - the catalog lists MPP for priced operations only when told MPP charges are offered.
import t from 'tap'
import { Challenge, Credential, Receipt } from 'mppx'
import { Mppx, tempo } from 'mppx/client'
import { createClient, custom, http as viemHttp } from 'viem'
import { generatePrivateKey, privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts'
import { tempo as tempoChain } from 'viem/tempo/chains'
import { createLogger } from '../../src/platform/logger.ts'
import { systemClock } from '../../src/platform/clock.ts'
import { AppError } from '../../src/platform/errors.ts'
import { openDb, type Db } from '../../src/platform/db/index.ts'
import { migrate } from '../../src/platform/db/migrate.ts'
import { openKeyValue } from '../../src/platform/kv/index.ts'
import { registry } from '../../src/catalog/registry.ts'
import { createCatalog } from '../../src/catalog/catalog.ts'
import { llmsTxt, manifestView } from '../../src/catalog/documents.ts'
import { openPayments, type Payments } from '../../src/payments/index.ts'
import type { PriceQuote } from '../../src/payments/types.ts'
import { memoryChain, memoryUsdc } from '../helpers/memory-chain.ts'
import { startTempoRpc } from '../helpers/tempo-rpc.ts'

const PAY_TO = '0x000000000000000000000000000000000000c0de' as const
const GATEWAY_URL = 'https://gw.test'

const rpc = await startTempoRpc()
t.teardown(() => rpc.close())

async function open(tempoRpcUrl: string | undefined): Promise<{ payments: Payments; db: Db }> {
  const db = await openDb({ kind: 'pglite', dataDir: 'memory://' })
  await migrate(db)
  const kv = await openKeyValue({ kind: 'memory' })
  const payments = await openPayments({
    db,
    kv,
    logger: createLogger('silent'),
    clock: systemClock,
    registry,
    dataDir: '',
    payTo: PAY_TO,
    gatewayUrl: GATEWAY_URL,
    chain: memoryChain(memoryUsdc()),
    ...(tempoRpcUrl ? { tempoRpcUrl } : {}),
    reconcileEveryMs: 0,
  })
  t.teardown(async () => {
    await payments.close()
    await kv.close()
    await db.close()
  })
  return { payments, db }
}

const embedded = await open(undefined)
const withTempo = await open(rpc.url)

function quote(route: string, amountMicros: bigint): PriceQuote {
  return { amountMicros, resourceUrl: `${GATEWAY_URL}${route.split(' ')[1]}`, route, description: route, payTo: PAY_TO }
}
const PRICED = quote('POST /plans/{planId}/purchase', 5_000_000n)
const FREE = quote('POST /advisor/agent/quote', 0n)

/** The 402 the guard answers for `q`, as the Response a client reads. */
function response402(payments: Payments, q: PriceQuote): Response {
  const error = payments.guard.paymentRequired(q)
  return new Response(JSON.stringify(error.toProblem()), { status: error.status, headers: error.headers })
}

/** What a refused authorize() answers. */
async function refusal(promise: Promise<unknown>): Promise<AppError> {
  try {
    await promise
  } catch (error) {
    if (error instanceof AppError) return error
    throw error
  }
  throw new Error('expected a refusal')
}

/** A real mppx client whose own Tempo client records every RPC call (and can reach the double). */
function agent(account: PrivateKeyAccount, rpcUrl?: string): { mppx: ReturnType<typeof Mppx.create>; calls: string[] } {
  const calls: string[] = []
  const transport = rpcUrl
    ? viemHttp(rpcUrl, { retryCount: 0 })
    : custom(
        {
          async request({ method }: { method: string }) {
            calls.push(method)
            throw new Error('no Tempo RPC here')
          },
        },
        { retryCount: 0 },
      )
  const mppx = Mppx.create({ methods: [tempo({ account, getClient: () => createClient({ chain: tempoChain, transport }) })], polyfill: false })
  return { mppx, calls }
}

t.test('embedded default (no Tempo RPC): a priced 402 does not advertise MPP', async (t) => {
  const res = response402(embedded.payments, PRICED)
  t.equal(res.status, 402)
  t.equal(res.headers.get('www-authenticate'), null, 'no WWW-Authenticate: Payment on a priced 402')
  t.ok(res.headers.get('payment-required'), 'x402 v2 challenge still there')
  const body = (await res.json()) as { detail: string }
  t.match(body.detail, /Pay with x402 and retry/)
  t.notMatch(body.detail, /MPP/)
  t.equal(embedded.payments.mppCharges, false)
})

t.test('embedded default: an MPP credential for a priced call gets a clear 402 saying MPP is not offered', async (t) => {
  // A well-formed push credential for a challenge of this route (the client may have it from elsewhere).
  const challenge = Challenge.deserialize((withTempo.payments.guard.paymentRequired(PRICED).headers['WWW-Authenticate'] as string) ?? '')
  const wallet = privateKeyToAccount(generatePrivateKey())
  const credential = Credential.serialize({ challenge, payload: { type: 'hash', hash: `0x${'11'.repeat(32)}` }, source: `did:pkh:eip155:4217:${wallet.address}` })
  const refused = await refusal(embedded.payments.guard.authorize({ authorization: credential }, PRICED, 'purchasePlan'))
  t.equal(refused.status, 402)
  t.equal(refused.extensions.reason, 'unsupported_scheme')
  t.match(refused.message, /MPP charges are not offered here/)
  t.match(refused.message, /x402/)
  t.equal(refused.headers['WWW-Authenticate'], undefined, 'the fresh 402 does not offer MPP either')
})

t.test('embedded default: a $0 quote offers MPP, and an mppx $0 proof verifies locally with no RPC', async (t) => {
  const res = response402(embedded.payments, FREE)
  t.match(res.headers.get('www-authenticate'), /^Payment .*method="tempo"/, '$0 402 offers an MPP proof')
  const wallet = privateKeyToAccount(generatePrivateKey())
  const { mppx, calls } = agent(wallet)
  const proof = await mppx.createCredential(res)
  const authorized = await embedded.payments.guard.authorize({ authorization: proof }, FREE, 'postAgentQuote')
  t.equal(authorized.payment.protocol, 'mpp')
  t.equal(authorized.payment.payer, wallet.address)
  t.equal(authorized.payment.zeroValue, true)
  const { decision } = await authorized.commit()
  t.equal(decision.status, 'settled')
  t.same(calls, [], 'the client made no RPC call either')

  const reuse = await refusal(embedded.payments.guard.authorize({ authorization: proof }, FREE, 'postAgentQuote'))
  t.equal(reuse.status, 402)
  t.equal(reuse.extensions.reason, 'nonce_already_used', 'single-use')

  // A proof whose source names another account than the signer does not verify.
  const fresh = JSON.parse(Buffer.from((await mppx.createCredential(response402(embedded.payments, FREE))).replace(/^Payment\s+/, ''), 'base64url').toString())
  fresh.source = `did:pkh:eip155:4217:${privateKeyToAccount(generatePrivateKey()).address}`
  const swapped = `Payment ${Buffer.from(JSON.stringify(fresh)).toString('base64url')}`
  const forged = await refusal(embedded.payments.guard.authorize({ authorization: swapped }, FREE, 'postAgentQuote'))
  t.equal(forged.status, 402)
  t.equal(forged.extensions.reason, 'invalid_signature')
})

t.test('with a Tempo RPC: MPP is advertised and a charge pays as before', async (t) => {
  t.equal(withTempo.payments.mppCharges, true)
  const res = response402(withTempo.payments, PRICED)
  t.match(res.headers.get('www-authenticate'), /^Payment .*method="tempo"/)
  t.match(((await res.clone().json()) as { detail: string }).detail, /Pay with x402 or MPP/)
  const wallet = privateKeyToAccount(generatePrivateKey())
  const { mppx } = agent(wallet, rpc.url)
  const credential = await mppx.createCredential(res)
  const broadcasts = rpc.broadcasts.length
  const authorized = await withTempo.payments.guard.authorize({ authorization: credential }, PRICED, 'purchasePlan')
  t.equal(authorized.payment.payer, wallet.address)
  const { decision, headers } = await authorized.commit()
  t.equal(decision.status, 'settled')
  t.equal(Receipt.deserialize(headers['Payment-Receipt'] ?? '').status, 'success')
  t.equal(rpc.broadcasts.length - broadcasts, 1, 'one transaction broadcast')
})

t.test('with a Tempo RPC: a $0 proof still costs no RPC call', async (t) => {
  const wallet = privateKeyToAccount(generatePrivateKey())
  const { mppx, calls } = agent(wallet)
  const proof = await mppx.createCredential(response402(withTempo.payments, FREE))
  const requests = rpc.requests.length
  const authorized = await withTempo.payments.guard.authorize({ authorization: proof }, FREE, 'postAgentQuote')
  t.equal(authorized.payment.payer, wallet.address)
  await authorized.commit()
  t.equal(rpc.requests.length - requests, 0, 'the Tempo RPC was not asked')
  t.same(calls, [])
})

t.test('discovery lists MPP for priced operations only where MPP charges are offered', async (t) => {
  const urls = { gateway: GATEWAY_URL, scheduler: 'https://scheduler.gw.test', memory: 'https://memory.gw.test' }
  const implemented = new Set(['purchasePlan', 'postAgentQuote'])
  const find = (catalog: ReturnType<typeof createCatalog>, operationId: string) => catalog.operations.find((entry) => entry.spec.operationId === operationId)

  const plain = createCatalog(registry, { urls, implemented })
  t.equal(plain.mppCharges, false, 'not offered unless told')
  t.same(find(plain, 'purchasePlan')?.paymentInfo.protocols, ['x402'])
  t.equal(find(plain, 'purchasePlan')?.paymentInfo.mpp, undefined)
  t.same(find(plain, 'postAgentQuote')?.paymentInfo.protocols, ['x402', 'mpp'], '$0 wallet proofs are offered over MPP')
  const page = plain.openapiPage({ path: '/plans/{planId}/purchase' }).document as { paths: Record<string, { post: { security: unknown } }> }
  t.same(page.paths['/plans/{planId}/purchase']?.post.security, [{ x402: [] }])
  const manifest = manifestView({ catalog: plain, payTo: PAY_TO }) as { protocols: { mpp: { charges: boolean; proofs: boolean } } }
  t.match(manifest.protocols.mpp, { charges: false, proofs: true })
  t.notMatch(llmsTxt({ catalog: plain, payTo: PAY_TO }), /or MPP \(tempo\/charge\)/)

  const paid = createCatalog(registry, { urls, implemented, mppCharges: withTempo.payments.mppCharges })
  t.same(find(paid, 'purchasePlan')?.paymentInfo.protocols, ['x402', 'mpp'])
  t.match(find(paid, 'purchasePlan')?.paymentInfo.mpp, { method: 'tempo', intent: 'charge' })
  const paidPage = paid.openapiPage({ path: '/plans/{planId}/purchase' }).document as { paths: Record<string, { post: { security: unknown } }> }
  t.same(paidPage.paths['/plans/{planId}/purchase']?.post.security, [{ x402: [] }, { mpp: [] }])
  t.match((manifestView({ catalog: paid, payTo: PAY_TO }) as { protocols: { mpp: unknown } }).protocols.mpp, { charges: true, proofs: true })
  t.match(llmsTxt({ catalog: paid, payTo: PAY_TO }), /or MPP \(tempo\/charge\)/)
})
