// One coded error catalogue for every role. Every 4xx/5xx leaves the process as
// application/problem+json (RFC 9457) with `type`, `title`, `status`, `detail`, `code`.
// Codes in UPPER_SNAKE come from the scheduler's SPEC list; lower_snake ones are the gateway's and
// the memory service's (docs/errors.md).

export interface ProblemBody {
  type: string
  title: string
  status: number
  detail: string
  code: string
  instance?: string
  /** Name of the offending field (JSON pointer-ish: `body.prompt`, `query.page`, `header.x-pay-amount-micros`). */
  field?: string
  [extension: string]: unknown
}

interface CatalogueEntry {
  status: number
  title: string
}

export const errorCatalogue = {
  // generic HTTP
  validation_error: { status: 400, title: 'Request validation failed' },
  malformed_json: { status: 400, title: 'Malformed JSON body' },
  unsupported_media_type: { status: 415, title: 'Unsupported content type' },
  payload_too_large: { status: 413, title: 'Request body too large' },
  route_not_found: { status: 404, title: 'No such route' },
  method_not_allowed: { status: 405, title: 'Method not allowed' },
  host_not_allowed: { status: 421, title: 'This server does not answer for that host' },
  origin_not_allowed: { status: 403, title: 'Cross-site request refused' },
  not_found: { status: 404, title: 'Not found' },
  range_not_satisfiable: { status: 416, title: 'Range not satisfiable' },
  not_implemented: { status: 501, title: 'Operation not implemented yet' },
  rate_limited: { status: 429, title: 'Too many requests' },
  internal: { status: 500, title: 'Internal error' },
  unavailable: { status: 503, title: 'Service unavailable' },
  // gateway access (SPEC "Errors / Gateway")
  bearer_required: { status: 401, title: 'Identity credential required' },
  plan_required: { status: 403, title: 'No active plan covers this operation' },
  payment_required: { status: 402, title: 'Payment Required' },
  payment_invalid: { status: 402, title: 'Payment proof rejected' },
  payment_malformed: { status: 400, title: 'Payment proof malformed' },
  payment_identifier_invalid: { status: 400, title: 'Payment identifier malformed' },
  payment_in_progress: { status: 409, title: 'A payment with this identifier is in progress' },
  payment_identifier_conflict: { status: 409, title: 'Payment identifier reused for another request' },
  unknown_service: { status: 404, title: 'Unknown service' },
  unknown_plan: { status: 404, title: 'Unknown plan' },
  plan_unavailable: { status: 409, title: 'Plan not for sale yet' },
  wallet_proof_required: { status: 401, title: 'Wallet proof required' },
  // media (song and speech generation); nothing is charged with any of these
  generation_failed: { status: 502, title: 'Every generation failed' },
  generation_timeout: { status: 504, title: 'Generation timed out' },
  media_unavailable: { status: 503, title: 'Media tools or upstream unavailable' },
  // memory service (SPEC: "Error codes of the memory service: not shown"); see docs/errors.md
  embedding_failed: { status: 502, title: 'Embedding upstream failed' },
  embedding_timeout: { status: 504, title: 'Embedding upstream timed out' },
  insufficient_deposit: { status: 402, title: 'Deposit balance below the cost of this write' },
  idempotency_conflict: { status: 409, title: 'Idempotency key reused with another body' },
  payment_settling: { status: 409, title: 'Payment still settling' },
  // reviews (annotation review sessions); see docs/reviews.md
  url_not_allowed: { status: 400, title: 'URL not allowed' },
  zip_rejected: { status: 400, title: 'Zip bundle refused' },
  zip_too_large: { status: 413, title: 'Zip bundle too large' },
  url_unreachable: { status: 422, title: 'Live page could not be loaded' },
  review_not_found: { status: 404, title: 'Review session not found' },
  review_submitted: { status: 409, title: 'Review already submitted' },
  review_expired: { status: 410, title: 'Review session expired' },
  // scheduler (SPEC "Errors / Scheduler"); statuses are ours where SPEC says "not shown", see docs/errors.md
  API_KEY_INVALID: { status: 401, title: 'API key invalid' },
  API_KEY_NOT_FOUND: { status: 404, title: 'API key not found' },
  VALIDATION_ERROR: { status: 400, title: 'Request validation failed' },
  INVALID_CRON: { status: 400, title: 'Invalid schedule' },
  UNSUPPORTED_RUNTIME: { status: 400, title: 'Unsupported runtime' },
  UNSUPPORTED_DEPENDENCY: { status: 400, title: 'Unsupported dependency' },
  UNKNOWN_SIBLING: { status: 400, title: 'Unknown sibling' },
  INSUFFICIENT_FUND_AMOUNT: { status: 400, title: 'Insufficient fund amount' },
  IDEMPOTENCY_CONFLICT: { status: 409, title: 'Idempotency key reused with another body' },
  CHANNEL_MISMATCH: { status: 409, title: 'Payment channel differs from the original' },
  IMMUTABLE_FIELD: { status: 409, title: 'Field is immutable' },
  IMMUTABLE_TOOL_REMOVAL: { status: 409, title: 'tool_list entries cannot be removed' },
  TASK_NOT_FOUND: { status: 404, title: 'Task not found' },
  TASK_DELETED: { status: 410, title: 'Task deleted' },
  TASK_COMPLETED: { status: 409, title: 'Task completed' },
  TASK_PAUSED_INSUFFICIENT_FUNDS: { status: 409, title: 'Task paused: insufficient funds' },
  TASK_PAUSED_MANUAL: { status: 409, title: 'Task paused' },
  TASK_TERMINATED: { status: 409, title: 'Task terminated' },
  SIBLING_NOT_ALLOWED: { status: 403, title: 'Sibling not in tool_list' },
  CALL_CAP_EXCEEDED: { status: 429, title: 'max_sibling_calls reached' },
  PRICE_CAP_EXCEEDED: { status: 402, title: 'Price above max_price_micros' },
  PRICE_UNKNOWN: { status: 400, title: 'Price unknown' },
  CAPABILITY_PROTOCOL_UNSUPPORTED: { status: 502, title: 'Capability offers no supported protocol' },
  SIBLING_PAYMENT_FAILED: { status: 502, title: 'Sibling payment failed' },
  TOKEN_EXPIRED: { status: 401, title: 'Token expired' },
  VOUCHER_BEHIND_CUMULATIVE: { status: 409, title: 'Voucher behind cumulative amount' },
  RATE_LIMIT: { status: 429, title: 'Rate limit exceeded' },
  INTERNAL: { status: 500, title: 'Internal error' },
  ROUTE_NOT_FOUND: { status: 404, title: 'No such route' },
  RUN_IN_FLIGHT: { status: 409, title: 'A run is in flight' },
  PAYMENT_SETTLING: { status: 409, title: 'Payment still settling' },
} as const satisfies Record<string, CatalogueEntry>

export type ErrorCode = keyof typeof errorCatalogue

export const PROBLEM_TYPE_BASE = 'https://agent-gateway.dev/problems/'
export const PROBLEM_CONTENT_TYPE = 'application/problem+json; charset=utf-8'

/** The one error type every layer throws; the HTTP layer turns it into problem+json. */
/** Retry-After (seconds) of a 503 whose thrower named none. */
export const DEFAULT_RETRY_AFTER_S = 5

export class AppError extends Error {
  readonly code: ErrorCode
  readonly status: number
  readonly field: string | undefined
  readonly extensions: Record<string, unknown>
  readonly headers: Record<string, string>

  constructor(
    code: ErrorCode,
    detail?: string,
    options: {
      field?: string
      extensions?: Record<string, unknown>
      headers?: Record<string, string>
      status?: number
      cause?: unknown
    } = {},
  ) {
    const entry: CatalogueEntry = errorCatalogue[code]
    super(detail ?? entry.title, options.cause === undefined ? undefined : { cause: options.cause })
    this.name = 'AppError'
    this.code = code
    this.status = options.status ?? entry.status
    this.field = options.field
    this.extensions = options.extensions ?? {}
    this.headers = options.headers ?? {}
    // Every 503 says when to come back, so clients and load balancers back off instead of retrying
    // at once; a thrower that knows better (a full disk, a lease) sets its own.
    if (this.status === 503 && !Object.keys(this.headers).some((name) => name.toLowerCase() === 'retry-after')) {
      this.headers = { ...this.headers, 'retry-after': String(DEFAULT_RETRY_AFTER_S) }
    }
  }

  toProblem(instance?: string): ProblemBody {
    const entry: CatalogueEntry = errorCatalogue[this.code]
    const body: ProblemBody = {
      ...this.extensions,
      type: PROBLEM_TYPE_BASE + this.code.toLowerCase().replaceAll('_', '-'),
      title: entry.title,
      status: this.status,
      detail: this.message,
      code: this.code,
    }
    if (this.field !== undefined) body.field = this.field
    if (instance !== undefined) body.instance = instance
    return body
  }
}

export function isAppError(value: unknown): value is AppError {
  return value instanceof AppError
}
