// The topology drill's end: quiescence, then the invariants. After the load and the faults have
// stopped: every process is up, the purchases left unanswered are retried with their
// payment-identifier, every payment is decided (agent_gateway_payments_open 0 on every money
// replica, 'reserved' rows of killed processes aside: Postgres releases them after the 10-minute
// window that protects live replicas, and nothing was bound or broadcast for them), every task is
// deleted by its owner, every memory deposit withdrawn, every refund confirmed
// (agent_gateway_refunds_outstanding 0). Then: every buyer is whole on-chain by conservation, the
// service wallet gained exactly what was sold, the database agrees (nothing open or provisional),
// every 5xx and every cut-off call fell in a fault window (and a 5xx there is 503 problem+json with
// Retry-After), every fault recovered within its bound.
import { forEachLimited } from '../../src/platform/concurrency.ts'
import { metricSum } from './crash-drill.ts'
import { ownerCall } from './owner-call.ts'
import type { Topology } from './topology.ts'
import { mcpPurchase } from './topology-buyers.ts'
import { type Buyer, type CallRecord, purchase } from './topology-calls.ts'
import type { Fault } from './topology-faults.ts'
import { MONEY_KINDS, type MoneyResult, usdc } from './topology-money.ts'

export { checkMoney, type MoneyResult, usdc } from './topology-money.ts'

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))
type Json = Record<string, any>

async function scrape(port: number): Promise<string> {
  const res = await fetch(`http://127.0.0.1:${port}/metrics`, { signal: AbortSignal.timeout(10_000) }).catch(() => undefined)
  return res?.ok ? await res.text().catch(() => '') : ''
}

/** Undefined once `name` sums to 0 on every money replica, else what is left there. */
async function untilZero(topology: Topology, name: string, timeoutMs: number, only?: (labels: string) => boolean): Promise<string | undefined> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const left: string[] = []
    for (const proc of topology.processes.filter((candidate) => candidate.takesPayments)) {
      const value = metricSum(await scrape(proc.port), name, only)
      if (value !== 0) left.push(`${proc.name} ${name} = ${value}`)
    }
    if (left.length === 0) return undefined
    if (Date.now() > deadline) return `timed out after ${timeoutMs / 1000} s waiting for ${name} = 0: ${left.join(', ')}`
    await sleep(500)
  }
}

/** A call repeated while it answers 5xx, 409 payment_in_progress or is cut off, up to `deadline`. */
async function persist(call: () => Promise<Response>, deadline: number): Promise<{ status: number; body: Json }> {
  for (;;) {
    const res = await call().catch(() => undefined)
    const body = res ? ((await res.json().catch(() => ({}))) as Json) : {}
    const again = !res || res.status >= 500 || (res.status === 409 && body.code === 'payment_in_progress')
    if (!again || Date.now() > deadline) return { status: res?.status ?? 0, body }
    await sleep(Number(res?.headers.get('retry-after') ?? 1) * 1000)
  }
}

/** Owner DELETEs in flight at once while the drill comes to rest. */
const DELETES_AT_ONCE = 8

export interface Quiescence {
  retried: number
  deleted: number
  withdrawn: number
  decidedMs: number
  refundsMs: number
}

/** Brings the topology to rest; problems found on the way are pushed to `problems`. */
export async function quiesce(topology: Topology, buyers: Buyer[], problems: string[], deadlineMs: number): Promise<Quiescence> {
  const out: Quiescence = { retried: 0, deleted: 0, withdrawn: 0, decidedMs: 0, refundsMs: 0 }
  const deadline = Date.now() + deadlineMs
  for (const buyer of buyers) {
    for (const id of buyer.unanswered) {
      const { status, body } = await persist(() => (buyer.kind === 'mcp' ? mcpPurchase(buyer, id) : purchase(topology, buyer, id)), deadline)
      out.retried += 1
      if (status >= 200 && status < 300) buyer.purchases += 1
      // Paid, but the first request died before it had an answer to keep: bought, not replayable.
      else if (status === 409 && body.code === 'payment_identifier_conflict') buyer.purchases += 1
      else problems.push(`${buyer.label}: the retried purchase ${id} answered ${status}: ${JSON.stringify(body).slice(0, 300)}`)
    }
  }
  let started = performance.now()
  // A broadcast whose outcome is unknown (the RPC node was down) is decided once its authorization
  // expires (validBefore, 300 s) and a reconciler pass (30 s) sees it unused.
  const decided = await untilZero(topology, 'agent_gateway_payments_open', 420_000, (labels) => !labels.includes('"reserved"'))
  if (decided) problems.push(decided)
  out.decidedMs = performance.now() - started
  for (const buyer of buyers.filter((candidate) => candidate.kind === 'tasks' || candidate.kind === 'v1' || candidate.kind === 'mcp')) {
    const usage = await persist(() => ownerCall(buyer.account, `${topology.urls.scheduler}/api/v1/owner/usage`), deadline)
    if (usage.status !== 200) {
      problems.push(`${buyer.label}: GET /api/v1/owner/usage answered ${usage.status}`)
      continue
    }
    // A long run leaves thousands of tasks: deleted a few at a time, as an owner's script would.
    const live = ((usage.body.tasks ?? []) as { task_id: string; status: string }[]).filter((task) => task.status !== 'deleted')
    await forEachLimited(live, DELETES_AT_ONCE, async (task) => {
      const res = await persist(() => ownerCall(buyer.account, `${topology.urls.scheduler}/api/v1/tasks/${task.task_id}`, { method: 'DELETE' }), deadline)
      if (res.status !== 200) problems.push(`${buyer.label}: DELETE ${task.task_id} answered ${res.status}: ${JSON.stringify(res.body).slice(0, 300)}`)
      out.deleted += 1
    })
  }
  for (const buyer of buyers.filter((candidate) => candidate.kind === 'memory')) {
    const res = await persist(() => ownerCall(buyer.account, `${topology.urls.memory}/api/v1/deposits`, { method: 'DELETE' }), deadline)
    // 404/409: nothing deposited (every deposit cut off before it landed) or nothing left.
    if (res.status === 200) out.withdrawn += 1
    else if (res.status >= 500 || res.status === 0) problems.push(`${buyer.label}: DELETE /api/v1/deposits answered ${res.status}: ${JSON.stringify(res.body).slice(0, 300)}`)
  }
  started = performance.now()
  const refunds = await untilZero(topology, 'agent_gateway_refunds_outstanding', 180_000)
  if (refunds) problems.push(refunds)
  out.refundsMs = performance.now() - started
  return out
}

export interface CallVerdict {
  byOp: Map<string, { calls: number; ok: number }>
  failures: Map<string, number>
  /** 5xx or cut-off calls outside every fault window, and 5xx inside one that are not 503 problem+json with Retry-After. */
  outside: CallRecord[]
  badInside: CallRecord[]
  /** 402 answers to paid calls (the payment refused) outside every fault window. */
  refused: CallRecord[]
  insideAccepted: number
}

/** The fault whose window ([start − 1 s, end + graceMs]) a call sent at `began` and ended at `at` overlaps, if any. */
export function faultOverlapping(faults: Fault[], began: number, at: number, graceMs: number): Fault | undefined {
  return faults.find((fault) => at >= fault.start - 1_000 && began <= fault.end + graceMs)
}

/** Puts every failed call in the fault window it overlaps ([start − 1 s, end + graceMs]), or in none. */
export function judgeCalls(calls: CallRecord[], faults: Fault[], graceMs: number, problems: string[]): CallVerdict {
  const verdict: CallVerdict = { byOp: new Map(), failures: new Map(), outside: [], badInside: [], refused: [], insideAccepted: 0 }
  for (const call of calls) {
    const op = verdict.byOp.get(call.op) ?? { calls: 0, ok: 0 }
    op.calls += 1
    if (call.status >= 200 && call.status < 300) op.ok += 1
    verdict.byOp.set(call.op, op)
    if (call.status >= 200 && call.status < 300) continue
    const kind = call.status === 0 ? (call.code === 'timeout' ? 'timed out' : (call.code ?? 'cut off')) : `${call.status}${call.code ? ` ${call.code}` : ''}`
    verdict.failures.set(kind, (verdict.failures.get(kind) ?? 0) + 1)
    const window = faultOverlapping(faults, call.began, call.at, graceMs)
    // A paid call refused after the payment was sent (the client's second 402) with no fault to explain it.
    if (call.status === 402 && !window) verdict.refused.push(call)
    if (call.status !== 0 && call.status < 500) continue
    if (!window) verdict.outside.push(call)
    else if (call.status === 0 || (call.status === 503 && call.problem && call.retryAfter)) verdict.insideAccepted += 1
    else verdict.badInside.push(call)
  }
  const show = (call: CallRecord) => `${call.op} ${call.status === 0 ? 'cut off' : call.status}${call.code ? ` ${call.code}` : ''} at ${new Date(call.at).toISOString()}`
  for (const call of verdict.refused) problems.push(`a paid call refused outside every fault window: ${show(call)} (${call.buyer})`)
  for (const call of verdict.outside) problems.push(`outside every fault window: ${show(call)} (${call.buyer})`)
  for (const call of verdict.badInside) {
    problems.push(`inside a fault window but not 503 problem+json with Retry-After: ${show(call)} (problem+json ${call.problem}, Retry-After ${call.retryAfter})`)
  }
  for (const fault of faults) if (fault.error) problems.push(`fault ${fault.kind} ${fault.target}: ${fault.error}`)
  return verdict
}

/** The drill's table: faults by kind, calls by operation, failures by kind, recovery times, money moved. */
export function table(faults: Fault[], verdict: CallVerdict, money: MoneyResult, extra: Record<string, string>): string {
  const lines: string[] = []
  const pad = (text: string, width: number) => text.padEnd(width)
  lines.push('faults injected        count  recovery min/median/max s')
  const kinds = [...new Set(faults.map((fault) => fault.kind))]
  for (const kind of kinds) {
    const of = faults.filter((fault) => fault.kind === kind)
    const times = of.map((fault) => fault.recoveryMs / 1000).sort((a, b) => a - b)
    const median = times[Math.floor(times.length / 2)] ?? 0
    const recovery = times.some((time) => time > 0) ? `${(times[0] ?? 0).toFixed(1)} / ${median.toFixed(1)} / ${(times.at(-1) ?? 0).toFixed(1)}` : '-'
    lines.push(`  ${pad(kind, 20)} ${String(of.length).padStart(5)}  ${recovery}${of.some((fault) => fault.error) ? '  (with errors)' : ''}`)
  }
  const killed = faults.filter((fault) => fault.kind === 'kill').map((fault) => `${fault.target} ${(fault.recoveryMs / 1000).toFixed(1)} s`)
  if (killed.length > 0) lines.push(`  kills: ${killed.join(', ')}`)
  lines.push('calls by operation     calls     2xx')
  for (const [op, count] of [...verdict.byOp].sort()) lines.push(`  ${pad(op, 20)} ${String(count.calls).padStart(5)}   ${String(count.ok).padStart(5)}`)
  lines.push('failures by kind       count')
  for (const [kind, count] of [...verdict.failures].sort((a, b) => b[1] - a[1])) lines.push(`  ${pad(kind, 40)} ${String(count).padStart(5)}`)
  lines.push(
    `  5xx/cut-offs accepted inside fault windows: ${verdict.insideAccepted}; outside windows: ${verdict.outside.length}; wrong inside: ${verdict.badInside.length}; 402 outside windows: ${verdict.refused.length}`,
  )
  const wrong = money.buyers.filter((buyer) => buyer.final !== buyer.expected).length
  const buyerKinds = [...new Set(money.buyers.map((buyer) => buyer.kind))].map((kind) => `${money.buyers.filter((buyer) => buyer.kind === kind).length} ${kind}`)
  lines.push(
    `money: ${money.buyers.length} buyers (${buyerKinds.join(', ')}; ${wrong} wrong); service wallet ${money.wallet.final === money.wallet.expected ? 'exact' : 'WRONG'}; ` +
      `${money.orphanedReservations} orphaned reservations (released after the stale window)`,
  )
  lines.push('money moved            payments  paid USDC      refunded USDC  kept USDC')
  for (const kind of MONEY_KINDS) {
    const moved = money.moved[kind]
    lines.push(
      `  ${pad(kind, 20)} ${String(moved.payments).padStart(8)}  ${usdc(moved.paid).padStart(13)}  ${usdc(moved.refunded).padStart(13)}  ${usdc(moved.paid - moved.refunded).padStart(13)}`,
    )
  }
  const { tasks, deposits, orders, partialOrders } = money.checked
  lines.push(
    `  checked one by one: ${tasks} tasks, ${deposits} memory deposit accounts, ${orders} song sales (${partialOrders} with a partial refund); ${money.plansSold} plans held`,
  )
  for (const [key, value] of Object.entries(extra)) lines.push(`${key}: ${value}`)
  return lines.join('\n')
}
