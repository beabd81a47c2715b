// The payment crash drill in facilitator mode (X402_FACILITATOR_URL with SETTLER_PRIVATE_KEY as
// the refund wallet): the runner of payment-crash.test.ts (test/helpers/payment-crash-suite.ts),
// each process's x402 verified and settled by the official x402 facilitator served over HTTP on
// the same anvil (test/helpers/x402-facilitator.ts, one for the file), every /verify and /settle a
// kill step (before: never sent; after: the facilitator settled and the answer was lost). Checked
// as there (every buyer and the service wallet exact on-chain, the database agreeing with the
// chain, nothing left open), and: the facilitator settled each authorization at most once, and
// every authorization used on-chain was broadcast by the facilitator's wallet, never by the
// process (its chain port settles nothing; the settler key only refunds).
// Kinds: create, purchase, broke-create (refused at the facilitator's /verify, which checks the
// balance: nothing is reserved) and purchase-id, and seven of them at once killed in the middle,
// on PGlite and Postgres: about 4 minutes on a 2-core machine.
import t from 'tap'
import { startDevChain } from '../../src/payments/chain/dev.ts'
import { paymentCrashSuite, type Kind } from '../helpers/payment-crash-suite.ts'
import { onPgliteAndPostgres } from '../helpers/servers.ts'
import { startTestFacilitator } from '../helpers/x402-facilitator.ts'

// Every step of four requests killed and recovered, on two databases: minutes by design.
t.setTimeout(20 * 60_000)

const dev = await startDevChain({ logger: undefined })
t.teardown(() => dev.close())
const facilitator = await startTestFacilitator({ rpcUrl: dev.rpcUrl })
t.teardown(() => facilitator.close())

const KINDS: Kind[] = ['create', 'purchase', 'broke-create', 'purchase-id']
const CONCURRENT: Kind[] = ['create', 'create', 'create', 'purchase', 'purchase', 'purchase-id', 'broke-create']

onPgliteAndPostgres(t, (t, db) => paymentCrashSuite(t, db, dev, { mode: 'facilitator', facilitator, kinds: KINDS, concurrent: CONCURRENT }))
