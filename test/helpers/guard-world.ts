// One process's payments on embedded PGlite, for tests of the payment guard against a real chain
// port: a work effect whose outcomes are heard, a quote to pay, and readers of the reservation and
// the ledger. `paid` is a paid request: authorize, bind the work, settle.
import type { Test } from 'tap'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { registry } from '../../src/catalog/registry.ts'
import { openPayments, type PaymentsOptions } from '../../src/payments/index.ts'
import type { PriceQuote } from '../../src/payments/types.ts'
import { systemClock } from '../../src/platform/clock.ts'
import { openDb } from '../../src/platform/db/index.ts'
import { migrate } from '../../src/platform/db/migrate.ts'
import { openKeyValue } from '../../src/platform/kv/index.ts'
import { createLogger } from '../../src/platform/logger.ts'

export const GUARD_EFFECT = 'test.work'

/** `options` adds to (or overrides) what every such test passes to openPayments; the chain port stays the caller's. */
export async function guardWorld(t: Test, priceMicros: bigint, options: Partial<PaymentsOptions>) {
  const db = await openDb({ kind: 'pglite', dataDir: 'memory://' })
  await migrate(db)
  const kv = await openKeyValue({ kind: 'memory' })
  const payTo = privateKeyToAccount(generatePrivateKey()).address
  const payments = await openPayments({
    db,
    kv,
    logger: createLogger('silent'),
    clock: systemClock,
    registry,
    dataDir: '',
    payTo,
    gatewayUrl: 'https://gw.test',
    reconcileEveryMs: 0,
    ...options,
  })
  const heard: string[] = []
  payments.outcomes.register(GUARD_EFFECT, {
    settled: async (_tx, key) => void heard.push(`settled ${key}`),
    failed: async (_tx, key) => void heard.push(`failed ${key}`),
    reversed: async (_tx, key) => void heard.push(`reversed ${key}`),
  })
  t.teardown(async () => {
    await payments.close()
    await kv.close()
    await db.close()
  })
  const quote: PriceQuote = { amountMicros: priceMicros, resourceUrl: 'https://gw.test/work', route: 'POST /work', description: 'test work', payTo }
  const row = async (key: string) =>
    (
      await db.query<{ state: string; reference: string | null; confirmed_at: Date | null }>(
        'select state, reference, confirmed_at from payment_reservations where replay_key = $1',
        [key],
      )
    )[0]
  const ledger = async (key: string) => (await db.query<{ event: string }>('select event from payments_ledger where replay_key = $1 order by id', [key])).map((r) => r.event)
  const paid = async (headers: Record<string, string>) => {
    const authorized = await payments.guard.authorize(headers, quote, 'op')
    await db.transaction((tx) => authorized.bind(tx, GUARD_EFFECT))
    const { decision, headers: receipt } = await authorized.commit()
    return { key: authorized.payment.replayKey, decision, receipt }
  }
  return { db, payments, heard, quote, payTo, row, ledger, paid }
}

export type GuardWorld = Awaited<ReturnType<typeof guardWorld>>
