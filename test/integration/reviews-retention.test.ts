// Review retention (src/reviews/retention.ts) on PGlite and a real Postgres, with a fake clock, a
// local blob store whose deletes can be made to fail, the real site host and reviewer pages: a
// session past REVIEWS_RETENTION_DAYS is expired by one sweep (row kept with its review and its
// pending callback, every blob gone, page/site/bundle/submission 410, GET says expired) while a
// younger one is untouched; upload intents older than an hour are purged, fresh ones left; two
// sweeps at once expire and purge each row once; a failed blob delete is kept for the next sweep.
import { randomBytes, randomUUID } from 'node:crypto'
import { mkdtemp, rm } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import Fastify from 'fastify'
import t, { type Test } from 'tap'
import { createLocalBlobStore, type BlobStore } from '../../src/platform/blobs.ts'
import type { Db } from '../../src/platform/db/index.ts'
import { migrate } from '../../src/platform/db/migrate.ts'
import { egressPolicy } from '../../src/platform/egress.ts'
import { sendProblem, toAppError } from '../../src/platform/http.ts'
import { type JobLogger, openJobQueue } from '../../src/platform/jobs.ts'
import { createLogger } from '../../src/platform/logger.ts'
import type { PageShots } from '../../src/platform/page-shots.ts'
import { registerReviewerPages } from '../../src/reviews/app.ts'
import type { CallbackDelivery } from '../../src/reviews/callbacks.ts'
import { createReviewKeys, reviewsMasterKeys } from '../../src/reviews/keys.ts'
import { newSiteLabel, reviewOrigins } from '../../src/reviews/origins.ts'
import { createRetentionSweep, REVIEW_RETENTION_CRON, REVIEW_RETENTION_QUEUE, UPLOAD_INTENT_TTL_MS } from '../../src/reviews/retention.ts'
import { createReviewService } from '../../src/reviews/service.ts'
import { buildSiteHostApp, snapshotKey } from '../../src/reviews/site-host.ts'
import { createReviewerAssets, createSiteAssets } from '../../src/reviews/ui/assets.ts'
import type { PlanSpec } from '../../src/catalog/types.ts'
import { buildZip } from '../helpers/zip-corpus.ts'
import { FakeClock } from '../helpers/fake-clock.ts'
import { onPgliteAndPostgres } from '../helpers/servers.ts'

t.setTimeout(5 * 60_000)

const AGENT = 'agent-reviews-retention'
const GATEWAY = 'http://localhost:4020'
const DAY_MS = 24 * 60 * 60 * 1000
const RETENTION_DAYS = 30
const PROBLEM = 'application/problem+json; charset=utf-8'

const PLAN: PlanSpec = {
  id: 'reviews-retention-test',
  kind: 'subscription',
  title: 'test',
  description: 'test',
  priceMicros: 0n,
  periodDays: 3650,
  callsPerPeriod: 1000,
  covers: ['reviews-create'],
}

const quietLogger: JobLogger = { debug() {}, info() {}, warn() {}, error() {} }

/** A local blob store whose deletes of the keys in `failing` throw, and whose puts wait for `hold` when set. */
function flakyBlobs(inner: BlobStore): BlobStore & { failing: Set<string>; deletes: string[]; hold: { gate: Promise<void> | undefined; waiting: number } } {
  const failing = new Set<string>()
  const deletes: string[] = []
  const hold = { gate: undefined as Promise<void> | undefined, waiting: 0 }
  return {
    failing,
    deletes,
    hold,
    async put(key, data, contentType) {
      if (hold.gate) {
        hold.waiting++
        await hold.gate
      }
      return inner.put(key, data, contentType)
    },
    get: (key) => inner.get(key),
    async delete(key) {
      deletes.push(key)
      if (failing.has(key)) throw new Error(`injected delete failure of ${key}`)
      await inner.delete(key)
    },
  }
}

async function suite(t: Test, db: Db): Promise<void> {
  await migrate(db)
  await db.query(`insert into agents (id, token_hash) values ($1, $2)`, [AGENT, randomBytes(32).toString('hex')])
  // A subscription covering reviews, so create() runs for real (nothing of money is under test).
  await db.query(
    `insert into plan_purchases (id, agent_id, plan_id, kind, replay_key, price_micros, starts_at, calls_per_period)
     values ('purchase-retention', $1, $2, 'subscription', 'replay-retention', 0, '2020-01-01', 1000)`,
    [AGENT, PLAN.id],
  )
  const dir = await mkdtemp(path.join(os.tmpdir(), 'agw-review-retention-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const blobs = flakyBlobs(createLocalBlobStore(dir))
  const clock = new FakeClock('2026-11-26T09:00:00.000Z')
  const keys = createReviewKeys(await reviewsMasterKeys(db, undefined))
  const origins = reviewOrigins('http://{site}.localhost:4025', GATEWAY)
  const egress = egressPolicy({ allow: [] })
  // The real delivery needs a queue; these tests only need enqueue to mark the callback pending.
  const callbacks: CallbackDelivery = {
    declare: async () => {},
    start: async () => {},
    enqueue: async (tx, reviewId) => {
      await tx.query(`update reviews set delivery_state = 'pending' where id = $1 and callback_url is not null`, [reviewId])
    },
    attempts: async () => [],
  }
  const service = createReviewService({
    db,
    blobs,
    keys,
    callbacks,
    origins,
    egress,
    clock,
    plans: [PLAN],
    priceMicros: 20_000n,
    gatewayUrl: GATEWAY,
    retentionDays: RETENTION_DAYS,
  })
  const sweeper = (batchSize = 2) => createRetentionSweep({ db, blobs, clock, logger: quietLogger, retentionDays: RETENTION_DAYS, batchSize })

  const noShots: PageShots = { available: async () => false, capture: async () => Promise.reject(new Error('no Chromium')) }
  const siteHost = buildSiteHostApp({
    directory: service.directory,
    blobs,
    origins,
    assets: createSiteAssets(origins.reviewer),
    egress,
    screenshots: noShots,
    logger: createLogger('silent'),
    nowMs: () => clock.nowMs(),
  })
  t.teardown(() => siteHost.close())
  const pages = Fastify()
  pages.setErrorHandler((error, _request, reply) => {
    const appError = toAppError(error)
    return sendProblem(reply, appError.toProblem(), appError.headers)
  })
  registerReviewerPages(pages, { service, assets: createReviewerAssets(), origins })
  t.teardown(() => pages.close())
  await Promise.all([siteHost.ready(), pages.ready()])

  /** A zip session created `ageMs` ago (by the fake clock): two files, its bundle, a callback. */
  async function zipSession(ageMs: number) {
    const reviewId = randomUUID()
    const label = newSiteLabel()
    const files = [
      { path: 'index.html', data: Buffer.from('<h1>Hello</h1>'), contentType: 'text/html; charset=utf-8' },
      { path: 'css/site.css', data: Buffer.from('h1 { color: red }'), contentType: 'text/css; charset=utf-8' },
    ]
    const fileKeys = files.map((_, i) => `reviews/${reviewId}/files/f${i}`)
    const bundleKey = `reviews/${reviewId}/bundle.zip`
    for (const [i, f] of files.entries()) await blobs.put(fileKeys[i]!, f.data, f.contentType)
    await blobs.put(bundleKey, Buffer.from('PK-the-original-zip'), 'application/zip')
    await db.query(
      `insert into reviews (id, agent_id, source_kind, entry_file, bundle_key, bundle_sha256, bundle_bytes, site_label, callback_url, plan_id, charged_micros, created_at)
       values ($1, $2, 'zip', 'index.html', $3, 'sha', 19, $4, 'https://agent.example/hook', 'plan-test', 20000, $5)`,
      [reviewId, AGENT, bundleKey, label, new Date(clock.nowMs() - ageMs)],
    )
    await db.query(
      `insert into review_files (review_id, path, blob_key, content_type, bytes, sha256)
       select $1, * from unnest($2::text[], $3::text[], $4::text[], $5::int[], $6::text[])`,
      [reviewId, files.map((f) => f.path), fileKeys, files.map((f) => f.contentType), files.map((f) => f.data.length), files.map(() => 'sha')],
    )
    return { reviewId, label, capability: keys.capability(reviewId), blobKeys: [...fileKeys, bundleKey] }
  }

  /** A live-page session created `ageMs` ago, with a stored screenshot. */
  async function urlSession(ageMs: number) {
    const reviewId = randomUUID()
    const label = newSiteLabel()
    await blobs.put(snapshotKey(reviewId), Buffer.from('png'), 'image/png')
    await db.query(
      `insert into reviews (id, agent_id, source_kind, source_url, site_label, plan_id, charged_micros, created_at)
       values ($1, $2, 'url', 'https://example.com/pricing', $3, 'plan-test', 20000, $4)`,
      [reviewId, AGENT, label, new Date(clock.nowMs() - ageMs)],
    )
    return { reviewId, label, capability: keys.capability(reviewId), blobKeys: [snapshotKey(reviewId)] }
  }

  const present = async (keysToCheck: string[]) => (await Promise.all(keysToCheck.map((k) => blobs.get(k)))).map((b) => b !== undefined)
  const rowOf = async (reviewId: string) =>
    (
      await db.query<{ status: string; expired_at: Date | null; review: unknown; delivery_state: string }>(
        `select status, expired_at, review, delivery_state from reviews where id = $1`,
        [reviewId],
      )
    )[0]!
  const intents = async () =>
    db.query<{ review_id: string; reason: string; blob_keys: string[] }>(`select review_id, reason, blob_keys from review_uploads order by review_id, reason`)
  const siteGet = (label: string, url = '/index.html') => siteHost.inject({ method: 'GET', url, headers: { host: new URL(origins.site(label)).host } })
  /** Leaves nothing due behind for the next subtest. */
  const drain = async () => {
    blobs.failing.clear()
    clock.advance(UPLOAD_INTENT_TTL_MS + 1)
    await sweeper(100).sweep()
  }

  await t.test('a session past retention: one sweep expires it and deletes its blobs; a younger one is untouched', async (t) => {
    const old = await zipSession(RETENTION_DAYS * DAY_MS + 60_000)
    const young = await zipSession(RETENTION_DAYS * DAY_MS - 60_000)
    const live = await urlSession(RETENTION_DAYS * DAY_MS + 1)
    // The old one is submitted while still open (a minute before its expiry), its callback pending.
    clock.advance(-120_000)
    const review = await service.submit(old.capability, { comment: 'Looks good', pins: [], console: [] })
    clock.advance(120_000)
    t.equal((await rowOf(old.reviewId)).delivery_state, 'pending')

    // Refused by the clock already, before any sweep: the site is not served past its expiry.
    t.equal((await siteGet(old.label)).statusCode, 410, 'site host refuses at the expiry, before the sweep')
    t.equal((await siteGet(young.label)).statusCode, 200, 'the younger site is served')

    const result = await sweeper().sweep()
    t.same(result, { expired: 2, purged: 2, failedKeys: 0 }, 'one run: two sessions expired (in batches of two), their blobs purged')
    t.same(await present(old.blobKeys), [false, false, false], 'files and bundle deleted')
    t.same(await present(live.blobKeys), [false], 'the live page’s screenshot deleted')
    t.same(await present(young.blobKeys), [true, true, true], 'the younger session’s blobs kept')
    t.same(await intents(), [], 'nothing left to delete')

    const row = await rowOf(old.reviewId)
    t.equal(row.status, 'expired')
    t.same(row.expired_at, clock.now())
    t.same(row.review, review, 'the submitted review is kept')
    t.equal(row.delivery_state, 'pending', 'the pending callback is left to its own retries')
    t.equal((await rowOf(young.reviewId)).status, 'open')
    t.equal((await db.query(`select 1 from review_files where review_id = $1`, [old.reviewId])).length, 0, 'the file list went with the files')
    t.equal((await db.query(`select 1 from review_files where review_id = $1`, [young.reviewId])).length, 2)

    const status = await service.status(AGENT, old.reviewId)
    t.equal(status.status, 'expired')
    t.same(status.review, review, 'GET keeps the review')
    t.equal(status.callback?.webhookId !== null, true, 'the webhook id stays (the callback may still be delivered)')
    t.equal((await service.status(AGENT, live.reviewId)).status, 'expired')
    t.equal((await service.status(AGENT, young.reviewId)).status, 'open')

    for (const [what, url] of [
      ['reviewer page', `/reviews/${old.capability}`],
      ['bundle.zip', `/reviews/${old.capability}/bundle.zip`],
      ['live reviewer page', `/reviews/${live.capability}`],
    ] as const) {
      const res = await pages.inject({ method: 'GET', url })
      t.equal(res.statusCode, 410, what)
      t.equal(res.headers['content-type'], PROBLEM, `${what}: problem+json`)
      t.equal(res.json().code, 'review_expired', `${what}: code`)
    }
    const site = await siteGet(old.label)
    t.equal(site.statusCode, 410, 'site host')
    t.equal(site.headers['content-type'], PROBLEM)
    t.equal(site.json().code, 'review_expired')
    t.equal((await siteGet(live.label, '/pricing')).statusCode, 410, 'live page proxy')
    t.equal((await pages.inject({ method: 'GET', url: `/reviews/${young.capability}` })).statusCode, 200, 'the younger page is served')
    t.equal((await pages.inject({ method: 'GET', url: `/reviews/${young.capability}/bundle.zip` })).statusCode, 200, 'the younger bundle is served')

    await t.rejects(service.submit(live.capability, { comment: 'late', pins: [], console: [] }), { code: 'review_expired', status: 410 }, 'submission to an expired session')
    // Not yet swept, but past its expiry by the clock: refused as well, and GET says expired.
    clock.advance(61_000)
    await t.rejects(service.submit(young.capability, { comment: 'late', pins: [], console: [] }), { code: 'review_expired' })
    t.equal((await service.status(AGENT, young.reviewId)).status, 'expired', 'GET reports expiry before the sweep marks it')
    t.same(await sweeper().sweep(), { expired: 1, purged: 1, failedKeys: 0 })
    t.same(await sweeper().sweep(), { expired: 0, purged: 0, failedKeys: 0 }, 'a second run finds nothing')
  })

  await t.test('upload intents: one older than an hour is purged with its blobs, a fresh one is left', async (t) => {
    const put = async (reviewId: string, ageMs: number) => {
      const blobKeys = [`reviews/${reviewId}/files/a`, `reviews/${reviewId}/bundle.zip`]
      for (const key of blobKeys) await blobs.put(key, Buffer.from(key), 'application/octet-stream')
      const at = new Date(clock.nowMs() - ageMs)
      await db.query(`insert into review_uploads (review_id, reason, blob_keys, created_at, purge_after) values ($1, 'upload', $2, $3, $4)`, [
        reviewId,
        blobKeys,
        at,
        new Date(at.getTime() + UPLOAD_INTENT_TTL_MS),
      ])
      return blobKeys
    }
    const deadId = randomUUID()
    const freshId = randomUUID()
    const dead = await put(deadId, UPLOAD_INTENT_TTL_MS + 1000)
    const fresh = await put(freshId, 60_000)
    t.same(await sweeper().sweep(), { expired: 0, purged: 1, failedKeys: 0 })
    t.same(await present(dead), [false, false], 'the dead upload’s blobs are deleted')
    t.same(await present(fresh), [true, true], 'the fresh upload’s blobs stay')
    t.same(
      (await intents()).map((i) => i.review_id),
      [freshId],
      'only the fresh intent is left',
    )
    // The create that wrote a purged intent may not commit any more: its delete finds it claimed.
    await db.query(`update review_uploads set claimed_at = $2 where review_id = $1`, [freshId, clock.now()])
    t.equal((await db.query(`delete from review_uploads where review_id = $1 and reason = 'upload' and claimed_at is null returning review_id`, [freshId])).length, 0)
    await db.query(`update review_uploads set claimed_at = null where review_id = $1`, [freshId])
    await drain()
    t.same(await present(fresh), [false, false], 'an hour later it is purged too')
  })

  await t.test('create: the upload intent goes in the session’s transaction; a request that dies is purged', async (t) => {
    const zipData = (
      await buildZip([
        { name: 'index.html', data: Buffer.from('<h1>Hi</h1>') },
        { name: 'app.js', data: Buffer.from('console.log(1)') },
      ])
    ).toString('base64')
    const { session } = await service.create(AGENT, { zipData, entryFile: 'index.html' }, undefined)
    t.same(await intents(), [], 'no intent left once the session is written')
    const written = await db.query<{ blob_key: string }>(`select blob_key from review_files where review_id = $1`, [session.reviewId])
    t.equal(written.length, 2)
    t.same(await present([...written.map((r) => r.blob_key), `reviews/${session.reviewId}/bundle.zip`]), [true, true, true])

    // A request whose puts stall past the intent's hour: the sweep reclaims its blobs, and the
    // request, when it resumes, may not write a session pointing at them.
    let release: () => void = () => {}
    blobs.hold.gate = new Promise<void>((resolve) => {
      release = resolve
    })
    blobs.hold.waiting = 0
    const stalled = service.create(
      AGENT,
      { zipData: (await buildZip([{ name: 'index.html', data: Buffer.from('<p>slow</p>') }])).toString('base64'), entryFile: 'index.html' },
      undefined,
    )
    stalled.catch(() => {})
    while (blobs.hold.waiting === 0) await new Promise((resolve) => setImmediate(resolve))
    const [intent] = await intents()
    t.equal(intent?.reason, 'upload', 'the intent is written before the first put')
    t.equal(intent?.blob_keys.length, 2, 'naming the file and the bundle')
    t.same(await sweeper().sweep(), { expired: 0, purged: 0, failedKeys: 0 }, 'a fresh intent is left alone')
    clock.advance(UPLOAD_INTENT_TTL_MS + 1)
    blobs.hold.gate = undefined
    t.same(await sweeper().sweep(), { expired: 0, purged: 1, failedKeys: 0 }, 'an hour later it is purged')
    release()
    await t.rejects(stalled, /outlived its intent/, 'the resumed request fails instead of writing the session')
    t.equal((await db.query(`select 1 from reviews where id = $1`, [intent!.review_id])).length, 0, 'no session row')
    t.same(await present(intent!.blob_keys), [false, false], 'its blobs are gone (deleted by the sweep and by the failed request)')
    t.same(await intents(), [])
  })

  await t.test('a blob delete that fails keeps its key for the next sweep', async (t) => {
    const s = await zipSession(RETENTION_DAYS * DAY_MS + 1)
    const stuck = s.blobKeys[1]!
    blobs.failing.add(stuck)
    t.same(await sweeper().sweep(), { expired: 1, purged: 0, failedKeys: 1 })
    t.equal((await rowOf(s.reviewId)).status, 'expired', 'the session is expired all the same')
    t.same(await present(s.blobKeys), [false, true, false], 'the other blobs went')
    t.same(await intents(), [{ review_id: s.reviewId, reason: 'expired', blob_keys: [stuck] }], 'only the failed key is kept')
    t.same(await sweeper().sweep(), { expired: 0, purged: 0, failedKeys: 0 }, 'not retried within the same run instant')
    clock.advance(1000)
    t.same(await sweeper().sweep(), { expired: 0, purged: 0, failedKeys: 1 }, 'still failing on the next sweep: still kept')
    blobs.failing.delete(stuck)
    blobs.deletes.length = 0
    clock.advance(1000)
    t.same(await sweeper().sweep(), { expired: 0, purged: 1, failedKeys: 0 }, 'the next sweep retries it')
    t.same(blobs.deletes, [stuck], 'exactly the kept key is deleted again')
    t.same(await present(s.blobKeys), [false, false, false])
    t.same(await intents(), [])
  })

  await t.test('two sweeps at once expire and purge each session once', async (t) => {
    const sessions = []
    for (let i = 0; i < 7; i++) sessions.push(await zipSession(RETENTION_DAYS * DAY_MS + 1000 + i))
    const keep = await zipSession(DAY_MS)
    blobs.deletes.length = 0
    const [a, b] = await Promise.all([sweeper(2).sweep(), sweeper(2).sweep()])
    t.equal(a.expired + b.expired, 7, `every due session expired once (${a.expired} + ${b.expired})`)
    t.equal(a.purged + b.purged, 7, 'every blob row purged once')
    const all = sessions.flatMap((s) => s.blobKeys)
    t.same([...blobs.deletes].sort(), [...all].sort(), 'each blob deleted exactly once')
    t.same(
      await present(all),
      all.map(() => false),
    )
    t.same(await present(keep.blobKeys), [true, true, true])
    const rows = await db.query<{ n: number }>(`select count(*)::int as n from reviews where status = 'expired' and id = any($1::uuid[])`, [sessions.map((s) => s.reviewId)])
    t.equal(rows[0]!.n, 7)
    t.same(await intents(), [])
  })

  await t.test('the sweep is a pg-boss schedule on its own queue', async (t) => {
    const jobs = await openJobQueue({ db, logger: quietLogger })
    t.teardown(() => jobs.stop({ timeoutMs: 1000 }))
    await sweeper().start(jobs)
    const rows = await db.query<{ name: string; cron: string; timezone: string }>(`select name, cron, timezone from ${jobs.schema}.schedule`)
    t.same(rows, [{ name: REVIEW_RETENTION_QUEUE, cron: REVIEW_RETENTION_CRON, timezone: 'UTC' }])
  })
}

onPgliteAndPostgres(t, suite)
