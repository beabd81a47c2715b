// Postgres errors surface the same way from both adapters: as a DbError carrying the SQLSTATE `code`
// and the server's diagnostic fields. The driver's original error is kept as `cause`.

export const pgErrorCodes = {
  uniqueViolation: '23505',
  foreignKeyViolation: '23503',
  notNullViolation: '23502',
  checkViolation: '23514',
  serializationFailure: '40001',
  deadlockDetected: '40P01',
  inFailedTransaction: '25P02',
  undefinedTable: '42P01',
  invalidCatalogName: '3D000',
} as const

export interface DbErrorFields {
  severity?: string | undefined
  detail?: string | undefined
  hint?: string | undefined
  schema?: string | undefined
  table?: string | undefined
  column?: string | undefined
  constraint?: string | undefined
}

export class DbError extends Error {
  /** SQLSTATE, e.g. '23505' (unique_violation). */
  readonly code: string
  readonly severity: string | undefined
  readonly detail: string | undefined
  readonly hint: string | undefined
  readonly schema: string | undefined
  readonly table: string | undefined
  readonly column: string | undefined
  readonly constraint: string | undefined

  constructor(message: string, code: string, fields: DbErrorFields = {}, options?: { cause?: unknown }) {
    super(message, options)
    this.name = 'DbError'
    this.code = code
    this.severity = fields.severity
    this.detail = fields.detail
    this.hint = fields.hint
    this.schema = fields.schema
    this.table = fields.table
    this.column = fields.column
    this.constraint = fields.constraint
  }
}

const SQLSTATE_RE = /^[0-9A-Z]{5}$/

function str(value: unknown): string | undefined {
  return typeof value === 'string' && value !== '' ? value : undefined
}

/** Converts a server error from either driver into a DbError; anything else is returned unchanged. */
export function toDbError(err: unknown): unknown {
  if (err instanceof DbError) return err
  if (typeof err !== 'object' || err === null) return err
  const e = err as Record<string, unknown>
  const code = e.code
  // Server errors carry a SQLSTATE and a severity; socket errors (ECONNREFUSED, ...) don't.
  if (typeof code !== 'string' || !SQLSTATE_RE.test(code) || typeof e.severity !== 'string') return err
  const message = err instanceof Error ? err.message : String(e.message)
  return new DbError(
    message,
    code,
    {
      severity: str(e.severity),
      detail: str(e.detail),
      hint: str(e.hint),
      schema: str(e.schema),
      table: str(e.table),
      column: str(e.column),
      constraint: str(e.constraint),
    },
    { cause: err },
  )
}

/** SQLSTATE of a database error (DbError or a raw driver error), else undefined. */
export function pgErrorCode(err: unknown): string | undefined {
  if (typeof err !== 'object' || err === null) return undefined
  const code = (err as { code?: unknown }).code
  return typeof code === 'string' && SQLSTATE_RE.test(code) ? code : undefined
}

/** true for unique_violation (23505), from either adapter. */
export function isUniqueViolation(err: unknown): boolean {
  return pgErrorCode(err) === pgErrorCodes.uniqueViolation
}
