// The topology drill's load: real clients through the fronts. Task buyers (@x402/fetch, x402 v2
// exact on the dev chain) create paid on-demand tasks and delete some of them as their owner
// (SIGN-IN-WITH-X), and buy plans with a payment-identifier (a purchase cut off or answered 409
// payment_in_progress is retried with the same id once the load has stopped); memory buyers deposit
// over x402, write on their deposit (SIGN-IN-WITH-X) and recall. Every answer is recorded with its
// time, so that the invariants can put each 5xx and each cut-off call in the fault window it fell
// in (or in none).
import { randomBytes } from 'node:crypto'
import { x402Client } from '@x402/core/client'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import { appendPaymentIdentifierToExtensions } from '@x402/extensions/payment-identifier'
import { createSIWxPayload, encodeSIWxHeader } from '@x402/extensions/sign-in-with-x'
import { wrapFetchWithPayment } from '@x402/fetch'
import { generatePrivateKey, type PrivateKeyAccount, privateKeyToAccount } from 'viem/accounts'
import { drillTask } from './crash-drill.ts'
import { ownerCall } from './owner-call.ts'
import type { Topology } from './topology.ts'

export const MINTED = 1_000_000_000n
export const TASK_AMOUNT = 200_000
export const PLAN = 'scheduler-credit-5'
export const PLAN_PRICE = 5_000_000n
export const DEPOSIT = 1_000_000n

type Json = Record<string, any>

export interface Buyer {
  account: PrivateKeyAccount
  kind: 'tasks' | 'memory'
  label: string
  token: string
  /** Plan purchases answered 2xx (or 409 payment_identifier_conflict on a retry: bought, not replayable). */
  purchases: number
  /** Payment-identifiers of purchases cut off (or still in progress) during the load: retried after it. */
  unanswered: string[]
  /** Tasks this buyer created (answered), to be deleted at the end. */
  tasks: string[]
}

/** One client call and what came of it. */
export interface CallRecord {
  op: string
  /** Date.now() when the answer (or the cut) arrived, and when the call began. */
  at: number
  began: number
  /** HTTP status, or 0 for a call cut off (the connection reset, no answer). */
  status: number
  /** 5xx only: a problem+json body, and a Retry-After header. */
  problem?: boolean
  retryAfter?: boolean
  code?: string
  buyer: string
}

export interface Load {
  buyers: Buyer[]
  calls: CallRecord[]
  /** Stops the workers (each finishes its call in flight). */
  stop(): Promise<void>
}

/** No call of the load waits longer for its answer (a hung replica must not hang the drill). */
const CALL_TIMEOUT_MS = 60_000
const timeout = () => AbortSignal.timeout(CALL_TIMEOUT_MS)
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

function payer(account: PrivateKeyAccount, id?: string): typeof fetch {
  const client = new x402Client().register('eip155:8453', new ExactEvmScheme(account)).setSpendControls(false)
  if (id !== undefined) {
    client.onBeforePaymentCreation(async ({ paymentRequired }) => {
      if (paymentRequired.extensions) appendPaymentIdentifierToExtensions(paymentRequired.extensions, id)
    })
  }
  return wrapFetchWithPayment(fetch, client)
}

async function json(res: Response): Promise<Json> {
  return (await res.json().catch(() => ({}))) as Json
}

/** Funds `n` task buyers and `m` memory buyers on the chain (the faucet mint) and registers plan bearers. */
export async function fundBuyers(topology: Topology, tasks: number, memory: number): Promise<Buyer[]> {
  const buyers: Buyer[] = []
  for (let i = 0; i < tasks + memory; i += 1) {
    const account = privateKeyToAccount(generatePrivateKey())
    await topology.chain().mint(account.address, MINTED)
    const kind = i < tasks ? 'tasks' : 'memory'
    let token = ''
    if (kind === 'tasks') {
      const res = await fetch(`${topology.urls.gateway}/auth/register`, { method: 'POST' })
      if (!res.ok) throw new Error(`POST /auth/register answered ${res.status}`)
      token = (await json(res)).accessToken as string
    }
    buyers.push({ account, kind, label: `${kind} buyer ${i + 1} ${account.address.toLowerCase()}`, token, purchases: 0, unanswered: [], tasks: [] })
  }
  return buyers
}

export function purchase(topology: Topology, buyer: Buyer, id: string): Promise<Response> {
  return payer(buyer.account, id)(`${topology.urls.gateway}/plans/${PLAN}/purchase`, {
    method: 'POST',
    headers: { 'svc-agent-authorization': `Bearer ${buyer.token}` },
    signal: timeout(),
  })
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

/** Records `call`'s outcome; the response's body is read (problem+json) and returned. */
export async function record(calls: CallRecord[], op: string, buyer: Buyer, call: () => Promise<Response>): Promise<{ res?: Response; body: Json }> {
  const began = Date.now()
  let res: Response
  try {
    res = await call()
  } catch (error) {
    // Cut off (the connection reset under the call), or no answer within CALL_TIMEOUT_MS.
    const timedOut = (error as Error).name === 'TimeoutError' || (error as { cause?: Error }).cause?.name === 'TimeoutError'
    calls.push({ op, at: Date.now(), began, status: 0, buyer: buyer.label, ...(timedOut ? { code: 'timeout' } : {}) })
    return { body: {} }
  }
  const text = await res.text().catch(() => '')
  let body: Json = {}
  try {
    body = JSON.parse(text) as Json
  } catch {
    // not JSON
  }
  const entry: CallRecord = { op, at: Date.now(), began, status: res.status, buyer: buyer.label }
  if (typeof body.code === 'string') entry.code = body.code
  if (res.status >= 500) {
    entry.problem = (res.headers.get('content-type') ?? '').startsWith('application/problem+json') && typeof body.status === 'number'
    entry.retryAfter = res.headers.get('retry-after') !== null
  }
  calls.push(entry)
  return { res, body }
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
  const workers = buyers.map((buyer) => (buyer.kind === 'tasks' ? taskWorker(buyer) : memoryWorker(buyer)))
  return {
    buyers,
    calls,
    async stop() {
      stopping = true
      await Promise.all(workers)
    },
  }
}
