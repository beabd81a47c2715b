// The helper endpoint of task runs (src/scheduler/helpers) on a real database (Postgres, then
// PGlite), over real HTTP: the helpers app listens on 127.0.0.1, a local OpenAI-compatible server
// stands in for the LLM upstream, and local capabilities answer 402 with real x402 (v2 and v1)
// and MPP challenges. Payments are made by the official clients with a fresh payer key and
// verified by this repo's own x402/MPP verification (signature recovered to the payer), MPP
// settled through the scripted Tempo RPC. Rows are SQL fixtures after the real migrations.
import { randomBytes } from 'node:crypto'
import { mkdtemp, rm } from 'node:fs/promises'
import http from 'node:http'
import net, { type AddressInfo } from 'node:net'
import os from 'node:os'
import path from 'node:path'
import t, { type Test } from 'tap'
import { encodePaymentResponseHeader } from '@x402/core/http'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { createLocalBlobStore } from '../../src/platform/blobs.ts'
import { systemClock } from '../../src/platform/clock.ts'
import { openDb, type Db } from '../../src/platform/db/index.ts'
import { migrate } from '../../src/platform/db/migrate.ts'
import { createHttpApp } from '../../src/platform/http.ts'
import { openKeyValue } from '../../src/platform/kv/index.ts'
import { createLogger } from '../../src/platform/logger.ts'
import { createMetrics } from '../../src/platform/metrics.ts'
import { createMpp, tempoClientFromUrl } from '../../src/payments/mpp/index.ts'
import { PaymentRejected, type PriceQuote } from '../../src/payments/types.ts'
import { verifyX402, x402Challenge, x402ProofOf } from '../../src/payments/x402/index.ts'
import { credentialsOf, paymentCredential } from '../../src/payments/credentials.ts'
import { DEFAULT_RATES, estimateCeilingMicros, type SchedulerRates } from '../../src/scheduler/domain/rates.ts'
import { registerHelperRoutes, registerSiblingPublicRoutes, type HelperDeps } from '../../src/scheduler/helpers/index.ts'
import { maxOutputTokensWithin, tokenCostMicros } from '../../src/scheduler/helpers/llm.ts'
import { sha256Hex } from '../../src/scheduler/helpers/run.ts'
import { chromiumAvailable } from '../../src/scheduler/helpers/siblings/screenshot.ts'
import { startTempoRpc } from '../helpers/tempo-rpc.ts'
import { PG_URL, throwawayDatabase } from '../helpers/servers.ts'

const logger = createLogger('silent')

// ---------------------------------------------------------------- shared outside servers

interface Served {
  server: http.Server
  base: string
  port: number
}

async function serve(t: Test, handler: http.RequestListener): Promise<Served> {
  const server = http.createServer(handler)
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()))
  t.teardown(() => {
    server.closeAllConnections()
    return new Promise<void>((resolve) => server.close(() => resolve()))
  })
  const port = (server.address() as AddressInfo).port
  return { server, base: `http://127.0.0.1:${port}`, port }
}

async function readBody(req: http.IncomingMessage): Promise<string> {
  const chunks: Buffer[] = []
  for await (const chunk of req) chunks.push(chunk as Buffer)
  return Buffer.concat(chunks).toString('utf8')
}

/** The OpenAI-compatible upstream: records requests, answers per `llm.mode`. */
const llm = {
  mode: 'ok' as 'ok' | 'error' | 'no_usage',
  usage: { prompt_tokens: 1234, completion_tokens: 567 },
  requests: [] as Array<{ headers: http.IncomingHttpHeaders; body: Record<string, unknown> }>,
}
const llmServer = await serve(t, async (req, res) => {
  const body = JSON.parse(await readBody(req)) as Record<string, unknown>
  llm.requests.push({ headers: req.headers, body })
  if (req.url !== '/v1/chat/completions' || req.headers.authorization !== 'Bearer sk-test') {
    res.writeHead(404).end('{"error":"not found"}')
    return
  }
  if (llm.mode === 'error') {
    res.writeHead(500, { 'content-type': 'application/json' }).end('{"error":{"message":"model overloaded"}}')
    return
  }
  res.writeHead(200, { 'content-type': 'application/json' })
  res.end(
    JSON.stringify({
      id: 'chatcmpl-1',
      model: `${String(body.model)}-2026`,
      choices: [{ index: 0, message: { role: 'assistant', content: `echo: ${JSON.stringify((body.messages as unknown[]).at(-1))}` }, finish_reason: 'stop' }],
      ...(llm.mode === 'no_usage' ? {} : { usage: llm.usage }),
    }),
  )
})

/** The marketplace: paid capabilities behind real x402 / MPP challenges, verified locally. */
const PAY_TO = '0x1111111111111111111111111111111111111111' as const
const payer = generatePrivateKey()
const payerAddress = privateKeyToAccount(payer).address
const market = { probes: 0, paidAttempts: 0, verified: [] as Array<{ protocol: string; version: number; payer: string; amount: bigint }> }
const rpc = await startTempoRpc()
t.teardown(() => rpc.close())
const kv = await openKeyValue({ kind: 'memory' })
t.teardown(() => kv.close())
const mpp = createMpp({
  secretKey: 'helpers-test-secret-0123456789abcdef-0123',
  realm: 'market.test',
  recipient: PAY_TO,
  getClient: tempoClientFromUrl(rpc.url, { timeoutMs: 2_000 }),
  store: kv,
})
let marketBase = ''
const quote = (route: string, amountMicros: bigint): PriceQuote => ({
  amountMicros,
  resourceUrl: `${marketBase}${route}`,
  route: `POST ${route}`,
  description: `demo ${route}`,
  payTo: PAY_TO,
})
const market402 = await serve(t, async (req, res) => {
  const route = new URL(req.url ?? '/', 'http://x').pathname
  const body = await readBody(req)
  const json = (status: number, value: unknown, headers: Record<string, string> = {}) => {
    res.writeHead(status, { 'content-type': 'application/json', ...headers }).end(JSON.stringify(value))
  }
  if (route === '/free/v1') return json(200, { free: true, echo: body ? JSON.parse(body) : null })
  if (route === '/plain/v1') return json(402, { error: 'pay me somehow' })
  if (route === '/image/v1') {
    res.writeHead(200, { 'content-type': 'image/png' }).end(Buffer.from([0x89, 0x50, 0x4e, 0x47]))
    return
  }
  const x402Price = route === '/render/v1' || route === '/v1only/v1' ? 25_000n : route === '/both/v1' ? 30_000n : undefined
  const mppPrice = route === '/mpp/v1' || route === '/both/v1' ? 20_000n : undefined
  const xq = x402Price === undefined ? undefined : quote(route, x402Price)
  const mq = mppPrice === undefined ? undefined : quote(route, mppPrice)
  const challenge = (error: string) => {
    const headers: Record<string, string> = { 'cache-control': 'no-store' }
    let v1Body: Record<string, unknown> = { error }
    if (xq) {
      const parts = x402Challenge(xq)
      if (route !== '/v1only/v1') Object.assign(headers, parts.headers)
      v1Body = { ...parts.body, error }
    }
    if (mq) Object.assign(headers, mpp.challenge(mq).headers)
    json(402, v1Body, headers)
  }
  try {
    const authorization = req.headers.authorization
    if (authorization?.startsWith('Payment ') && mq) {
      market.paidAttempts++
      const payment = await mpp.verify(authorization, mq)
      const outcome = await payment.settle()
      if (outcome.status !== 'settled') return challenge('settlement failed')
      market.verified.push({ protocol: 'mpp', version: 1, payer: payment.payer, amount: payment.amountMicros })
      return json(200, { ok: true, paid: 'mpp' }, outcome.headers)
    }
    // The seller reads the proof as our guard does: the request's one payment credential.
    const credential = paymentCredential(credentialsOf(req.headers))
    const proof = credential?.protocol === 'x402' ? x402ProofOf(credential) : undefined
    if (proof && xq) {
      market.paidAttempts++
      const verified = await verifyX402(proof, xq, { now: () => Date.now() })
      market.verified.push({ protocol: 'x402', version: verified.version, payer: verified.payer, amount: verified.amountMicros })
      const settle = encodePaymentResponseHeader({ success: true, transaction: `0x${'ab'.repeat(32)}`, network: 'eip155:8453', payer: verified.payer })
      return json(200, { ok: true, paid: 'x402', version: verified.version, request: JSON.parse(body) }, { 'PAYMENT-RESPONSE': settle })
    }
    market.probes++
    return challenge('payment required')
  } catch (err) {
    if (err instanceof PaymentRejected) return challenge(err.reason)
    json(500, { error: String(err) })
  }
})
marketBase = market402.base

async function freePort(): Promise<number> {
  const probe = net.createServer()
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', () => resolve()))
  const port = (probe.address() as AddressInfo).port
  await new Promise<void>((resolve) => probe.close(() => resolve()))
  return port
}

// ---------------------------------------------------------------- pure money arithmetic

t.test('LLM cost arithmetic', async (t) => {
  const quick = DEFAULT_RATES.llm_profiles.quick
  // 1234 x 100000 + 567 x 400000 = 350,200,000 → 350.2 micros → 351 (rounded up once, over the sum)
  t.equal(tokenCostMicros(1234, 567, quick), 351n)
  t.equal(tokenCostMicros(0, 0, quick), 0n)
  t.equal(tokenCostMicros(10, 0, quick), 1n, 'a fraction of a micro is a micro')
  t.equal(tokenCostMicros(1_000_000, 1_000_000, DEFAULT_RATES.llm_profiles.standard), 2_800_000n)
  // budget 1000 micros, 34 prompt tokens: (1000e6 - 34 x 100000) / 400000 = 2491.5 → 2491
  t.equal(maxOutputTokensWithin(1000n, 34, quick), 2491)
  t.equal(tokenCostMicros(34, 2491, quick) <= 1000n, true)
  t.equal(tokenCostMicros(34, 2492, quick) > 1000n, true)
  t.equal(maxOutputTokensWithin(3n, 34, quick), 0, 'not even the prompt fits')
})

// ---------------------------------------------------------------- the suite, per database

interface Harness {
  db: Db
  base: string
  publicUrl: string
  task(options?: FixtureOptions): Promise<Fixture>
}

interface FixtureOptions {
  spec?: Record<string, unknown>
  balance?: bigint
  consecutive?: number
  status?: string
  taskStatus?: string
}

interface Fixture {
  taskId: string
  runId: string
  token: string
  ceiling: bigint
  helper(name: string, body: unknown, token?: string): Promise<{ status: number; body: any; headers: Headers }>
  meters(): Promise<Record<string, unknown>>
}

const BASE_SPEC = {
  schedule: null,
  runtime: 'python',
  source: 'print(1)',
  entrypoint: 'main.py',
  max_runtime_sec: 60,
  max_sibling_calls: 5,
  max_amount_usdc_micros: '1000000',
  tool_list: null,
  max_sibling_spend_micros: '100000',
  dependencies: [],
  notify_email: null,
  end_at: null,
  llm: null,
  artifacts: { enabled: false },
}

function id(prefix: string): string {
  return prefix + randomBytes(8).toString('hex')
}

async function startHarness(t: Test, db: Db, overrides: Partial<HelperDeps> = {}): Promise<Harness> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'agw-helpers-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const port = await freePort()
  const publicUrl = `http://127.0.0.1:${port}`
  const deps: HelperDeps = {
    db,
    clock: systemClock,
    rates: DEFAULT_RATES,
    logger,
    blobs: createLocalBlobStore(dir),
    publicSchedulerUrl: publicUrl,
    llm: { baseUrl: `${llmServer.base}/v1`, apiKey: 'sk-test', defaultModel: 'small-1', models: { standard: 'large-1' } },
    marketplace: {
      payerPrivateKey: payer,
      tempo: tempoClientFromUrl(rpc.url, { timeoutMs: 2_000 }),
      resolve: async (capability) => {
        if (capability === 'broken.test/x') throw new Error('directory is down')
        if (capability === 'internal.test/x') return { url: `http://localhost:${market402.port}/render` }
        return { url: `${market402.base}/${capability.split('/')[1]}` }
      },
    },
    egress: { allow: [`127.0.0.1:${market402.port}`] },
    screenshot: { chromiumPath: '/nonexistent/chromium' },
    ...overrides,
  }
  const app = createHttpApp({ name: 'scheduler', logger, metrics: createMetrics({ defaultMetrics: false }), bodyLimitBytes: 16 << 20 })
  registerHelperRoutes(app, deps)
  registerSiblingPublicRoutes(app, deps)
  await app.listen({ host: '127.0.0.1', port })
  t.teardown(() => app.close())

  async function task(options: FixtureOptions = {}): Promise<Fixture> {
    const spec = { ...BASE_SPEC, ...options.spec }
    const taskId = id('t')
    const runId = id('r')
    const token = randomBytes(24).toString('base64url')
    const rates: SchedulerRates = deps.rates
    const ceiling = estimateCeilingMicros(
      {
        max_runtime_sec: spec.max_runtime_sec as number,
        max_sibling_calls: spec.max_sibling_calls as number,
        dependencies: spec.dependencies as string[],
        llm: spec.llm === null ? null : { profile: (spec.llm as { profile: 'quick' }).profile, max_cost_usdc_micros_per_run: null },
      },
      rates,
    )
    await db.query(
      `insert into scheduler_tasks (id, owner, rail, status, spec, idempotency_key, request_hash, consecutive_continuations)
       values ($1, '0xowner', 'direct', $2, $3, $4, 'h', $5)`,
      [taskId, options.taskStatus ?? 'active', spec, id('idem'), options.consecutive ?? 0],
    )
    await db.query(`insert into scheduler_runs (id, task_id, trigger, status, reserved_micros, token_hash) values ($1, $2, 'schedule', $3, $4, $5)`, [
      runId,
      taskId,
      options.status ?? 'running',
      ceiling,
      sha256Hex(token),
    ])
    await db.query(`insert into scheduler_ledger (task_id, kind, amount_micros) values ($1, 'charge', $2)`, [taskId, options.balance ?? 1_000_000n])
    return {
      taskId,
      runId,
      token,
      ceiling,
      async helper(name, body, tokenOverride) {
        const res = await fetch(`${publicUrl}/internal/v1/runs/${runId}/${name}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', ...(tokenOverride === '' ? {} : { authorization: `Bearer ${tokenOverride ?? token}` }) },
          body: JSON.stringify(body),
        })
        const text = await res.text()
        let parsed: unknown = null
        try {
          parsed = text ? JSON.parse(text) : null
        } catch {
          parsed = text
        }
        return { status: res.status, body: parsed, headers: res.headers }
      },
      async meters() {
        const rows = await db.query(
          'select sibling_calls, sibling_spend_micros, llm_input_tokens, llm_output_tokens, llm_cost_micros, artifacts_count, artifacts_bytes, continuation_delay_sec from scheduler_runs where id = $1',
          [runId],
        )
        return rows[0]!
      },
    }
  }
  return { db, base: publicUrl, publicUrl, task }
}

function problem(t: Test, res: { status: number; body: any; headers: Headers }, status: number, code: string, field?: string): void {
  t.equal(res.status, status, `status ${status}`)
  t.equal(res.body?.code, code, `code ${code}: ${res.body?.detail}`)
  t.match(res.headers.get('content-type') ?? '', /^application\/problem\+json/)
  if (field !== undefined) t.equal(res.body?.field, field, `field ${field}`)
}

async function suite(t: Test, db: Db): Promise<void> {
  await migrate(db)
  const h = await startHarness(t, db)
  const smallCaps: SchedulerRates = {
    ...DEFAULT_RATES,
    hard_caps: { ...DEFAULT_RATES.hard_caps, max_artifact_bytes: 16, max_artifacts_per_run: 3, max_artifact_bytes_per_run: 40 },
  }
  const bare = await startHarness(t, db, { llm: {}, marketplace: { resolve: async () => ({ url: `${market402.base}/render` }) }, rates: smallCaps })

  await t.test('the run token', async (t) => {
    const f = await h.task()
    problem(t, await f.helper('request_continuation', {}, ''), 401, 'TOKEN_EXPIRED', 'header.authorization')
    problem(t, await f.helper('request_continuation', {}, 'wrong-token'), 401, 'TOKEN_EXPIRED', 'header.authorization')
    problem(t, await f.helper('request_continuation', { delay_sec: 'soon' }, 'wrong-token'), 401, 'TOKEN_EXPIRED', undefined)
    const res = await fetch(`${h.base}/internal/v1/runs/nosuchrun/call`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${f.token}` },
      body: '{}',
    })
    t.equal(res.status, 401, 'another run id with this token')
    t.equal((await f.helper('request_continuation', {})).status, 200, 'the right token works')
    await db.query("update scheduler_runs set status = 'succeeded' where id = $1", [f.runId])
    const ended = await f.helper('call', { capability: 'urlshortener', path: '/links', body: { url: 'https://example.com' } })
    problem(t, ended, 401, 'TOKEN_EXPIRED')
    t.equal(ended.body.run_status, 'succeeded')
    const claimed = await h.task({ status: 'claimed' })
    t.equal((await claimed.helper('request_continuation', {})).status, 200, 'claimed runs may call helpers')
  })

  await t.test('generate_text', async (t) => {
    const noLlm = await h.task()
    problem(t, await noLlm.helper('generate_text', { prompt: 'hi' }), 400, 'VALIDATION_ERROR', 'task.llm')

    const f = await h.task({ spec: { llm: { profile: 'quick', max_cost_usdc_micros_per_run: null } } })
    llm.mode = 'ok'
    llm.requests.length = 0
    const res = await f.helper('generate_text', { prompt: 'Say hi', system: 'Be brief', max_output_tokens: 600, temperature: 0.2, reasoning: 'low' })
    t.equal(res.status, 200)
    t.equal(res.body.text, 'echo: {"role":"user","content":"Say hi"}')
    t.equal(res.body.model, 'small-1-2026')
    t.same(res.body.usage, { input_tokens: 1234, output_tokens: 567 })
    t.equal(res.body.cost_usdc_micros, '351', '1234 in + 567 out at quick prices, rounded up')
    t.equal(res.body.metadata.profile, 'quick')
    t.equal(res.body.metadata.finish_reason, 'stop')
    const sent = llm.requests[0]!
    t.equal(sent.headers.authorization, 'Bearer sk-test')
    t.same(sent.body, {
      model: 'small-1',
      messages: [
        { role: 'system', content: 'Be brief' },
        { role: 'user', content: 'Say hi' },
      ],
      max_tokens: 600,
      temperature: 0.2,
      reasoning_effort: 'low',
    })
    t.match(await f.meters(), { llm_input_tokens: 1234n, llm_output_tokens: 567n, llm_cost_micros: 351n })

    const std = await f.helper('generate_text', { prompt: 'again', model_alias: 'standard', max_output_tokens: 600 })
    t.equal(std.status, 200)
    t.equal(llm.requests.at(-1)!.body.model, 'large-1', "the alias picks the profile's model")
    // 1234 x 300000 + 567 x 2500000 = 1,787,700,000 → 1788
    t.equal(std.body.cost_usdc_micros, '1788')
    t.match(await f.meters(), { llm_cost_micros: 351n + 1788n, llm_input_tokens: 2468n })

    problem(t, await f.helper('generate_text', { prompt: 'x', model: 'gpt-999' }), 400, 'VALIDATION_ERROR', 'body.model')
    problem(t, await f.helper('generate_text', { prompt: '' }), 400, 'validation_error', 'body.prompt')
    problem(t, await f.helper('generate_text', { prompt: 'x', max_output_tokens: 0 }), 400, 'validation_error', 'body.max_output_tokens')
    problem(t, await f.helper('generate_text', { prompt: 'x', bogus: 1 }), 400, 'validation_error', 'body.bogus')

    llm.mode = 'error'
    const before = (await f.meters()).llm_cost_micros
    const failed = await f.helper('generate_text', { prompt: 'x', max_output_tokens: 100 })
    problem(t, failed, 502, 'unavailable')
    t.match(failed.body.detail, /500/)
    t.equal((await f.meters()).llm_cost_micros, before, 'a failed upstream call costs nothing')

    llm.mode = 'no_usage'
    const noUsage = await f.helper('generate_text', { prompt: 'hi', max_output_tokens: 100 })
    t.equal(noUsage.status, 200)
    // worst case: 2 + 32 prompt tokens, 100 output tokens at quick prices: (3,400,000 + 40,000,000) / 1e6 → 44
    t.equal(noUsage.body.cost_usdc_micros, '44', 'no usage reported: the worst case is charged')
    t.equal(noUsage.body.metadata.usage_reported, false)
    llm.mode = 'ok'

    // A 1000-micro reserve: a worst case above it is refused before the upstream sees anything.
    const tight = await h.task({ spec: { llm: { profile: 'quick', max_cost_usdc_micros_per_run: '1000' } } })
    const calls = llm.requests.length
    const refused = await tight.helper('generate_text', { prompt: 'hi', max_output_tokens: 10_000 })
    problem(t, refused, 402, 'PRICE_CAP_EXCEEDED', 'body.max_output_tokens')
    t.equal(refused.body.llm_reserve_micros, '1000')
    t.equal(llm.requests.length, calls, 'upstream not called')
    t.equal((await tight.meters()).llm_cost_micros, 0n)
    // Without max_output_tokens the cap is lowered to what the reserve covers: 2491 (see the arithmetic test).
    const fitted = await tight.helper('generate_text', { prompt: 'hi' })
    t.equal(fitted.status, 200)
    t.equal(llm.requests.at(-1)!.body.max_tokens, 2491)
    t.equal((await tight.meters()).llm_cost_micros, 351n, 'then the real usage is settled')

    const unconfigured = await bare.task({ spec: { llm: { profile: 'quick', max_cost_usdc_micros_per_run: null } } })
    const down = await unconfigured.helper('generate_text', { prompt: 'hi' })
    problem(t, down, 503, 'unavailable')
    t.match(down.body.detail, /no LLM upstream/)
  })

  await t.test('call: gates and first-party siblings', async (t) => {
    const denyAll = await h.task({ spec: { max_sibling_calls: 0, max_sibling_spend_micros: null } })
    problem(t, await denyAll.helper('call', { capability: 'urlshortener', path: '/links', body: { url: 'https://a.test' } }), 403, 'SIBLING_NOT_ALLOWED', 'body.capability')
    const allow = await h.task({ spec: { tool_list: ['cdn'], max_sibling_spend_micros: null } })
    problem(t, await allow.helper('call', { capability: 'urlshortener', path: '/links', body: { url: 'https://a.test' } }), 403, 'SIBLING_NOT_ALLOWED', 'body.capability')

    const f = await h.task()
    problem(t, await f.helper('call', { capability: 'urlshortner', path: '/links' }), 400, 'PRICE_UNKNOWN', 'body.capability')
    problem(t, await f.helper('call', { capability: 'acme.test/render', path: '/v1', body: {} }), 400, 'PRICE_UNKNOWN', 'body.max_price_micros')
    problem(t, await f.helper('call', { capability: 'acme.test/render', path: '/v1', body: {}, max_price_micros: 'lots' }), 400, 'PRICE_UNKNOWN', 'body.max_price_micros')
    problem(
      t,
      await f.helper('call', { capability: 'urlshortener', path: '/links', body: { url: 'https://a.test' }, max_price_micros: 999 }),
      402,
      'PRICE_CAP_EXCEEDED',
      'body.max_price_micros',
    )
    problem(t, await f.helper('call', { capability: 'urlshortener', path: 'links' }), 400, 'validation_error', 'body.path')
    problem(t, await f.helper('call', { capability: 'acme.test/render', path: '/../admin', max_price_micros: 1 }), 400, 'VALIDATION_ERROR', 'body.path')
    problem(t, await f.helper('call', { capability: 'acme.test/render', path: '/%2E%2e/admin?x=1', max_price_micros: 1 }), 400, 'VALIDATION_ERROR', 'body.path')
    t.match(await f.meters(), { sibling_calls: 0, sibling_spend_micros: 0n }, 'refused calls are not counted')

    const created = await f.helper('call', { capability: 'urlshortener', path: '/links', body: { url: 'https://example.com/a?b=1' } })
    t.equal(created.status, 201)
    t.match(created.body, { code: /^[A-Za-z0-9]{8}$/, short_url: `${h.publicUrl}/s/${created.body.code}`, url: 'https://example.com/a?b=1' })
    const redirect = await fetch(created.body.short_url, { redirect: 'manual' })
    t.equal(redirect.status, 302)
    t.equal(redirect.headers.get('location'), 'https://example.com/a?b=1')
    const shown = await f.helper('call', { capability: 'urlshortener', path: `/links/${created.body.code}` })
    t.equal(shown.status, 200)
    t.equal(shown.body.hits, 1)
    t.match(await f.meters(), { sibling_calls: 2, sibling_spend_micros: 2000n }, 'two calls at the 1000-micro fee')

    const bad = await f.helper('call', { capability: 'urlshortener', path: '/links', body: { url: 'ftp://x' } })
    problem(t, bad, 400, 'VALIDATION_ERROR', 'body.url')
    const missing = await f.helper('call', { capability: 'urlshortener', path: '/nope' })
    problem(t, missing, 404, 'route_not_found')
    t.match(await f.meters(), { sibling_calls: 4, sibling_spend_micros: 2000n }, 'failed sibling calls count but are not charged')
    t.equal((await fetch(`${h.base}/s/ZZZZZZZZ`, { redirect: 'manual' })).status, 404)

    const spendCapped = await h.task({ spec: { max_sibling_spend_micros: '1500' } })
    const capped = await spendCapped.helper('call', { capability: 'cdn', path: '/files', body: { name: 'a.txt', data_base64: 'aGk=' } })
    problem(t, capped, 402, 'PRICE_CAP_EXCEEDED')
    t.equal(capped.body.spend_limit_micros, '1500')
    t.match(await spendCapped.meters(), { sibling_calls: 0, sibling_spend_micros: 0n })
  })

  await t.test('call: 20 parallel calls with max_sibling_calls 5 → exactly 5 succeed', async (t) => {
    const f = await h.task({ spec: { max_sibling_calls: 5 } })
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) => f.helper('call', { capability: 'urlshortener', path: '/links', body: { url: `https://example.com/${i}` } })),
    )
    const statuses = results.map((r) => r.status)
    t.equal(statuses.filter((s) => s === 201).length, 5)
    t.equal(statuses.filter((s) => s === 429).length, 15)
    t.ok(results.filter((r) => r.status === 429).every((r) => r.body.code === 'CALL_CAP_EXCEEDED'))
    t.match(await f.meters(), { sibling_calls: 5, sibling_spend_micros: 5000n })
    const links = await db.query('select count(*)::int4 as n from scheduler_short_links where task_id = $1', [f.taskId])
    t.equal(links[0]!.n, 5)
  })

  await t.test('cdn, forms and inbox', async (t) => {
    const f = await h.task({ spec: { max_sibling_calls: 20 } })
    const pub = await f.helper('call', {
      capability: 'cdn',
      path: '/files',
      body: { name: 'logo.svg', data_base64: Buffer.from('<svg/>').toString('base64'), content_type: 'image/svg+xml' },
    })
    t.equal(pub.status, 201)
    t.equal(pub.body.url, `${h.publicUrl}/cdn/${f.taskId}/logo.svg`)
    let file = await fetch(pub.body.url)
    t.equal(file.status, 200)
    t.equal(file.headers.get('content-type'), 'image/svg+xml')
    t.equal(file.headers.get('content-security-policy'), 'sandbox')
    t.equal(await file.text(), '<svg/>')
    await f.helper('call', {
      capability: 'cdn',
      path: '/files',
      body: { name: 'logo.svg', data_base64: Buffer.from('<svg v="2"/>').toString('base64'), content_type: 'image/svg+xml' },
    })
    file = await fetch(pub.body.url)
    t.equal(await file.text(), '<svg v="2"/>', 'publishing a name again replaces it')
    problem(t, await f.helper('call', { capability: 'cdn', path: '/files', body: { name: '../x', data_base64: 'aGk=' } }), 400, 'VALIDATION_ERROR', 'body.name')
    problem(t, await f.helper('call', { capability: 'cdn', path: '/files', body: { name: 'x', data_base64: 'not base64!' } }), 400, 'VALIDATION_ERROR', 'body.data_base64')
    const listed = await f.helper('call', { capability: 'cdn', path: '/files' })
    t.same(
      listed.body.files.map((x: { name: string }) => x.name),
      ['logo.svg'],
    )

    const form = await f.helper('call', {
      capability: 'forms',
      path: '/forms',
      body: {
        title: 'Sign <up>',
        fields: [
          { name: 'email', type: 'email', required: true },
          { name: 'age', type: 'number' },
          { name: 'ok', type: 'checkbox' },
        ],
      },
    })
    t.equal(form.status, 201, form.body?.detail)
    t.match(form.body, { form_id: /^fm_/, submit_url: `${h.publicUrl}/f/${form.body.form_id}` })
    const page = await fetch(form.body.submit_url)
    const html = await page.text()
    t.equal(page.status, 200)
    t.match(html, /^<!doctype html>/, 'served as an HTML document')
    t.equal(page.headers.get('content-type'), 'text/html; charset=utf-8')
    t.match(html, /Sign &lt;up&gt;/, 'the title is escaped')
    t.notMatch(html, /<up>/)
    const json = await fetch(form.body.submit_url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ email: 'a@b.test', age: '42', extra: 'dropped' }),
    })
    t.equal(json.status, 201)
    const posted = await fetch(form.body.submit_url, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', accept: 'text/html' },
      body: 'email=c%40d.test&ok=on',
    })
    t.equal(posted.status, 201)
    t.match(await posted.text(), /Thank you/)
    const noEmail = await fetch(form.body.submit_url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ age: 3 }) })
    t.equal(noEmail.status, 400)
    t.equal(((await noEmail.json()) as { field: string }).field, 'body.email')
    const subs = await f.helper('call', { capability: 'forms', path: `/forms/${form.body.form_id}/submissions` })
    t.equal(subs.status, 200)
    t.same(
      subs.body.submissions.map((s: { data: unknown }) => s.data),
      [
        { email: 'a@b.test', age: 42, ok: false },
        { email: 'c@d.test', ok: true },
      ],
    )
    const other = await h.task()
    problem(t, await other.helper('call', { capability: 'forms', path: `/forms/${form.body.form_id}/submissions` }), 404, 'not_found')

    const inbox = await f.helper('call', { capability: 'inbox', path: '/inboxes', method: 'POST' })
    t.equal(inbox.status, 201)
    t.match(inbox.body, { inbox_id: /^ib_/, address: `${inbox.body.inbox_id}@127.0.0.1`, ingest_url: `${h.publicUrl}/inbox/${inbox.body.inbox_id}` })
    const mail = await fetch(inbox.body.ingest_url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ from: 'x@y.test', subject: 'Hello', text: 'Body' }),
    })
    t.equal(mail.status, 201)
    t.equal((await fetch(inbox.body.ingest_url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"subject":"no from"}' })).status, 400)
    const messages = await f.helper('call', { capability: 'inbox', path: `/inboxes/${inbox.body.inbox_id}/messages` })
    t.match(messages.body.messages, [{ from: 'x@y.test', subject: 'Hello', text: 'Body' }])
    t.equal(messages.body.messages.length, 1)
  })

  await t.test('screenshot', async (t) => {
    const f = await h.task()
    const priv = await f.helper('call', { capability: 'screenshot', path: '/shots', body: { url: 'http://169.254.169.254/latest/meta-data' } })
    problem(t, priv, 400, 'VALIDATION_ERROR', 'body.url')
    const noChrome = await f.helper('call', { capability: 'screenshot', path: '/shots', body: { url: `${market402.base}/free/v1` } })
    problem(t, noChrome, 503, 'unavailable')
    t.match(noChrome.body.detail, /no Chromium at \/nonexistent\/chromium/)
    t.match(await f.meters(), { sibling_calls: 1, sibling_spend_micros: 0n }, 'no Chromium: neither charged nor counted (the private URL counted)')

    const chromium = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium'
    if (!(await chromiumAvailable(chromium))) {
      t.comment(`no Chromium at ${chromium}: rendering not exercised (install chromium or set CHROMIUM_PATH)`)
      t.skip(`rendering a page needs Chromium at ${chromium}`, () => {})
      return
    }
    // The page pulls an image from another loopback port that is not exempt: the egress proxy must refuse it.
    let secretHits = 0
    const secret = await serve(t, (_req, res) => {
      secretHits++
      res.writeHead(200, { 'content-type': 'image/png' }).end()
    })
    const page = await serve(t, (_req, res) => res.writeHead(200, { 'content-type': 'text/html' }).end(`<h1 style="color:red">shot</h1><img src="${secret.base}/metadata.png">`))
    const shooter = await startHarness(t, db, { screenshot: { chromiumPath: chromium }, egress: { allow: [`127.0.0.1:${page.port}`] } })
    const s = await shooter.task()
    const shot = await s.helper('call', { capability: 'screenshot', path: '/shots', body: { url: `${page.base}/`, width: 400, height: 300 } })
    t.equal(shot.status, 201, shot.body?.detail)
    const png = await fetch(shot.body.url)
    t.equal(png.headers.get('content-type'), 'image/png')
    const bytes = Buffer.from(await png.arrayBuffer())
    t.same([...bytes.subarray(1, 4)], [0x50, 0x4e, 0x47], 'a PNG')
    t.equal(bytes.readUInt32BE(16), 400, 'of the requested width')
    t.match(await s.meters(), { sibling_calls: 1, sibling_spend_micros: 5000n })
    t.equal(secretHits, 0, 'a sub-resource on a private address was not fetched')
  })

  await t.test('call: paid marketplace capabilities', async (t) => {
    const spec = { max_sibling_calls: 10, max_sibling_spend_micros: '100000' } // reserved sibling budget 10 x 5000 = 50000
    const f = await h.task({ spec })
    const verifiedBefore = market.verified.length

    const paid = await f.helper('call', { capability: 'acme.test/render', path: '/v1', body: { doc: 'hello' }, max_price_micros: 30_000 })
    t.equal(paid.status, 200, paid.body?.detail)
    t.same(paid.body, { ok: true, paid: 'x402', version: 2, request: { doc: 'hello' } })
    t.same(market.verified.slice(verifiedBefore), [{ protocol: 'x402', version: 2, payer: payerAddress, amount: 25_000n }], 'signed by the payer key, verified by the capability')
    t.match(await f.meters(), { sibling_calls: 1, sibling_spend_micros: 25_000n }, 'charged the price, not the 30000 cap')
    const audit = await db.query('select protocol, price_micros, charged, status_code, reference from scheduler_capability_payments where run_id = $1', [f.runId])
    t.same(audit, [{ protocol: 'x402', price_micros: 25_000n, charged: true, status_code: 200, reference: `0x${'ab'.repeat(32)}` }])

    const probes = market.probes
    const attempts = market.paidAttempts
    const tooDear = await f.helper('call', { capability: 'acme.test/render', path: '/v1', body: {}, max_price_micros: 20_000 })
    problem(t, tooDear, 402, 'PRICE_CAP_EXCEEDED', 'body.max_price_micros')
    t.equal(tooDear.body.price_micros, '25000')
    t.equal(market.probes, probes + 1, 'the challenge was read')
    t.equal(market.paidAttempts, attempts, 'no payment was sent')
    t.match(await f.meters(), { sibling_calls: 2, sibling_spend_micros: 25_000n }, 'nothing spent')

    const v1 = await f.helper('call', { capability: 'acme.test/v1only', path: '/v1', body: { x: 1 }, max_price_micros: 25_000 })
    t.equal(v1.status, 200, v1.body?.detail)
    t.equal(v1.body.version, 1, 'a v1-only challenge is paid with an X-PAYMENT v1 proof')
    t.equal(market.verified.at(-1)!.payer, payerAddress)
    t.match(await f.meters(), { sibling_spend_micros: 50_000n })

    // The reserved sibling budget (50000) is now used up: even a cheap cap is refused up front.
    const over = await f.helper('call', { capability: 'acme.test/render', path: '/v1', body: {}, max_price_micros: 1 })
    problem(t, over, 402, 'PRICE_CAP_EXCEEDED', 'body.max_price_micros')
    t.match(over.body.detail, /reserved sibling budget/)

    const g = await h.task({ spec })
    const viaMpp = await g.helper('call', { capability: 'acme.test/mpp', path: '/v1', body: {}, max_price_micros: 40_000 })
    t.equal(viaMpp.status, 200, viaMpp.body?.detail)
    t.same(viaMpp.body, { ok: true, paid: 'mpp' })
    t.match(market.verified.at(-1), { protocol: 'mpp', amount: 20_000n })
    t.equal(market.verified.at(-1)!.payer.toLowerCase(), payerAddress.toLowerCase())
    t.ok(rpc.broadcasts.length >= 1, 'the Tempo transaction was broadcast')
    t.match(await g.meters(), { sibling_spend_micros: 20_000n })
    // 20000 of the 50000 sibling budget is spent: a 30000 cap still fits.
    const cheaper = await g.helper('call', { capability: 'acme.test/both', path: '/v1', body: {}, max_price_micros: 30_000 })
    t.equal(cheaper.status, 200, cheaper.body?.detail)
    t.equal(cheaper.body.paid, 'mpp', 'of x402 30000 and MPP 20000 the cheaper is paid')
    t.match(await g.meters(), { sibling_spend_micros: 40_000n })

    const free = await g.helper('call', { capability: 'acme.test/free', path: '/v1', body: { a: 1 }, max_price_micros: 5_000 })
    t.same(free, { status: 200, body: { free: true, echo: { a: 1 } }, headers: free.headers })
    const image = await g.helper('call', { capability: 'acme.test/image', path: '/v1', max_price_micros: 5_000 })
    t.same(image.body, { content_type: 'image/png', data_base64: Buffer.from([0x89, 0x50, 0x4e, 0x47]).toString('base64') })
    t.match(await g.meters(), { sibling_spend_micros: 40_000n }, 'free answers cost nothing')

    const k = await h.task({ spec })
    problem(t, await k.helper('call', { capability: 'acme.test/plain', path: '/v1', body: {}, max_price_micros: 5_000 }), 502, 'CAPABILITY_PROTOCOL_UNSUPPORTED')
    const internal = await k.helper('call', { capability: 'internal.test/x', path: '/v1', body: {}, max_price_micros: 5_000 })
    problem(t, internal, 502, 'SIBLING_PAYMENT_FAILED')
    t.match(internal.body.detail, /loopback, private/)
    problem(t, await k.helper('call', { capability: 'broken.test/x', path: '/v1', body: {}, max_price_micros: 5_000 }), 502, 'SIBLING_PAYMENT_FAILED')
    const nowallet = await bare.task({ spec })
    const unpaid = await nowallet.helper('call', { capability: 'acme.test/render', path: '/v1', body: {}, max_price_micros: 30_000 })
    problem(t, unpaid, 502, 'SIBLING_PAYMENT_FAILED')
    t.match(unpaid.body.detail, /no payer wallet/)
    t.match(await k.meters(), { sibling_spend_micros: 0n })
    t.match(await nowallet.meters(), { sibling_spend_micros: 0n })

    const capped = await h.task({ spec: { max_sibling_calls: 10, max_sibling_spend_micros: '20000' } })
    const probesBefore = market.probes
    problem(t, await capped.helper('call', { capability: 'acme.test/render', path: '/v1', body: {}, max_price_micros: 25_000 }), 402, 'PRICE_CAP_EXCEEDED', 'body.max_price_micros')
    t.equal(market.probes, probesBefore, 'a cap above max_sibling_spend_micros is refused before contacting the capability')
  })

  await t.test('store_artifact', async (t) => {
    const off = await h.task()
    problem(t, await off.helper('store_artifact', { name: 'a.txt', data: 'x' }), 400, 'VALIDATION_ERROR', 'task.artifacts')

    const f = await h.task({ spec: { artifacts: { enabled: true } } })
    const one = await f.helper('store_artifact', { name: 'report.html', data: '<p>one</p>', content_type: 'text/html' })
    const two = await f.helper('store_artifact', { name: 'report.html', data: '<p>two</p>', content_type: 'text/html' })
    t.equal(one.status, 201)
    t.match(one.body, { url: new RegExp(`^${h.publicUrl}/artifacts/${f.taskId}/a[a-z2-7]{16}/report\\.html$`), bytes: 10, stable: false })
    t.equal(one.body.path, one.body.url.slice(h.publicUrl.length))
    t.not(one.body.url, two.body.url, 'immutable: a new URL per call')
    const first = await fetch(one.body.url)
    t.equal(await first.text(), '<p>one</p>', 'the first URL still serves the first content')
    t.equal(first.headers.get('content-type'), 'text/html')
    t.match(first.headers.get('cache-control'), /immutable/)
    t.equal(await (await fetch(two.body.url)).text(), '<p>two</p>')

    const s1 = await f.helper('store_artifact', { name: 'latest.png', data_base64: Buffer.from([1, 2, 3]).toString('base64'), content_type: 'image/png', stable: true })
    const s2 = await f.helper('store_artifact', { name: 'latest.png', data_base64: Buffer.from([4, 5]).toString('base64'), content_type: 'image/png', stable: true })
    t.equal(s1.body.url, `${h.publicUrl}/artifacts/${f.taskId}/latest.png`)
    t.equal(s2.body.url, s1.body.url, 'stable: one URL per (task, name)')
    const latest = await fetch(s1.body.url)
    t.same([...Buffer.from(await latest.arrayBuffer())], [4, 5], 'overwritten')
    t.equal(latest.headers.get('cache-control'), 'no-cache')
    t.match(await f.meters(), { artifacts_count: 4, artifacts_bytes: 25n })

    const text = await f.helper('store_artifact', { name: 'notes.txt', data: 'héllo' })
    t.equal(text.body.content_type, 'text/plain; charset=utf-8')
    t.equal(text.body.bytes, 6, 'UTF-8 bytes')

    problem(t, await f.helper('store_artifact', { name: 'x', data: 'a', data_base64: 'YQ==' }), 400, 'VALIDATION_ERROR')
    problem(t, await f.helper('store_artifact', { name: 'x' }), 400, 'VALIDATION_ERROR', 'body.data')
    problem(t, await f.helper('store_artifact', { name: 'x', data_base64: '***' }), 400, 'VALIDATION_ERROR', 'body.data_base64')
    problem(t, await f.helper('store_artifact', { name: '../etc', data: 'a' }), 400, 'validation_error', 'body.name')
    problem(t, await f.helper('store_artifact', { name: 'x', data: 'a', content_type: 'text/html\r\nx: y' }), 400, 'validation_error', 'body.content_type')
    t.equal((await fetch(`${h.publicUrl}/artifacts/${f.taskId}/nothing.txt`)).status, 404)

    // Caps (rates with max_artifact_bytes 16, 3 per run, 40 bytes per run), under concurrency.
    const c = await bare.task({ spec: { artifacts: { enabled: true } } })
    problem(t, await c.helper('store_artifact', { name: 'big', data: 'x'.repeat(17) }), 413, 'payload_too_large', 'body.data')
    const burst = await Promise.all(Array.from({ length: 10 }, (_, i) => c.helper('store_artifact', { name: `f${i}`, data: 'x'.repeat(10) })))
    t.equal(burst.filter((r) => r.status === 201).length, 3, 'exactly max_artifacts_per_run succeed')
    t.ok(burst.filter((r) => r.status !== 201).every((r) => r.body.code === 'RATE_LIMIT'))
    t.match(await c.meters(), { artifacts_count: 3, artifacts_bytes: 30n })
    const d = await bare.task({ spec: { artifacts: { enabled: true } } })
    t.equal((await d.helper('store_artifact', { name: 'a', data: 'x'.repeat(16) })).status, 201)
    t.equal((await d.helper('store_artifact', { name: 'b', data: 'x'.repeat(16) })).status, 201)
    problem(t, await d.helper('store_artifact', { name: 'c', data: 'x'.repeat(16) }), 413, 'payload_too_large', 'body.data')
    t.match(await d.meters(), { artifacts_count: 2, artifacts_bytes: 32n })
  })

  await t.test('request_continuation', async (t) => {
    const f = await h.task()
    const ok = await f.helper('request_continuation', { delay_sec: 30 })
    t.equal(ok.status, 200)
    t.same(ok.body, { accepted: true, consecutive_continuations: 1, max_consecutive_continuations: 10, delay_sec: 30 })
    t.equal((await f.meters()).continuation_delay_sec, 30)
    const again = await f.helper('request_continuation', {})
    t.same(again.body, { accepted: true, consecutive_continuations: 1, max_consecutive_continuations: 10, delay_sec: 0 })
    t.equal((await f.meters()).continuation_delay_sec, 0, 'asking again replaces the delay')
    problem(t, await f.helper('request_continuation', { delay_sec: 601 }), 400, 'validation_error', 'body.delay_sec')
    problem(t, await f.helper('request_continuation', { delay_sec: -1 }), 400, 'validation_error', 'body.delay_sec')

    const atCap = await h.task({ consecutive: 10 })
    t.same((await atCap.helper('request_continuation', {})).body, {
      accepted: false,
      consecutive_continuations: 10,
      max_consecutive_continuations: 10,
      delay_sec: 0,
      reason: 'max_consecutive_continuations',
    })
    t.equal((await atCap.meters()).continuation_delay_sec, null, 'nothing recorded')
    const nine = await h.task({ consecutive: 9 })
    t.equal((await nine.helper('request_continuation', {})).body.consecutive_continuations, 10, 'the tenth is still accepted')

    // balance - open reservations (this run's own ceiling included) must cover one more ceiling.
    const probe = await h.task()
    const ceiling = probe.ceiling
    const short = await h.task({ balance: 2n * ceiling - 1n })
    t.match((await short.helper('request_continuation', {})).body, { accepted: false, reason: 'insufficient_funds' })
    const enough = await h.task({ balance: 2n * ceiling })
    t.match((await enough.helper('request_continuation', {})).body, { accepted: true })
    const paused = await h.task({ taskStatus: 'paused' })
    t.match((await paused.helper('request_continuation', {})).body, { accepted: false, reason: 'task_not_active' })
  })
}

t.test('on Postgres', async (t) => {
  const url = await throwawayDatabase(t)
  if (url === undefined) return
  const db = await openDb({ kind: 'postgres', url, poolMax: 8 })
  t.teardown(() => db.close())
  t.comment(`Postgres at ${new URL(PG_URL).host}`)
  await suite(t, db)
})

t.test('on PGlite', async (t) => {
  const db = await openDb({ kind: 'pglite', dataDir: 'memory://' })
  t.teardown(() => db.close())
  await suite(t, db)
})
