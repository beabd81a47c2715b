// The crash drill of the money path, on the real CLI (`agent-gateway serve`, the embedded default
// with its anvil dev chain), for several rounds on ONE DATA_DIR (and, on Postgres, one database).
// Each round: new buyers with test USDC pay for tasks and plans concurrently through the real x402
// client; the service is killed in the middle, either its whole process group at once (node, anvil
// and the watchdogs: a container OOM-kill or a power loss, where anvil loses what it had not dumped
// yet) or the node process alone (anvil is stopped by its watchdog and dumps its state); it is
// restarted on the same data, left to decide every payment, every task of every buyer so far is
// deleted by its owner (SIGN-IN-WITH-X) and every refund awaited. Then every buyer's on-chain
// balance must be exactly what conservation says (minted, less the plans it holds: the tasks are
// on-demand and never run, so their escrow comes back whole), the service wallet must hold what it
// held before the first round plus the plans sold, and the database must agree with the chain.
// Used by test/e2e/crash-drill.test.ts and bench/crash-drill.ts (`npm run drill`).
import { randomBytes, randomInt } from 'node:crypto'
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { x402Client } from '@x402/core/client'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import { appendPaymentIdentifierToExtensions } from '@x402/extensions/payment-identifier'
import { wrapFetchWithPayment } from '@x402/fetch'
import { generatePrivateKey, type PrivateKeyAccount, privateKeyToAccount } from 'viem/accounts'
import { openDb } from '../../src/platform/db/index.ts'
import { openKeyValue } from '../../src/platform/kv/index.ts'
import { type CliProcess, startCli } from './cli.ts'
import { openAdmin, PG_URL, REDIS_URL, redactUrl } from './servers.ts'
import { ownerCall } from './owner-call.ts'
import { disownGroup, killGroup, ownGroup } from './process-groups.ts'
import { seededRandom } from './signals.ts'

/** Enough that no buyer runs dry (a broke buyer's cut-off payment is decided only after its validBefore). */
const MINTED = 1_000_000_000n
const TASK_AMOUNT = 200_000
const PLAN = 'scheduler-credit-5'
const PLAN_PRICE = 5_000_000n
/** anvil account #0: both the payee and the refund wallet of the embedded default. */
export const SERVICE_WALLET = '0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266'
/** Generous: a refund owed by an overdrawn wallet never confirms, and that must fail, not hang. */
const REFUNDS_DEADLINE_MS = 180_000
const DECIDED_DEADLINE_MS = 180_000

export type KillKind = 'group' | 'service'

export interface DrillOptions {
  rounds: number
  /** Concurrent buyers per round (new ones each round), each paying in a loop. */
  workers: number
  /** How long the load runs before the kill; varied by up to ±15 % per round from `seed`. */
  killAfterMs: number
  /** Kill of each round, cycled: 'group' SIGKILLs node, anvil and the watchdogs at once, 'service' node alone. */
  kill: KillKind[]
  database: 'pglite' | 'postgres'
  /** Replays a run's kill times; random when unset (and printed either way). */
  seed?: number
  /** End the drill after a round whose payments or refunds never settled (later rounds would wait for them again). */
  stopWhenStuck?: boolean
  log?: (line: string) => void
}

export interface RoundResult {
  round: number
  kill: KillKind
  killAfterMs: number
  /** Start of the round's first CLI (fresh data in round 1, after a graceful stop later). */
  startMs: number
  restartMs: number
  /** Paid calls answered 2xx before the kill, and calls cut off by it. */
  answered: number
  cutOff: number
  deleted: number
  refundsWaitMs: number
  /** Settlements the chain had dropped (so far, all rounds): re-landed, and reversed for good. */
  relanded: number
  reversed: number
  problems: string[]
}

export interface DrillResult {
  seed: number
  rounds: RoundResult[]
  /** Every buyer of every round, as checked after the last round. */
  buyers: { address: string; round: number; final: bigint; expected: bigint }[]
  wallet: { address: string; final: bigint; expected: bigint }
  /** All rounds' problems, each prefixed with its round. */
  problems: string[]
}

type Json = Record<string, any>

interface Buyer {
  account: PrivateKeyAccount
  token: string
  round: number
  label: string
  /** Plan purchases answered 2xx (its own, or the retry of one the kill cut off). */
  purchases: number
  /** The payment-identifier of the purchase the kill cut off, retried after the restart. */
  cutPurchase?: string
}

/** The drills' paid task: on demand (never runs), so its whole escrow comes back when it is deleted. */
export function drillTask(amountMicros: number): Record<string, unknown> {
  return { runtime: 'python', entrypoint: 'main.py', source: 'print(1)', max_runtime_sec: 10, max_sibling_calls: 0, max_amount_usdc_micros: amountMicros }
}

/** @x402/fetch whose payments carry the x402 payment-identifier `id` (as the extension's client helper attaches it). */
function payingWithId(buyer: Buyer, id: string): typeof fetch {
  const client = new x402Client().register('eip155:8453', new ExactEvmScheme(buyer.account)).setSpendControls(false)
  client.onBeforePaymentCreation(async ({ paymentRequired }) => {
    if (paymentRequired.extensions) appendPaymentIdentifierToExtensions(paymentRequired.extensions, id)
  })
  return wrapFetchWithPayment(fetch, client)
}

const purchase = (pay: typeof fetch, gateway: string, buyer: Buyer) =>
  pay(`${gateway}/plans/${PLAN}/purchase`, { method: 'POST', headers: { 'svc-agent-authorization': `Bearer ${buyer.token}` } })

async function json(res: Response): Promise<Json> {
  return (await res.json().catch(() => ({}))) as Json
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** True when `promise` settles within `ms`; continues in the same tick as it. */
async function within(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), ms)
  })
  try {
    return await Promise.race([promise.then(() => true as const), late])
  } finally {
    clearTimeout(timer)
  }
}

/** Sum of the series of `name` (not of `name_something`) whose labels `only` accepts; NaN when there is none. */
export function metricSum(text: string, name: string, only: (labels: string) => boolean = () => true): number {
  let sum = Number.NaN
  for (const line of text.split('\n')) {
    if (line.startsWith('#') || line.split(/[{ ]/, 1)[0] !== name) continue
    const labels = line.startsWith(`${name}{`) ? line.slice(name.length, line.lastIndexOf('}') + 1) : ''
    if (!only(labels)) continue
    sum = (Number.isNaN(sum) ? 0 : sum) + Number(line.slice(line.lastIndexOf(' ') + 1))
  }
  return sum
}

async function scrape(cli: CliProcess, timeoutMs = 10_000): Promise<string> {
  const res = await fetch(`${cli.scheduler}/metrics`, { signal: AbortSignal.timeout(timeoutMs) }).catch(() => undefined)
  return res?.ok ? await res.text().catch(() => '') : ''
}

/** The last ~`chars` of a CLI's output, from a line start. */
function tail(output: string, chars: number): string {
  if (output.length <= chars) return output
  const cut = output.slice(-chars)
  return cut.slice(cut.indexOf('\n') + 1)
}

/** The money metrics of a scrape, on one line. */
function moneyMetrics(text: string): string {
  return (
    text
      .split('\n')
      .filter((line) => /^agent_gateway_(payments_open|refund)/.test(line))
      .join(', ') || 'no metrics'
  )
}

function usdc(micros: bigint): string {
  const sign = micros < 0n ? '-' : ''
  const abs = micros < 0n ? -micros : micros
  return `${sign}${abs / 1_000_000n}.${(abs % 1_000_000n).toString().padStart(6, '0')} USDC`
}

/** Live (non-zombie) processes of a process group, as `pid name`. */
function groupMembers(pgid: number): string[] {
  let entries: string[]
  try {
    entries = readdirSync('/proc')
  } catch {
    // No /proc: only whether the group still exists can be told.
    try {
      process.kill(-pgid, 0)
      return [`(process group ${pgid})`]
    } catch {
      return []
    }
  }
  const members: string[] = []
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue
    let stat: string
    try {
      stat = readFileSync(`/proc/${entry}/stat`, 'utf8')
    } catch {
      continue
    }
    const close = stat.lastIndexOf(')')
    const [state, , pgrp] = stat.slice(close + 2).split(' ')
    if (Number(pgrp) === pgid && state !== 'Z') members.push(`${entry} ${stat.slice(stat.indexOf('(') + 1, close)}`)
  }
  return members
}

async function groupGone(pgid: number, timeoutMs: number): Promise<string[]> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const members = groupMembers(pgid)
    if (members.length === 0 || Date.now() > deadline) return members
    await sleep(50)
  }
}

/** Why the Postgres drill cannot run here (Postgres or Redis unreachable), or undefined. */
export async function postgresUnreachable(): Promise<string | undefined> {
  try {
    await (await openAdmin()).close()
  } catch (err) {
    return `Postgres unreachable at ${redactUrl(PG_URL)} (${(err as Error).message || String(err)}); set TEST_DATABASE_URL`
  }
  try {
    await (await openKeyValue({ kind: 'redis', url: REDIS_URL })).close()
  } catch (err) {
    return `Redis unreachable at ${redactUrl(REDIS_URL)} (${(err as Error).message || String(err)}); set TEST_REDIS_URL`
  }
  return undefined
}

async function throwawayPostgres(): Promise<{ name: string; url: string; done(keep: boolean): Promise<void> }> {
  const admin = await openAdmin()
  const name = `ag_drill_${randomBytes(6).toString('hex')}`
  await admin.exec(`create database ${name}`)
  const url = new URL(PG_URL)
  url.pathname = `/${name}`
  return {
    name,
    url: url.toString(),
    async done(keep) {
      try {
        if (!keep) await admin.exec(`drop database if exists ${name} with (force)`)
      } finally {
        await admin.close()
      }
    },
  }
}

/** The concurrent paid load of one round: x402 task creates, every 8th call a plan purchase. */
function startLoad(cli: CliProcess, buyers: Buyer[], problems: string[]) {
  let stop = false
  let answered = 0
  let cutOff = 0
  let onAnswer: (() => void)[] = []
  // The first buyer only buys plans, so a purchase carrying a payment-identifier is in flight at every kill.
  const worker = async (buyer: Buyer, index: number) => {
    const pay = wrapFetchWithPayment(fetch, new x402Client().register('eip155:8453', new ExactEvmScheme(buyer.account)).setSpendControls(false))
    for (let i = 0; !stop; i += 1) {
      // Plan purchases carry a payment-identifier: the one the kill cuts off is retried after the restart.
      const purchaseId = index === 0 || i % 8 === 7 ? `pay_drill_${randomBytes(12).toString('hex')}` : undefined
      try {
        const res =
          purchaseId !== undefined
            ? await purchase(payingWithId(buyer, purchaseId), cli.gateway, buyer)
            : await pay(`${cli.scheduler}/api/v1/tasks`, {
                method: 'POST',
                headers: { 'content-type': 'application/json', 'idempotency-key': `drill-${randomBytes(8).toString('hex')}`, 'x-pay-amount-micros': String(TASK_AMOUNT) },
                body: JSON.stringify(drillTask(TASK_AMOUNT)),
              })
        if (res.ok) {
          if (purchaseId !== undefined) buyer.purchases += 1
          answered += 1
          for (const resolve of onAnswer) resolve()
          onAnswer = []
        } else if (!stop) problems.push(`a paid call answered ${res.status} before the kill: ${JSON.stringify(await json(res))}`)
      } catch {
        cutOff += 1 // the process died under this call
        if (purchaseId !== undefined) buyer.cutPurchase = purchaseId
        return
      }
    }
  }
  const workers = buyers.map((buyer, index) => worker(buyer, index))
  return {
    answered: () => answered,
    /** Resolves when the next paid call is answered, in the same tick. */
    nextAnswer: () => new Promise<void>((resolve) => onAnswer.push(resolve)),
    /** After the kill: waits for every worker to notice. */
    async end() {
      stop = true
      await Promise.all(workers)
      return { answered, cutOff }
    },
  }
}

export async function crashDrill(options: DrillOptions): Promise<DrillResult> {
  if (options.kill.length === 0) throw new Error('crashDrill: kill needs at least one kind')
  const log = options.log ?? (() => {})
  const seed = options.seed ?? randomInt(2 ** 31)
  const random = seededRandom(seed)
  log(`seed ${seed} (SEED=${seed} replays the kill times); ${options.database}, ${options.rounds} rounds of ${options.workers} new buyers, kills ${options.kill.join(',')}`)
  const keep = process.env.DRILL_KEEP !== undefined
  const database = options.database === 'postgres' ? await throwawayPostgres() : undefined
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'agw-drill-'))
  const env: Record<string, string> = database ? { DATABASE_URL: database.url, REDIS_URL } : {}
  if (database) log(`throw-away database ${database.name}, Redis ${redactUrl(REDIS_URL)}`)
  const buyers: Buyer[] = []
  const result: DrillResult = { seed, rounds: [], buyers: [], wallet: { address: SERVICE_WALLET.toLowerCase(), final: -1n, expected: -1n }, problems: [] }
  let cli: CliProcess | undefined
  const start = async (): Promise<[CliProcess, number]> => {
    const started = performance.now()
    cli = await startCli({ dataDir, env, detached: true, readyTimeoutMs: 90_000 })
    ownGroup(cli.child.pid as number)
    return [cli, performance.now() - started]
  }
  const balanceOf = async (at: CliProcess, address: string): Promise<bigint> => {
    const res = await fetch(`${at.gateway}/dev/balances/${address}`)
    if (res.status !== 200) throw new Error(`GET /dev/balances/${address} answered ${res.status}`)
    return BigInt((await json(res)).balanceMicros as string)
  }
  let walletBase: bigint | undefined
  try {
    for (let round = 1; round <= options.rounds; round += 1) {
      const kind = options.kill[(round - 1) % options.kill.length] as KillKind
      const killAfterMs = Math.round(options.killAfterMs * (0.85 + 0.3 * random()))
      const say = (line: string) => log(`round ${round}: ${line}`)
      const problems: string[] = []

      const [first, startMs] = await start()
      const pgid = first.child.pid as number
      for (let i = 1; i <= options.workers; i += 1) {
        const account = privateKeyToAccount(generatePrivateKey())
        const minted = await fetch(`${first.gateway}/dev/faucet`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ address: account.address, amountMicros: MINTED.toString() }),
        })
        if (minted.status !== 200) throw new Error(`faucet answered ${minted.status}`)
        const token = (await json(await fetch(`${first.gateway}/auth/register`, { method: 'POST' }))).accessToken as string
        buyers.push({ account, token, round, label: `round ${round} buyer ${i} ${account.address.toLowerCase()}`, purchases: 0 })
      }
      walletBase ??= await balanceOf(first, SERVICE_WALLET)
      say(`start ${startMs.toFixed(0)} ms; ${options.workers} new buyers funded (${buyers.length} in all)`)

      // The kill must land while settlements are being recorded: at the first answer after
      // killAfterMs, whose settlement was mined within the last moment (anvil dumps its state once a
      // second), with the other buyers' calls in flight.
      const load = startLoad(
        first,
        buyers.filter((buyer) => buyer.round === round),
        problems,
      )
      const loadStarted = performance.now()
      await sleep(killAfterMs)
      // Otherwise a group kill would be a service kill in disguise.
      const members = groupMembers(pgid)
      if (!members.some((member) => member.endsWith(' anvil'))) problems.push(`no anvil in the CLI's process group (${members.join(', ')})`)
      const before = await scrape(first, 1_000)
      const answeredBefore = load.answered()
      if (!(await within(load.nextAnswer(), 30_000))) {
        problems.push(`no paid call answered in the 30 s after killAfterMs (${answeredBefore} before): the kill did not land under load`)
      }
      const killedAt = performance.now() - loadStarted
      if (kind === 'group') process.kill(-pgid, 'SIGKILL')
      else process.kill(pgid, 'SIGKILL')
      await first.stop() // resolves with the dead process's exit
      const { answered, cutOff } = await load.end()
      say(
        `${kind} kill -9 at ${killedAt.toFixed(0)} ms of load (killAfterMs ${killAfterMs}): ${answered} paid calls answered, ${cutOff} cut off; just before: ${moneyMetrics(before)}`,
      )
      if (kind === 'group') {
        const left = await groupGone(pgid, 5_000)
        if (left.length > 0) {
          problems.push(`still running after the group kill: ${left.join(', ')}`)
          killGroup(pgid)
        }
      }

      const [second, restartMs] = await start()
      say(`restart ${restartMs.toFixed(0)} ms`)
      if (kind === 'service') {
        // The watchdog stops the old anvil after its dump; the restart waited for it.
        const left = await groupGone(pgid, 10_000)
        if (left.length > 0) problems.push(`left behind by the killed service: ${left.join(', ')}`)
      }
      disownGroup(pgid)

      // The purchases the kill cut off, retried with their payment-identifier and a new payment, as a
      // client that lost its answer does: answered (the first answer, or a new purchase if the first
      // bought nothing), never charged twice; 409 payment_in_progress only while the dead request's
      // payment is decided.
      const retried = buyers.filter((buyer) => buyer.round === round && buyer.cutPurchase !== undefined)
      const retryDeadline = Date.now() + DECIDED_DEADLINE_MS
      for (const buyer of retried) {
        for (;;) {
          const res = await purchase(payingWithId(buyer, buyer.cutPurchase as string), second.gateway, buyer)
          const body = await json(res)
          if (res.ok) buyer.purchases += 1
          // Paid, but the first request died before it had an answer to keep: bought, not replayable.
          else if (res.status === 409 && body.code === 'payment_identifier_conflict') buyer.purchases += 1
          else if (res.status === 409 && body.code === 'payment_in_progress' && Date.now() < retryDeadline) {
            await sleep(Number(res.headers.get('retry-after') ?? 2) * 1000)
            continue
          } else problems.push(`${buyer.label}: the retried purchase ${buyer.cutPurchase} answered ${res.status}: ${JSON.stringify(body)}`)
          break
        }
      }
      if (retried.length > 0) say(`${retried.length} purchases cut off by the kill retried with their payment-identifier`)

      // Undefined once `name` sums to 0, else what to report: the money metrics and the CLI's last words.
      const untilZero = async (what: string, name: string, timeoutMs: number, only?: (labels: string) => boolean): Promise<string | undefined> => {
        const deadline = Date.now() + timeoutMs
        for (;;) {
          const text = await scrape(second)
          if (metricSum(text, name, only) === 0) return undefined
          if (Date.now() > deadline) {
            return `timed out after ${timeoutMs / 1000} s waiting for ${what} (${name} = 0): ${moneyMetrics(text)}\n--- CLI output (tail) ---\n${tail(second.output(), 3000)}`
          }
          await sleep(250)
        }
      }

      // On Postgres a 'reserved' row of the dead process is released only after the 10-minute window
      // that protects other replicas' requests (PGlite releases them at start). Nothing was bound or
      // broadcast for it, so it cannot move money: waited for on PGlite only, counted apart on Postgres.
      const countReserved = database === undefined
      const decidedStarted = performance.now()
      let stuck = await untilZero('every payment decided', 'agent_gateway_payments_open', DECIDED_DEADLINE_MS, (labels) => countReserved || !labels.includes('"reserved"'))
      if (stuck) problems.push(stuck)
      else say(`every payment decided in ${((performance.now() - decidedStarted) / 1000).toFixed(1)} s: ${moneyMetrics(await scrape(second))}`)
      let deleted = 0
      for (const buyer of buyers) {
        const usage = await ownerCall(buyer.account, `${second.scheduler}/api/v1/owner/usage`)
        if (usage.status !== 200) {
          problems.push(`${buyer.label}: GET /api/v1/owner/usage answered ${usage.status}`)
          continue
        }
        for (const task of ((await json(usage)).tasks ?? []) as { task_id: string; status: string }[]) {
          if (task.status === 'deleted') continue
          const res = await ownerCall(buyer.account, `${second.scheduler}/api/v1/tasks/${task.task_id}`, { method: 'DELETE' })
          if (res.status !== 200) problems.push(`${buyer.label}: DELETE ${task.task_id} answered ${res.status}`)
          deleted += 1
        }
      }
      const refundsStarted = performance.now()
      const refunds = await untilZero('every refund confirmed', 'agent_gateway_refunds_outstanding', REFUNDS_DEADLINE_MS)
      const refundsWaitMs = performance.now() - refundsStarted
      if (refunds) problems.push(refunds)
      stuck ??= refunds

      // Balances from the chain while the service (and its anvil) runs; then the database, closed.
      const finals = new Map<string, bigint>()
      for (const buyer of buyers) finals.set(buyer.account.address.toLowerCase(), await balanceOf(second, buyer.account.address))
      const walletFinal = await balanceOf(second, SERVICE_WALLET)
      const overdrawn = second.output().split('transfer amount exceeds balance').length - 1
      if (overdrawn > 0) problems.push(`the refund wallet was overdrawn: 'transfer amount exceeds balance' ${overdrawn} times in the CLI output`)
      const code = await second.stop()
      if (code !== 0) problems.push(`graceful stop (SIGTERM) exited with ${code}:\n${tail(second.output(), 2000)}`)
      disownGroup(second.child.pid as number)
      cli = undefined

      const db = database ? await openDb({ kind: 'postgres', url: database.url, poolMax: 1 }) : await openDb({ kind: 'pglite', dataDir: path.join(dataDir, 'pgdata') })
      let plans: Map<string, bigint>
      let relanded = 0
      let reversed = 0
      try {
        // What the chain-truth sweep did: the ledger's reorg events.
        const events = await db.query<{ event: string; n: bigint }>(
          `select event, count(*)::int8 as n from payments_ledger where event in ('resettled', 'reversed') group by event`,
        )
        for (const row of events) {
          if (row.event === 'resettled') relanded = Number(row.n)
          else reversed = Number(row.n)
        }
        // What the database says each buyer kept: the plans their payments bought.
        const kept = await db.query<{ payer: string; n: bigint }>(
          `select r.payer, count(*)::int8 as n from plan_purchases p join payment_reservations r on r.replay_key = p.replay_key where p.state = 'active' group by r.payer`,
        )
        plans = new Map(kept.map((row) => [row.payer.toLowerCase(), BigInt(row.n)]))
        const leftovers = await db.query<{ what: string; n: bigint }>(
          `select 'open reservation' as what, count(*)::int8 as n from payment_reservations where state in ('settling', 'pending') or (state = 'reserved' and $1)
           union all select 'orphaned reservation (released after the stale window)', count(*) from payment_reservations where state = 'reserved' and not $1
           union all select 'provisional charge', count(*) from scheduler_charges where state = 'provisional'
           union all select 'provisional plan', count(*) from plan_purchases where state = 'provisional'
           union all select 'refund not confirmed', count(*) from scheduler_refunds where state <> 'confirmed'
           union all select 'charge without tx hash', count(*) from scheduler_ledger where kind = 'charge' and tx_hash is null
           union all select 'task not deleted', count(*) from scheduler_tasks where status <> 'deleted'`,
          [countReserved],
        )
        for (const row of leftovers) {
          if (BigInt(row.n) === 0n) continue
          if (row.what.startsWith('orphaned')) say(`${row.n} ${row.what}`)
          else problems.push(`${row.n} ${row.what}`)
        }
      } finally {
        await db.close()
      }

      result.buyers = []
      let soldPlans = 0n
      for (const buyer of buyers) {
        const address = buyer.account.address.toLowerCase()
        const held = plans.get(address) ?? 0n
        soldPlans += held
        // One plan per answered purchase at most (a chain that drops a payment for good takes one back).
        if (held > BigInt(buyer.purchases)) problems.push(`${buyer.label} holds ${held} plans for ${buyer.purchases} purchases: a purchase was charged twice`)
        const expected = MINTED - held * PLAN_PRICE
        const final = finals.get(address) ?? -1n
        result.buyers.push({ address, round: buyer.round, final, expected })
        if (final !== expected) {
          problems.push(`${buyer.label} holds ${usdc(final)}, conservation says ${usdc(expected)} (${held} plans): ${final > expected ? '+' : ''}${usdc(final - expected)}`)
        }
      }
      const walletExpected = (walletBase as bigint) + soldPlans * PLAN_PRICE
      result.wallet = { address: SERVICE_WALLET.toLowerCase(), final: walletFinal, expected: walletExpected }
      if (walletFinal !== walletExpected) {
        problems.push(
          `service wallet ${SERVICE_WALLET} holds ${usdc(walletFinal)}, expected ${usdc(walletExpected)} (before round 1 + ${soldPlans} plans): ${walletFinal > walletExpected ? '+' : ''}${usdc(walletFinal - walletExpected)}`,
        )
      }

      result.rounds.push({ round, kill: kind, killAfterMs, startMs, restartMs, answered, cutOff, deleted, refundsWaitMs, relanded, reversed, problems })
      result.problems.push(...problems.map((problem) => `round ${round}: ${problem}`))
      say(
        `${problems.length === 0 ? 'EXACT' : 'WRONG'} (${kind} kill, killAfterMs ${killAfterMs}): ${answered} answered, ${cutOff} cut off, ${deleted} deleted; ` +
          `start ${(startMs / 1000).toFixed(1)} s, restart ${(restartMs / 1000).toFixed(1)} s, refunds ${(refundsWaitMs / 1000).toFixed(1)} s; ` +
          `settlements the chain dropped so far: ${relanded} re-landed, ${reversed} reversed; ${buyers.length} buyers checked`,
      )
      for (const problem of problems) say(`  ${problem}`)
      if (stuck && options.stopWhenStuck && round < options.rounds) {
        result.problems.push(
          `round ${round}: stopped the drill here, ${round + 1 === options.rounds ? `round ${options.rounds}` : `rounds ${round + 1}–${options.rounds}`} not run`,
        )
        say('stopped: a wait timed out')
        break
      }
    }
    return result
  } finally {
    if (cli) {
      const pgid = cli.child.pid as number
      killGroup(pgid)
      await cli.stop('SIGKILL')
      disownGroup(pgid)
    }
    if (keep) log(`kept ${dataDir}${database ? ` and database ${database.name}` : ''}`)
    else rmSync(dataDir, { recursive: true, force: true })
    await database?.done(keep)
  }
}
