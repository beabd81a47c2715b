// Strings the database cannot store are refused at the door. Every request of every listener built
// by createHttpApp (src/platform/http.ts) passes one preValidation hook that scans its JSON body,
// query string, path parameters and headers (values and object keys alike) before any route
// schema or handler sees them. Refused, as a 400 validation_error naming the field:
// - U+0000 (NUL): Postgres text and jsonb cannot hold it (`invalid byte sequence for encoding
//   "UTF8": 0x00`, `unsupported Unicode escape sequence`);
// - an unpaired UTF-16 surrogate (U+D800–U+DFFF not part of a pair, e.g. the JSON escape
//   "\ud800" alone): it is not Unicode text; jsonb rejects it (`invalid input syntax for type
//   json`) and text columns would silently store U+FFFD instead.
// Everything else is legitimate Unicode and is stored as sent: emoji (paired surrogates), RTL text,
// combining marks, zero-width joiners, other control characters, noncharacters (Postgres stores
// all of them). Each check is a native linear scan, so even a body-limit-sized body of NULs is
// answered at once.
import type { FastifyReply, FastifyRequest, HookHandlerDoneFunction } from 'fastify'
import { AppError } from './errors.ts'

export type UnsafeTextReason = 'nul' | 'lone_surrogate'

export interface UnsafeText {
  /** Object keys and array indexes from the scanned value down to the offending string. */
  path: (string | number)[]
  /** true when the offending string is the last key of `path` itself (an object key), not a value. */
  inKey: boolean
  reason: UnsafeTextReason
  /** Index (UTF-16 code units) of the first offending character in that string. */
  index: number
  /** The offending code unit (0 for NUL, 0xD800–0xDFFF for a lone surrogate). */
  codeUnit: number
}

/** true when `text` can be stored: no U+0000 and no unpaired surrogate. */
export function isSafeText(text: string): boolean {
  return text.indexOf('\u0000') === -1 && text.isWellFormed()
}

/** Where and why `text` cannot be stored, or undefined when it can. */
export function unsafeCharacter(text: string): { reason: UnsafeTextReason; index: number; codeUnit: number } | undefined {
  if (isSafeText(text)) return undefined
  const nul = text.indexOf('\u0000')
  let lone = -1
  for (let i = 0; i < text.length && (nul === -1 || i < nul); i++) {
    const unit = text.charCodeAt(i)
    if (unit < 0xd800 || unit > 0xdfff) continue
    if (unit <= 0xdbff) {
      const next = text.charCodeAt(i + 1) // NaN past the end
      if (next >= 0xdc00 && next <= 0xdfff) {
        i++
        continue
      }
    }
    lone = i
    break
  }
  if (lone !== -1) return { reason: 'lone_surrogate', index: lone, codeUnit: text.charCodeAt(lone) }
  return { reason: 'nul', index: nul, codeUnit: 0 }
}

/**
 * `text` made storable for text we must keep rather than refuse (a run's stdout, an upstream's
 * message): each NUL and each unpaired surrogate becomes U+FFFD. Returns `text` itself when it is
 * storable already.
 */
export function storableText(text: string): string {
  return isSafeText(text) ? text : text.replaceAll('\u0000', '\ufffd').toWellFormed()
}

interface Frame {
  value: object
  parent: Frame | undefined
  key: string | number | undefined
}

function pathOf(frame: Frame, last: string | number): (string | number)[] {
  const path: (string | number)[] = [last]
  for (let f: Frame | undefined = frame; f?.key !== undefined; f = f.parent) path.push(f.key)
  return path.reverse()
}

/**
 * The first string (value or object key) in `value` that cannot be stored, or undefined. `value`
 * is parsed input: strings, numbers, booleans, null, arrays and objects; binary values (Buffers,
 * typed arrays) are bytes, not text, and are skipped. Walks without recursion, so nesting depth
 * cannot overflow the stack; each string is scanned once.
 */
export function findUnsafeText(value: unknown): UnsafeText | undefined {
  if (typeof value === 'string') {
    const bad = unsafeCharacter(value)
    return bad === undefined ? undefined : { path: [], inKey: false, ...bad }
  }
  if (value === null || typeof value !== 'object' || ArrayBuffer.isView(value)) return undefined
  const stack: Frame[] = [{ value, parent: undefined, key: undefined }]
  for (let frame = stack.pop(); frame !== undefined; frame = stack.pop()) {
    const container = frame.value
    if (Array.isArray(container)) {
      for (let i = 0; i < container.length; i++) {
        const item: unknown = container[i]
        if (typeof item === 'string') {
          if (!isSafeText(item)) return { path: pathOf(frame, i), inKey: false, ...(unsafeCharacter(item) as NonNullable<ReturnType<typeof unsafeCharacter>>) }
        } else if (item !== null && typeof item === 'object' && !ArrayBuffer.isView(item)) stack.push({ value: item, parent: frame, key: i })
      }
      continue
    }
    const record = container as Record<string, unknown>
    for (const key of Object.keys(record)) {
      if (!isSafeText(key)) return { path: pathOf(frame, key), inKey: true, ...(unsafeCharacter(key) as NonNullable<ReturnType<typeof unsafeCharacter>>) }
      const item = record[key]
      if (typeof item === 'string') {
        if (!isSafeText(item)) return { path: pathOf(frame, key), inKey: false, ...(unsafeCharacter(item) as NonNullable<ReturnType<typeof unsafeCharacter>>) }
      } else if (item !== null && typeof item === 'object' && !ArrayBuffer.isView(item)) stack.push({ value: item, parent: frame, key })
    }
  }
  return undefined
}

const MAX_SEGMENT = 64

/** A path segment as it may be echoed in a problem: unsafe characters spelled as \uXXXX, long keys cut. */
function printable(segment: string | number): string {
  if (typeof segment === 'number') return String(segment)
  const cut = segment.length > MAX_SEGMENT ? `${segment.slice(0, MAX_SEGMENT)}…` : segment
  // Cutting may split a pair: the escaping below spells the half out.
  // biome-ignore lint/suspicious/noControlCharactersInRegex: NUL is exactly what this escapes
  return cut.replace(/\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)
}

/** The field name of `found` under `prefix` (`body`, `query`, `path`, `header`), as schema errors name fields. */
export function unsafeTextField(prefix: string, found: UnsafeText): string {
  return [prefix, ...found.path.map(printable)].join('.')
}

/** The 400 validation_error for `found` under `prefix`. */
export function unsafeTextError(prefix: string, found: UnsafeText): AppError {
  const field = unsafeTextField(prefix, found)
  const what = found.inKey ? `${field} has a key that contains` : `${field} contains`
  const detail =
    found.reason === 'nul'
      ? `${what} U+0000 (NUL) at index ${found.index}, which cannot be stored; remove it or encode the data (e.g. base64)`
      : `${what} an unpaired UTF-16 surrogate (U+${found.codeUnit.toString(16).toUpperCase()}) at index ${found.index}, which is not valid Unicode; send well-formed text`
  return new AppError('validation_error', detail, {
    field,
    extensions: { errors: [{ field, message: found.reason === 'nul' ? 'must not contain U+0000' : 'must not contain an unpaired surrogate' }] },
  })
}

/** The first part of `request` holding a string that cannot be stored, as a 400; undefined when all can. */
export function unsafeTextInRequest(request: FastifyRequest): AppError | undefined {
  const parts: [string, unknown][] = [
    ['path', request.params],
    ['body', request.body],
    ['query', request.query],
    ['header', request.headers],
  ]
  for (const [prefix, value] of parts) {
    const found = findUnsafeText(value)
    if (found !== undefined) return unsafeTextError(prefix, found)
  }
  return undefined
}

/** The preValidation hook createHttpApp installs on every listener. */
export function rejectUnsafeText(request: FastifyRequest, _reply: FastifyReply, done: HookHandlerDoneFunction): void {
  const error = unsafeTextInRequest(request)
  if (error === undefined) done()
  else done(error)
}
