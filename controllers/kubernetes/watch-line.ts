// The head of one watch stream line (`{"type":…,"object":{…,"metadata":{…}}}`): the event's type
// and its object's namespace, name and resourceVersion, read without decoding the line, so a
// watcher that already holds that version (the echo of its own write) can leave the line
// undecoded. A walk over the JSON's structure, not a text search: a "resourceVersion" key inside
// spec, status, labels or managedFields is never taken for metadata's. The walk stops once the
// head is known (the API server writes `type` before `object`, and metadata before spec and
// status). Anything unexpected (invalid JSON, an escape inside one of the four values, a missing
// one) gives undefined: the line is then decoded as any other. The walk costs about half a
// JSON.parse of the line, so a watcher first looks up firstResourceVersion (one indexOf: a guess,
// usually metadata's, which the walk then confirms) and walks only a line it may hold.

export interface WatchLineHead {
  type: string
  /** '' for a cluster-scoped object. */
  namespace: string
  name: string
  resourceVersion: string
}

const QUOTE = 0x22
const BACKSLASH = 0x5c
const OPEN_BRACE = 0x7b
const CLOSE_BRACE = 0x7d
const OPEN_BRACKET = 0x5b
const CLOSE_BRACKET = 0x5d
const COLON = 0x3a
const COMMA = 0x2c

/** Thrown inside the walk when the line is not what it should be: the caller decodes it instead. */
const UNREADABLE = new Error('unreadable watch line')

/**
 * A walk over one line, character codes and indexOf only (no slices but the four values, no
 * regular expressions): it has to cost a small part of JSON.parse, or leaving the line undecoded
 * saves nothing.
 */
class Walk {
  readonly text: string
  at = 0
  constructor(text: string) {
    this.text = text
  }

  skipSpace(): void {
    let c = this.text.charCodeAt(this.at)
    while (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) c = this.text.charCodeAt(++this.at)
  }

  expect(code: number): void {
    this.skipSpace()
    if (this.text.charCodeAt(this.at) !== code) throw UNREADABLE
    this.at += 1
  }

  /** Index of the quote closing the string whose content starts at `from`. */
  closingQuote(from: number): number {
    for (let at = from; ; ) {
      const quote = this.text.indexOf('"', at)
      if (quote < 0) throw UNREADABLE
      let backslashes = 0
      while (this.text.charCodeAt(quote - 1 - backslashes) === BACKSLASH) backslashes += 1
      if (backslashes % 2 === 0) return quote
      at = quote + 1
    }
  }

  /** At a string: whether its raw content is exactly `name`; moves past it. */
  key(name: string): boolean {
    return this.keyOf([name]) === 0
  }

  /** At a string: the index of its raw content among `names` (-1: none); moves past it. */
  keyOf(names: readonly string[]): number {
    this.skipSpace()
    if (this.text.charCodeAt(this.at) !== QUOTE) throw UNREADABLE
    const start = this.at + 1
    const end = this.closingQuote(start)
    this.at = end + 1
    return names.findIndex((name) => end - start === name.length && this.text.startsWith(name, start))
  }

  /** At a string: its content, undefined if it holds an escape; moves past it. */
  string(): string | undefined {
    this.skipSpace()
    if (this.text.charCodeAt(this.at) !== QUOTE) throw UNREADABLE
    const start = this.at + 1
    const end = this.closingQuote(start)
    this.at = end + 1
    const raw = this.text.slice(start, end)
    return raw.includes('\\') ? undefined : raw
  }

  /** Moves past one value of any kind. */
  skipValue(): void {
    this.skipSpace()
    const text = this.text
    let at = this.at
    let c = text.charCodeAt(at)
    if (c === QUOTE) {
      this.at = this.closingQuote(at + 1) + 1
      return
    }
    if (c !== OPEN_BRACE && c !== OPEN_BRACKET) {
      // A number, true, false or null: up to the next separator.
      while (c !== COMMA && c !== CLOSE_BRACE && c !== CLOSE_BRACKET) {
        if (Number.isNaN(c)) throw UNREADABLE
        c = text.charCodeAt(++at)
      }
      if (at === this.at) throw UNREADABLE
      this.at = at
      return
    }
    let depth = 0
    for (;;) {
      if (c === QUOTE) at = this.closingQuote(at + 1)
      else if (c === OPEN_BRACE || c === OPEN_BRACKET) depth += 1
      else if (c === CLOSE_BRACE || c === CLOSE_BRACKET) {
        depth -= 1
        if (depth === 0) {
          this.at = at + 1
          return
        }
      } else if (Number.isNaN(c)) throw UNREADABLE
      c = text.charCodeAt(++at)
    }
  }

  /** At an object: moves past its '{'; false if it is empty (and moves past it whole). */
  open(): boolean {
    this.expect(OPEN_BRACE)
    this.skipSpace()
    if (this.text.charCodeAt(this.at) !== CLOSE_BRACE) return true
    this.at += 1
    return false
  }

  /** After a member's value: true if another member follows (past the ','), false at the '}' (past it). */
  next(): boolean {
    this.skipSpace()
    const c = this.text.charCodeAt(this.at)
    this.at += 1
    if (c === COMMA) return true
    if (c === CLOSE_BRACE) return false
    throw UNREADABLE
  }
}

const EVENT_KEYS = ['type', 'object'] as const
const HEAD_FIELDS = ['name', 'namespace', 'resourceVersion'] as const
const RESOURCE_VERSION_KEY = '"resourceVersion":"'

/**
 * The value of the line's first "resourceVersion" key, whatever object holds it: metadata's when
 * metadata comes before spec and status (as the API server writes it). A guess for a lookup only.
 */
export function firstResourceVersion(line: string): string | undefined {
  const at = line.indexOf(RESOURCE_VERSION_KEY)
  if (at < 0) return undefined
  const start = at + RESOURCE_VERSION_KEY.length
  const end = line.indexOf('"', start)
  return end < 0 ? undefined : line.slice(start, end)
}

/** The head of a watch event line, or undefined when it cannot be read without decoding it. */
export function readWatchLineHead(line: string): WatchLineHead | undefined {
  const walk = new Walk(line)
  let type: string | undefined
  let namespace: string | undefined
  let name: string | undefined
  let resourceVersion: string | undefined
  let metadataRead = false
  try {
    // The event: { "type": …, "object": { …, "metadata": { … }, … } }.
    for (let more = walk.open(); more && !(type !== undefined && metadataRead); more = walk.next()) {
      const member = walk.keyOf(EVENT_KEYS)
      if (member === 0) {
        walk.expect(COLON)
        type = walk.string()
        if (type === undefined) return undefined
        continue
      }
      if (member !== 1) {
        walk.expect(COLON)
        walk.skipValue()
        continue
      }
      walk.expect(COLON)
      for (let inObject = walk.open(); inObject; inObject = walk.next()) {
        const isMetadata = walk.key('metadata')
        walk.expect(COLON)
        if (!isMetadata) {
          walk.skipValue()
          continue
        }
        for (let inMetadata = walk.open(); inMetadata; inMetadata = walk.next()) {
          const field = walk.keyOf(HEAD_FIELDS)
          walk.expect(COLON)
          if (field < 0) {
            walk.skipValue()
            continue
          }
          const value = walk.string()
          if (value === undefined) return undefined
          if (field === 0) name = value
          else if (field === 1) namespace = value
          else resourceVersion = value
        }
        metadataRead = true
        if (type !== undefined) break // the rest of the object (spec, status) is not needed
      }
      if (!metadataRead) return undefined
      if (type !== undefined) break
    }
  } catch (err) {
    if (err === UNREADABLE) return undefined
    throw err
  }
  if (type === undefined || name === undefined || resourceVersion === undefined) return undefined
  return { type, namespace: namespace ?? '', name, resourceVersion }
}
