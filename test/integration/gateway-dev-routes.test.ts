// The gateway's dev-only routes (faucet, balances, mail outbox) exist on the local dev chain only:
// with a real chain (here the in-memory USDC standing in for CHAIN_RPC_URL) and no SMTP_URL they
// answer 404, and the start-up log says once, at warn, that mail is not delivered, without any
// message (claim codes are secrets). The real gateway app on PGlite and the real payments.
import t, { type Test } from 'tap'
import { openDb } from '../../src/platform/db/index.ts'
import { migrate, migrationsDir } from '../../src/platform/db/migrate.ts'
import { captureLogs } from '../helpers/log-capture.ts'
import { createMetrics } from '../../src/platform/metrics.ts'
import { createMailer } from '../../src/platform/mailer.ts'
import { openKeyValue } from '../../src/platform/kv/index.ts'
import { systemClock } from '../../src/platform/clock.ts'
import { registry } from '../../src/catalog/registry.ts'
import { createCatalog } from '../../src/catalog/catalog.ts'
import { openPayments, type Payments } from '../../src/payments/index.ts'
import type { DevChain } from '../../src/payments/chain/types.ts'
import { buildGatewayApp, GATEWAY_OPERATIONS } from '../../src/gateway/app.ts'
import { memoryChain, memoryUsdc } from '../helpers/memory-chain.ts'
import { mediaDown } from '../helpers/media.ts'

const PAY_TO = '0x000000000000000000000000000000000000c0de' as const
const WALLET = '0x00000000000000000000000000000000000000aa'

async function gateway(t: Test, options: { devChain: boolean }) {
  const { logger, lines } = captureLogs('debug')
  const db = await openDb({ kind: 'pglite', dataDir: 'memory://' })
  await migrate(db, migrationsDir)
  const kv = await openKeyValue({ kind: 'memory' })
  const token = memoryUsdc()
  const chain = memoryChain(token)
  const opened = await openPayments({ db, kv, logger, clock: systemClock, registry, dataDir: '', payTo: PAY_TO, gatewayUrl: 'https://gw.test', chain, reconcileEveryMs: 0 })
  // The dev chain is anvil (tested in test/e2e); here the same port with a faucet stands in for it.
  const devChain: DevChain = {
    ...chain,
    kind: 'dev',
    rpcUrl: 'http://127.0.0.1:0',
    async mint(to, amount) {
      token.mint(to, amount)
      return `0x${'00'.repeat(32)}`
    },
  }
  const payments: Payments = options.devChain ? { ...opened, devChain } : opened
  const mailer = createMailer({ from: 'test@localhost' }) // no SMTP_URL
  const catalog = createCatalog(registry, {
    urls: { gateway: 'https://gw.test', scheduler: 'https://s.test', memory: 'https://m.test' },
    implemented: new Set<string>(GATEWAY_OPERATIONS),
  })
  const app = buildGatewayApp({
    catalog,
    logger,
    metrics: createMetrics(),
    bodyLimitBytes: 1_000_000,
    payTo: PAY_TO,
    readiness: {},
    payments,
    mailer,
    db,
    media: { client: mediaDown },
  })
  await app.ready()
  t.teardown(async () => {
    await app.close()
    mailer.close()
    await opened.close()
    await kv.close()
    await db.close()
  })
  return { app, mailer, lines }
}

t.test('a real chain without SMTP_URL: no dev routes, and a warning that mail is not delivered', async (t) => {
  const { app, mailer, lines } = await gateway(t, { devChain: false })
  await mailer.send({ to: 'owner@example.com', subject: 'Your claim code', text: 'claim code 123-SECRET-456' })
  const outbox = await app.inject({ method: 'GET', url: '/dev/outbox' })
  t.equal(outbox.statusCode, 404, 'GET /dev/outbox is not served')
  t.notMatch(outbox.body, /SECRET/, 'the kept message does not leak')
  const faucet = await app.inject({ method: 'POST', url: '/dev/faucet', payload: { address: WALLET, amountMicros: '1000' } })
  t.equal(faucet.statusCode, 404, 'POST /dev/faucet is not served')
  t.equal((await app.inject({ method: 'GET', url: `/dev/balances/${WALLET}` })).statusCode, 404, 'GET /dev/balances is not served')

  const warnings = lines.filter((line) => line.level === 40 && /not delivered/.test(line.msg))
  t.equal(warnings.length, 1, 'mail not delivered: said once, at warn')
  t.match(warnings[0]?.msg, /SMTP_URL/, 'naming the setting that fixes it')
  t.notMatch(JSON.stringify(lines), /SECRET|owner@example\.com|claim code 1/, 'no message content in the logs')
})

t.test('the local dev chain: faucet, balances and the outbox are served, no warning', async (t) => {
  const { app, mailer, lines } = await gateway(t, { devChain: true })
  await mailer.send({ to: 'owner@example.com', subject: 'Your claim code', text: 'claim code 123' })
  const faucet = await app.inject({ method: 'POST', url: '/dev/faucet', payload: { address: WALLET, amountMicros: '1000' } })
  t.equal(faucet.statusCode, 200)
  t.equal(faucet.json().balanceMicros, '1000')
  t.equal((await app.inject({ method: 'GET', url: `/dev/balances/${WALLET}` })).json().balanceMicros, '1000')
  const outbox = await app.inject({ method: 'GET', url: '/dev/outbox' })
  t.equal(outbox.statusCode, 200)
  t.match(outbox.json(), { messages: [{ to: 'owner@example.com', text: 'claim code 123' }] })
  t.equal(lines.filter((line) => /not delivered/.test(line.msg)).length, 0, 'mail is shown in the outbox: no warning')
})
