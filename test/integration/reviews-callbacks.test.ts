// Review callbacks (src/reviews/callbacks.ts) on PGlite and a real Postgres, against a local
// receiver that verifies every request with `standardwebhooks` as an agent would: delivered the
// first time; a 500 then a 200 (two attempts, one webhook-id); 410 (gone, no retry); a private
// address and DNS answering a private address (refused before connecting, no retry); NXDOMAIN and
// a receiver that hangs (failed, retried, then given up); retries exhausted; a restart between two
// attempts (the retry survives on a new queue); a key rotation (two signatures, either secret
// verifies). Also the generated master key (one per database, even with two replicas at once).
import { randomBytes, randomUUID } from 'node:crypto'
import dns from 'node:dns/promises'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import t, { type Test } from 'tap'
import { Webhook } from 'standardwebhooks'
import { systemClock } from '../../src/platform/clock.ts'
import type { Db } from '../../src/platform/db/index.ts'
import { migrate } from '../../src/platform/db/migrate.ts'
import { egressPolicy } from '../../src/platform/egress.ts'
import { type JobQueue, openJobQueue } from '../../src/platform/jobs.ts'
import { CALLBACK_USER_AGENT, type CallbackDelivery, type CallbackDeliveryDeps, createCallbackDelivery, webhookIdOf } from '../../src/reviews/callbacks.ts'
import { createReviewKeys, type ReviewKeys, reviewsMasterKeys } from '../../src/reviews/keys.ts'
import { onPgliteAndPostgres } from '../helpers/servers.ts'
import { testJobLogger, until as waitUntil } from '../helpers/waiting.ts'

/** Waits here are for retries and workers: up to 30 s before a test fails. */
const until = (what: string, check: () => boolean | Promise<boolean>, timeoutMs = 30_000) => waitUntil(what, check, timeoutMs)

t.setTimeout(5 * 60_000)

interface Received {
  headers: Record<string, string>
  body: string
  /** Whether Webhook.verify with the review's secret (active key) accepted it. */
  verified: boolean
}

/** How the receiver answers the n-th request (0-based) for a review; 'hang' never answers. */
type Script = (n: number) => number | 'hang'

/** The receiver: POST /hook/<reviewId>, verified with the secret `secretOf` gives, answered per script. */
async function startReceiver(t: Test, secretOf: (reviewId: string) => string) {
  const received = new Map<string, Received[]>()
  const scripts = new Map<string, Script>()
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      const reviewId = req.url?.replace(/^\/hook\//, '') ?? ''
      const body = Buffer.concat(chunks).toString('utf8')
      const headers = Object.fromEntries(Object.entries(req.headers).map(([k, v]) => [k, String(v)]))
      let verified = false
      try {
        new Webhook(secretOf(reviewId)).verify(body, headers)
        verified = true
      } catch {}
      const list = received.get(reviewId) ?? []
      list.push({ headers, body, verified })
      received.set(reviewId, list)
      const answer = (scripts.get(reviewId) ?? (() => 204))(list.length - 1)
      if (answer === 'hang') return // keeps the connection open until the sender gives up
      res.writeHead(answer, { 'content-type': 'text/plain' })
      res.end(answer >= 400 ? `receiver says ${answer}` : '')
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(
    () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  )
  const port = (server.address() as AddressInfo).port
  return { port, received, scripts, url: (reviewId: string) => `http://127.0.0.1:${port}/hook/${reviewId}` }
}

const AGENT = 'agent-reviews-callbacks'

async function insertReview(db: Db, callbackUrl: string | null): Promise<{ reviewId: string; review: Record<string, unknown>; submittedAt: Date }> {
  const reviewId = randomUUID()
  const submittedAt = new Date(Date.now() - 60_000)
  const review = {
    reviewId,
    source: { kind: 'url', url: 'https://example.com/pricing' },
    submittedAt: submittedAt.toISOString(),
    comment: 'Looks good apart from the price — and “quotes”, emoji 🎉, RTL שלום.',
    pins: [
      {
        id: 'p1',
        comment: 'Wrong price',
        severity: 'blocking',
        selector: 'main > p.price',
        tag: 'p',
        text: '$10',
        box: { x: 10, y: 20, width: 100, height: 24 },
        viewport: { width: 1440, height: 900 },
        scroll: { x: 0, y: 0 },
        page: { url: 'https://example.com/pricing', title: 'Pricing' },
        userAgent: 'test',
        createdAt: submittedAt.toISOString(),
      },
    ],
    console: [],
  }
  await db.query(
    `insert into reviews (id, agent_id, source_kind, source_url, site_label, callback_url, status, review, submitted_at, plan_id, charged_micros)
     values ($1, $2, 'url', 'https://example.com/pricing', $3, $4, 'submitted', $5, $6, 'plan-test', 1000)`,
    [reviewId, AGENT, `s-${randomBytes(8).toString('hex')}`, callbackUrl, review, submittedAt],
  )
  return { reviewId, review, submittedAt }
}

async function stateOf(db: Db, reviewId: string): Promise<string> {
  const rows = await db.query<{ delivery_state: string }>(`select delivery_state from reviews where id = $1`, [reviewId])
  return rows[0]!.delivery_state
}

async function jobStates(db: Db, schema: string, reviewId: string): Promise<string[]> {
  const rows = await db.query<{ state: string }>(`select state::text as state from ${schema}.job where name = 'review-callbacks' and data->>'reviewId' = $1`, [reviewId])
  return rows.map((r) => r.state)
}

async function suite(t: Test, db: Db): Promise<void> {
  await migrate(db)
  await db.query(`insert into agents (id, token_hash) values ($1, $2)`, [AGENT, randomBytes(32).toString('hex')])

  await t.test('the generated master key: one per database, even when two replicas start at once', async (t) => {
    const [a, b] = await Promise.all([reviewsMasterKeys(db, undefined), reviewsMasterKeys(db, undefined)])
    t.equal(a.length, 1)
    t.equal(a[0]!.length, 32)
    t.same(b, a)
    t.same(await reviewsMasterKeys(db, ''), a, 'an empty setting is unset')
  })

  const keys = createReviewKeys(await reviewsMasterKeys(db, undefined))
  const receiver = await startReceiver(t, (id) => keys.webhookSecret(id))
  const egress = egressPolicy({
    allow: [`127.0.0.1:${receiver.port}`],
    // evil.test answers the receiver's own address: reachable only if the rule were not applied.
    lookup: async (host) => {
      if (host === 'evil.test') return [{ address: '127.0.0.1', family: 4 }]
      if (host === 'nowhere.test') throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: 'ENOTFOUND' })
      return dns.lookup(host, { all: true, verbatim: true })
    },
  })
  const schema = 'pgboss'
  const queues: JobQueue[] = []
  t.teardown(async () => {
    for (const q of queues) await q.stop({ timeoutMs: 1000 })
  })
  const logger = testJobLogger()
  const openQueue = async (s = schema) => {
    const q = await openJobQueue({ db, logger, schema: s, maintenanceIntervalSeconds: 1 })
    queues.push(q)
    return q
  }
  const deps = (jobs: JobQueue, k: ReviewKeys = keys): CallbackDeliveryDeps => ({
    db,
    jobs: async () => jobs,
    keys: k,
    egress,
    clock: systemClock,
    logger,
    retry: { limit: 1, delaySeconds: 1 },
    timeoutMs: 1000,
    pollingIntervalSeconds: 0.5,
  })
  const first = await openQueue()
  const delivery = createCallbackDelivery(deps(first))
  await delivery.start()

  const submit = async (d: CallbackDelivery, callbackUrl: string | ((reviewId: string) => string), script?: Script) => {
    const placeholder = typeof callbackUrl === 'string' ? callbackUrl : 'http://placeholder.invalid/'
    const row = await insertReview(db, placeholder)
    if (typeof callbackUrl === 'function') await db.query(`update reviews set callback_url = $2 where id = $1`, [row.reviewId, callbackUrl(row.reviewId)])
    if (script) receiver.scripts.set(row.reviewId, script)
    // As the review service submits: the queue declared before the transaction.
    await d.declare()
    await db.transaction((tx) => d.enqueue(tx, row.reviewId))
    return row
  }
  const settled = (reviewId: string) => until(`review ${reviewId} settled`, async () => ['delivered', 'failed'].includes(await stateOf(db, reviewId)))

  await t.test('delivered the first time: signed, headers and body as documented', async (t) => {
    const { reviewId, review, submittedAt } = await submit(delivery, receiver.url, () => 200)
    await settled(reviewId)
    t.equal(await stateOf(db, reviewId), 'delivered')
    const got = receiver.received.get(reviewId)!
    t.equal(got.length, 1)
    const [req] = got
    t.ok(req!.verified, 'Webhook.verify accepts it with keys.webhookSecret(reviewId)')
    t.equal(req!.headers['content-type'], 'application/json')
    t.equal(req!.headers['user-agent'], CALLBACK_USER_AGENT)
    t.equal(req!.headers['webhook-id'], `msg_${reviewId.replaceAll('-', '')}`)
    t.equal(req!.headers['webhook-id'], webhookIdOf(reviewId))
    t.match(req!.headers['webhook-signature'], /^v1,[A-Za-z0-9+/]{43}=$/, 'one signature with one master key')
    t.ok(Math.abs(Number(req!.headers['webhook-timestamp']) - Date.now() / 1000) < 30, 'webhook-timestamp is now, in seconds')
    t.same(JSON.parse(req!.body), { type: 'review.submitted', timestamp: submittedAt.toISOString(), data: review })
    const attempts = await delivery.attempts(db, reviewId)
    t.match(attempts, [{ attempt: 1, outcome: 'delivered', statusCode: 200, error: null }])
    t.ok(Number.isInteger(attempts[0]!.durationMs) && attempts[0]!.durationMs >= 0)
    t.ok(!Number.isNaN(Date.parse(attempts[0]!.at)))
    t.same(await jobStates(db, schema, reviewId), ['completed'])
  })

  await t.test('500 then 200: two attempts logged, delivered, one webhook-id and one body', async (t) => {
    const { reviewId } = await submit(delivery, receiver.url, (n) => (n === 0 ? 500 : 200))
    await settled(reviewId)
    t.equal(await stateOf(db, reviewId), 'delivered')
    const got = receiver.received.get(reviewId)!
    t.equal(got.length, 2)
    t.ok(
      got.every((r) => r.verified),
      'both verify',
    )
    t.equal(got[0]!.headers['webhook-id'], got[1]!.headers['webhook-id'], 'the same webhook-id on both attempts')
    t.equal(got[0]!.body, got[1]!.body, 'the same bytes on both attempts')
    t.match(await delivery.attempts(db, reviewId), [
      { attempt: 1, outcome: 'failed', statusCode: 500, error: 'HTTP 500: receiver says 500' },
      { attempt: 2, outcome: 'delivered', statusCode: 200, error: null },
    ])
  })

  await t.test('410: gone after one attempt, never retried', async (t) => {
    const { reviewId } = await submit(delivery, receiver.url, () => 410)
    await settled(reviewId)
    t.equal(await stateOf(db, reviewId), 'failed')
    t.match(await delivery.attempts(db, reviewId), [{ attempt: 1, outcome: 'gone', statusCode: 410 }])
    t.equal((await delivery.attempts(db, reviewId)).length, 1)
    t.same(await jobStates(db, schema, reviewId), ['completed'], 'the job is done, no retry is queued')
    t.equal(receiver.received.get(reviewId)!.length, 1)
  })

  await t.test('a 3xx is a failure: redirects are not followed', async (t) => {
    const { reviewId } = await submit(delivery, receiver.url, (n) => (n === 0 ? 302 : 200))
    await settled(reviewId)
    t.match(await delivery.attempts(db, reviewId), [
      { outcome: 'failed', statusCode: 302, error: /redirects are not followed/ },
      { outcome: 'delivered', statusCode: 200 },
    ])
  })

  await t.test('refused: a private address, never connected to, never retried', async (t) => {
    const { reviewId } = await submit(delivery, 'http://10.0.0.1/hook')
    await settled(reviewId)
    t.equal(await stateOf(db, reviewId), 'failed')
    const attempts = await delivery.attempts(db, reviewId)
    t.match(attempts, [{ attempt: 1, outcome: 'refused', statusCode: null, error: /10\.0\.0\.1.*not reachable/ }])
    t.equal(attempts.length, 1)
    t.same(await jobStates(db, schema, reviewId), ['completed'])
  })

  await t.test('refused: DNS answering a private address (the receiver itself) is not connected to', async (t) => {
    const { reviewId } = await submit(
      delivery,
      (id) => `http://evil.test:${receiver.port}/hook/${id}`,
      () => 200,
    )
    await settled(reviewId)
    t.equal(await stateOf(db, reviewId), 'failed')
    t.match(await delivery.attempts(db, reviewId), [{ attempt: 1, outcome: 'refused', error: /evil\.test resolves to 127\.0\.0\.1/ }])
    t.equal(receiver.received.get(reviewId), undefined, 'the receiver got nothing')
    t.same(await jobStates(db, schema, reviewId), ['completed'])
  })

  await t.test('NXDOMAIN is transient: failed, retried, then given up', async (t) => {
    const { reviewId } = await submit(delivery, 'https://nowhere.test/hook')
    await settled(reviewId)
    t.equal(await stateOf(db, reviewId), 'failed')
    t.match(await delivery.attempts(db, reviewId), [
      { attempt: 1, outcome: 'failed', error: /cannot resolve nowhere\.test/ },
      { attempt: 2, outcome: 'failed', error: /cannot resolve nowhere\.test/ },
    ])
    await until('the job failed', async () => (await jobStates(db, schema, reviewId))[0] === 'failed')
  })

  await t.test('a receiver that hangs past timeoutMs: failed, retried, given up', async (t) => {
    const { reviewId } = await submit(delivery, receiver.url, () => 'hang')
    await settled(reviewId)
    const attempts = await delivery.attempts(db, reviewId)
    t.match(attempts, [
      { attempt: 1, outcome: 'failed', statusCode: null, error: 'no answer within 1000 ms' },
      { attempt: 2, outcome: 'failed', statusCode: null, error: 'no answer within 1000 ms' },
    ])
    t.ok(
      attempts.every((a) => a.durationMs >= 900),
      'each attempt waited about the timeout',
    )
    t.equal(receiver.received.get(reviewId)!.length, 2)
  })

  await t.test('retries exhausted (limit 1): two failed attempts, state failed, job failed', async (t) => {
    const { reviewId } = await submit(delivery, receiver.url, () => 503)
    await settled(reviewId)
    t.equal(await stateOf(db, reviewId), 'failed')
    t.match(await delivery.attempts(db, reviewId), [
      { attempt: 1, outcome: 'failed', statusCode: 503 },
      { attempt: 2, outcome: 'failed', statusCode: 503 },
    ])
    await until('the job failed', async () => (await jobStates(db, schema, reviewId))[0] === 'failed')
    t.equal(receiver.received.get(reviewId)!.length, 2)
  })

  await t.test('a delivered or failed review is not sent again by a duplicate job', async (t) => {
    const { reviewId } = await submit(delivery, receiver.url, () => 200)
    await settled(reviewId)
    await first.send('review-callbacks', { reviewId })
    await until('the duplicate job ran', async () => (await jobStates(db, schema, reviewId)).every((s) => s === 'completed'))
    t.equal(receiver.received.get(reviewId)!.length, 1)
    t.equal((await delivery.attempts(db, reviewId)).length, 1)
  })

  await t.test('enqueue is part of the caller’s transaction; a review without callback is left alone', async (t) => {
    const { reviewId } = await insertReview(db, receiver.url('x'))
    await t.rejects(
      db.transaction(async (tx) => {
        await delivery.enqueue(tx, reviewId)
        throw new Error('submission rolled back')
      }),
      /rolled back/,
    )
    t.equal(await stateOf(db, reviewId), 'waiting')
    t.same(await jobStates(db, schema, reviewId), [])
    const bare = await insertReview(db, null)
    await db.transaction((tx) => delivery.enqueue(tx, bare.reviewId))
    t.equal(await stateOf(db, bare.reviewId), 'waiting')
    t.same(await jobStates(db, schema, bare.reviewId), [])
  })

  await t.test('the queue opens on the first declare, once, and enqueue waits for it', async (t) => {
    let opened = 0
    const lazy = createCallbackDelivery({
      ...deps(first),
      jobs: async () => {
        opened += 1
        return first
      },
    })
    const { reviewId } = await insertReview(db, receiver.url('lazy'))
    t.equal(opened, 0, 'nothing is opened by creating the delivery')
    await t.rejects(
      db.transaction((tx) => lazy.enqueue(tx, reviewId)),
      /enqueue before declare/,
      'an enqueue before declare() fails rather than opening the queue inside the transaction',
    )
    await Promise.all([lazy.declare(), lazy.declare()])
    t.equal(opened, 1, 'two declares at once open the queue once')
    await db.transaction((tx) => lazy.enqueue(tx, reviewId))
    t.equal(await stateOf(db, reviewId), 'pending')
    t.equal((await jobStates(db, schema, reviewId)).length, 1, 'the job was sent')
  })

  await t.test('rotation: two v1 signatures; a receiver with the old or the new secret verifies', async (t) => {
    const oldKey = randomBytes(32)
    const newKey = randomBytes(32)
    const rotated = createReviewKeys([newKey, oldKey])
    const rotationSchema = 'pgboss_rotation'
    const q = await openQueue(rotationSchema)
    const d = createCallbackDelivery(deps(q, rotated))
    await d.start()
    const { reviewId } = await submit(d, receiver.url, () => 200)
    await settled(reviewId)
    const [req] = receiver.received.get(reviewId)!
    const sigs = req!.headers['webhook-signature']!.split(' ')
    t.equal(sigs.length, 2)
    for (const s of sigs) t.match(s, /^v1,[A-Za-z0-9+/]{43}=$/)
    for (const [name, secret] of [
      ['new key only', createReviewKeys([newKey]).webhookSecret(reviewId)],
      ['old key only', createReviewKeys([oldKey]).webhookSecret(reviewId)],
    ] as const) {
      t.doesNotThrow(() => new Webhook(secret).verify(req!.body, req!.headers), name)
    }
    t.throws(() => new Webhook(createReviewKeys([randomBytes(32)]).webhookSecret(reviewId)).verify(req!.body, req!.headers), 'another key does not verify')
    await q.stop({ timeoutMs: 1000 })
  })

  await t.test('surviving a restart: the retry after a failed attempt runs on a new queue', async (t) => {
    // A longer first delay (3–6 s) leaves time to stop the first queue before the retry is due.
    const slow = createCallbackDelivery({ ...deps(first), retry: { limit: 1, delaySeconds: 3 } })
    const { reviewId } = await submit(slow, receiver.url, (n) => (n === 0 ? 500 : 200))
    await until('the first attempt', async () => (await delivery.attempts(db, reviewId)).length === 1)
    await first.stop({ timeoutMs: 1000 })
    t.match(await delivery.attempts(db, reviewId), [{ attempt: 1, outcome: 'failed', statusCode: 500 }], 'one attempt when the first queue stopped')
    t.equal(await stateOf(db, reviewId), 'pending')
    const second = await openQueue()
    const again = createCallbackDelivery(deps(second))
    await again.start()
    await settled(reviewId)
    t.equal(await stateOf(db, reviewId), 'delivered')
    t.match(await again.attempts(db, reviewId), [
      { attempt: 1, outcome: 'failed', statusCode: 500 },
      { attempt: 2, outcome: 'delivered', statusCode: 200 },
    ])
  })

  await t.test('the logs never carry a secret or a signature', async (t) => {
    const text = JSON.stringify(logger.lines)
    t.notMatch(text, /whsec_/)
    t.notMatch(text, /v1,/)
    t.match(text, /review callback delivered/)
  })
}

onPgliteAndPostgres(t, suite)
