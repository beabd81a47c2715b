// Refunds when the refund wallet is not the wallet payments go to: payments
// land at PAY_TO_ADDRESS while refunds are paid by the settler wallet, which starts with no USDC.
// A refund that cannot be sent is never dropped: it shows in the DELETE answer, the task ledger,
// the metrics (capacity below zero) and, once it is old, in /readyz detail (still 200); it is
// retried past any attempt count until the float arrives, then confirmed exactly once.
import t from 'tap'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { openDb } from '../../src/platform/db/index.ts'
import { migrate } from '../../src/platform/db/migrate.ts'
import { startDevChain } from '../../src/payments/chain/dev.ts'
import { boot, createCall, send, shutdown, sign, TASK_AMOUNT } from '../helpers/paid-process.ts'

const dev = await startDevChain({})
const db = await openDb({ kind: 'pglite', dataDir: 'memory://' })
await migrate(db)
t.teardown(async () => {
  await db.close()
  await dev.close()
})

async function rpc(method: string, params: unknown[]): Promise<unknown> {
  const res = await fetch(dev.rpcUrl, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }) })
  return ((await res.json()) as { result: unknown }).result
}

t.test('a refund the settler wallet cannot pay is retried, visible, and paid once the float arrives', async (t) => {
  const settlerKey = generatePrivateKey()
  const settler = privateKeyToAccount(settlerKey).address
  await rpc('anvil_setBalance', [settler, '0x3635c9adc5dea00000']) // gas only, no USDC
  const payTo = privateKeyToAccount(generatePrivateKey()).address
  const buyer = privateKeyToAccount(generatePrivateKey())
  await dev.mint(buyer.address, 1_000_000n)
  const proc = await boot(db, dev, settlerKey, payTo)
  t.teardown(() => shutdown(proc))

  const call = createCall('float-1')
  const created = await send(proc, call, await sign(proc, buyer, call))
  t.equal(created.status, 201, 'created')
  t.equal(created.body.balance_micros, TASK_AMOUNT.toString(), 'the settled payment is the escrow')
  t.equal(created.body.pending_payment_micros, '0')
  t.equal(await dev.balanceOf(payTo), TASK_AMOUNT, 'the payment went to PAY_TO_ADDRESS')
  const taskId = created.body.id as string
  const ledger = await db.query<{ kind: string; tx_hash: string | null }>(`select kind, tx_hash from scheduler_ledger where task_id = $1`, [taskId])
  t.match(ledger, [{ kind: 'charge', tx_hash: /^0x[0-9a-f]{64}$/ }], 'the charge row carries its settlement hash')

  const deleted = await proc.service.deleteTask(taskId, buyer.address)
  t.match(deleted.refund, { state: 'retrying', amount_micros: TASK_AMOUNT.toString(), estimated: false }, 'the answer says the refund is owed and retried')
  t.match(deleted.refund.detail, /the refund wallet holds 0 micros/, 'it waits for the float instead of failing on-chain')
  t.equal(deleted.refunded_micros, '0', 'nothing refunded yet')
  const owed = await proc.service.taskLedger(taskId, buyer.address)
  t.match(owed.refund, { state: 'retrying', amount_micros: TASK_AMOUNT.toString() }, 'the task ledger says the refund is owed')
  t.match(owed.rows.at(-1), { kind: 'refund', tx_hash: null }, 'its row has no hash until it is on-chain')

  const metric = async (name: string) => Number(new RegExp(`^${name} (-?[0-9.e+]+)$`, 'm').exec(await proc.metrics.render())?.[1])
  t.equal(await metric('agent_gateway_refunds_outstanding'), 1)
  t.equal(await metric('agent_gateway_refunds_outstanding_micros'), Number(TASK_AMOUNT))
  t.equal(await metric('agent_gateway_refund_wallet_balance_micros'), 0)
  t.equal(await metric('agent_gateway_refund_capacity_micros'), -Number(TASK_AMOUNT), 'the shortfall shows as negative capacity')

  // Many attempts later (each one as soon as it is due), it is still owed, never abandoned.
  for (let i = 0; i < 12; i += 1) {
    await db.query(`update scheduler_refunds set next_attempt_at = now()`)
    await proc.service.recover()
  }
  const row = (await db.query<{ state: string; attempts: number; error: string }>(`select state, attempts, error from scheduler_refunds where task_id = $1`, [taskId]))[0]
  t.match(row, { state: 'waiting', error: /refund wallet holds 0 micros/ }, 'still owed, waiting for the float')
  t.ok((row?.attempts ?? 0) > 10, `retried ${row?.attempts} times`)

  // Old enough to be stuck: /readyz says so and stays 200 (the listener is fine).
  await db.query(`update scheduler_refunds set created_at = now() - interval '11 minutes'`)
  const ready = await proc.scheduler.inject({ method: 'GET', url: '/readyz' })
  t.equal(ready.statusCode, 200)
  t.match(ready.json(), { status: 'ready', detail: { refunds: { stuck: 1, outstanding: 1, outstanding_micros: TASK_AMOUNT.toString(), oldest: taskId } } })
  t.equal(await metric('agent_gateway_refunds_stuck'), 1)

  // The operator tops up the float: the next pass pays, exactly once.
  await dev.mint(settler, 5_000_000n)
  await db.query(`update scheduler_refunds set next_attempt_at = now()`)
  await proc.service.recover()
  await proc.service.recover()
  t.equal(await dev.balanceOf(buyer.address), 1_000_000n, 'the buyer is whole')
  t.equal(await dev.balanceOf(settler), 5_000_000n - TASK_AMOUNT, 'paid once from the float')
  const after = await proc.scheduler.inject({ method: 'GET', url: '/readyz' })
  t.notOk('detail' in (after.json() as object), 'nothing stuck any more')
  const paid = await proc.service.taskLedger(taskId, buyer.address)
  t.match(paid.refund, { state: 'confirmed', tx_hash: /^0x[0-9a-f]{64}$/ })
  t.equal(paid.rows.at(-1)?.tx_hash, paid.refund?.tx_hash, 'the refund row carries its transfer')
  const rows = await db.query<{ kind: string; amount_micros: bigint }>(`select kind, amount_micros from scheduler_ledger where task_id = $1 order by id`, [taskId])
  t.same(
    rows.map((r) => [r.kind, r.amount_micros]),
    [
      ['charge', TASK_AMOUNT],
      ['refund', -TASK_AMOUNT],
    ],
  )
})
