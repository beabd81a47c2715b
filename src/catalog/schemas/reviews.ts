// Annotation review sessions (SPEC "POST /api/v1/annotate/reviews", "Review session") and the
// review a human submits: the JSON delivered to callbackUrl and returned by GET, stated once here
// so the routes validate it and the OpenAPI document and docs/reviews.md show it.
import { Type } from '@sinclair/typebox'
import {
  CONSOLE_MESSAGE_MAX_CHARS,
  PIN_SELECTOR_MAX_CHARS,
  PIN_TEXT_MAX_CHARS,
  REVIEW_COMMENT_MAX_CHARS,
  REVIEW_MAX_CONSOLE_ENTRIES,
  REVIEW_MAX_PINS,
  ZIP_MAX_BASE64_CHARS,
} from './review-limits.ts'

export const ReviewRequest = Type.Object(
  {
    url: Type.Optional(
      Type.String({
        format: 'uri',
        maxLength: 2048,
        description: 'Live page to annotate (http or https, a public address); mutually exclusive with zipData',
      }),
    ),
    zipData: Type.Optional(
      // No maxLength here: the zip reader refuses a longer string at once (413 zip_too_large, reason
      // too_large), where ajv would count the code points of ~14 MB (about 50 ms) on every upload.
      // Strict base64 (RFC 4648 §4, padded) is checked there too, naming the cause.
      Type.String({
        contentEncoding: 'base64',
        contentMediaType: 'application/zip',
        description: `Base64 zip of static site files (HTML, CSS, JS), at most 10 MiB decoded (${ZIP_MAX_BASE64_CHARS} base64 characters; more answers 413 zip_too_large); the site is hosted for the reviewer. Mutually exclusive with url`,
      }),
    ),
    entryFile: Type.String({
      minLength: 1,
      maxLength: 255,
      pattern: '^(?!/)(?!(.*/)?\\.\\.(/|$)).+$',
      default: 'index.html',
      description: 'Entry filename inside the zip (default index.html); used only with zipData',
    }),
    callbackUrl: Type.Optional(
      Type.String({
        format: 'uri',
        maxLength: 2048,
        description: 'Receives the full review JSON by POST when the human submits, signed per Standard Webhooks (see callbackSecret)',
      }),
    ),
  },
  {
    additionalProperties: false,
    description: 'Send exactly one of url or zipData (checked by the service, which names the field).',
  },
)

export const ReviewSession = Type.Object(
  {
    reviewId: Type.String({ format: 'uuid', description: 'Identifier of the session' }),
    shareUrl: Type.String({ description: 'URL for the human reviewer: an unguessable capability; whoever has it can review once' }),
    bundleUrl: Type.Optional(Type.String({ description: 'Download URL of the original source zip; only for code-bundle reviews' })),
    statusUrl: Type.String({ description: 'GET it with the same bearer for the status, delivery state and the submitted review' }),
    callbackSecret: Type.Optional(
      Type.String({
        pattern: '^whsec_[A-Za-z0-9+/]+={0,2}$',
        description: 'Standard Webhooks secret (whsec_…) that signs the callback to callbackUrl; present when callbackUrl is set',
      }),
    ),
  },
  { additionalProperties: false },
)

const Box = Type.Object(
  {
    x: Type.Number({ description: 'Left edge in CSS pixels, relative to the document' }),
    y: Type.Number({ description: 'Top edge in CSS pixels, relative to the document' }),
    width: Type.Number({ minimum: 0 }),
    height: Type.Number({ minimum: 0 }),
  },
  { additionalProperties: false },
)
const Size = Type.Object({ width: Type.Integer({ minimum: 0, maximum: 100000 }), height: Type.Integer({ minimum: 0, maximum: 100000 }) }, { additionalProperties: false })
const Scroll = Type.Object({ x: Type.Number(), y: Type.Number() }, { additionalProperties: false })

export const PinSeverity = Type.Union([Type.Literal('blocking'), Type.Literal('important'), Type.Literal('suggestion')], {
  description: 'blocking: must be fixed; important: should be fixed; suggestion: nice to have',
})

export const ReviewPin = Type.Object(
  {
    id: Type.String({ pattern: '^[A-Za-z0-9_-]{1,64}$', description: "The pin's id (chosen by the reviewer page)" }),
    comment: Type.String({ minLength: 1, maxLength: REVIEW_COMMENT_MAX_CHARS }),
    severity: PinSeverity,
    selector: Type.String({ minLength: 1, maxLength: PIN_SELECTOR_MAX_CHARS, description: 'Unique CSS selector of the pinned element (@medv/finder)' }),
    xpath: Type.Optional(Type.String({ maxLength: PIN_SELECTOR_MAX_CHARS, description: 'Absolute XPath of the element, a fallback when the selector no longer matches' })),
    tag: Type.String({ minLength: 1, maxLength: 64, description: 'Lower-case tag name of the element' }),
    text: Type.String({ maxLength: PIN_TEXT_MAX_CHARS, description: "The element's visible text, whitespace collapsed, cut at 200 characters" }),
    box: Box,
    point: Type.Optional(
      Type.Object(
        { x: Type.Number({ minimum: 0, maximum: 1 }), y: Type.Number({ minimum: 0, maximum: 1 }) },
        { additionalProperties: false, description: 'Where in the box the reviewer clicked, as fractions of its width and height' },
      ),
    ),
    viewport: Size,
    scroll: Scroll,
    page: Type.Object(
      {
        url: Type.String({ maxLength: 4096, description: 'Address of the page as the reviewed site names it (the live URL, or the path inside the bundle)' }),
        title: Type.String({ maxLength: 500 }),
      },
      { additionalProperties: false },
    ),
    userAgent: Type.String({ maxLength: 1000 }),
    createdAt: Type.String({ format: 'date-time' }),
  },
  { additionalProperties: false },
)

export const ConsoleEntry = Type.Object(
  {
    level: Type.Union([Type.Literal('error'), Type.Literal('warning')]),
    message: Type.String({ maxLength: CONSOLE_MESSAGE_MAX_CHARS }),
    source: Type.Optional(Type.String({ maxLength: 4096, description: 'Script address and line, when known' })),
    at: Type.String({ format: 'date-time' }),
  },
  { additionalProperties: false },
)

/** What the reviewer page sends (POST /reviews/{capability}/submission). */
export const ReviewSubmission = Type.Object(
  {
    comment: Type.String({ maxLength: REVIEW_COMMENT_MAX_CHARS, description: 'Overall comment (may be empty)' }),
    pins: Type.Array(ReviewPin, { maxItems: REVIEW_MAX_PINS }),
    console: Type.Array(ConsoleEntry, { maxItems: REVIEW_MAX_CONSOLE_ENTRIES, description: "Errors and warnings the reviewed page's scripts logged" }),
  },
  { additionalProperties: false },
)

export const ReviewSourceSchema = Type.Union([
  Type.Object(
    {
      kind: Type.Literal('zip'),
      entryFile: Type.String(),
      bundleSha256: Type.String({ pattern: '^[0-9a-f]{64}$' }),
      bundleUrl: Type.String(),
    },
    { additionalProperties: false },
  ),
  Type.Object({ kind: Type.Literal('url'), url: Type.String() }, { additionalProperties: false }),
])

/** The submitted review: the `data` of the callback and the `review` of GET. */
export const ReviewDocument = Type.Object(
  {
    reviewId: Type.String({ format: 'uuid' }),
    source: ReviewSourceSchema,
    submittedAt: Type.String({ format: 'date-time' }),
    comment: Type.String({ description: 'Overall comment (may be empty)' }),
    pins: Type.Array(ReviewPin),
    console: Type.Array(ConsoleEntry),
  },
  { additionalProperties: false },
)

export const DeliveryAttempt = Type.Object(
  {
    attempt: Type.Integer({ minimum: 1 }),
    at: Type.String({ format: 'date-time' }),
    outcome: Type.Union([Type.Literal('delivered'), Type.Literal('failed'), Type.Literal('refused'), Type.Literal('gone')]),
    statusCode: Type.Union([Type.Integer(), Type.Null()]),
    error: Type.Union([Type.String(), Type.Null()]),
    durationMs: Type.Integer({ minimum: 0 }),
  },
  { additionalProperties: false },
)

export const ReviewStatus = Type.Object(
  {
    reviewId: Type.String({ format: 'uuid' }),
    status: Type.Union([Type.Literal('open'), Type.Literal('submitted'), Type.Literal('expired')], {
      description: 'expired: past REVIEWS_RETENTION_DAYS; the site and bundle are deleted, a submitted review is kept',
    }),
    createdAt: Type.String({ format: 'date-time' }),
    source: ReviewSourceSchema,
    shareUrl: Type.String(),
    bundleUrl: Type.Optional(Type.String()),
    callback: Type.Union([
      Type.Null(),
      Type.Object(
        {
          url: Type.String(),
          secret: Type.String({ description: 'The whsec_ secret that signs it' }),
          state: Type.Union([Type.Literal('waiting'), Type.Literal('pending'), Type.Literal('delivered'), Type.Literal('failed')], {
            description: 'waiting: not submitted yet; pending: being delivered or retried; delivered: answered 2xx; failed: given up (410, refused address, or retries exhausted)',
          }),
          webhookId: Type.Union([Type.String(), Type.Null()]),
          attempts: Type.Array(DeliveryAttempt),
        },
        { additionalProperties: false },
      ),
    ]),
    review: Type.Union([ReviewDocument, Type.Null()], { description: 'The submitted review, null while open' }),
  },
  { additionalProperties: false },
)

export const ReviewIdParams = Type.Object({ reviewId: Type.String({ format: 'uuid' }) }, { additionalProperties: false })
export const CapabilityParams = Type.Object({ capability: Type.String({ pattern: '^[A-Za-z0-9_-]{20,200}$' }) }, { additionalProperties: false })
