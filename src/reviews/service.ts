// Review sessions: create (one plan debit, in the transaction that writes the session, exactly once
// per Idempotency-Key), read (the creating agent only), the reviewer page's view and its one
// submission (which enqueues the callback in the same transaction), and the site directory the
// isolated origin serves from.
//
// What is written where, and what a crash leaves:
// - An uploaded site's files and its original zip go to the blob store first, then one transaction
//   writes the session, its file list and the plan debit. Before the first put an upload intent
//   (review_uploads) names every key, and that transaction deletes it: a crash in between leaves an
//   intent the retention sweep purges after an hour (nothing charged, nothing served); a failed
//   transaction deletes the blobs and the intent at once.
// - A session expires REVIEWS_RETENTION_DAYS after creation (retention.ts): from then on its page,
//   site, bundle and submission answer 410, and the sweep deletes its blobs; GET still answers.
// - The submission, the session's status and the first callback job commit together, so a
//   submitted review is always delivered or visibly failing (GET shows the delivery log).
import { createHash, randomUUID } from 'node:crypto'
import type { Static } from '@sinclair/typebox'
import type { ReviewStatus } from '../catalog/schemas/reviews.ts'
import type { PlanSpec } from '../catalog/types.ts'
import { planOffer } from '../payments/access.ts'
import { debitPlanIn, planStandings, type PlanStanding } from '../payments/agents.ts'
import type { BlobStore } from '../platform/blobs.ts'
import { forEachLimited } from '../platform/concurrency.ts'
import type { Clock } from '../platform/clock.ts'
import { isUniqueViolation, type Db, type Queryable } from '../platform/db/index.ts'
import { guardedFetch, EgressRefused, type EgressPolicy } from '../platform/egress.ts'
import { AppError } from '../platform/errors.ts'
import { formatUsd } from '../platform/money.ts'
import { webhookIdOf, type CallbackDelivery } from './callbacks.ts'
import type { ReviewKeys } from './keys.ts'
import { PROXY_MAX_REDIRECTS, PROXY_MAX_RESPONSE_BYTES, PROXY_TIMEOUT_MS } from './limits.ts'
import { newSiteLabel } from './origins.ts'
import type { HostedSite, ReviewerPageView, ReviewJson, ReviewOrigins, SiteDirectory, SiteFile, SubmissionJson } from './types.ts'
import { checkPublicUrl } from './urls.ts'
import { readSiteZip } from './zip.ts'
import { DEFAULT_RETENTION_DAYS, expiryOf, UPLOAD_INTENT_TTL_MS } from './retention.ts'

/** The plan debit's operation, and its request id prefix in plan_credit_ledger. */
export const REVIEW_OPERATION = 'createReviewSession'

export interface CreateReviewInput {
  url?: string
  zipData?: string
  entryFile: string
  callbackUrl?: string
}

export interface CreatedReview {
  reviewId: string
  shareUrl: string
  bundleUrl?: string
  statusUrl: string
  callbackSecret?: string
}

export interface ReviewServiceDeps {
  db: Db
  blobs: BlobStore
  keys: ReviewKeys
  callbacks: CallbackDelivery
  origins: ReviewOrigins
  /** The SSRF rule of live pages and callbacks (src/platform/egress.ts). */
  egress: EgressPolicy
  clock: Clock
  /** Plans covering reviews-create, and the price of one session. */
  plans: readonly PlanSpec[]
  priceMicros: bigint
  gatewayUrl: string
  /** REVIEWS_RETENTION_DAYS (default 30). */
  retentionDays?: number
}

type ReviewRow = {
  id: string
  agent_id: string
  source_kind: 'zip' | 'url'
  source_url: string | null
  entry_file: string | null
  bundle_key: string | null
  bundle_sha256: string | null
  site_label: string
  callback_url: string | null
  status: 'open' | 'submitted' | 'expired'
  review: ReviewJson | null
  delivery_state: 'waiting' | 'pending' | 'delivered' | 'failed'
  request_hash: string | null
  created_at: Date
  expired_at: Date | null
}

const REVIEW_COLUMNS = `id, agent_id, source_kind, source_url, entry_file, bundle_key, bundle_sha256, site_label, callback_url, status, review, delivery_state, request_hash, created_at, expired_at`

function sha256Hex(data: string | Buffer): string {
  return createHash('sha256').update(data).digest('hex')
}

/** What a retried create is compared on (key order fixed; the zip by its bytes' hash). */
function requestHash(input: CreateReviewInput): string {
  return sha256Hex(
    JSON.stringify([
      input.url ?? null,
      input.zipData === undefined ? null : sha256Hex(input.zipData),
      input.zipData === undefined ? null : input.entryFile,
      input.callbackUrl ?? null,
    ]),
  )
}

const BLOB_WRITES_AT_ONCE = 8

/** The path of a file as a URL path (each segment percent-encoded). */
function urlPath(path: string): string {
  return `/${path.split('/').map(encodeURIComponent).join('/')}`
}

export function createReviewService(deps: ReviewServiceDeps) {
  const { db, blobs, keys, callbacks, origins, egress, clock } = deps
  const retentionDays = deps.retentionDays ?? DEFAULT_RETENTION_DAYS
  const probe = guardedFetch(egress, { timeoutMs: PROXY_TIMEOUT_MS, maxResponseBytes: PROXY_MAX_RESPONSE_BYTES })

  const shareUrlOf = (reviewId: string) => `${deps.gatewayUrl}/reviews/${keys.capability(reviewId)}`
  const statusUrlOf = (reviewId: string) => `${deps.gatewayUrl}/api/v1/annotate/reviews/${reviewId}`

  function sessionOf(row: Pick<ReviewRow, 'id' | 'source_kind' | 'callback_url'>): CreatedReview {
    const shareUrl = shareUrlOf(row.id)
    return {
      reviewId: row.id,
      shareUrl,
      ...(row.source_kind === 'zip' ? { bundleUrl: `${shareUrl}/bundle.zip` } : {}),
      statusUrl: statusUrlOf(row.id),
      ...(row.callback_url !== null ? { callbackSecret: keys.webhookSecret(row.id) } : {}),
    }
  }

  function sourceOf(row: ReviewRow): ReviewJson['source'] {
    if (row.source_kind === 'url') return { kind: 'url', url: row.source_url as string }
    return { kind: 'zip', entryFile: row.entry_file as string, bundleSha256: row.bundle_sha256 as string, bundleUrl: `${shareUrlOf(row.id)}/bundle.zip` }
  }

  async function replayOf(agentId: string, idempotencyKey: string, hash: string): Promise<CreatedReview | undefined> {
    const rows = await db.query<ReviewRow>(`select ${REVIEW_COLUMNS} from reviews where agent_id = $1 and idempotency_key = $2`, [agentId, idempotencyKey])
    const row = rows[0]
    if (row === undefined) return undefined
    if (row.request_hash !== hash) {
      throw new AppError('idempotency_conflict', 'This Idempotency-Key created another review session; use a new key for a new session', { field: 'header.idempotency-key' })
    }
    return sessionOf(row)
  }

  /**
   * A live page must answer from a public address, hop by hop: each redirect is checked by the
   * same rule before it is followed. A page that cannot be reached at all is refused before any
   * charge; one that answers (any status) can be reviewed (the screenshot covers what the proxy cannot show).
   */
  async function checkLivePage(raw: string): Promise<string> {
    let url = await checkPublicUrl(raw, 'body.url', egress)
    for (let hop = 0; ; hop++) {
      let response: Response
      try {
        response = await probe(url.href, { method: 'GET', headers: { accept: 'text/html,*/*;q=0.8', 'accept-encoding': 'identity' } })
      } catch (err) {
        if (err instanceof EgressRefused)
          throw new AppError('url_not_allowed', `url ${hop === 0 ? '' : `redirects to ${url.href}, which `}is not reachable: ${err.message}`, { field: 'body.url' })
        throw new AppError('url_unreachable', `url could not be loaded: ${(err as Error).message}. Nothing was charged.`, { field: 'body.url' })
      }
      const location = response.headers.get('location')
      if (response.status < 300 || response.status >= 400 || location === null) return raw
      if (hop >= PROXY_MAX_REDIRECTS) throw new AppError('url_unreachable', `url redirects more than ${PROXY_MAX_REDIRECTS} times. Nothing was charged.`, { field: 'body.url' })
      let next: URL
      try {
        next = new URL(location, url)
      } catch {
        throw new AppError('url_unreachable', 'url redirects to an address that does not parse. Nothing was charged.', { field: 'body.url' })
      }
      try {
        url = await checkPublicUrl(next.href, 'body.url', egress)
      } catch (err) {
        if (err instanceof AppError) throw new AppError('url_not_allowed', `url redirects to ${next.href}, which is not allowed: ${err.message}`, { field: 'body.url' })
        throw err
      }
    }
  }

  async function debit(tx: Queryable, agentId: string, reviewId: string): Promise<PlanStanding> {
    const debited = await debitPlanIn(tx, clock.now(), {
      agentId,
      service: 'reviews-create',
      plans: deps.plans,
      costMicros: deps.priceMicros,
      operationId: REVIEW_OPERATION,
      requestId: `review:${reviewId}`,
    })
    if (debited === undefined) throw planRequired()
    return debited.standing
  }

  function planRequired(): AppError {
    return new AppError('plan_required', `No active plan of yours covers a review session (${formatUsd(deps.priceMicros)} USD of plan credit); buy one of the listed plans`, {
      extensions: { plans: deps.plans.map((plan) => planOffer(plan, deps.gatewayUrl)) },
    })
  }

  async function rowOf(q: Queryable, reviewId: string, lock = false): Promise<ReviewRow | undefined> {
    const rows = await q.query<ReviewRow>(`select ${REVIEW_COLUMNS} from reviews where id = $1${lock ? ' for update' : ''}`, [reviewId])
    return rows[0]
  }

  function notFound(): AppError {
    return new AppError('review_not_found', 'No review session has this address; check the link you were given')
  }

  /** When the session stops being served: its expiry by the clock, or when the sweep marked it (retention may have grown since). */
  function expiresAt(row: ReviewRow): Date {
    return row.expired_at ?? expiryOf(row.created_at, retentionDays)
  }

  /** Expired by the clock already, even before the sweep has marked it. */
  function isExpired(row: ReviewRow): boolean {
    return row.status === 'expired' || expiresAt(row).getTime() <= clock.nowMs()
  }

  function expired(): AppError {
    return new AppError('review_expired', `This review session has expired (sessions are kept ${retentionDays} days); its site was deleted`)
  }

  const directory: SiteDirectory = {
    async siteByLabel(label: string): Promise<HostedSite | undefined> {
      if (!/^s-[a-z2-7]{26}$/.test(label)) return undefined
      const rows = await db.query<ReviewRow>(`select ${REVIEW_COLUMNS} from reviews where site_label = $1`, [label])
      const row = rows[0]
      if (row === undefined) return undefined
      const expiry = expiresAt(row).getTime()
      if (row.source_kind === 'url') return { kind: 'url', reviewId: row.id, label, url: row.source_url as string, expiresAt: expiry }
      const files = await db.query<{ path: string; blob_key: string; content_type: string; bytes: number; sha256: string }>(
        `select path, blob_key, content_type, bytes, sha256 from review_files where review_id = $1`,
        [row.id],
      )
      const map = new Map<string, SiteFile>(files.map((f) => [f.path, { path: f.path, blobKey: f.blob_key, contentType: f.content_type, bytes: f.bytes, sha256: f.sha256 }]))
      return { kind: 'zip', reviewId: row.id, label, entryFile: row.entry_file as string, files: map, expiresAt: expiry }
    },
  }

  return {
    directory,

    /**
     * Creates a session for `agentId`: checks the input (nothing charged when it is refused),
     * stores an uploaded site, then debits one session from a covering plan in the transaction
     * that writes the row. A retry with the same Idempotency-Key answers the first session.
     */
    async create(agentId: string, input: CreateReviewInput, idempotencyKey: string | undefined): Promise<{ session: CreatedReview; standing?: PlanStanding }> {
      if ((input.url === undefined) === (input.zipData === undefined)) {
        throw new AppError('validation_error', 'Send exactly one of url (a live page) or zipData (a base64 zip of the site)', {
          field: input.url === undefined ? 'body.url' : 'body.zipData',
        })
      }
      // Hashing a 14 MB body costs ~20 ms: only a keyed request is ever compared.
      const hash = idempotencyKey === undefined ? null : requestHash(input)
      if (idempotencyKey !== undefined && hash !== null) {
        const replay = await replayOf(agentId, idempotencyKey, hash)
        if (replay) return { session: replay }
      }
      // Refused early, before any work: nobody without a covering plan makes us read 10 MiB.
      // (The debit in the session's transaction is what counts.)
      if ((await planStandings(db, clock.now(), agentId, 'reviews-create', deps.plans, deps.priceMicros)).length === 0) throw planRequired()

      if (input.callbackUrl !== undefined) await checkPublicUrl(input.callbackUrl, 'body.callbackUrl', egress)
      const reviewId = randomUUID()
      const label = newSiteLabel()
      const written: string[] = []
      let intent = false
      let files: SiteFile[] = []
      let bundle: { key: string; sha256: string; bytes: number } | undefined
      let sourceUrl: string | null = null
      let entryFile: string | null = null
      try {
        if (input.url !== undefined) {
          sourceUrl = await checkLivePage(input.url)
        } else {
          const site = await readSiteZip(input.zipData as string, input.entryFile)
          entryFile = site.entryFile
          const zip = site.zip
          // Content-addressed within the session: identical files are stored once.
          const unique = new Map<string, { key: string; data: Buffer; contentType: string }>()
          for (const file of site.files) {
            const blobKey = `reviews/${reviewId}/files/${file.sha256}`
            if (!unique.has(blobKey)) unique.set(blobKey, { key: blobKey, data: file.data, contentType: file.contentType })
            files.push({ path: file.path, blobKey, contentType: file.contentType, bytes: file.data.length, sha256: file.sha256 })
          }
          bundle = { key: `reviews/${reviewId}/bundle.zip`, sha256: sha256Hex(zip), bytes: zip.length }
          const puts = [...unique.values(), { key: bundle.key, data: zip, contentType: 'application/zip' }]
          // Durable before the first put: if this request dies, the sweep finds the keys here.
          const at = clock.now()
          await db.query(`insert into review_uploads (review_id, reason, blob_keys, created_at, purge_after) values ($1, 'upload', $2, $3, $4)`, [
            reviewId,
            puts.map((put) => put.key),
            at,
            new Date(at.getTime() + UPLOAD_INTENT_TTL_MS),
          ])
          intent = true
          written.push(...puts.map((put) => put.key))
          // Several at once: each local put ends with an fsync, which overlap well.
          await forEachLimited(puts, BLOB_WRITES_AT_ONCE, (put) => blobs.put(put.key, put.data, put.contentType))
        }
        const standing = await db.transaction(async (tx) => {
          if (intent) {
            // A sweep that took the intent (this request outlived it) may be deleting the blobs.
            const kept = await tx.query(`delete from review_uploads where review_id = $1 and reason = 'upload' and claimed_at is null returning review_id`, [reviewId])
            if (kept.length === 0) throw new Error(`review ${reviewId}: the upload outlived its intent and its blobs were reclaimed`)
          }
          const standing = await debit(tx, agentId, reviewId)
          await tx.query(
            `insert into reviews (id, agent_id, source_kind, source_url, entry_file, bundle_key, bundle_sha256, bundle_bytes, site_label, callback_url,
                                  idempotency_key, request_hash, plan_id, charged_micros, created_at)
             values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)`,
            [
              reviewId,
              agentId,
              sourceUrl === null ? 'zip' : 'url',
              sourceUrl,
              entryFile,
              bundle?.key ?? null,
              bundle?.sha256 ?? null,
              bundle?.bytes ?? null,
              label,
              input.callbackUrl ?? null,
              idempotencyKey ?? null,
              hash,
              standing.planId,
              standing.kind === 'credit' ? deps.priceMicros : 0n,
              clock.now(),
            ],
          )
          if (files.length > 0) {
            await tx.query(
              `insert into review_files (review_id, path, blob_key, content_type, bytes, sha256)
               select $1, * from unnest($2::text[], $3::text[], $4::text[], $5::int[], $6::text[])`,
              [reviewId, files.map((f) => f.path), files.map((f) => f.blobKey), files.map((f) => f.contentType), files.map((f) => f.bytes), files.map((f) => f.sha256)],
            )
          }
          return standing
        })
        return { session: sessionOf({ id: reviewId, source_kind: sourceUrl === null ? 'zip' : 'url', callback_url: input.callbackUrl ?? null }), standing }
      } catch (err) {
        // The intent goes only once every blob is gone; otherwise the sweep finishes the job.
        const deleted = await Promise.all(
          written.map((key) =>
            blobs.delete(key).then(
              () => true,
              () => false,
            ),
          ),
        )
        if (intent && deleted.every(Boolean)) await db.query(`delete from review_uploads where review_id = $1 and reason = 'upload'`, [reviewId]).catch(() => {})
        files = []
        // Two requests with one Idempotency-Key at once: the loser answers the winner's session.
        if (idempotencyKey !== undefined && hash !== null && isUniqueViolation(err)) {
          const replay = await replayOf(agentId, idempotencyKey, hash)
          if (replay) return { session: replay }
        }
        throw err
      }
    },

    /** GET /api/v1/annotate/reviews/{reviewId}: the creating agent only (others get 404). */
    async status(agentId: string, reviewId: string): Promise<Static<typeof ReviewStatus>> {
      const row = await rowOf(db, reviewId)
      if (row === undefined || row.agent_id !== agentId) throw new AppError('review_not_found', 'You have no review session with this id')
      const session = sessionOf(row)
      return {
        reviewId: row.id,
        status: isExpired(row) ? 'expired' : row.status,
        createdAt: row.created_at.toISOString(),
        source: sourceOf(row),
        shareUrl: session.shareUrl,
        ...(session.bundleUrl ? { bundleUrl: session.bundleUrl } : {}),
        callback:
          row.callback_url === null
            ? null
            : {
                url: row.callback_url,
                secret: keys.webhookSecret(row.id),
                state: row.delivery_state,
                webhookId: row.review !== null ? webhookIdOf(row.id) : null,
                attempts: await callbacks.attempts(db, row.id),
              },
        review: row.review,
      }
    },

    /** The reviewer page's view for a capability, or undefined when it names no session. */
    async page(capability: string): Promise<ReviewerPageView | undefined> {
      const reviewId = keys.reviewIdOf(capability)
      const row = reviewId === undefined ? undefined : await rowOf(db, reviewId)
      if (row === undefined) return undefined
      if (isExpired(row)) throw expired()
      const siteOrigin = origins.site(row.site_label)
      const shareUrl = shareUrlOf(row.id)
      let frameUrl: string
      if (row.source_kind === 'zip') frameUrl = `${siteOrigin}${urlPath(row.entry_file as string)}`
      else {
        const live = new URL(row.source_url as string)
        frameUrl = `${siteOrigin}${live.pathname}${live.search}${live.hash}`
      }
      return {
        reviewId: row.id,
        status: row.status === 'submitted' ? 'submitted' : 'open',
        source:
          row.source_kind === 'zip' ? { kind: 'zip', entryFile: row.entry_file as string, bundleUrl: `${shareUrl}/bundle.zip` } : { kind: 'url', url: row.source_url as string },
        frameUrl,
        siteOrigin,
        snapshotUrl: row.source_kind === 'url' ? `${siteOrigin}/__agent_gateway__/snapshot` : null,
        submitUrl: `${shareUrl}/submission`,
        review: row.review,
      }
    },

    /** The original zip of a bundle review, for its capability. */
    async bundle(capability: string): Promise<{ data: Buffer; reviewId: string } | undefined> {
      const reviewId = keys.reviewIdOf(capability)
      const row = reviewId === undefined ? undefined : await rowOf(db, reviewId)
      if (row === undefined || row.bundle_key === null) return undefined
      if (isExpired(row)) throw expired()
      const blob = await blobs.get(row.bundle_key)
      return blob === undefined ? undefined : { data: blob.data, reviewId: row.id }
    },

    /**
     * The reviewer's one submission: stored with its session's new status and the callback's
     * first job in one transaction. A second submission (or a race of two) answers 409.
     */
    async submit(capability: string, submission: SubmissionJson): Promise<ReviewJson> {
      const reviewId = keys.reviewIdOf(capability)
      if (reviewId === undefined) throw notFound()
      const ids = new Set<string>()
      for (const [index, pin] of submission.pins.entries()) {
        if (ids.has(pin.id)) throw new AppError('validation_error', `pins[${index}].id repeats another pin's id`, { field: `body.pins.${index}.id` })
        ids.add(pin.id)
      }
      // The callback's queue is ready before the transaction that enqueues to it (see declare()).
      await callbacks.declare()
      return db.transaction(async (tx) => {
        const row = await rowOf(tx, reviewId, true)
        if (row === undefined) throw notFound()
        if (isExpired(row)) throw expired()
        if (row.status === 'submitted') throw new AppError('review_submitted', 'This review was already submitted; a session takes one submission')
        const now = clock.now()
        const review: ReviewJson = {
          reviewId: row.id,
          source: sourceOf(row),
          submittedAt: now.toISOString(),
          comment: submission.comment,
          pins: submission.pins,
          console: submission.console,
        }
        await tx.query(`update reviews set status = 'submitted', review = $2, submitted_at = $3 where id = $1`, [row.id, JSON.stringify(review), now])
        if (row.callback_url !== null) await callbacks.enqueue(tx, row.id)
        return review
      })
    },
  }
}

export type ReviewService = ReturnType<typeof createReviewService>
