// The bounds of review sessions that the API states (the request and submission schemas in
// reviews.ts, the submission route's body limit): the catalog owns them because it states the API
// and depends on no domain module. src/reviews/limits.ts re-exports them beside the bounds only
// the reviews module enforces, so the zip reader, the reviewer page and docs/reviews.md read one list.

/** Decoded zip bytes at most (SPEC Limits "zipData size"). */
export const ZIP_MAX_BYTES = 10 * 1024 * 1024
/** Longest base64 text that can decode to ZIP_MAX_BYTES (13,981,016 characters). */
export const ZIP_MAX_BASE64_CHARS = Math.ceil(ZIP_MAX_BYTES / 3) * 4

/** What a reviewer submits at most. */
export const REVIEW_MAX_PINS = 200
export const REVIEW_COMMENT_MAX_CHARS = 10_000
export const PIN_TEXT_MAX_CHARS = 200
export const PIN_SELECTOR_MAX_CHARS = 2000
export const REVIEW_MAX_CONSOLE_ENTRIES = 200
export const CONSOLE_MESSAGE_MAX_CHARS = 2000
/** Body limit of the submission route (200 pins × 10k-character comments fit). */
export const SUBMISSION_MAX_BYTES = 4 * 1024 * 1024
