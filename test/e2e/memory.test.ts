// The memory service end to end, through the real CLI on real Postgres and Redis, with real
// clients only: @x402/fetch pays deposits and per-call writes on the embedded local EVM,
// @x402/extensions signs the owner proofs (SIGN-IN-WITH-X), and the withdrawal is read back from
// the chain. Then the raw database (pg_dump) is scanned for the planted phrases and their stems.
import t from 'tap'
import { execFileSync } from 'node:child_process'
import { x402Client } from '@x402/core/client'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import { wrapFetchWithPayment } from '@x402/fetch'
import { createSIWxPayload, encodeSIWxHeader } from '@x402/extensions/sign-in-with-x'
import { generatePrivateKey, privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts'
import path from 'node:path'
import { repoRoot, startCli, type CliProcess } from '../helpers/cli.ts'
import { balanceOf, faucet } from '../helpers/dev-chain.ts'
import { reachableRedis, throwawayDatabase } from '../helpers/servers.ts'

type Json = Record<string, any>

const PLANTED = ['quetzalcoatl marmalade', 'zanzibarian xylophonist', 'periwinkle tesseract']
// Stems too: the blind index must not store words in any form.
const STEMS = ['quetzalcoatl', 'marmalad', 'zanzibarian', 'xylophonist', 'periwinkl', 'tesseract']

let cli: CliProcess | undefined
let databaseUrl: string | undefined

t.before(async () => {
  databaseUrl = await throwawayDatabase(t)
  const redisUrl = await reachableRedis(t)
  if (databaseUrl === undefined || redisUrl === undefined) return
  cli = await startCli({ env: { DATABASE_URL: databaseUrl, REDIS_URL: redisUrl } })
})
t.teardown(async () => {
  await cli?.stop('SIGKILL')
})

async function json(response: Response): Promise<Json> {
  return (await response.json()) as Json
}

function payingFetch(account: PrivateKeyAccount): typeof fetch {
  return wrapFetchWithPayment(fetch, new x402Client().register('eip155:8453', new ExactEvmScheme(account)).setSpendControls(false))
}

async function signed(account: PrivateKeyAccount, challenge: Json, url: string): Promise<string> {
  const chain = challenge.supportedChains[0]
  return encodeSIWxHeader(await createSIWxPayload({ ...challenge.info, chainId: chain.chainId, type: chain.type }, account, url))
}

/** An owner call: answers the 401 SIWX challenge with a signed proof and retries once. */
async function owner(account: PrivateKeyAccount, url: string, init: RequestInit = {}): Promise<Response> {
  const first = await fetch(url, init)
  if (first.status !== 401) return first
  const challenge = (await json(first)).extensions?.['sign-in-with-x']
  if (!challenge) throw new Error('401 without a SIWX challenge')
  const headers = new Headers(init.headers)
  headers.set('sign-in-with-x', await signed(account, challenge, url))
  return fetch(url, { ...init, headers })
}

const post = (body: unknown, headers: Record<string, string> = {}): RequestInit => ({
  method: 'POST',
  headers: { 'content-type': 'application/json', ...headers },
  body: JSON.stringify(body),
})

/** A direct-rail write: the 402 carries a SIWX challenge for this request; the proof alone pays from the deposit. */
async function rememberOnDeposit(account: PrivateKeyAccount, body: Json): Promise<Response> {
  const url = `${cli?.memory}/api/v1/memories`
  const first = await fetch(url, post(body))
  if (first.status !== 402) return first
  const challenge = (await json(first)).extensions?.['sign-in-with-x']
  if (!challenge) throw new Error('402 without a SIWX challenge')
  return fetch(url, post(body, { 'sign-in-with-x': await signed(account, challenge, url) }))
}

t.test('an x402 buyer deposits, remembers 20 records, recalls, expands, reads the account and withdraws the rest on-chain', async (t) => {
  if (!cli) return t.skip('no Postgres/Redis', () => {})
  const base = cli.memory
  const buyer = privateKeyToAccount(generatePrivateKey())
  await faucet(cli?.gateway as string, buyer.address, 3_000_000n)
  const pay = payingFetch(buyer)

  const deposit = await pay(`${base}/api/v1/deposits`, { method: 'POST', headers: { 'x-pay-amount-micros': '1000000' } })
  t.equal(deposit.status, 200, 'the deposit is paid through the 402')
  const deposited = await json(deposit)
  t.equal(deposited.depositedMicros, '1000000')
  t.equal(deposited.balanceMicros, '1000000')
  t.match(deposited.txHash, /^0x[0-9a-f]{64}$/, 'with its settlement transaction')
  t.equal(await balanceOf(cli?.gateway as string, buyer.address), 2_000_000n)

  const contents = Array.from({ length: 20 }, (_, i) =>
    i < PLANTED.length ? `Note ${i}: the user keeps a ${PLANTED[i]} in the pantry` : `Note ${i}: ordinary remark number ${i} about the weather and the garden`,
  )
  const ids: string[] = []
  let debited = 0n
  for (const [i, content] of contents.entries()) {
    const response = await rememberOnDeposit(buyer, { content, context: 'project:e2e', tags: i % 2 === 0 ? ['even'] : ['odd'], metadata: { i } })
    t.equal(response.status, 201, `write ${i} is stored on the deposit`)
    const body = await json(response)
    t.equal(body.rail, 'direct')
    t.ok(body.tokens > 0)
    t.equal(BigInt(body.chargedMicros), (BigInt(body.tokens) * 100_000n + 999_999n) / 1_000_000n, 'debited ceil(tokens × 100000 / 1e6)')
    debited += BigInt(body.chargedMicros)
    ids.push(body.id)
  }

  const recall = await owner(buyer, `${base}/api/v1/contexts`, post({ query: 'Where is the quetzalcoatl marmalade?' }))
  t.equal(recall.status, 200)
  const recalled = await json(recall)
  t.equal(recalled.results[0]?.id, ids[0], 'the planted note ranks first')
  t.match(recalled.results[0]?.content, /quetzalcoatl marmalade/)
  t.ok(
    recalled.results.every((hit: Json, i: number) => i === 0 || hit.score <= recalled.results[i - 1].score),
    'best first',
  )
  t.equal(recalled.embeddings, 'lexical', 'the embedded default says which embedder ranked')

  const filtered = await json(await owner(buyer, `${base}/api/v1/contexts`, post({ query: 'ordinary remark weather', tags: ['odd'], limit: 5 })))
  t.equal(filtered.results.length, 5)
  t.ok(
    filtered.results.every((hit: Json) => hit.tags.includes('odd')),
    'tags filter',
  )

  const expand = await json(await owner(buyer, `${base}/api/v1/contexts/expand`, post({ ids: [ids[3], ids[1]] })))
  t.same(
    expand.records.map((record: Json) => record.id),
    [ids[3], ids[1]],
    'expand answers in the order asked',
  )
  t.same(expand.records[0].metadata, { i: 3 })
  t.same(expand.records[0].derivedFrom, [])

  const account = await json(await owner(buyer, `${base}/api/v1/account`))
  t.equal(account.depositMicros, '1000000')
  t.equal(account.spentMicros, debited.toString())
  t.equal(account.balanceMicros, (1_000_000n - debited).toString())
  t.equal(account.records, 20)
  t.equal(account.embeddings.mode, 'lexical')
  t.equal(account.dreaming.enabled, false)

  const before = await balanceOf(cli?.gateway as string, buyer.address)
  const withdraw = await owner(buyer, `${base}/api/v1/deposits`, { method: 'DELETE' })
  t.equal(withdraw.status, 200)
  const withdrawn = await json(withdraw)
  t.equal(withdrawn.refundedMicros, (1_000_000n - debited).toString(), 'refund = deposit − debits')
  t.match(withdrawn.txHash, /^0x[0-9a-f]{64}$/)
  t.match(withdrawn, { withdrawalId: /^[0-9a-f-]{36}$/, status: 'confirmed', settlingMicros: '0', replay: false }, 'this call made the withdrawal; nothing is settling')
  t.equal(await balanceOf(cli?.gateway as string, buyer.address), before + 1_000_000n - debited, 'the refund arrived on-chain')
  const again = await json(await owner(buyer, `${base}/api/v1/deposits`, { method: 'DELETE' }))
  t.same(again, { ...withdrawn, replay: true }, 'a second withdrawal answers the first, as a replay (nothing is paid twice)')
  t.equal(await balanceOf(cli?.gateway as string, buyer.address), before + 1_000_000n - debited)

  const poor = await rememberOnDeposit(buyer, { content: 'one more after the withdrawal' })
  t.equal(poor.status, 402)
  t.equal((await json(poor)).code, 'insufficient_deposit', 'an empty deposit cannot pay a write')
})

t.test('a marketplace buyer remembers on a plan; a per-call buyer pays 0.001; identical content never crosses owners', async (t) => {
  if (!cli) return t.skip('no Postgres/Redis', () => {})
  const base = cli.memory
  const agent = await json(await fetch(`${cli.gateway}/auth/register`, { method: 'POST' }))
  const planBuyer = privateKeyToAccount(generatePrivateKey())
  await faucet(cli?.gateway as string, planBuyer.address, 6_000_000n)
  const purchase = await payingFetch(planBuyer)(`${cli.gateway}/plans/memory-credit-5/purchase`, {
    method: 'POST',
    headers: { 'svc-agent-authorization': `Bearer ${agent.accessToken}` },
  })
  t.equal(purchase.status, 200, 'memory-credit-5 is sold now that memory is built')

  const shared = `The launch code word is ${PLANTED[2]} for the marketplace`
  const onPlan = await fetch(`${base}/api/v1/memories`, post({ content: shared }, { authorization: `Bearer ${agent.accessToken}` }))
  t.equal(onPlan.status, 201)
  t.equal((await json(onPlan)).rail, 'marketplace')
  t.equal(onPlan.headers.get('x-plan-credit-remaining-micros'), '4999000', 'one memory-ops unit of plan credit')

  const stranger = privateKeyToAccount(generatePrivateKey())
  await faucet(cli?.gateway as string, stranger.address, 1_000_000n)
  const paid = await payingFetch(stranger)(`${base}/api/v1/memories`, post({ content: shared }))
  t.equal(paid.status, 201)
  const paidBody = await json(paid)
  t.equal(paidBody.rail, 'payg')
  t.equal(paidBody.chargedMicros, '1000')
  t.equal(await balanceOf(cli?.gateway as string, stranger.address), 999_000n)

  const mine = await json(await fetch(`${base}/api/v1/contexts`, post({ query: 'launch code word' }, { authorization: `Bearer ${agent.accessToken}` })))
  t.equal(mine.results.length, 1, 'the plan holder sees only its own record')
  const theirs = await json(await owner(stranger, `${base}/api/v1/contexts`, post({ query: 'launch code word' })))
  t.equal(theirs.results.length, 1)
  t.equal(theirs.results[0].id, paidBody.id)
  t.not(theirs.results[0].id, mine.results[0].id, 'identical content, two owners, two records')

  const nobody = privateKeyToAccount(generatePrivateKey())
  const empty = await json(await owner(nobody, `${base}/api/v1/contexts`, post({ query: 'launch code word' })))
  t.same(empty.results, [], 'an owner without memories recalls nothing')
  const foreign = await json(await owner(nobody, `${base}/api/v1/contexts/expand`, post({ ids: [paidBody.id] })))
  t.same(foreign.records, [], "another owner's id expands to nothing")
  t.same(foreign.missing, [paidBody.id])
})

t.test('memory rotate-key re-wraps every data key while the server keeps serving', async (t) => {
  if (!cli) return t.skip('no Postgres/Redis', () => {})
  const base = cli.memory
  const before = privateKeyToAccount(generatePrivateKey())
  await faucet(cli?.gateway as string, before.address, 1_000_000n)
  const written = await json(await payingFetch(before)(`${base}/api/v1/memories`, post({ content: 'written before the rotation: lighthouse keeper' })))
  const output = execFileSync(process.execPath, [path.join(repoRoot, 'bin/agent-gateway.js'), 'memory', 'rotate-key'], { cwd: repoRoot, env: cli.env }).toString()
  t.match(output, /active key-encryption key: k-[0-9]{8}-[0-9a-f]+; rewrapped [1-9][0-9]*/, 'a new key, every data key re-wrapped')
  const again = execFileSync(
    process.execPath,
    [path.join(repoRoot, 'bin/agent-gateway.js'), 'memory', 'rotate-key', '--to', /active key-encryption key: (\S+);/.exec(output)?.[1] ?? ''],
    {
      cwd: repoRoot,
      env: cli.env,
    },
  ).toString()
  t.match(again, /rewrapped 0,/, 'rotating to the same key again has nothing to do')
  const recalled = await json(await owner(before, `${base}/api/v1/contexts`, post({ query: 'lighthouse keeper' })))
  t.equal(recalled.results[0]?.id, written.id, 'an owner from before the rotation still recalls')
  const after = privateKeyToAccount(generatePrivateKey())
  await faucet(cli?.gateway as string, after.address, 1_000_000n)
  const fresh = await payingFetch(after)(`${base}/api/v1/memories`, post({ content: 'written after the rotation: lighthouse keeper' }))
  t.equal(fresh.status, 201, 'a new owner gets a data key under the new key-encryption key (the server reloads its ring)')
  const theirs = await json(await owner(after, `${base}/api/v1/contexts`, post({ query: 'lighthouse keeper' })))
  t.equal(theirs.results.length, 1)
})

t.test('the raw database holds none of the planted phrases or their stems', async (t) => {
  if (!cli || !databaseUrl) return t.skip('no Postgres/Redis', () => {})
  const dump = execFileSync('pg_dump', ['--no-owner', databaseUrl], { maxBuffer: 512 * 1024 * 1024 })
    .toString('latin1')
    .toLowerCase()
  t.ok(dump.includes('memory_records'), 'the dump holds the memory tables')
  for (const phrase of [...PLANTED, ...STEMS]) {
    t.notOk(dump.includes(phrase), `"${phrase}" is nowhere in pg_dump`)
    // bytea columns dump as hex: plaintext stored in one would show as its hex.
    t.notOk(dump.includes(Buffer.from(phrase).toString('hex')), `nor its hex (bytea)`)
  }
})
