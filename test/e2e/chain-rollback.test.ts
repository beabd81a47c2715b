// The dev chain rolled back under the running service, end to end through the real CLI with real
// clients (@x402/fetch, SIGN-IN-WITH-X): buyers pay for a task escrow, a plan, a memory deposit, a
// per-call memory write and a song sale of which one candidate fails (a partial refund owed), the
// task is deleted and the deposit withdrawn (both refunds must wait: no settlement is confirmed
// yet, CHAIN_CONFIRMATIONS is deeper than everything the purchases mine), then anvil's
// evm_revert takes every one of those settlements off the chain while the database holds them.
//
// 1. Re-landed: the confirmation sweep re-broadcasts each still-valid authorization, so each buyer
//    pays exactly once and gets back exactly what is owed; the ledger says settled → reorged →
//    resettled; every refund is mined only after the settlement it returns is final again.
// 2. Dropped for good: after the revert the chain's clock passes every authorization's
//    validBefore, so nothing can land: every purchase is reversed (task gone with no refund, plan
//    cancelled, deposit reversed and its withdrawal cancelled, the paid write deleted, the sale
//    reversed and its refund cancelled), the buyer holds exactly what was minted, no refund
//    transaction is ever signed for it, and the ledger says settled → reorged → reversed.
import { randomUUID } from 'node:crypto'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { x402Client } from '@x402/core/client'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import { wrapFetchWithPayment } from '@x402/fetch'
import t, { type Test } from 'tap'
import { createPublicClient, http, parseAbiItem, type Address, type Hex, type PublicClient } from 'viem'
import { generatePrivateKey, privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts'
import { BASE_USDC } from '../../src/payments/chain/usdc-abi.ts'
import { openDb } from '../../src/platform/db/index.ts'
import { type CliProcess, startCli } from '../helpers/cli.ts'
import { balanceOf, faucet } from '../helpers/dev-chain.ts'
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.ts'
import { syntheticSong } from '../helpers/synthetic-song.ts'
import { ownerCall } from '../helpers/owner-call.ts'

type Json = Record<string, any>

/**
 * Deeper than the blocks one scenario's purchases mine (anvil mines a block per settlement: 5),
 * so none is final before the revert. With 3, the task's create would be 3 deep once the deposit
 * settles, the sweep would confirm it and the DELETE would rightly sign its refund: a rollback
 * deeper than CHAIN_CONFIRMATIONS is outside what the service promises.
 */
const CONFIRMATIONS = 10
/** anvil account #0: payTo and the refund (settler) wallet of the embedded default. */
const SERVICE = '0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266' as Address
const MINTED = 10_000_000n
const PLAN = 'scheduler-credit-5'
const PLAN_PRICE = 5_000_000n
const TASK_ESCROW = 200_000n
const DEPOSIT = 1_000_000n
const WRITE_PRICE = 1_000n
const SONG = 80_000n
/** Three candidates ordered, the second fails: 0.24 paid, 0.16 charged, 0.08 owed back. */
const SONG_PAID = 3n * SONG
const SONG_CHARGED = 2n * SONG
const SONG_REFUND = SONG
const SPENT = TASK_ESCROW + PLAN_PRICE + DEPOSIT + WRITE_PRICE + SONG_PAID
const TRANSFER = parseAbiItem('event Transfer(address indexed from, address indexed to, uint256 value)')

let cli: CliProcess
let upstream: ScriptedUpstream
let chain: PublicClient
const dataDir = mkdtempSync(path.join(os.tmpdir(), 'agw-rollback-'))

/** What one scenario's buyer did, for the database checks after the CLI stops. */
interface Scenario {
  buyer: PrivateKeyAccount
  token: string
  taskId: string
  phrase: string
}
const scenarios: { relanded?: Scenario; dropped?: Scenario } = {}

t.setTimeout(420_000)

t.before(async () => {
  upstream = await startScriptedUpstream()
  const song = syntheticSong({ seconds: 30, bpm: 120, sampleRate: 16_000 })
  // Candidate i has seed base + i; every base ends in 0, so the second candidate (…1) fails (a
  // 400 is not retried): each sale delivers 2 of 3.
  upstream.route('/songs', {
    handler: (_req, res, recorded) => {
      const seed = Number((recorded.json as { seed?: number } | undefined)?.seed)
      if (seed % 10 === 1) {
        res.writeHead(400, { 'content-type': 'text/plain' })
        res.end('scripted: this candidate fails')
        return
      }
      res.writeHead(200, { 'content-type': 'audio/wav', 'content-length': String(song.length) })
      res.end(song)
    },
  })
  cli = await startCli({
    dataDir,
    readyTimeoutMs: 90_000,
    env: { CHAIN_CONFIRMATIONS: String(CONFIRMATIONS), SONG_UPSTREAM_URL: `${upstream.url}/songs`, MEDIA_UPSTREAM_RETRIES: '0' },
  })
  // The CLI's anvil, found from its pid file: the test drives it as a node operator would.
  const pid = readFileSync(path.join(dataDir, 'chain', 'anvil.pid'), 'utf8').trim()
  const argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')
  const port = argv[argv.indexOf('--port') + 1]
  chain = createPublicClient({ transport: http(`http://127.0.0.1:${port}`, { retryCount: 0 }) })
})
t.teardown(async () => {
  await cli?.stop('SIGKILL')
  await upstream?.close()
  rmSync(dataDir, { recursive: true, force: true })
})

function anvil<T = unknown>(method: string, params: unknown[] = []): Promise<T> {
  return chain.request({ method: method as 'eth_chainId', params: params as never }) as Promise<T>
}
const hex = (n: number) => `0x${n.toString(16)}`

async function json(response: Response): Promise<Json> {
  return (await response.json().catch(() => ({}))) as Json
}

function payingFetch(account: PrivateKeyAccount): typeof fetch {
  return wrapFetchWithPayment(fetch, new x402Client().register('eip155:8453', new ExactEvmScheme(account)).setSpendControls(false))
}

const post = (body: unknown, headers: Record<string, string> = {}): RequestInit => ({
  method: 'POST',
  headers: { 'content-type': 'application/json', ...headers },
  body: JSON.stringify(body),
})

function metric(text: string, name: string): number {
  let sum = 0
  for (const line of text.split('\n')) if (line.startsWith(name) && !line.startsWith('#')) sum += Number(line.split(' ').pop())
  return sum
}

/**
 * Mines blocks (so re-landed settlements and refunds get final) until no payment is open and no
 * refund is owed, as the metrics say.
 */
async function untilDecided(what: string, timeoutMs = 150_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  let last = ''
  for (;;) {
    await anvil('anvil_mine', [hex(CONFIRMATIONS)])
    const text = await (await fetch(`${cli.scheduler}/metrics`)).text()
    const open = metric(text, 'agent_gateway_payments_open')
    const owed = metric(text, 'agent_gateway_refunds_outstanding ')
    if (open === 0 && owed === 0) return
    last = text
      .split('\n')
      .filter((line) => /^agent_gateway_(payments_open|refunds_outstanding |refunds_waiting)/.test(line))
      .join(', ')
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}: ${last}\n${cli.output().slice(-4000)}`)
    await sleep(1_000)
  }
}

/** The withdrawal's `status` (docs/memory.md "Withdrawal answers"); the refund row is checked in the database at the end too. */
function withdrawalStatus(t: Test, answer: Json, expected: string, what: string): void {
  t.equal(answer.status, expected, what)
}

/** A marketplace task on the plan's bearer token alone: whether the plan still covers the scheduler. */
function marketplaceTask(token: string): Promise<Response> {
  return fetch(
    `${cli.scheduler}/api/v1/tasks`,
    post(
      { runtime: 'python', entrypoint: 'main.py', source: 'print(1)', max_runtime_sec: 10, max_sibling_calls: 0, max_amount_usdc_micros: 5_000 },
      { authorization: `Bearer ${token}`, 'idempotency-key': randomUUID() },
    ),
  )
}

/** USDC Transfer logs on the chain as it is now (a rolled-back block's logs are gone with it). */
async function transfers(args: { from?: Address; to?: Address }) {
  const logs = await chain.getLogs({ address: BASE_USDC, event: TRANSFER, args, fromBlock: 0n, toBlock: 'latest' })
  return logs.map((log) => ({ from: log.args.from as Address, to: log.args.to as Address, value: log.args.value as bigint, block: log.blockNumber as bigint }))
}

/**
 * One buyer pays for all five kinds of work, then deletes the task and withdraws the deposit:
 * neither refund may be signed yet (nothing is confirmed). Checks the HTTP answers on the way.
 */
async function buyEverything(t: Test, buyer: PrivateKeyAccount, label: string, seed: number): Promise<Scenario> {
  const pay = payingFetch(buyer)
  const token = (await json(await fetch(`${cli.gateway}/auth/register`, { method: 'POST' }))).accessToken as string
  const phrase = `${label} remembers the ${label === 'relanded' ? 'saffron lighthouse' : 'cobalt windmill'}`

  const created = await pay(
    `${cli.scheduler}/api/v1/tasks`,
    post(
      { runtime: 'python', entrypoint: 'main.py', source: 'print(1)', max_runtime_sec: 10, max_sibling_calls: 0, max_amount_usdc_micros: Number(TASK_ESCROW) },
      { 'idempotency-key': `${label}-${randomUUID()}`, 'x-pay-amount-micros': String(TASK_ESCROW) },
    ),
  )
  const task = await json(created)
  t.equal(created.status, 201, `${label}: the task is created on its paid escrow`)
  t.match(task, { rail: 'direct', balance_micros: String(TASK_ESCROW) })

  const plan = await pay(`${cli.gateway}/plans/${PLAN}/purchase`, { method: 'POST', headers: { 'svc-agent-authorization': `Bearer ${token}` } })
  t.equal(plan.status, 200, `${label}: the plan is bought`)
  t.match(await json(plan), { planId: PLAN, status: 'active' })

  // The write before the deposit: a depositor's paid write draws on its deposit instead (docs/memory.md).
  const write = await pay(`${cli.memory}/api/v1/memories`, post({ content: phrase }))
  t.equal(write.status, 201, `${label}: the per-call write is paid`)
  t.match(await json(write), { rail: 'payg', chargedMicros: String(WRITE_PRICE) })

  const deposit = await pay(`${cli.memory}/api/v1/deposits`, { method: 'POST', headers: { 'x-pay-amount-micros': String(DEPOSIT) } })
  t.equal(deposit.status, 200, `${label}: the deposit is paid`)
  t.match(await json(deposit), { depositedMicros: String(DEPOSIT), balanceMicros: String(DEPOSIT) })

  const sale = await pay(`${cli.gateway}/api/v1/audio/songs/songmodel-3-pro`, post({ prompt: `${label} house`, candidateCount: 3, seed, durationSec: 30 }))
  const song = await json(sale)
  t.equal(sale.status, 200, `${label}: the song is sold (${JSON.stringify(song).slice(0, 300)})`)
  t.match(song, { price_usdc: '0.160000', generationFailures: 1 })
  t.equal(sale.headers.get('x-refund-micros'), String(SONG_REFUND), `${label}: the undelivered candidate is owed back`)
  t.equal(sale.headers.get('x-refund-status'), 'waiting', `${label}: its refund waits for the sale's payment to be confirmed`)
  t.equal(sale.headers.get('x-refund-tx'), null, `${label}: no refund transaction yet`)

  const deleted = await ownerCall(buyer, `${cli.scheduler}/api/v1/tasks/${task.id}`, { method: 'DELETE' })
  t.equal(deleted.status, 200, `${label}: the task is deleted`)
  const closing = await json(deleted)
  t.match(closing.refund, { state: 'after_payment', amount_micros: String(TASK_ESCROW) }, `${label}: the escrow refund waits for the create's payment`)
  t.equal(closing.refund_tx_hash ?? null, null)

  const withdrawal = await ownerCall(buyer, `${cli.memory}/api/v1/deposits`, { method: 'DELETE' })
  t.equal(withdrawal.status, 200, `${label}: the deposit is withdrawn`)
  const withdrawn = await json(withdrawal)
  t.match(withdrawn, { refundedMicros: String(DEPOSIT), txHash: null }, `${label}: the withdrawal owes the whole deposit, nothing is signed`)
  withdrawalStatus(t, withdrawn, 'waiting', `${label}: the withdrawal waits for the deposit's payment`)

  t.equal(await balanceOf(cli.gateway, buyer.address), MINTED - SPENT, `${label}: every payment left the buyer, no refund came back`)
  t.same(await transfers({ from: SERVICE, to: buyer.address }), [], `${label}: no refund transfer on the chain`)
  return { buyer, token, taskId: task.id as string, phrase }
}

/** A new buyer, funded before the snapshot (the revert must not take its money), then buys everything. */
async function buyAfterSnapshot(t: Test, label: string, seed: number) {
  const buyer = privateKeyToAccount(generatePrivateKey())
  await faucet(cli.gateway, buyer.address, MINTED)
  const serviceBefore = await balanceOf(cli.gateway, SERVICE)
  const snapshot = await anvil<Hex>('evm_snapshot')
  return { serviceBefore, snapshot, bought: await buyEverything(t, buyer, label, seed) }
}

t.test('re-landed: every settlement the revert dropped is broadcast again; each buyer pays once and gets exactly its refunds', async (t) => {
  const { serviceBefore, snapshot, bought } = await buyAfterSnapshot(t, 'relanded', 100)
  scenarios.relanded = bought
  const { buyer: account, token, taskId, phrase } = bought

  t.equal(await anvil<boolean>('evm_revert', [snapshot]), true, 'the chain is rolled back under the service')
  t.equal(await balanceOf(cli.gateway, account.address), MINTED, 'the chain no longer has any of the five payments')
  t.equal(await balanceOf(cli.gateway, SERVICE), serviceBefore)

  const started = Date.now()
  await untilDecided('the re-landed settlements and their refunds')
  t.comment(`re-landed and refunded in ${Date.now() - started} ms`)

  const kept = PLAN_PRICE + WRITE_PRICE + SONG_CHARGED
  t.equal(await balanceOf(cli.gateway, account.address), MINTED - kept, 'the buyer paid the plan, the write and two songs, once; escrow and deposit came back whole')
  t.equal((await balanceOf(cli.gateway, SERVICE)) - serviceBefore, kept, 'the service wallet kept exactly that')

  // On the chain itself: each payment once, each refund once, and each refund mined only after
  // the settlement it returns was final (CONFIRMATIONS deep) again.
  const paid = await transfers({ from: account.address, to: SERVICE })
  t.same(paid.map((row) => row.value).sort(), [TASK_ESCROW, PLAN_PRICE, DEPOSIT, WRITE_PRICE, SONG_PAID].sort(), 'five payments on the chain, each once')
  const refunded = await transfers({ from: SERVICE, to: account.address })
  t.same(refunded.map((row) => row.value).sort(), [TASK_ESCROW, DEPOSIT, SONG_REFUND].sort(), 'three refunds on the chain, each once')
  for (const [refund, source] of [
    [TASK_ESCROW, TASK_ESCROW],
    [DEPOSIT, DEPOSIT],
    [SONG_REFUND, SONG_PAID],
  ] as const) {
    const out = refunded.find((row) => row.value === refund)
    const into = paid.find((row) => row.value === source)
    t.ok(out && into && out.block >= into.block + BigInt(CONFIRMATIONS), `the ${refund}-micro refund (block ${out?.block}) came after its payment (block ${into?.block}) was final`)
  }

  // What the service answers now.
  const again = await json(await ownerCall(account, `${cli.scheduler}/api/v1/tasks/${taskId}`, { method: 'DELETE' }))
  t.match(again.refund, { state: 'confirmed', amount_micros: String(TASK_ESCROW), tx_hash: /^0x[0-9a-f]{64}$/ }, 'the escrow was refunded')
  const withdrawn = await json(await ownerCall(account, `${cli.memory}/api/v1/deposits`, { method: 'DELETE' }))
  t.match(withdrawn, { refundedMicros: String(DEPOSIT), txHash: /^0x[0-9a-f]{64}$/ }, 'the withdrawal was refunded')
  withdrawalStatus(t, withdrawn, 'confirmed', 'the withdrawal is confirmed')
  const recall = await json(await ownerCall(account, `${cli.memory}/api/v1/contexts`, post({ query: phrase })))
  t.equal(recall.results?.[0]?.content, phrase, 'the paid write is still there')
  t.equal((await marketplaceTask(token)).status, 201, 'the plan still covers the scheduler')
})

t.test('dropped for good: the revert and a clock past validBefore reverse every purchase, and no refund is signed', async (t) => {
  const { serviceBefore, snapshot, bought } = await buyAfterSnapshot(t, 'dropped', 200)
  scenarios.dropped = bought
  const { buyer: account, token, taskId, phrase } = bought
  t.equal((await marketplaceTask(token)).status, 201, 'the plan covers the scheduler while its payment stands')

  // Mining is stopped across the rollback and the jump of the clock: a re-broadcast the sweep
  // may send in between waits in the pool and is mined only after validBefore, where it reverts.
  await anvil('evm_setAutomine', [false])
  t.equal(await anvil<boolean>('evm_revert', [snapshot]), true, 'the chain is rolled back under the service')
  await anvil('evm_increaseTime', [hex(3_600)])
  await anvil('anvil_mine', [hex(CONFIRMATIONS + 2)])
  await anvil('evm_setAutomine', [true])
  t.equal(await balanceOf(cli.gateway, account.address), MINTED, 'the chain no longer has any of the five payments')

  const started = Date.now()
  await untilDecided('the reversals')
  t.comment(`reversed in ${Date.now() - started} ms`)

  t.equal(await balanceOf(cli.gateway, account.address), MINTED, 'the buyer holds exactly what was minted: no money moved')
  t.equal(await balanceOf(cli.gateway, SERVICE), serviceBefore, 'nor did the service wallet gain or lose any')
  t.same(await transfers({ from: account.address }), [], 'no payment of the buyer is on the chain')
  t.same(await transfers({ from: SERVICE, to: account.address }), [], 'no refund transfer reached the buyer')
  t.same(
    (await transfers({ to: account.address })).map((row) => row.value),
    [MINTED],
    'only the mint ever reached the buyer',
  )

  const task = await ownerCall(account, `${cli.scheduler}/api/v1/tasks/${taskId}`)
  const view = await json(task)
  t.equal(task.status, 200, `the task is still readable by its owner (${JSON.stringify(view).slice(0, 300)})`)
  t.match(view, { status: 'deleted', balance_micros: '0' }, 'deleted, its escrow empty: the create was taken back')
  const again = await ownerCall(account, `${cli.scheduler}/api/v1/tasks/${taskId}`, { method: 'DELETE' })
  t.equal(again.status, 200, 'DELETE is idempotent')
  t.match((await json(again)).refund, { state: 'none' }, 'nothing is refunded for a create that was never paid')
  const withdrawn = await json(await ownerCall(account, `${cli.memory}/api/v1/deposits`, { method: 'DELETE' }))
  t.match(withdrawn, { refundedMicros: '0', txHash: null }, 'nothing is withdrawn: the deposit never reached the chain')
  withdrawalStatus(t, withdrawn, 'cancelled', 'the withdrawal was cancelled')
  const accountView = await json(await ownerCall(account, `${cli.memory}/api/v1/account`))
  t.equal(accountView.balanceMicros, '0', 'the memory account holds nothing')
  const recall = await json(await ownerCall(account, `${cli.memory}/api/v1/contexts`, post({ query: phrase })))
  t.same(recall.results ?? [], [], 'the paid write is gone')
  const covered = await marketplaceTask(token)
  t.equal(covered.status, 403, 'the plan no longer covers the scheduler')
  t.equal((await json(covered)).code, 'plan_required')
})

t.test('the database agrees: ledger stories, refund rows, and nothing signed for a dropped settlement', async (t) => {
  const { relanded, dropped } = scenarios
  if (!relanded || !dropped) return t.fail('the scenarios did not run')
  t.equal(await cli.stop('SIGTERM'), 0, 'the CLI stops cleanly')
  const db = await openDb({ kind: 'pglite', dataDir: path.join(dataDir, 'pgdata') })
  t.teardown(() => db.close())

  const story = async (payer: Address) => {
    const rows = await db.query<{
      replay_key: string
      state: string
      reference: string | null
      confirmed: boolean
      effect: string | null
      events: string[]
      refs: (string | null)[]
    }>(
      `select r.replay_key, r.state, r.reference, r.confirmed_at is not null as confirmed, r.effect,
              (select array_agg(l.event order by l.id) from payments_ledger l where l.replay_key = r.replay_key) as events,
              (select array_agg(l.reference order by l.id) from payments_ledger l where l.replay_key = r.replay_key) as refs
         from payment_reservations r where lower(r.payer) = lower($1) and r.amount_micros > 0 order by r.created_at`,
      [payer],
    )
    return rows
  }
  const first = await story(relanded.buyer.address)
  t.equal(first.length, 5, 'five payments of the re-landed buyer')
  for (const row of first) {
    t.same(row.events, ['settled', 'reorged', 'resettled'], `${row.effect}: settled, reorged, resettled`)
    t.match(row, { state: 'settled', confirmed: true }, `${row.effect}: confirmed on the chain`)
    const [settled, reorged, resettled] = row.refs
    t.ok(
      settled && reorged === settled && resettled === row.reference && resettled !== settled,
      `${row.effect}: the reorg names the lost transaction, the re-settlement the new one`,
    )
  }
  const second = await story(dropped.buyer.address)
  t.equal(second.length, 5, 'five payments of the dropped buyer')
  for (const row of second) {
    t.same(row.events, ['settled', 'reorged', 'reversed'], `${row.effect}: settled, reorged, reversed`)
    t.match(row, { state: 'reversed', confirmed: false }, `${row.effect}: reversed`)
  }

  const refunds = async (payer: Address) =>
    db.query<{ kind: string; state: string; amount_micros: bigint; signed: boolean }>(
      `select 'scheduler' as kind, state, amount_micros, (tx_hash is not null or raw_tx is not null) as signed from scheduler_refunds where task_id = $2
       union all select 'media', state, amount_micros, (tx_hash is not null or raw_tx is not null) from media_refunds where lower(to_address) = lower($1)
       union all select 'memory', state, amount_micros, (tx_hash is not null or raw_tx is not null) from memory_refunds where lower(to_address) = lower($1)
       order by 1`,
      [payer, payer === relanded.buyer.address ? relanded.taskId : dropped.taskId],
    )
  t.same(
    await refunds(relanded.buyer.address),
    [
      { kind: 'media', state: 'confirmed', amount_micros: SONG_REFUND, signed: true },
      { kind: 'memory', state: 'confirmed', amount_micros: DEPOSIT, signed: true },
      { kind: 'scheduler', state: 'confirmed', amount_micros: TASK_ESCROW, signed: true },
    ],
    're-landed: each refund confirmed, once',
  )
  const unsent = await refunds(dropped.buyer.address)
  t.ok(
    unsent.every((row) => !row.signed && row.state === 'cancelled'),
    `dropped: every refund row cancelled, none signed (${JSON.stringify(unsent, (_k, v) => (typeof v === 'bigint' ? String(v) : v))})`,
  )
  t.same(
    unsent.map((row) => row.kind),
    ['media', 'memory'],
    'dropped: the task never owed one (its escrow closed empty); the sale and the withdrawal did',
  )

  const work = async (payer: Address, taskId: string) =>
    (
      await db.query<Json>(
        `select (select status from scheduler_tasks where id = $2) as task,
                (select coalesce(sum(amount_micros), 0)::int8 from scheduler_ledger where task_id = $2 and kind <> 'audit') as escrow,
                (select array_agg(state) from scheduler_charges where task_id = $2) as charges,
                (select array_agg(p.state) from plan_purchases p join payment_reservations r on r.replay_key = p.replay_key where lower(r.payer) = lower($1)) as plans,
                (select array_agg(state) from memory_deposits where lower(owner) = lower($1)) as deposits,
                (select coalesce(sum(amount_micros), 0)::int8 from memory_ledger where lower(owner) = lower($1)) as memory_balance,
                (select count(*)::int8 from memory_records where lower(owner) = lower($1)) as records,
                (select array_agg(state) from media_sales where lower(payer) = lower($1)) as sales`,
        [payer, taskId],
      )
    )[0]
  t.match(
    await work(relanded.buyer.address, relanded.taskId),
    { task: 'deleted', escrow: 0n, charges: ['settled'], plans: ['active'], deposits: ['settled'], memory_balance: 0n, records: 1n, sales: ['settled'] },
    're-landed: the work stands, the escrow and deposit were paid out',
  )
  t.match(
    await work(dropped.buyer.address, dropped.taskId),
    { task: 'deleted', escrow: 0n, charges: ['reversed'], plans: ['cancelled'], deposits: ['reversed'], memory_balance: 0n, records: 0n, sales: ['reversed'] },
    'dropped: every piece of work was taken back',
  )
})
