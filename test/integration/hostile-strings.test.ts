// Hostile strings, on PGlite and on a throw-away real Postgres database:
// - the embedded ResourceStore (controllers/local/postgres-store.ts) group-commits Task/Run
//   writes; a write Postgres refuses (a NUL or an unpaired surrogate in a spec or status, a NUL in
//   a name) fails for its own caller only: 1 poison + 12 valid concurrent creates, status patches
//   and deletes → the 12 are written, with their watch events, the poison is refused;
// - the real gateway, scheduler and memory apps answer a JSON body (sent as raw JSON text
//   escapes), a query string, a path parameter or a header holding U+0000 or a lone surrogate with
//   a 400 validation_error naming the field, never a 500; 12 valid task creates racing one poison
//   all succeed; legitimate Unicode (emoji, RTL, combining marks, ZWJ) is stored unchanged.
import t, { type Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import { x402Client } from '@x402/core/client'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import { wrapFetchWithPayment } from '@x402/fetch'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { openDb, type Db } from '../../src/platform/db/index.ts'
import { migrate } from '../../src/platform/db/migrate.ts'
import { PostgresResourceStore } from '../../controllers/local/postgres-store.ts'
import { FakeClock } from '../helpers/fake-clock.ts'
import { worldApps } from '../helpers/world-apps.ts'
import { openWorld } from '../helpers/scheduler-world.ts'
import { throwawayDatabase } from '../helpers/servers.ts'
import { NotFoundError, type TaskResource } from '../../src/scheduler/contract/index.ts'

const API = 'jobs.agent-gateway.dev/v1alpha1'
const PROBLEM = 'application/problem+json; charset=utf-8'
const POISONS = { nul: 'print("a\u0000b")', surrogate: 'print("a\ud800b")' } as const
const LEGIT_SOURCE = 'print("hi 😀 👨‍👩‍👧‍👦 שלום مرحبا e\u0301 a\u200db \u{1f1eb}\u{1f1f7}")'

function newTask(name: string, spec: TaskResource['spec'] = {}) {
  return { apiVersion: API, kind: 'Task' as const, metadata: { name, namespace: 'default' }, spec }
}

function codeOf(result: PromiseSettledResult<unknown>): string {
  return result.status === 'fulfilled' ? 'ok' : String((result.reason as { code?: unknown }).code ?? (result.reason as Error).name)
}

// ------------------------------------------------------------------ the resource store

async function storeSuite(t: Test, db: Db): Promise<void> {
  await migrate(db)
  const tasks = new PostgresResourceStore<TaskResource>(db, { kind: 'Task' })

  for (const [kind, poison] of Object.entries(POISONS)) {
    await t.test(`creates: 1 poison (${kind} in spec.source) + 12 valid, concurrent`, async (t) => {
      const names = Array.from({ length: 13 }, (_, i) => `${kind}-c${i}`)
      const poisonAt = 6
      // Submitted together: the first goes out at once, the other 12 (poison included) share the next batch.
      const results = await Promise.allSettled(names.map((name, i) => tasks.create(newTask(name, { source: i === poisonAt ? poison : `print(${i})` }))))
      t.same(
        results.map(codeOf),
        names.map((_, i) => (i === poisonAt ? (kind === 'nul' ? '22P05' : '22P02') : 'ok')),
        'only the poison failed',
      )
      for (const [i, name] of names.entries()) {
        const stored = await tasks.get('default', name)
        if (i === poisonAt) t.equal(stored, undefined, 'the poison was not written')
        else t.equal(stored?.spec.source, `print(${i})`, `${name} was written`)
      }
      const events = await db.query<{ name: string }>(
        `select object #>> '{metadata,name}' as name from resource_events where kind = 'Task' and type = 'ADDED' and object #>> '{metadata,name}' like $1`,
        [`${kind}-c%`],
      )
      t.equal(events.length, 12, 'one ADDED event per valid create')
      const rvs = await Promise.all(names.filter((_, i) => i !== poisonAt).map(async (name) => BigInt((await tasks.get('default', name))?.metadata.resourceVersion ?? '0')))
      t.equal(new Set(rvs.map(String)).size, 12, 'distinct resourceVersions')
    })
  }

  await t.test('a NUL in a name and a lone surrogate in labels: refused alone', async (t) => {
    const results = await Promise.allSettled([
      tasks.create(newTask('n-first')),
      tasks.create(newTask('n-a')),
      tasks.create(newTask('n-\u0000')),
      tasks.create({ ...newTask('n-b'), metadata: { name: 'n-b', namespace: 'default', labels: { tier: 'x\udc00' } } }),
      tasks.create(newTask('n-c')),
    ])
    t.same(results.map(codeOf), ['ok', 'ok', '22021', '22P02', 'ok'])
    t.ok(await tasks.get('default', 'n-c'))
  })

  await t.test('status patches: 1 poison + 12 valid, concurrent', async (t) => {
    const names = Array.from({ length: 13 }, (_, i) => `p${i}`)
    for (const name of names) await tasks.create(newTask(name))
    const results = await Promise.allSettled(
      names.map((name, i) => tasks.patchStatus('default', name, (i === 5 ? { lastScheduleTime: POISONS.nul } : { lastScheduleTime: `t${i}` }) as TaskResource['status'])),
    )
    t.same(
      results.map(codeOf),
      names.map((_, i) => (i === 5 ? '22P05' : 'ok')),
    )
    for (const [i, name] of names.entries()) {
      const stored = await tasks.get('default', name)
      t.equal((stored?.status as { lastScheduleTime?: string } | undefined)?.lastScheduleTime, i === 5 ? undefined : `t${i}`, name)
    }
  })

  await t.test('deletes: 1 poison name + 12 valid, concurrent', async (t) => {
    const names = Array.from({ length: 12 }, (_, i) => `d${i}`)
    for (const name of names) await tasks.create(newTask(name))
    const all = [...names.slice(0, 6), 'd-\u0000', ...names.slice(6)]
    const results = await Promise.allSettled(all.map((name) => tasks.delete('default', name)))
    t.same(
      results.map(codeOf),
      all.map((name) => (name.includes('\u0000') ? '22021' : 'ok')),
    )
    for (const name of names) t.equal(await tasks.get('default', name), undefined, `${name} deleted`)
    t.rejects(tasks.delete('default', 'd0'), NotFoundError)
  })
}

t.test('resource store on PGlite', async (t) => {
  const db = await openDb({ kind: 'pglite', dataDir: 'memory://' })
  t.teardown(() => db.close())
  await storeSuite(t, db)
})

t.test('resource store on Postgres', async (t) => {
  const url = await throwawayDatabase(t)
  if (url === undefined) return
  const db = await openDb({ kind: 'postgres', url })
  t.teardown(() => db.close())
  await storeSuite(t, db)
})

// ------------------------------------------------------------------ the apps over HTTP

const _PAY_TO = '0x000000000000000000000000000000000000c0de' as const
const _GATEWAY_URL = 'https://gw.test'

interface Answer {
  status: number
  type: string | undefined
  body: any
}

async function inject(app: FastifyInstance, method: string, url: string, options: { payload?: string; headers?: Record<string, string> } = {}): Promise<Answer> {
  const response = await app.inject({
    method: method as 'GET',
    url,
    headers: { ...(options.payload === undefined ? {} : { 'content-type': 'application/json' }), ...(options.headers ?? {}) },
    ...(options.payload === undefined ? {} : { payload: options.payload }),
  })
  return { status: response.statusCode, type: response.headers['content-type'] as string | undefined, body: response.body ? response.json() : undefined }
}

function taskJson(source: string, extra = ''): string {
  // Raw JSON text: `source` is spliced in as written, so "\\u0000" arrives as the JSON escape \u0000.
  return `{"schedule":{"every":"minute"},"runtime":"python","entrypoint":"main.py","source":"${source}","max_runtime_sec":10,"max_sibling_calls":0,"max_amount_usdc_micros":5000${extra}}`
}

async function appsSuite(t: Test, databaseUrl?: string): Promise<void> {
  const start = Math.floor(Date.now() / 60_000) * 60_000 + 30_000
  const world = await openWorld({ ...(databaseUrl ? { databaseUrl } : {}), clock: new FakeClock(start) })
  const { token, gateway, gatewayBase, scheduler, memory: memoryApp } = await worldApps(t, world, { memory: true })
  const memory = memoryApp as NonNullable<typeof memoryApp>

  const registered = (await gateway.inject({ method: 'POST', url: '/auth/register' })).json() as { agentId: string; accessToken: string }
  const buyer = privateKeyToAccount(generatePrivateKey())
  token.mint(buyer.address, 100_000_000n)
  const paying = wrapFetchWithPayment(fetch, new x402Client().register('eip155:8453', new ExactEvmScheme(buyer)).setSpendControls(false))
  const purchase = await paying(`${gatewayBase}/plans/scheduler-credit-5/purchase`, { method: 'POST', headers: { 'svc-agent-authorization': `Bearer ${registered.accessToken}` } })
  t.equal(purchase.status, 200, 'a plan to create tasks with')
  const auth = { authorization: `Bearer ${registered.accessToken}` }

  const refused = (t: Test, answer: Answer, field: string, detail: RegExp, what: string) => {
    t.equal(answer.status, 400, `${what}: 400`)
    t.equal(answer.type, PROBLEM, `${what}: problem+json`)
    t.match(answer.body, { code: 'validation_error', field, detail }, `${what}: names ${field}`)
  }
  const NUL = /U\+0000/
  const LONE = /unpaired UTF-16 surrogate/

  await t.test('gateway', async (t) => {
    refused(t, await inject(gateway, 'POST', '/auth/claim', { payload: '{"email":"a\\u0000b@example.com"}', headers: auth }), 'body.email', NUL, 'NUL in an e-mail')
    refused(t, await inject(gateway, 'POST', '/auth/claim', { payload: '{"email":"a\\ud800@example.com"}', headers: auth }), 'body.email', LONE, 'a lone surrogate in an e-mail')
    refused(t, await inject(gateway, 'GET', '/openapi.json?q=song%00'), 'query.q', NUL, 'NUL in a search query')
    const fine = await inject(gateway, 'GET', `/openapi.json?q=${encodeURIComponent('song 🎵')}`)
    t.equal(fine.status, 200, 'an emoji in a search query is fine')
  })

  await t.test('songs and speech: every string field, before any 402', async (t) => {
    const song = (extra: string) => inject(gateway, 'POST', '/api/v1/audio/songs/songmodel-3-pro', { payload: `{"candidateCount":1,${extra}}` })
    refused(t, await song('"prompt":"lofi\\u0000"'), 'body.prompt', NUL, 'NUL in a prompt')
    refused(t, await song('"prompt":"x","negativePrompt":"\\ud800"'), 'body.negativePrompt', LONE, 'a lone surrogate in negativePrompt')
    refused(
      t,
      await song('"prompt":"x","sections":[{"name":"a","startSec":0,"endSec":30,"description":"quiet\\u0000"}]'),
      'body.sections.0.description',
      NUL,
      'NUL in a section description',
    )
    refused(
      t,
      await song('"prompt":"x","instrumentalLeadMapping":[{"role":"lead","instrument":"sax\\udc00"}]'),
      'body.instrumentalLeadMapping.0.instrument',
      LONE,
      'a lone surrogate in an instrument',
    )
    const speech = await inject(gateway, 'POST', '/api/v1/audio/speech/speechmodel-3.1-flash-tts', { payload: '{"input":"hello\\u0000"}' })
    refused(t, speech, 'body.input', NUL, 'NUL in speech input')
    const legit = await song(`"prompt":${JSON.stringify('שלום \u200f\u200b lofi 🎵')}`)
    t.equal(legit.status, 402, 'right-to-left, zero-width and emoji in a prompt pass validation: the answer is the price')
  })

  await t.test('memory (schemas validate before any handler or 402)', async (t) => {
    refused(t, await inject(memory, 'POST', '/api/v1/memories', { payload: '{"content":"x","metadata":{"k\\u0000":"v"}}' }), 'body.metadata.k\\u0000', NUL, 'NUL in a metadata key')
    refused(t, await inject(memory, 'POST', '/api/v1/memories', { payload: '{"content":"\\udfff"}' }), 'body.content', LONE, 'a lone surrogate in content')
    refused(t, await inject(memory, 'POST', '/api/v1/contexts', { payload: '{"query":"a\\u0000"}' }), 'body.query', NUL, 'NUL in a recall query')
    // Bad input that is valid Unicode: still a 400 naming the field, before any 402 or 401.
    const invalid = async (method: string, url: string, payload: string | undefined, field: string, what: string, headers: Record<string, string> = {}) => {
      const answer = await inject(memory, method, url, { ...(payload === undefined ? {} : { payload }), headers })
      t.equal(answer.status, 400, `${what}: 400`)
      t.match(answer.body, { code: 'validation_error', field }, `${what}: names ${field}`)
    }
    await invalid('POST', '/api/v1/memories', JSON.stringify({ content: 'x'.repeat(32_769) }), 'body.content', 'oversized content')
    await invalid('POST', '/api/v1/memories', JSON.stringify({ content: '' }), 'body.content', 'empty content')
    await invalid('POST', '/api/v1/memories', JSON.stringify({ content: 'x', tags: Array.from({ length: 21 }, (_, i) => `t${i}`) }), 'body.tags', 'too many tags')
    await invalid('POST', '/api/v1/memories', JSON.stringify({ content: 'x', tags: ['a', 'a'] }), 'body.tags', 'duplicate tags')
    await invalid('POST', '/api/v1/memories', JSON.stringify({ content: 'x', owner: '0xabc' }), 'body.owner', 'an unknown field')
    await invalid('POST', '/api/v1/memories', JSON.stringify({ content: 'x', context: '../etc' }), 'body.context', 'a context outside its pattern')
    await invalid('POST', '/api/v1/contexts', JSON.stringify({ query: '' }), 'body.query', 'an empty query')
    await invalid('POST', '/api/v1/contexts', JSON.stringify({ query: 'x', limit: 51 }), 'body.limit', 'limit above 50')
    await invalid('POST', '/api/v1/contexts/expand', JSON.stringify({ ids: ['not-a-uuid'] }), 'body.ids.0', 'a bad id')
    await invalid('POST', '/api/v1/contexts/expand', JSON.stringify({ ids: [] }), 'body.ids', 'no ids')
    await invalid('POST', '/api/v1/deposits', undefined, 'header.x-pay-amount-micros', 'a deposit without an amount', { 'x-pay-amount-micros': '1.5' })
  })

  await t.test('scheduler: every string field', async (t) => {
    const create = (payload: string, headers: Record<string, string> = {}) =>
      inject(scheduler, 'POST', '/api/v1/tasks', { payload, headers: { ...auth, 'idempotency-key': `k-${Math.random()}`, ...headers } })
    refused(t, await create(taskJson('a\\u0000b')), 'body.source', NUL, 'NUL in source')
    refused(t, await create(taskJson('a\\ud800b')), 'body.source', LONE, 'a lone high surrogate in source')
    refused(t, await create(taskJson('\\udc00')), 'body.source', LONE, 'a lone low surrogate in source')
    refused(t, await create(taskJson('x', ',"env":{"MY_KEY":"v\\u0000"}')), 'body.env.MY_KEY', NUL, 'NUL in an env value')
    refused(t, await create(taskJson('x', ',"env":{"MY\\u0000KEY":"v"}')), 'body.env.MY\\u0000KEY', /has a key that contains U\+0000/, 'NUL in an env key')
    refused(t, await create(taskJson('x', ',"notify_email":"a\\u0000@example.com"')), 'body.notify_email', NUL, 'NUL in notify_email')
    refused(t, await create(taskJson('x', ',"dependencies":["requests","nu\\ud83dmpy"]')), 'body.dependencies.1', LONE, 'a lone surrogate in a dependency')
    refused(t, await create(taskJson('x', ',"entrypoint":"m\\u0000.py"').replace('"entrypoint":"main.py",', '')), 'body.entrypoint', NUL, 'NUL in the entrypoint')
    refused(t, await create(taskJson('x'), { 'idempotency-key': 'k\ud800' }), 'header.idempotency-key', LONE, 'a lone surrogate in Idempotency-Key')
    refused(t, await inject(scheduler, 'GET', '/api/v1/tasks/abc%00def', { headers: auth }), 'path.id', NUL, 'NUL in a path parameter')
    refused(t, await inject(scheduler, 'PATCH', '/api/v1/tasks/abc', { payload: '{"source":"\\u0000"}', headers: auth }), 'body.source', NUL, 'NUL in an update')
    const count = await world.db.query<{ n: bigint }>('select count(*)::int8 as n from scheduler_tasks')
    t.equal(count[0]?.n, 0n, 'nothing was created')
  })

  await t.test('scheduler: a huge body of NULs is refused', async (t) => {
    const payload = taskJson('\\u0000'.repeat(150_000)) // ~900 KB, under the 1 MB body limit
    const answer = await inject(scheduler, 'POST', '/api/v1/tasks', { payload, headers: { ...auth, 'idempotency-key': 'k-huge' } })
    refused(t, answer, 'body.source', NUL, 'a source of 150,000 NULs')
  })

  await t.test('scheduler: 1 poison + 12 valid concurrent creates → the 12 are created', async (t) => {
    const bodies = Array.from({ length: 13 }, (_, i) => (i === 6 ? taskJson('print(\\"a\\u0000b\\")') : taskJson(`print(${i})`)))
    const answers = await Promise.all(bodies.map((payload, i) => inject(scheduler, 'POST', '/api/v1/tasks', { payload, headers: { ...auth, 'idempotency-key': `race-${i}` } })))
    t.same(
      answers.map((a) => a.status),
      bodies.map((_, i) => (i === 6 ? 400 : 201)),
      'only the poison was refused',
    )
    t.equal(answers[6]?.body.field, 'body.source')
    for (const [i, answer] of answers.entries()) {
      if (i === 6) continue
      const resource = await world.tasks.get('default', answer.body.id)
      t.equal(resource?.spec.source, `print(${i})`, `task ${i} has its Task resource`)
    }
  })

  await t.test('legitimate Unicode is stored unchanged', async (t) => {
    const answer = await inject(scheduler, 'POST', '/api/v1/tasks', {
      payload: JSON.stringify({ ...JSON.parse(taskJson('x')), source: LEGIT_SOURCE, env: { GREETING: 'שלום 👋🏽' } }),
      headers: { ...auth, 'idempotency-key': 'k-unicode' },
    })
    t.equal(answer.status, 201, 'created')
    const resource = await world.tasks.get('default', answer.body.id)
    t.equal(resource?.spec.source, LEGIT_SOURCE, 'the source round-trips exactly')
    const raw = await inject(scheduler, 'POST', '/api/v1/tasks', {
      payload: taskJson('pair \\ud83d\\ude00 ok'),
      headers: { ...auth, 'idempotency-key': 'k-pair' },
    })
    t.equal(raw.status, 201, 'an escaped surrogate pair is a character')
    t.equal((await world.tasks.get('default', raw.body.id))?.spec.source, 'pair 😀 ok')
  })
}

t.test('apps on PGlite', async (t) => {
  await appsSuite(t)
})

t.test('apps on Postgres', async (t) => {
  const url = await throwawayDatabase(t)
  if (url === undefined) return
  await appsSuite(t, url)
})
