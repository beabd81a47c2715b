// A host that cannot run task scripts (here: bwrap taken off PATH) must not sell tasks: the real
// CLI says what is missing and how to fix it on stderr, the scheduler's /readyz is 503 with the
// reason (its /healthz and the other listeners stay up), and create / fund / run now / trigger /
// webhook answer 503 problem+json before any payment is asked (no 402). Discovery, the gateway
// and the rest of the scheduler keep working.
import t, { type Test } from 'tap'
import { mkdtempSync, readdirSync, rmSync, symlinkSync, chmodSync, existsSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { startCli, type CliProcess } from '../helpers/cli.ts'

/** A PATH of one dir holding every program of the current PATH (first wins) except `without`. */
function pathWithout(without: string): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'agw-path-'))
  chmodSync(dir, 0o755)
  for (const source of (process.env.PATH ?? '').split(':').filter((entry) => entry.startsWith('/'))) {
    let names: string[]
    try {
      names = readdirSync(source)
    } catch {
      continue
    }
    for (const name of names) {
      if (name === without || existsSync(path.join(dir, name))) continue
      try {
        symlinkSync(path.join(source, name), path.join(dir, name))
      } catch {
        /* a name seen twice */
      }
    }
  }
  return dir
}

type Json = Record<string, any>

let cli: CliProcess
const strippedPath = pathWithout('bwrap')
t.before(async () => {
  cli = await startCli({ env: { PATH: strippedPath, SCHEDULER_EXECUTOR: 'local' } })
})
t.teardown(async () => {
  await cli?.stop('SIGKILL')
  rmSync(strippedPath, { recursive: true, force: true })
  if (cli?.env.DATA_DIR) rmSync(cli.env.DATA_DIR, { recursive: true, force: true })
})

const createBody = {
  schedule: { every: 'minute' },
  runtime: 'python',
  entrypoint: 'main.py',
  source: 'print("hello")\n',
  max_runtime_sec: 20,
  max_sibling_calls: 0,
  max_amount_usdc_micros: 1_000_000,
}

async function problem(t: Test, response: Response, what: string): Promise<Json> {
  t.equal(response.status, 503, `${what}: 503`)
  t.match(response.headers.get('content-type'), /application\/problem\+json/, `${what}: problem+json`)
  const body = (await response.json()) as Json
  t.equal(body.code, 'unavailable', `${what}: code unavailable`)
  t.match(body.detail, /bwrap/, `${what}: says why`)
  t.notOk(response.headers.get('payment-required'), `${what}: no payment challenge`)
  t.equal(response.headers.get('retry-after'), '10', `${what}: Retry-After (a replica whose check has no verdict yet answers the same)`)
  return body
}

t.test('start-up prints what is missing and the fix, and still serves', async (t) => {
  t.match(cli.output(), /local sandbox executor \(SCHEDULER_EXECUTOR=local\) cannot run task scripts/)
  t.match(cli.output(), /bwrap \(bubblewrap\) is not (installed|on the service's PATH)/)
  t.match(cli.output(), /fix: (apt-get install -y bubblewrap|add \/\S+ to the service's PATH)/)
  t.match(cli.output(), /agent-gateway ready/)
})

t.test("the scheduler's /readyz is 503 with the reason; /healthz and the other listeners are fine", async (t) => {
  const ready = await fetch(`${cli.scheduler}/readyz`)
  t.equal(ready.status, 503)
  const body = (await ready.json()) as Json
  t.equal(body.status, 'not-ready')
  t.same(body.checks, { database: true, kv: true, executor: false })
  t.match(body.reasons.executor.reason, /bwrap/)
  t.match(body.reasons.executor.fix, /apt-get install -y bubblewrap|to the service's PATH/)
  t.equal((await fetch(`${cli.scheduler}/healthz`)).status, 200, 'scheduler /healthz')
  t.equal((await fetch(`${cli.gateway}/readyz`)).status, 200, 'gateway /readyz')
  t.equal((await fetch(`${cli.memory}/readyz`)).status, 200, 'memory /readyz')
})

t.test('create, fund, run now, trigger and webhook answer 503 before any 402', async (t) => {
  const unpaid = await fetch(`${cli.scheduler}/api/v1/tasks`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': crypto.randomUUID() },
    body: JSON.stringify(createBody),
  })
  await problem(t, unpaid, 'create without any payment header')
  const withAmount = await fetch(`${cli.scheduler}/api/v1/tasks`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': crypto.randomUUID(), 'x-pay-amount-micros': '1000000' },
    body: JSON.stringify(createBody),
  })
  await problem(t, withAmount, 'create with the amount header')
  const fund = await fetch(`${cli.scheduler}/api/v1/tasks/tsk_x/fund`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': crypto.randomUUID(), 'x-pay-amount-micros': '1000000' },
    body: JSON.stringify({ top_up_amount_micros: 1_000_000 }),
  })
  await problem(t, fund, 'fund')
  await problem(t, await fetch(`${cli.scheduler}/api/v1/tasks/tsk_x/runs`, { method: 'POST' }), 'run now')
  await problem(t, await fetch(`${cli.scheduler}/api/v1/tasks/tsk_x/trigger`, { method: 'POST' }), 'trigger')
  await problem(t, await fetch(`${cli.scheduler}/api/v1/tasks/tsk_x/webhook`, { method: 'POST', headers: { authorization: 'Bearer whsec_x' } }), 'webhook')
})

t.test('discovery and the rest of the scheduler still answer', async (t) => {
  t.equal((await fetch(`${cli.gateway}/openapi.json`)).status, 200, 'gateway /openapi.json')
  t.equal((await fetch(`${cli.gateway}/manifest.json`)).status, 200, 'gateway /manifest.json')
  t.equal((await fetch(`${cli.scheduler}/openapi.json`)).status, 200, 'scheduler /openapi.json')
  t.equal((await fetch(`${cli.scheduler}/api/v1/rates`)).status, 200, 'scheduler rates')
  const owned = await fetch(`${cli.scheduler}/api/v1/tasks/tsk_x`)
  t.equal(owned.status, 401, 'owner operations are not refused for the executor (they ask for the wallet proof)')
})
