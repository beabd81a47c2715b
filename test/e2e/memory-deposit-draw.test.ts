// Issue 27, item 4, end to end through the real CLI (embedded default: PGlite, its local EVM chain)
// with a plain @x402/fetch v2 client that knows nothing of deposits or SIGN-IN-WITH-X: it deposits
// 1 USDC, writes 20 records (each 402 paid by the client as usual) and withdraws. Its on-chain
// balance moves only by the deposit and the withdrawal: no write was settled per call.
import t from 'tap'
import { x402Client } from '@x402/core/client'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import { wrapFetchWithPayment } from '@x402/fetch'
import { createSIWxPayload, encodeSIWxHeader } from '@x402/extensions/sign-in-with-x'
import { generatePrivateKey, privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts'
import { startCli, type CliProcess } from '../helpers/cli.ts'
import { balanceOf, faucet } from '../helpers/dev-chain.ts'

type Json = Record<string, any>

let cli: CliProcess | undefined
t.before(async () => {
  cli = await startCli()
})
t.teardown(async () => {
  await cli?.stop('SIGKILL')
})

/** A SIGN-IN-WITH-X owner call (recall, account, withdraw): answers the 401 challenge once. */
async function owner(account: PrivateKeyAccount, url: string, init: RequestInit = {}): Promise<Response> {
  const first = await fetch(url, init)
  if (first.status !== 401) return first
  const challenge = ((await first.json()) as Json).extensions?.['sign-in-with-x']
  const chain = challenge.supportedChains[0]
  const headers = new Headers(init.headers)
  headers.set('sign-in-with-x', encodeSIWxHeader(await createSIWxPayload({ ...challenge.info, chainId: chain.chainId, type: chain.type }, account, url)))
  return fetch(url, { ...init, headers })
}

t.test('a plain @x402/fetch client with a memory deposit writes 20 records: its wallet moves only by the deposit and the withdrawal', async (t) => {
  const base = cli?.memory as string
  const gateway = cli?.gateway as string
  const buyer = privateKeyToAccount(generatePrivateKey())
  await faucet(gateway, buyer.address, 3_000_000n)
  const pay = wrapFetchWithPayment(fetch, new x402Client().register('eip155:8453', new ExactEvmScheme(buyer)).setSpendControls(false))

  const deposit = await pay(`${base}/api/v1/deposits`, { method: 'POST', headers: { 'x-pay-amount-micros': '1000000' } })
  t.equal(deposit.status, 200)
  t.equal(await balanceOf(gateway, buyer.address), 2_000_000n, 'the deposit left the wallet')

  const ids: string[] = []
  let debited = 0n
  for (let i = 0; i < 20; i += 1) {
    const response = await pay(`${base}/api/v1/memories`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ content: `Drawn note ${i}: the user waters the ficus on day ${i}`, context: 'e2e/draw' }),
    })
    t.equal(response.status, 201, `write ${i} stored`)
    t.notOk(response.headers.get('payment-response'), `write ${i}: no settlement receipt`)
    const body = (await response.json()) as Json
    t.equal(body.rail, 'direct', `write ${i} drawn on the deposit`)
    debited += BigInt(body.chargedMicros)
    t.equal(body.balanceMicros, (1_000_000n - debited).toString())
    ids.push(body.id)
  }
  t.equal(await balanceOf(gateway, buyer.address), 2_000_000n, 'no write was settled on-chain')

  const recalled = (await (
    await owner(buyer, `${base}/api/v1/contexts`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ query: 'ficus day 7', context: 'e2e/draw' }),
    })
  ).json()) as Json
  t.ok(
    recalled.results.some((hit: Json) => hit.id === ids[7]),
    'the records are readable',
  )
  const expanded = (await (
    await owner(buyer, `${base}/api/v1/contexts/expand`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ids }) })
  ).json()) as Json
  t.equal(expanded.records.length, 20)
  t.same(expanded.missing, [])

  const account = (await (await owner(buyer, `${base}/api/v1/account`)).json()) as Json
  t.match(account, { depositMicros: '1000000', spentMicros: debited.toString(), records: 20 })

  const withdrawn = (await (await owner(buyer, `${base}/api/v1/deposits`, { method: 'DELETE' })).json()) as Json
  t.match(withdrawn, { refundedMicros: (1_000_000n - debited).toString(), status: 'confirmed', replay: false })
  t.equal(await balanceOf(gateway, buyer.address), 3_000_000n - debited, 'the wallet moved by the deposit and the withdrawal only')
})
