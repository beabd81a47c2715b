// The topology drill's load: real clients through the fronts. Task buyers (@x402/fetch, x402 v2
// exact on the dev chain) create paid on-demand tasks and delete some of them as their owner
// (SIGN-IN-WITH-X), and buy plans with a payment-identifier (a purchase cut off or answered 409
// payment_in_progress is retried with the same id once the load has stopped); memory buyers deposit
// over x402, write on their deposit (SIGN-IN-WITH-X) and recall. The x402 v1, MCP and song buyers
// are in topology-buyers.ts. Every answer is recorded with its time, so that the invariants can put
// each 5xx and each cut-off call in the fault window it fell in (or in none).
import { randomBytes } from 'node:crypto'
import { createSIWxPayload, encodeSIWxHeader } from '@x402/extensions/sign-in-with-x'
import { generatePrivateKey, type PrivateKeyAccount, privateKeyToAccount } from 'viem/accounts'
import { drillTask } from './crash-drill.ts'
import { ownerCall } from './owner-call.ts'
import type { Topology } from './topology.ts'
import { connectMcp, mcpWorker, songWorker, v1Worker, type WorkerContext } from './topology-buyers.ts'
import { type Buyer, type BuyerKind, type CallRecord, DEPOSIT, type Json, MINTED, payer, purchase, record, sleep, TASK_AMOUNT, timeout } from './topology-calls.ts'
import { useSongUpstream } from './topology-songs.ts'

export { type Buyer, type BuyerKind, type CallRecord, DEPOSIT, MINTED, PLAN, PLAN_PRICE, payer, purchase, record, SONG_PRICE, TASK_AMOUNT } from './topology-calls.ts'

export interface Load {
  buyers: Buyer[]
  calls: CallRecord[]
  /** Stops the workers (each finishes its call in flight). */
  stop(): Promise<void>
}

/** Buyers of the kinds beyond the task and memory ones (topology-buyers.ts). */
export interface MoreBuyers {
  v1?: number
  mcp?: number
  songs?: number
  /** Put the media role on the drill's song upstream (a restart) when it is not; default true. */
  songUpstream?: boolean
}

/** DRILL_V1_BUYERS, DRILL_MCP_BUYERS, DRILL_SONG_BUYERS: 1 each unless set. */
export function moreBuyersFromEnv(env: NodeJS.ProcessEnv = process.env): { v1: number; mcp: number; songs: number } {
  const count = (name: string) => {
    const value = Number(env[name] ?? 1)
    if (!Number.isInteger(value) || value < 0) throw new Error(`${name} must be a non-negative integer, not ${env[name]}`)
    return value
  }
  return { v1: count('DRILL_V1_BUYERS'), mcp: count('DRILL_MCP_BUYERS'), songs: count('DRILL_SONG_BUYERS') }
}

const MORE_KINDS: readonly BuyerKind[] = ['v1', 'mcp', 'songs']

async function json(res: Response): Promise<Json> {
  return (await res.json().catch(() => ({}))) as Json
}

async function register(topology: Topology): Promise<string> {
  const res = await fetch(`${topology.urls.gateway}/auth/register`, { method: 'POST', signal: timeout() })
  if (!res.ok) throw new Error(`POST /auth/register answered ${res.status}`)
  return (await json(res)).accessToken as string
}

/**
 * Funds `tasks` task buyers, `memory` memory buyers and `more` of the other kinds on the chain (the
 * faucet mint); registers plan bearers, connects the MCP clients, and with song buyers puts the
 * media role on the drill's song upstream (topology-songs.ts).
 */
export async function fundBuyers(topology: Topology, tasks: number, memory: number, more: MoreBuyers = {}): Promise<Buyer[]> {
  const kinds: BuyerKind[] = [
    ...Array<BuyerKind>(tasks).fill('tasks'),
    ...Array<BuyerKind>(memory).fill('memory'),
    ...Array<BuyerKind>(more.v1 ?? 0).fill('v1'),
    ...Array<BuyerKind>(more.mcp ?? 0).fill('mcp'),
    ...Array<BuyerKind>(more.songs ?? 0).fill('songs'),
  ]
  if ((more.songs ?? 0) > 0 && more.songUpstream !== false) await useSongUpstream(topology, (line) => console.log(line))
  const buyers: Buyer[] = []
  for (const [i, kind] of kinds.entries()) {
    const account = privateKeyToAccount(generatePrivateKey())
    await topology.chain().mint(account.address, MINTED)
    const token = kind === 'tasks' || kind === 'v1' || kind === 'mcp' ? await register(topology) : ''
    const buyer: Buyer = { account, kind, label: `${kind} buyer ${i + 1} ${account.address.toLowerCase()}`, token, purchases: 0, unanswered: [], tasks: [] }
    if (kind === 'mcp') await connectMcp(topology, buyer)
    buyers.push(buyer)
  }
  return buyers
}

/** A write paid from the deposit: the 402's SIWX challenge answered with a proof for this request. */
async function rememberOnDeposit(account: PrivateKeyAccount, url: string, body: Json): Promise<Response> {
  const init = { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal: timeout() }
  const first = await fetch(url, init)
  if (first.status !== 402) return first
  const challenge = (await json(first)).extensions?.['sign-in-with-x']
  if (!challenge) return first
  const chain = challenge.supportedChains[0]
  const proof = encodeSIWxHeader(await createSIWxPayload({ ...challenge.info, chainId: chain.chainId, type: chain.type }, account, url))
  return fetch(url, { ...init, headers: { ...init.headers, 'sign-in-with-x': proof } })
}

export function startLoad(topology: Topology, buyers: Buyer[], options: { paceMs: number; maxCalls: number; random: () => number }): Load {
  const calls: CallRecord[] = []
  let stopping = false
  const { scheduler, memory } = topology.urls
  const taskWorker = async (buyer: Buyer) => {
    const pay = payer(buyer.account)
    while (!stopping && calls.length < options.maxCalls) {
      const dice = options.random()
      if (dice < 0.25) {
        // A plan purchase carries a payment-identifier; unanswered ones are retried after the load.
        const id = `pay_topo_${randomBytes(12).toString('hex')}`
        const { res, body } = await record(calls, 'plan.purchase', buyer, () => purchase(topology, buyer, id))
        if (res?.ok) buyer.purchases += 1
        else if (!res || res.status >= 500 || (res.status === 409 && body.code === 'payment_in_progress')) buyer.unanswered.push(id)
      } else if (dice < 0.45 && buyer.tasks.length > 0) {
        const task = buyer.tasks.shift() as string
        const { res } = await record(calls, 'task.delete', buyer, () => ownerCall(buyer.account, `${scheduler}/api/v1/tasks/${task}`, { method: 'DELETE', signal: timeout() }))
        if (!res?.ok && res?.status !== 404) buyer.tasks.push(task) // deleted at the end otherwise
      } else {
        const { res, body } = await record(calls, 'task.create', buyer, () =>
          pay(`${scheduler}/api/v1/tasks`, {
            method: 'POST',
            headers: { 'content-type': 'application/json', 'idempotency-key': `topo-${randomBytes(8).toString('hex')}`, 'x-pay-amount-micros': String(TASK_AMOUNT) },
            body: JSON.stringify(drillTask(TASK_AMOUNT)),
            signal: timeout(),
          }),
        )
        const id = body.task_id ?? body.id
        if (res?.ok && typeof id === 'string') buyer.tasks.push(id)
      }
      await sleep(options.paceMs)
    }
  }
  const memoryWorker = async (buyer: Buyer) => {
    const pay = payer(buyer.account)
    let deposited = false
    for (let i = 0; !stopping && calls.length < options.maxCalls; i += 1) {
      if (!deposited) {
        const { res } = await record(calls, 'memory.deposit', buyer, () =>
          pay(`${memory}/api/v1/deposits`, { method: 'POST', headers: { 'x-pay-amount-micros': String(DEPOSIT) }, signal: timeout() }),
        )
        // A cut-off deposit may have landed: the account says what was deposited, at the end.
        deposited = res?.ok === true
      } else if (options.random() < 0.7) {
        await record(calls, 'memory.remember', buyer, () =>
          rememberOnDeposit(buyer.account, `${memory}/api/v1/memories`, { content: `drill note ${i} ${randomBytes(6).toString('hex')} about topology`, tags: ['drill'] }),
        )
      } else {
        await record(calls, 'memory.recall', buyer, () =>
          ownerCall(buyer.account, `${memory}/api/v1/contexts`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ query: 'note about topology', limit: 3 }),
            signal: timeout(),
          }),
        )
      }
      await sleep(options.paceMs)
    }
  }
  const ctx: WorkerContext = { topology, calls, random: options.random, paceMs: options.paceMs, maxCalls: options.maxCalls, stopping: () => stopping }
  const songEveryMs = Number(process.env.DRILL_SONG_EVERY_S ?? 20) * 1000
  const run = (buyer: Buyer): Promise<void> => {
    if (buyer.kind === 'tasks') return taskWorker(buyer)
    if (buyer.kind === 'memory') return memoryWorker(buyer)
    if (buyer.kind === 'v1') return v1Worker(ctx, buyer)
    if (buyer.kind === 'mcp') return mcpWorker(ctx, buyer)
    return songWorker(ctx, buyer, songEveryMs)
  }
  const workers = buyers.map(run)
  // A caller that funded only task and memory buyers gets the other kinds too (moreBuyersFromEnv),
  // funded here and added to `buyers`, which the quiescence and the checks read after the load.
  if (!buyers.some((buyer) => MORE_KINDS.includes(buyer.kind))) {
    const more = moreBuyersFromEnv()
    // The media role is not restarted under the load: songs come from whatever generates them.
    workers.push(
      fundBuyers(topology, 0, 0, { ...more, songUpstream: false }).then(async (added) => {
        buyers.push(...added)
        await Promise.all(added.map(run))
      }),
    )
  }
  return {
    buyers,
    calls,
    async stop() {
      stopping = true
      await Promise.all(workers)
    },
  }
}
