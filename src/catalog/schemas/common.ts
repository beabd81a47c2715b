// Building blocks shared by the registry's schemas. Every schema here is plain JSON Schema
// (no $id / $ref, no bigint values) so it can be inlined into fastify routes and OpenAPI 3.1.
import { Type, type TSchema, type TUnsafe, type SchemaOptions } from '@sinclair/typebox'

/** Largest integer JSON numbers carry exactly (2^53 - 1). */
export const MAX_SAFE_INTEGER = 9007199254740991

/**
 * A string enum rendered as JSON Schema `enum` (not TypeBox's anyOf of consts): the discovery
 * documents list `enum` members verbatim and ajv names the allowed values in its error.
 */
export function StringEnum<const T extends readonly string[]>(values: T, options: SchemaOptions = {}): TUnsafe<T[number]> {
  return Type.Unsafe<T[number]>({ ...options, type: 'string', enum: [...values] })
}

/** RFC 9457 problem+json body every 4xx/5xx carries (see src/platform/errors.ts). */
export const ProblemSchema = Type.Object(
  {
    type: Type.String({ description: 'URI of the problem type' }),
    title: Type.String(),
    status: Type.Integer({ minimum: 400, maximum: 599 }),
    detail: Type.String(),
    code: Type.String({ description: 'Stable error code, e.g. bearer_required, plan_required, payment_required, IDEMPOTENCY_CONFLICT' }),
    field: Type.Optional(Type.String({ description: 'Offending field, e.g. body.prompt or header.idempotency-key' })),
    instance: Type.Optional(Type.String()),
  },
  { additionalProperties: true, description: 'application/problem+json (RFC 9457); extension members may follow' },
)

/** Integer micros in a response: a decimal string so 64-bit amounts never lose precision. */
export function MicrosString(options: SchemaOptions = {}): TSchema {
  return Type.String({ pattern: '^(0|[1-9][0-9]{0,18})$', description: 'Integer micros (1 USD = 1,000,000) as a decimal string', ...options })
}

/** Signed integer micros in a response (ledger rows: debits are negative). */
export function SignedMicrosString(options: SchemaOptions = {}): TSchema {
  return Type.String({ pattern: '^(0|-?[1-9][0-9]{0,18})$', description: 'Signed integer micros as a decimal string', ...options })
}

/**
 * Integer micros in a request, "integer as string or number". JSON bodies are validated without
 * type coercion (src/platform/http.ts), so the value reaches the handler as sent, a digit string or
 * a safe integer; parseMicros takes both. The string branch comes first so that, should the schema
 * ever be used where values are coerced (query strings, headers), a number is normalised to its
 * digit string instead of a long digit string being coerced to a float that loses precision.
 */
export function MicrosInput(options: SchemaOptions & { minimum?: number } = {}): TSchema {
  const { minimum = 0, ...rest } = options
  return Type.Union([Type.String({ pattern: minimum >= 1 ? '^[1-9][0-9]{0,18}$' : '^(0|[1-9][0-9]{0,18})$' }), Type.Integer({ minimum, maximum: MAX_SAFE_INTEGER })], {
    description: 'Integer micros (1 USD = 1,000,000) as a JSON integer or a digit string',
    ...rest,
  })
}

/** Header carrying integer micros (X-Pay-Amount-Micros). */
export function MicrosHeader(options: SchemaOptions = {}): TSchema {
  return Type.String({ pattern: '^[1-9][0-9]{0,18}$', ...options })
}

export const IdempotencyKey = Type.String({
  minLength: 1,
  maxLength: 255,
  pattern: '^[\\x21-\\x7e]+$',
  description: 'Client-chosen key (printable ASCII, 1 to 255 characters); the same key with the same body returns the same result',
})

export const Timestamp = Type.String({ format: 'date-time', description: 'RFC 3339 timestamp' })

/** The states of an on-chain refund in its outbox (src/payments/refunds.ts), as answers show them. */
export const REFUND_OUTBOX_STATES = ['pending', 'waiting', 'sending', 'confirmed', 'failed', 'cancelled'] as const

export function Nullable<T extends TSchema>(schema: T, options: SchemaOptions = {}) {
  // Null first: under coerceTypes a null would otherwise be coerced to "" / 0 by the other branch.
  return Type.Union([Type.Null(), schema], options)
}

/** Amount in USDC as a decimal string with up to six decimals, e.g. "0.080000". */
export const UsdcAmount = Type.String({ pattern: '^[0-9]+(\\.[0-9]{1,6})?$', description: 'Amount charged in USDC, decimal string (six decimals)' })

export const CursorQuery = Type.Object(
  {
    cursor: Type.Optional(Type.String({ minLength: 1, maxLength: 512, description: 'Opaque cursor from the previous page (next_cursor)' })),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 20, description: 'Rows per page, 1 to 100, default 20' })),
  },
  { additionalProperties: false },
)
