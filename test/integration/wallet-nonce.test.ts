// Replicas that share the settler key (the chart gives SETTLER_PRIVATE_KEY to every money role):
// two RPC chain adapters with the same wallet against a REAL anvil, as two processes, each with a
// pool of its own on a throw-away Postgres database whose advisory lock they share
// (postgresWalletLock, what openPayments passes on Postgres). Without it both pick the same nonce
// under load and a valid payment is refused (docs/reliability.md, finding 2).
import t from 'tap'
import type { Test } from 'tap'
import { authorizationTypes } from '@x402/evm'
import type { Address, Hex } from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { openDb, type Db } from '../../src/platform/db/index.ts'
import { BASE_CHAIN_ID, BASE_USDC, createRpcChain, postgresWalletLock, startDevChain, walletLockKey } from '../../src/payments/chain/index.ts'
import type { ChainLogger, RpcChain, TransferAuthorization } from '../../src/payments/chain/index.ts'
import { migrate } from '../../src/platform/db/migrate.ts'
import { openKeyValue } from '../../src/platform/kv/index.ts'
import { systemClock } from '../../src/platform/clock.ts'
import { registry } from '../../src/catalog/registry.ts'
import { openPayments } from '../../src/payments/index.ts'
import { captureLogs } from '../helpers/log-capture.ts'
import { throwawayDatabase } from '../helpers/servers.ts'

/** anvil's dev account #1: the settler of both replicas (account #0 is the dev chain's own). */
const SETTLER_KEY: Hex = '0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d'
const SETTLER = privateKeyToAccount(SETTLER_KEY).address
const PRICE = 10_000n
const EACH = 20

const dev = await startDevChain()
t.teardown(() => dev.close())

/** A logger that keeps the warnings (nonce conflicts, lock fallbacks) a replica logs. */
function warningsLog(): { log: ChainLogger; warnings: string[] } {
  const warnings: string[] = []
  const quiet = () => undefined
  return { warnings, log: { debug: quiet, info: quiet, error: quiet, warn: (_obj, msg) => warnings.push(msg ?? '') } }
}

function replica(db: Db | undefined, log: ChainLogger): RpcChain {
  return createRpcChain({
    rpcUrl: dev.rpcUrl,
    privateKey: SETTLER_KEY,
    chainId: BASE_CHAIN_ID,
    usdc: BASE_USDC,
    pollingIntervalMs: 20,
    logger: log,
    ...(db ? { walletLock: postgresWalletLock(db, walletLockKey(BASE_CHAIN_ID, SETTLER), log) } : {}),
  })
}

/** `count` EIP-3009 authorizations of one funded buyer to `payTo`. */
async function authorizations(count: number, payTo: Address): Promise<{ auth: TransferAuthorization; signature: Hex }[]> {
  const buyer = privateKeyToAccount(generatePrivateKey())
  await dev.mint(buyer.address, PRICE * BigInt(count))
  const validBefore = BigInt(Math.floor(Date.now() / 1000) + 300)
  return Promise.all(
    Array.from({ length: count }, async () => {
      const auth: TransferAuthorization = { from: buyer.address, to: payTo, value: PRICE, validAfter: 0n, validBefore, nonce: generatePrivateKey() }
      const signature = await buyer.signTypedData({
        domain: { name: 'USD Coin', version: '2', chainId: BASE_CHAIN_ID, verifyingContract: BASE_USDC },
        types: authorizationTypes,
        primaryType: 'TransferWithAuthorization',
        message: auth,
      })
      return { auth, signature }
    }),
  )
}

/** Two pools on one throw-away database: what two replica processes hold. */
async function twoPools(t: Test): Promise<[Db, Db] | undefined> {
  const url = await throwawayDatabase(t)
  if (!url) return undefined
  const a = await openDb({ kind: 'postgres', url, poolMax: 3 })
  const b = await openDb({ kind: 'postgres', url, poolMax: 3 })
  t.teardown(async () => {
    await a.close()
    await b.close()
  })
  return [a, b]
}

t.test('two replicas on one wallet, sharing the Postgres wallet lock: 40 concurrent settlements all confirmed, no nonce taken twice', async (t) => {
  const pools = await twoPools(t)
  if (!pools) return
  const { log, warnings } = warningsLog()
  const replicas = [replica(pools[0], log), replica(pools[1], log)]
  t.teardown(() => Promise.all(replicas.map((r) => r.close())))
  const payTo = privateKeyToAccount(generatePrivateKey()).address
  const payments = await authorizations(2 * EACH, payTo)

  const results = await Promise.all(payments.map((p, i) => (replicas[i % 2] as RpcChain).settleAuthorization(p.auth, p.signature, { timeoutMs: 30_000 })))
  const refused = results.flatMap((r) => (r.status === 'confirmed' ? [] : [`${r.status}${r.status === 'failed' ? `: ${r.reason}` : ''}`]))
  t.same(refused, [], 'every valid payment confirmed')
  t.equal(await dev.balanceOf(payTo), PRICE * BigInt(2 * EACH), 'every payment moved once')
  t.same(
    warnings.filter((w) => /nonce|lock/.test(w)),
    [],
    'no replica ever signed with a nonce the other had taken',
  )
})

t.test('openPayments on Postgres with CHAIN_RPC_URL wires the lock: two replicas settle 40 at once without a nonce conflict', async (t) => {
  const pools = await twoPools(t)
  if (!pools) return
  await migrate(pools[0])
  const { logger, lines } = captureLogs('warn')
  const payTo = privateKeyToAccount(generatePrivateKey()).address
  const replicas = await Promise.all(
    pools.map(async (db) => {
      const kv = await openKeyValue({ kind: 'memory' })
      const payments = await openPayments({
        db,
        kv,
        logger,
        clock: systemClock,
        registry,
        dataDir: '',
        payTo,
        gatewayUrl: 'https://gw.test',
        chainRpcUrl: dev.rpcUrl,
        settlerPrivateKey: SETTLER_KEY,
        chainConfirmations: 1,
        reconcileEveryMs: 0,
      })
      t.teardown(async () => {
        await payments.close()
        await kv.close()
      })
      return payments.chain
    }),
  )
  const payments = await authorizations(2 * EACH, payTo)
  const results = await Promise.all(payments.map((p, i) => (replicas[i % 2] as RpcChain).settleAuthorization(p.auth, p.signature, { timeoutMs: 30_000 })))
  t.same(
    results.filter((r) => r.status !== 'confirmed'),
    [],
  )
  t.same(
    lines.map((l) => l.msg),
    [],
    'no nonce conflict',
  )
})

t.test('refunds under the lock record their signed transaction in the database (onSigned on another connection)', async (t) => {
  const pools = await twoPools(t)
  if (!pools) return
  const [a, b] = pools
  await a.exec('create table signed (hash text primary key, nonce int not null)')
  const { log, warnings } = warningsLog()
  const replicas = [replica(a, log), replica(b, log)]
  t.teardown(() => Promise.all(replicas.map((r) => r.close())))
  await dev.mint(SETTLER, 20n * PRICE)
  const to = privateKeyToAccount(generatePrivateKey()).address

  const results = await Promise.all(
    Array.from({ length: 20 }, (_, i) => {
      const db = i % 2 === 0 ? a : b
      return (replicas[i % 2] as RpcChain).transfer(to, PRICE, {
        timeoutMs: 30_000,
        onSigned: (tx) => db.transaction(async (q) => void (await q.query('insert into signed (hash, nonce) values ($1, $2)', [tx.hash, tx.nonce]))),
      })
    }),
  )
  t.same(
    results.map((r) => r.status),
    Array(20).fill('confirmed'),
  )
  const rows = await a.query<{ nonce: number }>('select nonce from signed order by nonce')
  t.equal(rows.length, 20, 'one signed transaction per refund')
  t.equal(new Set(rows.map((r) => r.nonce)).size, 20, 'twenty distinct nonces')
  t.equal(await dev.balanceOf(to), 20n * PRICE)
  t.same(warnings, [])
})

t.test('the lock out of reach (database closed): the broadcast goes on without it', async (t) => {
  const url = await throwawayDatabase(t)
  if (!url) return
  const db = await openDb({ kind: 'postgres', url, poolMax: 1 })
  await db.close()
  const { log, warnings } = warningsLog()
  const port = replica(db, log)
  t.teardown(() => port.close())
  const payTo = privateKeyToAccount(generatePrivateKey()).address
  const [payment] = await authorizations(1, payTo)
  if (!payment) throw new Error('no authorization')
  t.equal((await port.settleAuthorization(payment.auth, payment.signature)).status, 'confirmed')
  t.match(warnings, [/wallet lock unavailable/])
})

t.test('a writer outside the lock (no lock at all): the nonce retry, bounded by time, still lands every settlement', async (t) => {
  const { log } = warningsLog()
  const replicas = [replica(undefined, log), replica(undefined, log)]
  t.teardown(() => Promise.all(replicas.map((r) => r.close())))
  const payTo = privateKeyToAccount(generatePrivateKey()).address
  const payments = await authorizations(2 * EACH, payTo)
  const results = await Promise.all(payments.map((p, i) => (replicas[i % 2] as RpcChain).settleAuthorization(p.auth, p.signature, { timeoutMs: 30_000 })))
  t.same(
    results.filter((r) => r.status !== 'confirmed'),
    [],
  )
  t.equal(await dev.balanceOf(payTo), PRICE * BigInt(2 * EACH))
})
