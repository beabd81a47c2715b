// The topology drill's review sessions with callbacks (docs/reliability.md, "Schedules and
// callbacks"): a webhook receiver on 127.0.0.1 that verifies every delivery (Standard Webhooks,
// with the session's callbackSecret) as it arrives, a reviewer buying `reviews-credit-5` over x402
// and opening sessions on the gateway front, and a reviewer submitting each one over plain HTTP
// (`POST {shareUrl}/submission`, what the reviewer page sends). The check: every submitted session's
// callback delivered, under exactly one webhook-id (retries of that id are at-least-once and
// allowed), each signature valid, each session debited once.
//
// The gateway refuses a loopback callbackUrl unless REVIEWS_EGRESS_ALLOW names the receiver's
// 127.0.0.1:<port>, so the receiver is started before the topology (its port goes into the gateways'
// environment).
import { randomBytes } from 'node:crypto'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { Webhook } from 'standardwebhooks'
import yazl from 'yazl'
import type { Topology } from './topology.ts'
import { openDrillDb } from './topology-faults.ts'
import { type Buyer, type CallRecord, payer, record } from './topology-load.ts'

type Json = Record<string, any>
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))
const CALL_TIMEOUT_MS = 60_000
export const REVIEWS_PLAN = 'reviews-credit-5'

/** One POST the receiver took, judged as it arrived (the signature's timestamp window is 5 minutes). */
export interface Delivery {
  at: number
  webhookId: string
  /** The session the body names (data.reviewId), when the body parsed. */
  reviewId?: string
  type?: string
  verified: boolean
  error?: string
  answered: number
}

export interface Receiver {
  port: number
  /** The `host:port` REVIEWS_EGRESS_ALLOW must name on every gateway. */
  allow: string
  url: string
  deliveries: Delivery[]
  /** The session's secret, registered at creation (before its callback can fire). */
  expect(webhookId: string, secret: string): void
  close(): Promise<void>
}

/**
 * Starts the receiver. The first attempt of a webhook-id is answered 503 with probability
 * `failFirst`, so that the product's retries (same webhook-id, same body) are exercised too.
 */
export async function startReceiver(options: { random?: () => number; failFirst?: number } = {}): Promise<Receiver> {
  const secrets = new Map<string, string>()
  const deliveries: Delivery[] = []
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (chunk: Buffer) => chunks.push(chunk))
    req.on('end', () => {
      const raw = Buffer.concat(chunks).toString('utf8')
      const webhookId = String(req.headers['webhook-id'] ?? '')
      const delivery: Delivery = { at: Date.now(), webhookId, verified: false, answered: 204 }
      try {
        const body = JSON.parse(raw) as Json
        delivery.type = body.type
        if (typeof body.data?.reviewId === 'string') delivery.reviewId = body.data.reviewId
      } catch {
        delivery.error = 'body is not JSON'
      }
      const secret = secrets.get(webhookId)
      if (secret === undefined) delivery.error = `no session has webhook-id ${webhookId}`
      else {
        try {
          new Webhook(secret).verify(raw, req.headers as Record<string, string>)
          delivery.verified = true
        } catch (error) {
          delivery.error = `signature: ${(error as Error).message}`
        }
      }
      const first = !deliveries.some((earlier) => earlier.webhookId === webhookId)
      if (first && options.random && options.random() < (options.failFirst ?? 0)) delivery.answered = 503
      deliveries.push(delivery)
      res.writeHead(delivery.answered).end()
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as AddressInfo).port
  return {
    port,
    allow: `127.0.0.1:${port}`,
    url: `http://127.0.0.1:${port}`,
    deliveries,
    expect: (webhookId, secret) => void secrets.set(webhookId, secret),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}

/** Repeats `call` (through `record`) while it is cut off, 5xx or 409 payment_in_progress, until `deadline`. */
export async function persistRecorded(calls: CallRecord[], op: string, buyer: Buyer, call: () => Promise<Response>, deadline: number): Promise<{ res?: Response; body: Json }> {
  for (;;) {
    const out = await record(calls, op, buyer, call)
    const again = !out.res || out.res.status >= 500 || (out.res.status === 409 && out.body.code === 'payment_in_progress')
    if (!again || Date.now() > deadline) return out
    await sleep(Math.min(10, Number(out.res?.headers.get('retry-after') ?? 1)) * 1000)
  }
}

function zipOf(files: Record<string, string>): Promise<Buffer> {
  const zip = new yazl.ZipFile()
  for (const [name, text] of Object.entries(files)) zip.addBuffer(Buffer.from(text), name)
  zip.end()
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    zip.outputStream.on('data', (chunk: Buffer) => chunks.push(chunk))
    zip.outputStream.on('end', () => resolve(Buffer.concat(chunks)))
    zip.outputStream.on('error', reject)
  })
}

export interface ReviewSession {
  key: string
  reviewId?: string
  shareUrl?: string
  webhookId?: string
  /** The submission was answered 200 (or 409: an earlier, cut-off attempt had landed). */
  submitted: boolean
}

export interface Reviews {
  sessions: ReviewSession[]
  /** Plans bought (answered 2xx or payment_identifier_conflict). */
  plans: number
  stop(): Promise<void>
}

/** Buys a plan for `buyer`, then opens and submits up to `count` sessions, one every `spacingMs`. */
export function startReviews(
  topology: Topology,
  buyer: Buyer,
  receiver: Receiver,
  calls: CallRecord[],
  options: { count: number; spacingMs: number; random: () => number; log: (line: string) => void },
): Reviews {
  const gateway = topology.urls.gateway
  const out: Reviews = { sessions: [], plans: 0, stop: async () => {} }
  let stopping = false
  const auth = { authorization: `Bearer ${buyer.token}` }
  const worker = async () => {
    const id = `pay_topo_rv_${randomBytes(10).toString('hex')}`
    const bought = await persistRecorded(
      calls,
      'review.plan',
      buyer,
      () =>
        payer(buyer.account, id)(`${gateway}/plans/${REVIEWS_PLAN}/purchase`, {
          method: 'POST',
          headers: { 'svc-agent-authorization': `Bearer ${buyer.token}` },
          signal: AbortSignal.timeout(CALL_TIMEOUT_MS),
        }),
      Date.now() + 300_000,
    )
    if (bought.res?.ok || (bought.res?.status === 409 && bought.body.code === 'payment_identifier_conflict')) out.plans += 1
    else {
      options.log(`reviews: the ${REVIEWS_PLAN} purchase answered ${bought.res?.status ?? 'nothing'}; no sessions`)
      return
    }
    const zip = (await zipOf({ 'index.html': '<!doctype html><title>drill</title><h1 data-testid="t">Drill page</h1>' })).toString('base64')
    while (!stopping && out.sessions.length < options.count) {
      const session: ReviewSession = { key: `topo-review-${randomBytes(8).toString('hex')}`, submitted: false }
      out.sessions.push(session)
      const body = JSON.stringify({ zipData: zip, callbackUrl: `${receiver.url}/hooks/review` })
      const created = await persistRecorded(
        calls,
        'review.create',
        buyer,
        () =>
          fetch(`${gateway}/api/v1/annotate/reviews`, {
            method: 'POST',
            headers: { ...auth, 'content-type': 'application/json', 'idempotency-key': session.key },
            body,
            signal: AbortSignal.timeout(CALL_TIMEOUT_MS),
          }),
        Date.now() + 120_000,
      )
      if (created.res?.ok && typeof created.body.reviewId === 'string') {
        session.reviewId = created.body.reviewId
        session.shareUrl = created.body.shareUrl
        session.webhookId = `msg_${session.reviewId.replace(/-/g, '')}`
        receiver.expect(session.webhookId, created.body.callbackSecret)
        // The reviewer looks at the page a little while, then submits it.
        await sleep(2_000 + Math.floor(options.random() * 8_000))
        const submitted = await persistRecorded(
          calls,
          'review.submit',
          buyer,
          () =>
            fetch(`${session.shareUrl}/submission`, {
              method: 'POST',
              headers: { 'content-type': 'application/json' },
              body: JSON.stringify({ comment: `drill review ${session.key}`, pins: [], console: [] }),
              signal: AbortSignal.timeout(CALL_TIMEOUT_MS),
            }),
          Date.now() + 120_000,
        )
        // 409: one submission per session, so an earlier attempt cut off after it landed.
        session.submitted = submitted.res?.ok === true || submitted.res?.status === 409
      }
      const pause = Date.now() + options.spacingMs
      while (!stopping && Date.now() < pause) await sleep(250)
    }
  }
  const running = worker().catch((error: unknown) => options.log(`reviews worker failed: ${(error as Error).stack ?? error}`))
  out.stop = async () => {
    stopping = true
    await running
  }
  return out
}

export interface ReviewsSummary {
  sessions: number
  submitted: number
  delivered: number
  deliveries: number
  /** Deliveries beyond the first of their webhook-id (retries, allowed). */
  repeats: number
  /** Plan credit and the price of the plans bought, for the service wallet's expectation. */
  planMicros: bigint
}

/** After quiescence: every submitted session's callback delivered once per webhook-id, signed, debited once. */
export async function checkReviews(topology: Topology, buyer: Buyer, receiver: Receiver, reviews: Reviews, problems: string[], waitMs = 180_000): Promise<ReviewsSummary> {
  const summary: ReviewsSummary = { sessions: 0, submitted: 0, delivered: 0, deliveries: receiver.deliveries.length, repeats: 0, planMicros: 0n }
  const ours = reviews.sessions.filter((session) => session.reviewId !== undefined)
  summary.sessions = ours.length
  const deadline = Date.now() + waitMs
  for (const session of ours) {
    if (!session.submitted) continue
    summary.submitted += 1
    // The product's view first: its callback state settles (delivered or given up).
    let state = 'unknown'
    for (;;) {
      const res = await fetch(`${topology.urls.gateway}/api/v1/annotate/reviews/${session.reviewId}`, {
        headers: { authorization: `Bearer ${buyer.token}` },
        signal: AbortSignal.timeout(10_000),
      }).catch(() => undefined)
      const view = res?.ok ? ((await res.json().catch(() => ({}))) as Json) : {}
      state = view.callback?.state ?? state
      if ((state === 'delivered' || state === 'failed') && view.status === 'submitted') break
      if (Date.now() > deadline) break
      await sleep(1_000)
    }
    const mine = receiver.deliveries.filter((delivery) => delivery.webhookId === session.webhookId || delivery.reviewId === session.reviewId)
    const ids = new Set(mine.map((delivery) => delivery.webhookId))
    const accepted = mine.filter((delivery) => delivery.answered >= 200 && delivery.answered < 300)
    summary.repeats += Math.max(0, mine.length - 1)
    if (state !== 'delivered') problems.push(`review ${session.reviewId}: submitted, its callback is '${state}' after quiescence`)
    if (accepted.length === 0) problems.push(`review ${session.reviewId}: submitted, no callback answered 2xx reached the receiver (${mine.length} deliveries)`)
    else summary.delivered += 1
    if (ids.size > 1) problems.push(`review ${session.reviewId}: its callback came under ${ids.size} webhook-ids (${[...ids].join(', ')}): one event, one id`)
    if (accepted.length > 1) problems.push(`review ${session.reviewId}: the callback was delivered (2xx) ${accepted.length} times under ${session.webhookId}`)
    for (const delivery of mine) {
      if (!delivery.verified) problems.push(`review ${session.reviewId}: a delivery at ${new Date(delivery.at).toISOString()} did not verify: ${delivery.error}`)
      if (delivery.type !== 'review.submitted' || delivery.reviewId !== session.reviewId)
        problems.push(`review ${session.reviewId}: a delivery carried type ${delivery.type}, reviewId ${delivery.reviewId}`)
    }
  }
  const known = new Set(ours.map((session) => session.webhookId))
  for (const delivery of receiver.deliveries)
    if (!known.has(delivery.webhookId)) problems.push(`the receiver got a callback for no session of ours: webhook-id ${delivery.webhookId} (${delivery.error ?? ''})`)
  for (const session of reviews.sessions) if (session.reviewId === undefined) problems.push(`review session ${session.key}: never answered with a session (see its calls)`)

  const db = await openDrillDb(topology)
  try {
    const rows = await db.query<{ id: string; idempotency_key: string; debits: bigint }>(
      `select r.id::text as id, r.idempotency_key, (select count(*) from plan_credit_ledger l where l.request_id = 'review:' || r.id::text and l.kind = 'debit')::int8 as debits
         from reviews r where r.idempotency_key = any($1::text[])`,
      [reviews.sessions.map((session) => session.key)],
    )
    const byKey = new Map(rows.map((row) => [row.idempotency_key, row]))
    for (const session of reviews.sessions) {
      const row = byKey.get(session.key)
      if (session.reviewId !== undefined && row?.id !== session.reviewId)
        problems.push(`review ${session.reviewId}: the database holds ${row?.id ?? 'no session'} for its Idempotency-Key`)
      if (row && BigInt(row.debits) !== 1n) problems.push(`review ${row.id}: ${row.debits} plan debits, one session is one debit`)
    }
    const bought = await db.query<{ micros: bigint | null }>(
      `select sum(p.price_micros)::int8 as micros from plan_purchases p join payment_reservations r on r.replay_key = p.replay_key
        where p.state = 'active' and p.plan_id = $1 and lower(r.payer) = $2`,
      [REVIEWS_PLAN, buyer.account.address.toLowerCase()],
    )
    summary.planMicros = BigInt(bought[0]?.micros ?? 0)
  } finally {
    await db.close()
  }
  return summary
}
