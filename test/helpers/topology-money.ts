// The topology drill's money invariants, after quiescence: every buyer exactly whole on-chain
// against what the database says the service kept of it (plans, task escrows, memory deposits,
// songs), every settled payment accounted for by what it bought, and the same again per task, per
// memory deposit and per song order; the service wallet gained exactly what was kept. Nothing is
// left open or provisional in the database.
import type { Topology } from './topology.ts'
import { type Buyer, type BuyerKind, MINTED, SONG_PRICE } from './topology-calls.ts'
import { openDrillDb } from './topology-faults.ts'

export function usdc(micros: bigint): string {
  const sign = micros < 0n ? '-' : ''
  const abs = micros < 0n ? -micros : micros
  return `${sign}${abs / 1_000_000n}.${(abs % 1_000_000n).toString().padStart(6, '0')}`
}

export type MoneyKind = 'plans' | 'tasks' | 'memory' | 'songs'
export const MONEY_KINDS: readonly MoneyKind[] = ['plans', 'tasks', 'memory', 'songs']

export interface Moved {
  /** Settled payments (count, micros) and confirmed refunds (micros) of the drill's buyers. */
  payments: number
  paid: bigint
  refunded: bigint
}

export interface MoneyResult {
  buyers: { label: string; kind: BuyerKind; final: bigint; expected: bigint }[]
  wallet: { final: bigint; expected: bigint }
  plansSold: bigint
  memoryKept: bigint
  orphanedReservations: number
  moved: Record<MoneyKind, Moved>
  /** Per-task, per-deposit and per-order checks run (and how many song orders refunded a part). */
  checked: { tasks: number; deposits: number; orders: number; partialOrders: number }
}

type Sums = Map<string, bigint>
const get = (map: Sums, key: string) => map.get(key) ?? 0n

/** Rows of `sql` (payer, micros, n) as maps keyed by lowercase payer. */
async function sums(db: Awaited<ReturnType<typeof openDrillDb>>, sql: string): Promise<{ micros: Sums; count: Sums }> {
  const rows = await db.query<{ payer: string; micros: bigint | null; n: bigint }>(sql)
  return {
    micros: new Map(rows.map((row) => [row.payer.toLowerCase(), BigInt(row.micros ?? 0n)])),
    count: new Map(rows.map((row) => [row.payer.toLowerCase(), BigInt(row.n)])),
  }
}

const LEFTOVERS = `select 'open reservation' as what, count(*)::int8 as n from payment_reservations where state in ('settling', 'pending', 'reorged')
  union all select 'settled payment not confirmed', count(*) from payment_reservations where state = 'settled' and confirmed_at is null
  union all select 'orphaned reservation', count(*) from payment_reservations where state = 'reserved'
  union all select 'provisional charge', count(*) from scheduler_charges where state = 'provisional'
  union all select 'provisional plan', count(*) from plan_purchases where state = 'provisional'
  union all select 'provisional memory deposit', count(*) from memory_deposits where state = 'provisional'
  union all select 'provisional song sale', count(*) from media_sales where state = 'provisional'
  union all select 'scheduler refund not confirmed', count(*) from scheduler_refunds where state not in ('confirmed', 'cancelled')
  union all select 'memory refund not confirmed', count(*) from memory_refunds where state not in ('confirmed', 'cancelled')
  union all select 'song refund not confirmed', count(*) from media_refunds where state not in ('confirmed', 'cancelled')
  union all select 'charge without tx hash', count(*) from scheduler_ledger l join scheduler_tasks t on t.id = l.task_id where l.kind = 'charge' and l.tx_hash is null and t.rail = 'direct'
  union all select 'task not deleted', count(*) from scheduler_tasks where status <> 'deleted'`

/** Conservation per buyer and for the service wallet, the chain read against the database. */
export async function checkMoney(
  topology: Topology,
  buyers: Buyer[],
  walletBase: bigint,
  serviceAddress: `0x${string}`,
  problems: string[],
  faulted: (from: number, to: number) => boolean = () => false,
): Promise<MoneyResult> {
  const chain = topology.chain()
  const db = await openDrillDb(topology)
  const mine = buyers.map((buyer) => buyer.account.address.toLowerCase())
  const result: MoneyResult = {
    buyers: [],
    wallet: { final: 0n, expected: 0n },
    plansSold: 0n,
    memoryKept: 0n,
    orphanedReservations: 0,
    moved: { plans: zero(), tasks: zero(), memory: zero(), songs: zero() },
    checked: { tasks: 0, deposits: 0, orders: 0, partialOrders: 0 },
  }
  let paid: Record<MoneyKind, { micros: Sums; count: Sums }>
  let refunded: Record<Exclude<MoneyKind, 'plans'>, Sums>
  let settled: Sums
  let payg: Sums
  try {
    paid = {
      plans: await sums(
        db,
        `select r.payer, sum(p.price_micros)::int8 as micros, count(*)::int8 as n from plan_purchases p join payment_reservations r on r.replay_key = p.replay_key
          where p.state = 'active' group by r.payer`,
      ),
      tasks: await sums(
        db,
        `select r.payer, sum(c.amount_micros)::int8 as micros, count(*)::int8 as n from scheduler_charges c join payment_reservations r on r.replay_key = c.replay_key
          where c.state = 'settled' group by r.payer`,
      ),
      memory: await sums(
        db,
        `select r.payer, sum(d.amount_micros)::int8 as micros, count(*)::int8 as n from memory_deposits d join payment_reservations r on r.replay_key = d.replay_key
          where d.state = 'settled' group by r.payer`,
      ),
      songs: await sums(db, `select payer, sum(paid_micros)::int8 as micros, count(*)::int8 as n from media_sales where state = 'settled' group by payer`),
    }
    const back = async (table: string) =>
      (await sums(db, `select to_address as payer, sum(amount_micros)::int8 as micros, count(*)::int8 as n from ${table} where state = 'confirmed' group by to_address`)).micros
    refunded = { tasks: await back('scheduler_refunds'), memory: await back('memory_refunds'), songs: await back('media_refunds') }
    settled = (await sums(db, `select payer, sum(amount_micros)::int8 as micros, count(*)::int8 as n from payment_reservations where state = 'settled' group by payer`)).micros
    payg = (
      await sums(
        db,
        `select r.payer, sum(r.amount_micros)::int8 as micros, count(*)::int8 as n from memory_records m join payment_reservations r on r.replay_key = m.replay_key
          where r.state = 'settled' group by r.payer`,
      )
    ).micros
    for (const row of await db.query<{ what: string; n: bigint }>(LEFTOVERS)) {
      if (BigInt(row.n) === 0n) continue
      if (row.what === 'orphaned reservation') result.orphanedReservations = Number(row.n)
      else problems.push(`database: ${row.n} ${row.what}`)
    }
    result.checked.tasks = await checkTasks(db, mine, problems)
    result.checked.deposits = await checkDeposits(db, mine, problems)
    const orders = await checkOrders(db, buyers, problems, faulted)
    result.checked.orders = orders.orders
    result.checked.partialOrders = orders.partial
  } finally {
    await db.close()
  }

  let kept = 0n
  for (const buyer of buyers) {
    const address = buyer.account.address.toLowerCase()
    const held = get(paid.plans.count, address)
    const answered = BigInt(buyer.purchases + (buyer.uncertain ?? 0))
    if (held > answered)
      problems.push(`${buyer.label} holds ${held} plans for ${buyer.purchases} purchases answered (${buyer.uncertain ?? 0} uncertain): a purchase was charged twice`)
    let out = 0n
    let back = 0n
    for (const kind of MONEY_KINDS) {
      const p = get(paid[kind].micros, address)
      const r = kind === 'plans' ? 0n : get(refunded[kind], address)
      out += p
      back += r
      result.moved[kind].payments += Number(get(paid[kind].count, address))
      result.moved[kind].paid += p
      result.moved[kind].refunded += r
    }
    result.plansSold += held
    result.memoryKept += get(paid.memory.micros, address) - get(refunded.memory, address)
    // Every settled payment bought something: a plan, an escrow charge, a deposit, a song sale or a paid write.
    const bought = out + get(payg, address)
    if (get(settled, address) !== bought) {
      problems.push(
        `${buyer.label}: settled payments total ${usdc(get(settled, address))} USDC but what they bought totals ${usdc(bought)} (a payment settled for nothing, or work without its payment)`,
      )
    }
    const expected = MINTED - bought + back
    kept += bought - back
    const final = await chain.balanceOf(buyer.account.address)
    result.buyers.push({ label: buyer.label, kind: buyer.kind, final, expected })
    if (final !== expected) {
      const parts = MONEY_KINDS.map((kind) => `${kind} ${usdc(get(paid[kind].micros, address))}${kind === 'plans' ? '' : ` less ${usdc(get(refunded[kind], address))} refunded`}`)
      problems.push(`${buyer.label} holds ${usdc(final)} USDC, conservation says ${usdc(expected)} (${parts.join(', ')}): off by ${usdc(final - expected)}`)
    }
  }
  const walletFinal = await chain.balanceOf(serviceAddress)
  result.wallet = { final: walletFinal, expected: walletBase + kept }
  if (walletFinal !== result.wallet.expected) {
    problems.push(
      `service wallet holds ${usdc(walletFinal)} USDC, expected ${usdc(result.wallet.expected)} (kept of the drill's buyers ${usdc(kept)}): off by ${usdc(walletFinal - result.wallet.expected)}`,
    )
  }
  return result
}

function zero(): Moved {
  return { payments: 0, paid: 0n, refunded: 0n }
}

type Db = Awaited<ReturnType<typeof openDrillDb>>

/**
 * Per task: the ledger entered every settled charge (less a reversal of one the chain dropped),
 * the escrow is closed (its money rows sum to 0), its refund row was sent and confirmed for the
 * amount the ledger says, and nothing was kept: the drill's tasks are on-demand and never run.
 */
async function checkTasks(db: Db, owners: string[], problems: string[]): Promise<number> {
  const rows = await db.query<{ id: string; charged: bigint; entered: bigint; balance: bigint; owed: bigint; kept: bigint; refunded: bigint | null; refund_state: string | null }>(
    `select t.id,
       (select coalesce(sum(amount_micros), 0) from scheduler_charges c where c.task_id = t.id and c.state = 'settled')::int8 as charged,
       (select coalesce(sum(amount_micros), 0) from scheduler_ledger l where l.task_id = t.id and l.kind in ('charge', 'reversal'))::int8 as entered,
       (select coalesce(sum(amount_micros), 0) from scheduler_ledger l where l.task_id = t.id and l.kind in ('charge', 'reversal', 'run_cost', 'refund', 'dust_forfeit'))::int8 as balance,
       (select coalesce(-sum(amount_micros), 0) from scheduler_ledger l where l.task_id = t.id and l.kind = 'refund')::int8 as owed,
       (select coalesce(-sum(amount_micros), 0) from scheduler_ledger l where l.task_id = t.id and l.kind in ('run_cost', 'dust_forfeit'))::int8 as kept,
       r.amount_micros as refunded, r.state as refund_state
     from scheduler_tasks t left join scheduler_refunds r on r.task_id = t.id
     where lower(t.owner) = any($1::text[])`,
    [owners],
  )
  for (const row of rows) {
    const facts = `charged ${usdc(BigInt(row.charged))}, ledger ${usdc(BigInt(row.entered))}, refund owed ${usdc(BigInt(row.owed))}, refund ${row.refund_state ?? 'none'} ${usdc(BigInt(row.refunded ?? 0n))}`
    if (BigInt(row.charged) !== BigInt(row.entered)) problems.push(`task ${row.id}: its settled charges are not what its ledger holds (${facts})`)
    if (BigInt(row.balance) !== 0n) problems.push(`task ${row.id}: its escrow did not close to 0 (${usdc(BigInt(row.balance))} left; ${facts})`)
    if (BigInt(row.kept) !== 0n) problems.push(`task ${row.id}: ${usdc(BigInt(row.kept))} USDC kept (run cost or dust) though it never ran (${facts})`)
    const owed = BigInt(row.owed)
    if (owed > 0n && (row.refund_state !== 'confirmed' || BigInt(row.refunded ?? 0n) !== owed))
      problems.push(`task ${row.id}: its refund is not confirmed for what it owes (${facts})`)
    if (owed === 0n && row.refund_state === 'confirmed') problems.push(`task ${row.id}: a refund was confirmed that its ledger does not owe (${facts})`)
  }
  return rows.length
}

/**
 * Per memory deposit account: the ledger entered every settled deposit, its debits are the writes it
 * paid for, its refunds the confirmed withdrawals, and it was withdrawn to 0.
 */
async function checkDeposits(db: Db, owners: string[], problems: string[]): Promise<number> {
  const rows = await db.query<{ owner: string; deposited: bigint; entered: bigint; debited: bigint; written: bigint; owed: bigint; refunded: bigint; balance: bigint }>(
    `select o.owner,
       (select coalesce(sum(amount_micros), 0) from memory_deposits d where d.owner = o.owner and d.state = 'settled')::int8 as deposited,
       (select coalesce(sum(amount_micros), 0) from memory_ledger l where l.owner = o.owner and l.kind in ('deposit', 'reversal'))::int8 as entered,
       (select coalesce(-sum(amount_micros), 0) from memory_ledger l where l.owner = o.owner and l.kind = 'debit')::int8 as debited,
       (select coalesce(sum(charged_micros), 0) from memory_records m where m.owner = o.owner and m.rail = 'direct')::int8 as written,
       (select coalesce(-sum(amount_micros), 0) from memory_ledger l where l.owner = o.owner and l.kind = 'refund')::int8 as owed,
       (select coalesce(sum(amount_micros), 0) from memory_refunds r where r.owner = o.owner and r.state = 'confirmed')::int8 as refunded,
       (select coalesce(sum(amount_micros), 0) from memory_ledger l where l.owner = o.owner)::int8 as balance
     from memory_owners o where lower(o.owner) = any($1::text[])
       and exists (select 1 from memory_deposits d where d.owner = o.owner)`,
    [owners],
  )
  for (const row of rows) {
    const n = (value: bigint) => usdc(BigInt(value))
    const facts = `deposited ${n(row.deposited)}, ledger ${n(row.entered)}, debited ${n(row.debited)} for writes of ${n(row.written)}, refunds owed ${n(row.owed)}, confirmed ${n(row.refunded)}`
    if (BigInt(row.deposited) !== BigInt(row.entered)) problems.push(`memory deposit of ${row.owner}: the ledger does not hold its settled deposits (${facts})`)
    if (BigInt(row.debited) !== BigInt(row.written)) problems.push(`memory deposit of ${row.owner}: its debits are not the writes it paid for (${facts})`)
    if (BigInt(row.owed) !== BigInt(row.refunded)) problems.push(`memory deposit of ${row.owner}: its withdrawals are not all confirmed (${facts})`)
    if (BigInt(row.balance) !== 0n) problems.push(`memory deposit of ${row.owner}: ${n(row.balance)} USDC left after its withdrawal (${facts})`)
  }
  return rows.length
}

/**
 * Per song order: a settled sale charged exactly its delivered songs (no free units here) and
 * refunded the rest, confirmed on-chain to its payer; an answered order's buyer was told the same
 * (the candidates it got, price_usdc, x-refund-micros); no sale without an order that can have delivered;
 * no candidate failed but the scripted ones, or more inside a fault window (`faulted`).
 */
async function checkOrders(db: Db, buyers: Buyer[], problems: string[], faulted: (from: number, to: number) => boolean): Promise<{ orders: number; partial: number }> {
  const songBuyers = buyers.filter((buyer) => buyer.kind === 'songs')
  if (songBuyers.length === 0) return { orders: 0, partial: 0 }
  const rows = await db.query<{
    payer: string
    ordered: number
    delivered: number
    free_units: number
    paid: bigint
    charged: bigint
    refund: bigint
    state: string
    tx: string | null
    refund_state: string | null
    refund_amount: bigint | null
    refund_to: string | null
    replay_key: string
  }>(
    `select s.replay_key, s.payer, s.ordered_units as ordered, s.delivered_units as delivered, s.free_units, s.paid_micros as paid, s.charged_micros as charged,
            s.refund_micros as refund, s.state, lower(s.settlement_ref) as tx, f.state as refund_state, f.amount_micros as refund_amount, lower(f.to_address) as refund_to
       from media_sales s left join media_refunds f on f.replay_key = s.replay_key
      where lower(s.payer) = any($1::text[])`,
    [songBuyers.map((buyer) => buyer.account.address.toLowerCase())],
  )
  let partial = 0
  for (const row of rows.filter((candidate) => candidate.state === 'settled')) {
    const what = `sale ${row.tx} (${row.delivered} of ${row.ordered} delivered, paid ${usdc(BigInt(row.paid))}, charged ${usdc(BigInt(row.charged))})`
    if (BigInt(row.paid) !== SONG_PRICE * BigInt(row.ordered)) problems.push(`${what}: paid is not ${row.ordered} × ${usdc(SONG_PRICE)}`)
    if (BigInt(row.charged) !== SONG_PRICE * BigInt(row.delivered - row.free_units)) problems.push(`${what}: charged is not the delivered songs' price`)
    const refund = BigInt(row.refund)
    if (refund > 0n) {
      partial += 1
      if (row.refund_state !== 'confirmed' || BigInt(row.refund_amount ?? 0n) !== refund || row.refund_to !== row.payer.toLowerCase()) {
        problems.push(`${what}: its refund of ${usdc(refund)} is ${row.refund_state ?? 'missing'} (${usdc(BigInt(row.refund_amount ?? 0n))} to ${row.refund_to})`)
      }
    } else if (row.refund_state !== null) problems.push(`${what}: a refund row for a sale that owes none`)
  }
  for (const buyer of songBuyers) {
    // A sale needs an order that may have delivered: answered 2xx, cut off, or 5xx (the answer lost).
    const possible = (buyer.orders ?? []).filter((order) => order.status === 0 || order.status >= 500 || (order.status >= 200 && order.status < 300)).length
    const sold = rows.filter((row) => row.state === 'settled' && row.payer.toLowerCase() === buyer.account.address.toLowerCase()).length
    if (sold > possible) problems.push(`${buyer.label}: ${sold} settled song sales for ${possible} orders that can have delivered (of ${(buyer.orders ?? []).length})`)
  }
  // An answer names its sale by the payment it was answered for (the replay key of the signature
  // the buyer sent), or by its transaction; not by its result URL, which is content-addressed and
  // so shared by every order of the same song.
  const byTx = new Map(rows.filter((row) => row.tx).map((row) => [row.tx as string, row]))
  const byReplayKey = new Map(rows.map((row) => [row.replay_key.toLowerCase(), row]))
  for (const buyer of songBuyers) {
    for (const order of buyer.orders ?? []) {
      if (order.status < 200 || order.status >= 300) continue
      const sale = (order.replayKey ? byReplayKey.get(order.replayKey) : undefined) ?? (order.tx ? byTx.get(order.tx) : undefined)
      const told = `${buyer.label}: the order seeded ${order.seed} (${order.candidates} candidates, told ${order.delivered} delivered, price ${usdc(order.priceMicros ?? 0n)}, refund ${usdc(order.refundMicros ?? 0n)}${order.paymentStatus ? `, payment ${order.paymentStatus}` : ''})`
      if (!sale) {
        problems.push(`${told}: no sale for its payment ${order.replayKey ?? '(none)'} or transaction ${order.tx ?? '(none)'}`)
        continue
      }
      if (sale.state !== 'settled') problems.push(`${told}: answered 2xx, but its sale is ${sale.state}`)
      if (sale.delivered !== order.delivered || sale.ordered !== order.candidates) problems.push(`${told}: the sale says ${sale.delivered} of ${sale.ordered}`)
      if (BigInt(sale.charged) !== order.priceMicros || BigInt(sale.refund) !== (order.refundMicros ?? 0n)) {
        problems.push(`${told}: the sale charged ${usdc(BigInt(sale.charged))} and refunds ${usdc(BigInt(sale.refund))}`)
      }
      // A fault while it ran (the media role killed, the blob store full) may fail more
      // candidate, which the sale refunds like a scripted one; outside every fault, only those fail.
      const expected = order.candidates - order.failing
      const faultFailed = (order.delivered ?? 0) < expected && faulted(order.began ?? 0, order.answeredAt ?? Date.now())
      if (order.delivered !== expected && !faultFailed) problems.push(`${told}: ${order.failing} candidates were scripted to fail`)
    }
  }
  return { orders: rows.length, partial }
}
