// Money conservation under crashes: the real gateway and scheduler apps,
// the real x402 client signing, a real anvil chain, PGlite and Postgres. A process is killed at
// EVERY step of a paid request (each statement, transaction commit and chain call, before it
// runs and after it ran but before its answer arrived: test/helpers/crashable.ts), then a fresh
// process on the same database and chain reconciles, every task is deleted and every refund sent.
// Then, for every buyer, on-chain: balance = minted - what the plans they hold cost (tasks are
// deleted without runs, so everything paid into escrow comes back), the service wallet gained
// exactly that, and the database agrees with the chain (a payment is settled in the database iff
// its authorization was used on-chain; no provisional work, reservation or refund is left over).
// The concurrent part kills a process in the middle of many requests at once.
// The scenario runner: test/helpers/payment-crash-suite.ts (facilitator mode:
// payment-crash-facilitator.test.ts).
import t from 'tap'
import { startDevChain } from '../../src/payments/chain/dev.ts'
import { ALL_KINDS, paymentCrashSuite, type Kind } from '../helpers/payment-crash-suite.ts'
import { onPgliteAndPostgres } from '../helpers/servers.ts'

// Every step of six requests killed and recovered, on two databases: several minutes by design,
// more than the suite's per-file default on a slow or shared machine.
t.setTimeout(30 * 60_000)

const CONCURRENT: Kind[] = ['create', 'create', 'create', 'fund', 'fund', 'purchase', 'purchase', 'purchase-id', 'delete', 'delete', 'broke-create', 'broke-purchase']

const dev = await startDevChain({ logger: undefined })
t.teardown(() => dev.close())

onPgliteAndPostgres(t, (t, db) => paymentCrashSuite(t, db, dev, { mode: 'self', kinds: ALL_KINDS, concurrent: CONCURRENT }))
