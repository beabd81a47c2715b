// The annotation review service (reviews-create), sold on plans: its meter, its plans and its operations.
import type { Meter, PlanSpec } from '../types.ts'
import { SUBMISSION_MAX_BYTES } from '../schemas/review-limits.ts'
import { CapabilityParams, ReviewDocument, ReviewIdParams, ReviewRequest, ReviewSession, ReviewStatus, ReviewSubmission } from '../schemas/reviews.ts'
import { defineService, PLAN_HOW, problem } from './common.ts'

const REVIEW_PLANS_TEXT =
  'Plans covering it: reviews-credit-5 (5.00 USD of prepaid credit, debited 0.020000 USD per review, 250 reviews) and reviews-monthly (15.00 USD per 30 days, up to 1000 reviews a period).'

const reviewsMeter: Meter = { name: 'requests', unit: 'request', unitPriceMicros: 20_000n, includedUnits: 0 }

const reviewPlans: PlanSpec[] = [
  {
    id: 'reviews-credit-5',
    kind: 'credit',
    title: 'Review credit, 5 USD',
    description: '5.00 USD of prepaid credit for annotation reviews, debited 0.020000 USD per created review session (250 sessions). Credit does not expire.',
    priceMicros: 5_000_000n,
    creditMicros: 5_000_000n,
    covers: ['reviews-create'],
  },
  {
    id: 'reviews-monthly',
    kind: 'subscription',
    title: 'Reviews monthly',
    description: '15.00 USD per 30-day period for up to 1000 annotation review sessions in the period.',
    priceMicros: 15_000_000n,
    periodDays: 30,
    callsPerPeriod: 1000,
    covers: ['reviews-create'],
  },
]

export const reviews = defineService({
  slug: 'reviews-create',
  title: 'Annotation review sessions',
  description:
    'Creates a review session in which a human annotates a live web page or a hosted static code bundle; the full review JSON is POSTed to your callbackUrl when the human submits. ' +
    `Sold on plans (0.020000 USD per request from plan credit). ${REVIEW_PLANS_TEXT}`,
  server: 'gateway',
  access: 'plan',
  meter: reviewsMeter,
  plans: reviewPlans,
  operations: [
    {
      operationId: 'createReviewSession',
      service: 'reviews-create',
      server: 'gateway',
      method: 'POST',
      path: '/api/v1/annotate/reviews',
      summary: 'Create an annotation review session for a web page or a static site bundle',
      description:
        'Creates a review session and returns {reviewId, shareUrl, bundleUrl?}. Send the shareUrl to the human reviewer. ' +
        'Send exactly one of url (a live page) or zipData (base64 zip of static HTML/CSS/JS, at most 10 MiB decoded; hosted for the reviewer, bundleUrl then downloads the original zip). ' +
        'entryFile names the entry page inside the zip (default index.html). If callbackUrl is set, the full review JSON is POSTed to it when the human submits. ' +
        `Price: 0.020000 USD per request, debited from a plan (meter requests, no free units). ${REVIEW_PLANS_TEXT} ${PLAN_HOW}`,
      tags: ['reviews'],
      access: 'plan',
      proof: 'plan-bearer',
      pricing: { kind: 'plan-credit' },
      schemas: {
        body: ReviewRequest,
        response: { 200: ReviewSession, 201: ReviewSession, 400: problem, 401: problem, 402: problem, 403: problem, 409: problem, 413: problem, 422: problem },
      },
      keywords: ['review', 'annotate', 'annotation', 'feedback', 'human', 'website', 'web page', 'html', 'zip', 'bundle', 'comments', 'qa', 'design review'],
    },
    {
      operationId: 'getReviewSession',
      service: 'reviews-create',
      server: 'gateway',
      method: 'GET',
      path: '/api/v1/annotate/reviews/{reviewId}',
      summary: 'Read a review session: its status, callback delivery and the submitted review',
      description:
        'Free with the access token that created the session (Authorization: Bearer <accessToken>); another agent gets 404. ' +
        'Returns {reviewId, status (open | submitted), createdAt, source, shareUrl, bundleUrl?, callback (url, secret, state waiting | pending | delivered | failed, webhookId, attempts[]) or null, review (the submitted review JSON) or null}. ' +
        'Poll it when you cannot receive callbacks: the review appears here the moment the human submits.',
      tags: ['reviews'],
      access: 'payg',
      proof: 'agent-bearer',
      pricing: { kind: 'free' },
      schemas: { params: ReviewIdParams, response: { 200: ReviewStatus, 401: problem, 404: problem } },
      keywords: ['review status', 'poll', 'submitted review', 'annotations', 'callback delivery'],
    },
    {
      operationId: 'submitReview',
      service: 'reviews-create',
      server: 'gateway',
      method: 'POST',
      path: '/reviews/{capability}/submission',
      summary: "The reviewer page's submission of the human's review (once per session)",
      description:
        'Called by the reviewer page at shareUrl; the capability in the path is the only credential. Accepts {comment, pins[], console[]} once: ' +
        'the review is stored, returned, POSTed to the callbackUrl (Standard Webhooks signature) and shown by GET /api/v1/annotate/reviews/{reviewId}. ' +
        'A second submission answers 409 review_submitted.',
      tags: ['reviews'],
      access: 'payg',
      proof: 'none',
      pricing: { kind: 'free' },
      schemas: { params: CapabilityParams, body: ReviewSubmission, response: { 200: ReviewDocument, 404: problem, 409: problem, 413: problem } },
      bodyLimitBytes: SUBMISSION_MAX_BYTES,
      keywords: ['submit review', 'reviewer'],
    },
  ],
})
