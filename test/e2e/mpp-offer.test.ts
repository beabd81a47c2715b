// The embedded default (`npm start` with no chain config: anvil, no TEMPO_RPC_URL) through the
// real CLI, with the real mppx client: MPP is advertised only where it can be paid. A priced 402
// carries no WWW-Authenticate: Payment and an MPP credential for it gets a 402 saying MPP is not
// offered; the $0 advisor quote is offered over MPP and the mppx $0 proof is verified locally, with
// no RPC; /manifest.json and /openapi.json list MPP for the $0 wallet proof only. (With the Tempo
// RPC test double configured, MPP charges are paid in test/e2e/payments.test.ts.)
import t from 'tap'
import { Challenge, Credential } from 'mppx'
import { Mppx, tempo } from 'mppx/client'
import { createClient, custom } from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { tempo as tempoChain } from 'viem/tempo/chains'
import { startCli, type CliProcess } from '../helpers/cli.ts'

let cli: CliProcess
t.before(async () => {
  cli = await startCli()
})
t.teardown(async () => {
  await cli?.stop('SIGKILL')
})

const PLAN = 'scheduler-credit-5'

async function register(): Promise<string> {
  const response = await fetch(`${cli.gateway}/auth/register`, { method: 'POST' })
  return ((await response.json()) as { accessToken: string }).accessToken
}

t.test('a priced 402 does not advertise MPP, and an MPP credential is told MPP is not offered here', async (t) => {
  const token = await register()
  const url = `${cli.gateway}/plans/${PLAN}/purchase`
  const unpaid = await fetch(url, { method: 'POST', headers: { 'svc-agent-authorization': `Bearer ${token}` } })
  t.equal(unpaid.status, 402)
  t.ok(unpaid.headers.get('payment-required'), 'x402 v2 challenge')
  t.equal(unpaid.headers.get('www-authenticate'), null, 'no WWW-Authenticate: Payment')
  const body = (await unpaid.json()) as { detail: string }
  t.notMatch(body.detail, /MPP/, body.detail)

  // An MPP charge credential (for a challenge of another gateway): refused as not offered here.
  const challenge = Challenge.from({
    id: 'x'.repeat(43),
    realm: new URL(cli.gateway).host,
    method: 'tempo',
    intent: 'charge',
    request: {
      amount: '5000000',
      currency: '0x20C000000000000000000000b9537d11c60E8b50',
      recipient: '0x000000000000000000000000000000000000c0de',
      methodDetails: { chainId: 4217 },
    },
  })
  const credential = Credential.serialize({
    challenge,
    payload: { type: 'hash', hash: `0x${'11'.repeat(32)}` },
    source: `did:pkh:eip155:4217:${privateKeyToAccount(generatePrivateKey()).address}`,
  })
  const refused = await fetch(url, { method: 'POST', headers: { 'svc-agent-authorization': `Bearer ${token}`, authorization: credential } })
  t.equal(refused.status, 402)
  t.equal(refused.headers.get('www-authenticate'), null)
  const problem = (await refused.json()) as { code: string; reason: string; detail: string }
  t.match(problem, { code: 'payment_invalid', reason: 'unsupported_scheme' })
  t.match(problem.detail, /MPP charges are not offered here/)
})

t.test('an mppx $0 proof on /advisor/agent/quote works without any Tempo RPC, once', async (t) => {
  const url = `${cli.gateway}/advisor/agent/quote`
  const init = { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ goal: 'run a python script every hour' }) }
  const unpaid = await fetch(url, init)
  t.equal(unpaid.status, 402)
  t.match(unpaid.headers.get('www-authenticate'), /^Payment .*method="tempo"/, 'the $0 quote is offered over MPP')
  const calls: string[] = []
  const sent: string[] = []
  const wallet = privateKeyToAccount(generatePrivateKey())
  const noRpc = custom(
    {
      async request({ method }: { method: string }) {
        calls.push(method)
        throw new Error('no Tempo RPC here')
      },
    },
    { retryCount: 0 },
  )
  const agent = Mppx.create({
    methods: [tempo({ account: wallet, getClient: () => createClient({ chain: tempoChain, transport: noRpc }) })],
    polyfill: false,
    fetch: async (input, requestInit) => {
      const authorization = new Headers(requestInit?.headers).get('authorization')
      if (authorization) sent.push(authorization)
      return fetch(input, requestInit)
    },
  })
  const quote = await agent.fetch(url, init)
  t.equal(quote.status, 200, 'MPP $0 proof accepted (was 503 "No client configured with chainId 4217")')
  t.ok(((await quote.json()) as { recommendations: unknown[] }).recommendations.length > 0)
  t.same(calls, [], 'no RPC call')
  const proof = sent.find((value) => value.startsWith('Payment ')) ?? ''
  const reuse = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', authorization: proof }, body: init.body })
  const reused = (await reuse.json()) as { reason: string }
  t.equal(reuse.status, 402, `a $0 proof is single-use: ${JSON.stringify(reused)}`)
  t.equal(reused.reason, 'nonce_already_used')
})

t.test('discovery lists MPP only where it is offered', async (t) => {
  type Operation = { operationId: string; 'x-payment-info': { protocols: string[]; mpp?: unknown; proof: string; pricing: string } }
  const manifest = (await (await fetch(`${cli.gateway}/manifest.json`)).json()) as {
    protocols: { mpp: { charges: boolean; proofs: boolean } }
    services: { operations: Operation[] }[]
  }
  t.match(manifest.protocols.mpp, { charges: false, proofs: true })
  const operations = manifest.services.flatMap((service) => service.operations)
  const purchase = operations.find((operation) => operation.operationId === 'purchasePlan')
  t.same(purchase?.['x-payment-info'].protocols, ['x402'])
  t.equal(purchase?.['x-payment-info'].mpp, undefined)
  const quote = operations.find((operation) => operation.operationId === 'postAgentQuote')
  t.same(quote?.['x-payment-info'].protocols, ['x402', 'mpp'])
  const listing = (keep: (info: Operation['x-payment-info']) => boolean) =>
    operations.filter((operation) => keep(operation['x-payment-info'])).map((operation) => operation.operationId)
  t.same(
    listing((info) => info.protocols.includes('mpp')),
    listing((info) => info.protocols.length > 0 && info.proof === 'wallet' && info.pricing === 'free'),
    'MPP is listed for $0 wallet proofs only',
  )
  const openapi = (await (await fetch(`${cli.gateway}/openapi.json?path=/plans/${PLAN}/purchase`)).json()) as { paths: Record<string, { post: { security: unknown } }> }
  t.same(openapi.paths['/plans/{planId}/purchase']?.post.security, [{ x402: [] }])
  const llms = await (await fetch(`${cli.gateway}/llms.txt`)).text()
  t.notMatch(llms, /or MPP \(tempo\/charge\)/)
})
