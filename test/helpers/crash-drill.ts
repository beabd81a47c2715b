// The kill -9 drill of the money path, on the real CLI (`agent-gateway serve`, the embedded
// default): buyers with test USDC pay for tasks and plans concurrently through the real x402
// client, the process is SIGKILLed in the middle, restarted on the same DATA_DIR, left to
// reconcile, every task is deleted by its owner (SIGN-IN-WITH-X), every refund awaited; then each
// buyer's on-chain balance must be exactly what conservation says (minted, less the plans it holds:
// the tasks are on-demand and never run, so their escrow comes back whole), and the database must
// agree with the chain. Used by test/e2e/crash-drill.test.ts (one round) and bench/crash-drill.ts.
import { mkdtempSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { randomBytes } from 'node:crypto'
import { x402Client } from '@x402/core/client'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import { wrapFetchWithPayment } from '@x402/fetch'
import { createSIWxPayload, encodeSIWxHeader } from '@x402/extensions/sign-in-with-x'
import { generatePrivateKey, privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts'
import { openDb } from '../../src/platform/db/index.ts'
import { startCli, type CliProcess } from './cli.ts'

/** Enough that no buyer runs dry (a broke buyer's cut-off payment is decided only after its validBefore). */
const MINTED = 1_000_000_000n
const TASK_AMOUNT = 200_000
const PLAN = 'scheduler-credit-5'
const PLAN_PRICE = 5_000_000n

export interface DrillOptions {
  /** Concurrent buyers, each paying in a loop. */
  workers: number
  /** How long the load runs before the SIGKILL. */
  killAfterMs: number
  log?: (line: string) => void
}

export interface DrillResult {
  cleanStartMs: number
  restartMs: number
  /** Paid calls answered 2xx before the kill, and calls cut off by it. */
  answered: number
  cutOff: number
  deleted: number
  /** Buyers whose balance differs from conservation, and other disagreements. */
  problems: string[]
  buyers: { address: string; final: bigint; expected: bigint }[]
}

type Json = Record<string, any>

async function json(res: Response): Promise<Json> {
  return (await res.json().catch(() => ({}))) as Json
}

/** An owner call: answers the 401 SIWX challenge with a proof for this method and URL, once. */
async function owner(account: PrivateKeyAccount, url: string, init: RequestInit = {}): Promise<Response> {
  const first = await fetch(url, init)
  if (first.status !== 401) return first
  const challenge = (await json(first)).extensions?.['sign-in-with-x']
  if (!challenge) throw new Error(`401 without a SIWX challenge at ${url}`)
  const chain = challenge.supportedChains[0]
  const payload = await createSIWxPayload({ ...challenge.info, chainId: chain.chainId, type: chain.type }, account, url)
  const headers = new Headers(init.headers)
  headers.set('sign-in-with-x', encodeSIWxHeader(payload))
  return fetch(url, { ...init, headers })
}

async function eventually(what: string, probe: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 250))
  }
}

function metric(text: string, name: string): number {
  let sum = 0
  for (const line of text.split('\n')) if (line.startsWith(name) && !line.startsWith('#')) sum += Number(line.split(' ').pop())
  return sum
}

export async function crashDrill(options: DrillOptions): Promise<DrillResult> {
  const log = options.log ?? (() => {})
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'agw-drill-'))
  const problems: string[] = []
  let cli: CliProcess | undefined
  try {
    let started = performance.now()
    cli = await startCli({ dataDir, readyTimeoutMs: 90_000 })
    const cleanStartMs = performance.now() - started
    const first = cli
    const buyers = Array.from({ length: options.workers }, () => privateKeyToAccount(generatePrivateKey()))
    const tokens: string[] = []
    for (const buyer of buyers) {
      const minted = await fetch(`${first.gateway}/dev/faucet`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ address: buyer.address, amountMicros: MINTED.toString() }),
      })
      if (minted.status !== 200) throw new Error(`faucet answered ${minted.status}`)
      tokens.push((await json(await fetch(`${first.gateway}/auth/register`, { method: 'POST' }))).accessToken as string)
    }
    log(`clean start ${cleanStartMs.toFixed(0)} ms; ${buyers.length} buyers funded`)

    let stop = false
    let answered = 0
    let cutOff = 0
    const worker = async (buyer: PrivateKeyAccount, token: string) => {
      const pay = wrapFetchWithPayment(fetch, new x402Client().register('eip155:8453', new ExactEvmScheme(buyer)).setSpendControls(false))
      for (let i = 0; !stop; i += 1) {
        try {
          const res =
            i % 8 === 7
              ? await pay(`${first.gateway}/plans/${PLAN}/purchase`, { method: 'POST', headers: { 'svc-agent-authorization': `Bearer ${token}` } })
              : await pay(`${first.scheduler}/api/v1/tasks`, {
                  method: 'POST',
                  headers: { 'content-type': 'application/json', 'idempotency-key': `drill-${randomBytes(8).toString('hex')}`, 'x-pay-amount-micros': String(TASK_AMOUNT) },
                  body: JSON.stringify({
                    runtime: 'python',
                    entrypoint: 'main.py',
                    source: 'print(1)',
                    max_runtime_sec: 10,
                    max_sibling_calls: 0,
                    max_amount_usdc_micros: TASK_AMOUNT,
                  }),
                })
          if (res.ok) answered += 1
          else if (!stop) problems.push(`a paid call answered ${res.status} before the kill: ${JSON.stringify(await json(res))}`)
        } catch {
          cutOff += 1 // the process died under this call
          return
        }
      }
    }
    const load = buyers.map((buyer, i) => worker(buyer, tokens[i] as string))
    await new Promise((resolve) => setTimeout(resolve, options.killAfterMs))
    first.child.kill('SIGKILL')
    stop = true
    await first.stop() // resolves with the dead process's exit
    await Promise.all(load)
    log(`killed -9 after ${options.killAfterMs} ms: ${answered} paid calls answered, ${cutOff} cut off`)

    started = performance.now()
    cli = await startCli({ dataDir, readyTimeoutMs: 90_000 })
    const restartMs = performance.now() - started
    const second = cli
    log(`restart ${restartMs.toFixed(0)} ms`)
    const metrics = async () => (await fetch(`${second.scheduler}/metrics`)).text()
    await eventually('every payment decided', async () => metric(await metrics(), 'agent_gateway_payments_open') === 0, 60_000).catch(async (error: unknown) => {
      throw new Error(
        `${(error as Error).message}: ${(await metrics())
          .split('\n')
          .filter((line) => line.startsWith('agent_gateway_payments_open'))
          .join(', ')}\n${second.output().slice(-3000)}`,
      )
    })

    let deleted = 0
    for (const buyer of buyers) {
      const usage = await json(await owner(buyer, `${second.scheduler}/api/v1/owner/usage`))
      for (const task of (usage.tasks ?? []) as { task_id: string; status: string }[]) {
        if (task.status === 'deleted') continue
        const res = await owner(buyer, `${second.scheduler}/api/v1/tasks/${task.task_id}`, { method: 'DELETE' })
        if (res.status !== 200) problems.push(`DELETE ${task.task_id} answered ${res.status}`)
        deleted += 1
      }
    }
    await eventually('every refund confirmed', async () => metric(await metrics(), 'agent_gateway_refunds_outstanding ') === 0, 120_000)
    const finals = new Map<string, bigint>()
    for (const buyer of buyers)
      finals.set(buyer.address.toLowerCase(), BigInt((await json(await fetch(`${second.gateway}/dev/balances/${buyer.address}`))).balanceMicros as string))
    await second.stop()
    cli = undefined

    // What the database says each buyer kept: the plans their payments bought.
    const db = await openDb({ kind: 'pglite', dataDir: path.join(dataDir, 'pgdata') })
    try {
      const kept = await db.query<{ payer: string; n: bigint }>(
        `select r.payer, count(*)::int8 as n from plan_purchases p join payment_reservations r on r.replay_key = p.replay_key where p.state = 'active' group by r.payer`,
      )
      const plans = new Map(kept.map((row) => [row.payer, row.n]))
      const leftovers = await db.query<{ what: string; n: bigint }>(
        `select 'open reservation' as what, count(*)::int8 as n from payment_reservations where state in ('reserved', 'settling', 'pending')
         union all select 'provisional charge', count(*) from scheduler_charges where state = 'provisional'
         union all select 'provisional plan', count(*) from plan_purchases where state = 'provisional'
         union all select 'refund not confirmed', count(*) from scheduler_refunds where state <> 'confirmed'
         union all select 'charge without tx hash', count(*) from scheduler_ledger where kind = 'charge' and tx_hash is null
         union all select 'task not deleted', count(*) from scheduler_tasks where status <> 'deleted'`,
      )
      for (const row of leftovers) if (row.n > 0n) problems.push(`${row.n} ${row.what}`)
      const result: DrillResult = { cleanStartMs, restartMs, answered, cutOff, deleted, problems, buyers: [] }
      for (const buyer of buyers) {
        const address = buyer.address.toLowerCase()
        const expected = MINTED - (plans.get(address) ?? 0n) * PLAN_PRICE
        const final = finals.get(address) ?? -1n
        result.buyers.push({ address, final, expected })
        if (final !== expected) problems.push(`buyer ${address} holds ${final}, conservation says ${expected}`)
      }
      log(`deleted ${deleted} tasks; ${problems.length === 0 ? 'every buyer exact' : problems.join('; ')}`)
      return result
    } finally {
      await db.close()
    }
  } finally {
    await cli?.stop('SIGKILL')
    if (process.env.DRILL_KEEP === undefined) rmSync(dataDir, { recursive: true, force: true })
    else log(`kept ${dataDir}`)
  }
}
