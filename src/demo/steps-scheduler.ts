// Steps 7–9: a paid scheduler task. Create it with x402 (the escrow), run it now and read its
// logs, then delete it: the unused escrow comes back on-chain, and the task's ledger shows every
// movement. Owner calls carry a SIGN-IN-WITH-X proof of the paying wallet. A scheduler that cannot
// run scripts here (no bubblewrap) takes no task and no money: those steps are skipped.
import { randomUUID } from 'node:crypto'
import { describeReply, expectStatus, field, ownerSend, paidSend, send, sleep, StepFailure, type Json, type Reply } from './clients.ts'
import type { DemoContext, Step } from './context.ts'
import { clip, signedUsdc, usdc } from './output.ts'

const MAX_RUNTIME_SEC = 10
const SCRIPT = `import platform, sys
print(f"hello from the agent-gateway demo, python {platform.python_version()} in a sandbox")
print("the escrow pays for this second of compute", file=sys.stderr)
`

const micros = (value: unknown): bigint => BigInt(typeof value === 'string' || typeof value === 'number' ? value : 0)

function executorSkip(ctx: DemoContext): string {
  ctx.refundNote = 'the scheduler took no task here, so no escrow was paid'
  const problem = ctx.executorProblem
  if (!problem) return 'the scheduler cannot run scripts here'
  return `the scheduler cannot run scripts here: ${problem.reason}${problem.fix ? `; fix: ${problem.fix}` : ''}; nothing was paid`
}

function noTask(ctx: DemoContext): string {
  return ctx.executorProblem ? 'no task: the scheduler cannot run scripts here (see step 7)' : 'no task was created'
}

/** The escrow: ten runs' ceiling, and at least five times the smallest refund the scheduler sends, so the remainder comes back. */
async function escrowFromRates(ctx: DemoContext): Promise<{ escrow: bigint; ceiling: bigint }> {
  const rates = expectStatus(await send('GET', `${ctx.urls.scheduler}/api/v1/rates`), [200], 'the rate card did not answer').body
  const ceiling = BigInt(MAX_RUNTIME_SEC) * micros(rates.sandbox_per_second_micros) + micros(rates.overhead_micros)
  const tenRuns = 10n * ceiling
  const refundable = 5n * micros(rates.min_refund_micros)
  return { escrow: tenRuns > refundable ? tenRuns : refundable, ceiling }
}

export const createTask: Step = {
  title: 'create a paid scheduler task',
  async run(ctx) {
    if (ctx.executorProblem) return { skip: executorSkip(ctx) }
    const { escrow, ceiling } = await escrowFromRates(ctx)
    const reply = await paidSend(ctx.account, 'POST', `${ctx.urls.scheduler}/api/v1/tasks`, {
      headers: { 'idempotency-key': `demo-${randomUUID()}`, 'x-pay-amount-micros': escrow.toString() },
      body: { runtime: 'python', entrypoint: 'main.py', source: SCRIPT, max_runtime_sec: MAX_RUNTIME_SEC, max_sibling_calls: 0, max_amount_usdc_micros: Number(escrow) },
      maxUsd: 1,
    })
    if (reply.status === 503 && reply.body.reason === 'executor_unavailable') {
      const ready = await send('GET', `${ctx.urls.scheduler}/readyz`).catch(() => undefined)
      const executor = ((ready?.body.reasons ?? {}) as Record<string, Json | undefined>).executor
      ctx.executorProblem = {
        reason: typeof executor?.reason === 'string' ? executor.reason : String(reply.body.detail),
        fix: typeof executor?.fix === 'string' ? executor.fix : undefined,
      }
      return { skip: executorSkip(ctx) }
    }
    expectStatus(reply, [201], 'the task was not created')
    const id = field(reply, 'id')
    ctx.task = { id, url: `${ctx.urls.scheduler}/api/v1/tasks/${id}` }
    ctx.refundNote = 'the task was not deleted'
    const paid = reply.priceMicros ?? micros(reply.body.balance_micros)
    const ceilingText = typeof reply.body.estimated_ceiling_micros === 'string' ? usdc(BigInt(reply.body.estimated_ceiling_micros)) : usdc(ceiling)
    return {
      summary: `scheduler task ${id} created: escrow ${usdc(paid)} USDC paid with x402${reply.tx ? ` (tx ${reply.tx})` : ''}, at most ${ceilingText} USDC a run`,
    }
  },
}

async function runNow(ctx: DemoContext, url: string): Promise<Reply> {
  const deadline = Date.now() + 60_000
  for (;;) {
    const reply = await ownerSend(ctx.account, 'POST', url, { timeoutMs: 120_000 })
    // The escrow's payment may still be settling, or another run in flight: wait as told.
    const busy = reply.status === 409 && (reply.body.code === 'PAYMENT_SETTLING' || reply.body.code === 'RUN_IN_FLIGHT')
    if (!busy || Date.now() > deadline) return reply
    await sleep(Math.min(5, Number(reply.headers.get('retry-after') ?? '1') || 1) * 1000)
  }
}

export const runTask: Step = {
  title: 'run the task now and read its logs',
  async run(ctx) {
    if (!ctx.task) return { skip: noTask(ctx) }
    const reply = await runNow(ctx, `${ctx.task.url}/runs`)
    if (reply.status === 503 && reply.body.reason === 'executor_unavailable') {
      ctx.runSkipped = `the scheduler cannot run scripts here: ${String(reply.body.detail)}`
      return { skip: `${ctx.runSkipped}; the escrow is refunded in the next step` }
    }
    expectStatus(reply, [200], 'the run did not happen')
    const run = reply.body
    if (run.status !== 'succeeded') {
      if (run.exit_code === null) {
        // Lost to the service (the sandbox could not start): not charged; the refund still follows.
        ctx.runSkipped = `the sandbox could not run it: ${String(run.error ?? run.status)}`
        return { skip: `${ctx.runSkipped}; the escrow is refunded in the next step` }
      }
      throw new StepFailure(`the run ${String(run.status)} with exit code ${String(run.exit_code)}`, { asked: reply.asked, got: describeReply(reply) })
    }
    const logsUrl = field(reply, 'logs_url')
    const logs = expectStatus(await send('GET', logsUrl), [200], 'the run logs did not open')
    const hello = logs.text.split('\n').find((line) => line.includes('hello from')) ?? logs.text.split('\n')[0] ?? ''
    ctx.links.push(['run logs', logsUrl])
    const seconds = typeof run.duration_ms === 'number' ? `${(run.duration_ms / 1000).toFixed(1)} s, ` : ''
    return {
      summary: `ran task ${ctx.task.id} now (POST …/runs): ${String(run.status)} (${seconds}exit ${String(run.exit_code)}, cost ${usdc(micros(run.cost_micros))} USDC)`,
      details: [`logs (${String(run.id)}): ${clip(hello, 160)}`],
    }
  },
}

interface LedgerRow {
  kind: string
  amount_micros: string
  tx_hash?: string | null
}

/** DELETE the task, wait for the refund to be mined, and read the ledger. Also the way out after a failure. */
export async function closeTask(ctx: DemoContext): Promise<{ refunded: bigint; tx: string | undefined; ledger: Reply }> {
  const task = ctx.task
  if (!task) throw new StepFailure('no task to delete')
  const deleted = expectStatus(await ownerSend(ctx.account, 'DELETE', task.url), [200], 'the task was not deleted')
  ctx.task = undefined
  const refund = (deleted.body.refund ?? {}) as Json
  let tx = typeof deleted.body.refund_tx_hash === 'string' ? deleted.body.refund_tx_hash : typeof refund.tx_hash === 'string' ? refund.tx_hash : undefined
  let ledger = expectStatus(await ownerSend(ctx.account, 'GET', `${task.url}/ledger`), [200], 'the ledger did not answer')
  // A refund still sending (or waiting for the run to settle) is confirmed within seconds on the dev chain.
  const deadline = Date.now() + 60_000
  while (tx === undefined && refund.state !== 'none' && Date.now() < deadline) {
    const row = ((ledger.body.rows ?? []) as LedgerRow[]).find((candidate) => candidate.kind === 'refund' && candidate.tx_hash)
    if (row?.tx_hash) tx = row.tx_hash
    else {
      await sleep(1000)
      ledger = expectStatus(await ownerSend(ctx.account, 'GET', `${task.url}/ledger`), [200], 'the ledger did not answer')
    }
  }
  const refunded = micros(deleted.body.refunded_micros ?? refund.amount_micros)
  if (tx === undefined && refunded > 0n) {
    throw new StepFailure(`the refund of ${usdc(refunded)} USDC was not confirmed within 60 s (state ${String(refund.state)})`, {
      asked: deleted.asked,
      got: describeReply(deleted),
    })
  }
  ctx.refundTx = tx
  if (tx === undefined) ctx.refundNote = `nothing to refund (${String(refund.state ?? 'none')})`
  return { refunded, tx, ledger }
}

export const deleteTask: Step = {
  title: 'delete the task and get the escrow refunded',
  async run(ctx) {
    if (!ctx.task) return { skip: noTask(ctx) }
    const id = ctx.task.id
    const { refunded, tx, ledger } = await closeTask(ctx)
    const rows = ((ledger.body.rows ?? []) as LedgerRow[]).map(
      (row) => `${row.kind} ${signedUsdc(micros(row.amount_micros))}${row.tx_hash ? ` (tx ${row.tx_hash.slice(0, 10)}…)` : ''}`,
    )
    const sum = typeof ledger.body.sum_micros === 'string' ? `; sum ${usdc(BigInt(ledger.body.sum_micros))}` : ''
    return {
      summary: `deleted task ${id}: ${usdc(refunded)} USDC of escrow refunded on-chain${tx ? ` (tx ${tx})` : ''}`,
      details: [`ledger (GET …/ledger): ${rows.join(', ')}${sum}`],
    }
  },
}
