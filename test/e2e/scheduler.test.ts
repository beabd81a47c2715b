// The scheduler end to end, through the real CLI and HTTP only, with real clients: @x402/fetch pays
// the escrow on the embedded local EVM, @x402/extensions signs the owner proofs (SIGN-IN-WITH-X),
// scripts run in real bubblewrap sandboxes, and the refund is read back from the chain.
import t from 'tap'
import { x402Client } from '@x402/core/client'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import { wrapFetchWithPayment } from '@x402/fetch'
import { createSIWxPayload, encodeSIWxHeader } from '@x402/extensions/sign-in-with-x'
import { generatePrivateKey, privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts'
import { startCli, type CliProcess } from '../helpers/cli.ts'
import { balanceOf, faucet } from '../helpers/dev-chain.ts'
import { sandboxAvailable } from '../../controllers/local/sandbox.ts'

let cli: CliProcess
const available = await sandboxAvailable()

t.before(async () => {
  if (available.ok) cli = await startCli()
})
t.teardown(async () => {
  await cli?.stop('SIGKILL')
})

type Json = Record<string, any>

async function json(response: Response): Promise<Json> {
  return (await response.json()) as Json
}

function payingFetch(account: PrivateKeyAccount): typeof fetch {
  return wrapFetchWithPayment(fetch, new x402Client().register('eip155:8453', new ExactEvmScheme(account)).setSpendControls(false))
}

/** An owner call: answers the 401 SIWX challenge with a signed proof and retries once. */
async function owner(account: PrivateKeyAccount, url: string, init: RequestInit = {}): Promise<Response> {
  const first = await fetch(url, init)
  if (first.status !== 401) return first
  const body = await json(first)
  const challenge = body.extensions?.['sign-in-with-x']
  if (!challenge) throw new Error(`401 without a SIWX challenge: ${JSON.stringify(body)}`)
  const chain = challenge.supportedChains[0]
  const payload = await createSIWxPayload({ ...challenge.info, chainId: chain.chainId, type: chain.type }, account, url)
  const headers = new Headers(init.headers)
  headers.set('sign-in-with-x', encodeSIWxHeader(payload))
  return fetch(url, { ...init, headers })
}

async function eventually<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const value = await probe()
    if (value !== undefined) return value
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 500))
  }
}

const createBody = (overrides: Json = {}) => ({
  schedule: { every: 'minute' },
  runtime: 'node',
  entrypoint: 'main.mjs',
  source: "console.log('hello from', process.env.GREETING ?? 'nobody'); console.error('to stderr')\n",
  max_runtime_sec: 20,
  max_sibling_calls: 0,
  max_amount_usdc_micros: 1_000_000,
  env: { GREETING: 'the sandbox' },
  notify_email: 'owner@example.com',
  ...overrides,
})

t.test(
  'a paid every-minute task: runs on the clock, triggers, sync runs, fund, pause/resume, webhook, delete with an on-chain refund',
  { skip: available.ok ? false : available.reason },
  async (t) => {
    const wallet = privateKeyToAccount(generatePrivateKey())
    await faucet(cli.gateway, wallet.address, 5_000_000n)
    const pay = payingFetch(wallet)
    const key = crypto.randomUUID()
    const body = createBody()

    // Unpaid: the 402 names the escrow amount.
    const unpaid = await fetch(`${cli.scheduler}/api/v1/tasks`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key, 'x-pay-amount-micros': '1000000' },
      body: JSON.stringify(body),
    })
    t.equal(unpaid.status, 402)
    // A header that does not match the body is refused before any payment.
    const mismatch = await fetch(`${cli.scheduler}/api/v1/tasks`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key, 'x-pay-amount-micros': '999' },
      body: JSON.stringify(body),
    })
    t.equal(mismatch.status, 400)
    t.equal((await json(mismatch)).field, 'header.x-pay-amount-micros')

    const created = await pay(`${cli.scheduler}/api/v1/tasks`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key, 'x-pay-amount-micros': '1000000' },
      body: JSON.stringify(body),
    })
    t.equal(created.status, 201, 'created after paying the escrow')
    const task = await json(created)
    t.match(task, { status: 'active', rail: 'direct', estimated_ceiling_micros: '3000', balance_micros: '1000000', env_keys: ['GREETING'] })
    t.notOk('env' in task, 'env is never returned')
    t.equal(await balanceOf(cli.gateway, wallet.address), 4_000_000n, 'the escrow left the wallet')

    // Idempotent retry: the same task, nothing paid again; another body with the same key: 409.
    const retry = await fetch(`${cli.scheduler}/api/v1/tasks`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key, 'x-pay-amount-micros': '1000000' },
      body: JSON.stringify(body),
    })
    t.equal(retry.status, 200)
    t.equal((await json(retry)).id, task.id)
    const conflict = await fetch(`${cli.scheduler}/api/v1/tasks`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key, 'x-pay-amount-micros': '1000000' },
      body: JSON.stringify({ ...body, source: 'console.log(2)' }),
    })
    t.equal(conflict.status, 409)
    t.equal((await json(conflict)).code, 'IDEMPOTENCY_CONFLICT')
    t.equal(await balanceOf(cli.gateway, wallet.address), 4_000_000n)

    const base = `${cli.scheduler}/api/v1/tasks/${task.id}`
    // Owner endpoints need the wallet proof; a stranger's proof finds nothing.
    const anonymous = await fetch(base)
    t.equal(anonymous.status, 401)
    t.ok((await json(anonymous)).extensions['sign-in-with-x'].info.nonce, '401 carries the SIWX challenge')
    const stranger = await owner(privateKeyToAccount(generatePrivateKey()), base)
    t.equal(stranger.status, 404)
    const got = await json(await owner(wallet, base))
    t.equal(got.id, task.id)
    t.ok(got.next_run_at, 'next_run_at is set')

    // Runs happen on the clock.
    const scheduled = await eventually(
      'a scheduled run',
      async () => {
        const list = await json(await owner(wallet, `${base}/runs`))
        return list.runs.find((run: Json) => run.trigger === 'schedule' && run.status === 'succeeded')
      },
      150_000,
    )
    t.ok(BigInt(scheduled.cost_micros) > 0n, 'a scheduled run costs something')
    const scheduledRun = await json(await owner(wallet, `${cli.scheduler}/api/v1/runs/${scheduled.id}`))
    t.match(scheduledRun.stdout, /hello from the sandbox/)
    t.match(scheduledRun.stderr, /to stderr/)
    const logs = await fetch(scheduledRun.logs_url)
    t.equal(logs.status, 200)
    t.match(await logs.text(), /hello from the sandbox/)

    // Synchronous run: returns the finished run inline. (A scheduled slot may hold the task for a
    // moment: one run at a time, so RUN_IN_FLIGHT is retried.)
    const syncRun = async (url: string, init: RequestInit, retryOn: number) => {
      for (let i = 0; ; i += 1) {
        const response = (await url.includes('/webhook')) ? await fetch(url, init) : await owner(wallet, url, init)
        if (response.status !== retryOn || i === 10) return response
        await new Promise((resolve) => setTimeout(resolve, 1000))
      }
    }
    const now = await syncRun(`${base}/runs`, { method: 'POST' }, 409)
    t.equal(now.status, 200)
    const nowRun = await json(now)
    t.match(nowRun, { status: 'succeeded', trigger: 'manual', exit_code: 0 })
    t.match(nowRun.stdout, /hello from the sandbox/)
    t.match(nowRun.runtime_version, /^node \d+\.\d+/, 'the real interpreter version is reported')

    // Trigger: queued, executed within a pass.
    const triggered = await owner(wallet, `${base}/trigger`, { method: 'POST' })
    t.equal(triggered.status, 202)
    t.match(await json(triggered), { queued: true, status: 'active' })
    await eventually(
      'the triggered run',
      async () => (await json(await owner(wallet, `${base}/runs`))).runs.find((run: Json) => run.trigger === 'trigger' && run.status === 'succeeded'),
      30_000,
    )

    // Fund: the top-up is paid and added.
    const before = await json(await owner(wallet, base))
    const funded = await pay(`${base}/fund`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': crypto.randomUUID(), 'x-pay-amount-micros': '500000' },
      body: JSON.stringify({ top_up_amount_micros: 500000 }),
    })
    t.equal(funded.status, 200)
    const afterFund = await json(funded)
    t.ok(BigInt(afterFund.balance_micros) >= BigInt(before.balance_micros) + 500_000n - 10_000n, 'balance grew by the top-up (minus any run in between)')

    // Pause and resume.
    const paused = await json(await owner(wallet, `${base}/pause`, { method: 'POST' }))
    t.match(paused, { status: 'paused', next_run_at: null, recovery_hint: { reason: 'paused_manually' } })
    const resumed = await json(await owner(wallet, `${base}/resume`, { method: 'POST' }))
    t.match(resumed, { status: 'active' })

    // Webhook: enable, rotate (the old secret dies at once), call.
    const first = await json(await owner(wallet, `${base}/webhook`, { method: 'PUT' }))
    t.match(first.secret, /^whsec_/)
    const rotated = await json(await owner(wallet, `${base}/webhook`, { method: 'PUT' }))
    t.not(rotated.secret, first.secret)
    const oldSecret = await fetch(`${base}/webhook`, { method: 'POST', headers: { authorization: `Bearer ${first.secret}` } })
    t.equal(oldSecret.status, 401)
    const hook = await syncRun(`${base}/webhook`, { method: 'POST', headers: { authorization: `Bearer ${rotated.secret}` } }, 429)
    t.equal(hook.status, 200)
    t.match(await json(hook), { trigger: 'webhook', status: 'succeeded' })

    // The completion e-mail of scheduled/triggered runs went to notify_email.
    const outbox = await json(await fetch(`${cli.gateway}/dev/outbox`))
    t.ok(
      (outbox.messages ?? outbox).some((m: Json) => m.to === 'owner@example.com' && String(m.subject).includes(task.id)),
      'completion e-mail sent',
    )

    // Delete: the refund equals everything paid minus the cumulative cost, on-chain.
    const walletBefore = await balanceOf(cli.gateway, wallet.address)
    const final = await json(await owner(wallet, base))
    const deleted = await owner(wallet, base, { method: 'DELETE' })
    t.equal(deleted.status, 200)
    const closing = await json(deleted)
    const ledger = await json(await owner(wallet, `${base}/ledger`))
    const funded_ = ledger.rows.filter((row: Json) => row.kind === 'charge').reduce((acc: bigint, row: Json) => acc + BigInt(row.amount_micros), 0n)
    const cost = -ledger.rows.filter((row: Json) => row.kind === 'run_cost').reduce((acc: bigint, row: Json) => acc + BigInt(row.amount_micros), 0n)
    t.equal(funded_, 1_500_000n, 'create + top-up')
    t.ok(cost >= BigInt(final.cumulative_cost_micros), 'cost covers every run')
    t.equal(BigInt(closing.refunded_micros), funded_ - cost, 'refund = max_amount (+ top-ups) - cumulative cost')
    t.match(closing.refund_tx_hash, /^0x[0-9a-f]{64}$/)
    t.equal(ledger.sum_micros, '0', 'the ledger of a deleted task sums to 0')
    t.equal(await balanceOf(cli.gateway, wallet.address), walletBefore + funded_ - cost, 'the refund arrived on-chain')
    const again = await owner(wallet, base, { method: 'DELETE' })
    t.equal(again.status, 200, 'DELETE is idempotent')
    t.equal((await json(again)).refunded_micros, closing.refunded_micros)
    t.equal(await balanceOf(cli.gateway, wallet.address), walletBefore + funded_ - cost, 'and refunds once')
  },
)

t.test('two concurrent webhook calls: one runs, the other gets 429', { skip: available.ok ? false : available.reason }, async (t) => {
  const wallet = privateKeyToAccount(generatePrivateKey())
  await faucet(cli.gateway, wallet.address, 1_000_000n)
  const created = await payingFetch(wallet)(`${cli.scheduler}/api/v1/tasks`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': crypto.randomUUID(), 'x-pay-amount-micros': '200000' },
    body: JSON.stringify(
      createBody({
        schedule: undefined,
        notify_email: undefined,
        max_amount_usdc_micros: 200_000,
        source: "await new Promise((r) => setTimeout(r, 2000)); console.log('slow done')\n",
      }),
    ),
  })
  t.equal(created.status, 201)
  const task = await json(created)
  const { secret } = await json(await owner(wallet, `${cli.scheduler}/api/v1/tasks/${task.id}/webhook`, { method: 'PUT' }))
  const call = () => fetch(`${cli.scheduler}/api/v1/tasks/${task.id}/webhook`, { method: 'POST', headers: { authorization: `Bearer ${secret}` } })
  const [a, b] = await Promise.all([call(), call()])
  t.same([a.status, b.status].sort(), [200, 429])
  const limited = [a, b].find((response) => response.status === 429) as Response
  t.equal((await json(limited)).code, 'RATE_LIMIT')
  const ok = [a, b].find((response) => response.status === 200) as Response
  t.match(await json(ok), { status: 'succeeded', stdout: /slow done/ })
})

t.test('bad create input answers problem+json naming the field, before any payment', { skip: available.ok ? false : available.reason }, async (t) => {
  const post = (body: unknown, headers: Record<string, string> = {}) =>
    fetch(`${cli.scheduler}/api/v1/tasks`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': crypto.randomUUID(), 'x-pay-amount-micros': '1000000', ...headers },
      body: JSON.stringify(body),
    })
  const cases: [string, unknown, string, string][] = [
    ['cron garbage', createBody({ schedule: { cron: 'every tuesday' } }), 'INVALID_CRON', 'body.schedule.cron'],
    ['timezone garbage', createBody({ schedule: { cron: '* * * * *', timezone: 'Mars/Olympus' } }), 'INVALID_CRON', 'body.schedule.timezone'],
    ['unknown field', createBody({ colour: 'red' }), 'validation_error', 'body.colour'],
    ['env with an object', createBody({ env: { N: { x: 1 } } }), 'validation_error', 'body.env.N'],
    ['env with a number (not coerced to "1")', createBody({ env: { N: 1 } }), 'validation_error', 'body.env.N'],
    ['env with a boolean', createBody({ env: { DEBUG: true } }), 'validation_error', 'body.env.DEBUG'],
    ['micros as a fraction', createBody({ max_amount_usdc_micros: 1.5 }), 'validation_error', 'body.max_amount_usdc_micros'],
    ['negative micros', createBody({ max_amount_usdc_micros: -5 }), 'validation_error', 'body.max_amount_usdc_micros'],
    ['runtime', createBody({ runtime: 'ruby' }), 'validation_error', 'body.runtime'],
    ['huge source', createBody({ source: 'x'.repeat(300_000) }), 'validation_error', 'body.source'],
    ['preinstalled dependency', createBody({ dependencies: ['axios'] }), 'UNSUPPORTED_DEPENDENCY', 'body.dependencies.0'],
    ['unknown sibling', createBody({ max_sibling_calls: 1, tool_list: ['nope'] }), 'UNKNOWN_SIBLING', 'body.tool_list.0'],
    ['open tool list without a spend cap', createBody({ max_sibling_calls: 2 }), 'validation_error', 'body.max_sibling_spend_micros'],
  ]
  for (const [name, body, code, field] of cases) {
    const response = await post(body)
    t.ok(response.status >= 400 && response.status < 500, `${name}: 4xx (${response.status})`)
    t.match(response.headers.get('content-type'), /application\/problem\+json/, `${name}: problem+json`)
    const problem = await json(response)
    t.equal(problem.code.toLowerCase(), code.toLowerCase(), `${name}: code ${problem.code}`)
    t.match(problem.field ?? '', field, `${name}: names ${problem.field}`)
  }
  const noKey = await fetch(`${cli.scheduler}/api/v1/tasks`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(createBody()) })
  t.equal(noKey.status, 400)
  t.match((await json(noKey)).field, /idempotency-key/)
})
