// The scheduler API's bounds, each written once: the HTTP schemas, the Task resource schema (hence
// the CRD the API server enforces; src/scheduler/contract re-exports them), the domain validation
// and the rate card's hard caps all read them from here. SPEC leaves these numbers open; they are
// decided here, and GET /api/v1/rates publishes the per-task caps (hard_caps).

/** Per-task caps: the create body, the Task resource and GET /api/v1/rates agree on them. */
export const SCHEDULER_LIMITS = {
  maxSourceChars: 262144,
  maxRuntimeSec: 3600,
  maxSiblingCalls: 100,
  maxToolList: 50,
  maxDependencies: 20,
  maxEnvKeys: 50,
  maxEnvValueChars: 4096,
} as const

/**
 * Bounds of single fields. A dependency entry is at most npm's package-name limit (214); a tool is
 * a sibling name or a marketplace capability id of at most 200 characters; an e-mail address at
 * most RFC 5321's 254.
 */
export const FIELD_LIMITS = {
  maxEntrypointChars: 128,
  maxCronChars: 120,
  maxTimezoneChars: 64,
  maxDependencyChars: 214,
  maxEnvNameChars: 128,
  maxToolNameChars: 200,
  maxEmailChars: 254,
  /** Task, run and key ids in paths. */
  maxIdChars: 64,
} as const

/** Syntax of single fields, as JSON Schema patterns (compile with `new RegExp` where code checks them). */
export const FIELD_PATTERNS = {
  /** A bare file name: no path separator, no leading dot. */
  entrypoint: '^[A-Za-z0-9_][A-Za-z0-9._-]*$',
  /** The shape of an IANA zone name (Intl decides whether it exists). */
  timezone: '^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+){0,2}$',
  envName: `^[A-Za-z_][A-Za-z0-9_]{0,${FIELD_LIMITS.maxEnvNameChars - 1}}$`,
  id: '^[A-Za-z0-9_-]+$',
} as const
