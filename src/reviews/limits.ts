// Bounds of review sessions, defined once: the zip reader enforces them, the request and submission
// schemas and the submission route state the ones the API shows (defined in the catalog,
// src/catalog/schemas/review-limits.ts, and re-exported here), docs/reviews.md lists them.

export {
  CONSOLE_MESSAGE_MAX_CHARS,
  PIN_SELECTOR_MAX_CHARS,
  PIN_TEXT_MAX_CHARS,
  REVIEW_COMMENT_MAX_CHARS,
  REVIEW_MAX_CONSOLE_ENTRIES,
  REVIEW_MAX_PINS,
  SUBMISSION_MAX_BYTES,
  ZIP_MAX_BASE64_CHARS,
  ZIP_MAX_BYTES,
} from '../catalog/schemas/review-limits.ts'

/** Entries in the central directory at most (checked before any entry is read). */
export const ZIP_MAX_ENTRIES = 2000
/** Uncompressed bytes of one entry at most, counted as they are inflated (not as declared). */
export const ZIP_MAX_ENTRY_BYTES = 25 * 1024 * 1024
/** Uncompressed bytes of the whole archive at most (stops overlapping-entry bombs). */
export const ZIP_MAX_TOTAL_BYTES = 100 * 1024 * 1024
/** Inflated / compressed ratio at most, for entries whose inflated size passes ZIP_RATIO_FLOOR_BYTES. */
export const ZIP_MAX_RATIO = 200
export const ZIP_RATIO_FLOOR_BYTES = 1024 * 1024
/** A path inside the site at most (UTF-8 bytes). */
export const SITE_PATH_MAX_BYTES = 1024

/** Live pages: the first load (at creation) and each proxied request. */
export const PROXY_TIMEOUT_MS = 15_000
export const PROXY_MAX_RESPONSE_BYTES = 16 * 1024 * 1024
export const PROXY_MAX_REDIRECTS = 5

/** Callbacks: one attempt's timeout, and the response bytes kept in the delivery log. */
export const CALLBACK_TIMEOUT_MS = 15_000
export const CALLBACK_LOG_BODY_CHARS = 500
