// Bounds of review sessions, defined once: the zip reader enforces them, the request and submission
// schemas (src/catalog/schemas/reviews.ts) state them, docs/reviews.md lists them.

/** Decoded zip bytes at most (SPEC Limits "zipData size"). */
export const ZIP_MAX_BYTES = 10 * 1024 * 1024
/** Longest base64 text that can decode to ZIP_MAX_BYTES (13,981,016 characters). */
export const ZIP_MAX_BASE64_CHARS = Math.ceil(ZIP_MAX_BYTES / 3) * 4
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

/** What a reviewer submits at most. */
export const REVIEW_MAX_PINS = 200
export const REVIEW_COMMENT_MAX_CHARS = 10_000
export const PIN_TEXT_MAX_CHARS = 200
export const PIN_SELECTOR_MAX_CHARS = 2000
export const REVIEW_MAX_CONSOLE_ENTRIES = 200
export const CONSOLE_MESSAGE_MAX_CHARS = 2000
/** Body limit of the submission route (200 pins × 10k-character comments fit). */
export const SUBMISSION_MAX_BYTES = 4 * 1024 * 1024

/** Live pages: the first load (at creation) and each proxied request. */
export const PROXY_TIMEOUT_MS = 15_000
export const PROXY_MAX_RESPONSE_BYTES = 16 * 1024 * 1024
export const PROXY_MAX_REDIRECTS = 5

/** Callbacks: one attempt's timeout, and the response bytes kept in the delivery log. */
export const CALLBACK_TIMEOUT_MS = 15_000
export const CALLBACK_LOG_BODY_CHARS = 500
