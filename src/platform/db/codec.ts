// The one value codec shared by both adapters, so PGlite and node-postgres map types identically.
//
// Results: both drivers hand us Postgres' *text* output; we parse it with `resultParsers` (keyed by
// type OID). Any OID not listed stays the raw text string in both adapters.
// Params: every JS value is turned into Postgres text input by `encodeParam` before it reaches the
// driver, so neither driver's own (different) serialisation rules apply.

/** Type OIDs we parse. Everything else comes back as the server's text output. */
export const oid = {
  bool: 16,
  bytea: 17,
  char: 18,
  name: 19,
  int8: 20,
  int2: 21,
  int4: 23,
  text: 25,
  oid: 26,
  json: 114,
  float4: 700,
  float8: 701,
  bpchar: 1042,
  varchar: 1043,
  date: 1082,
  timestamp: 1114,
  timestamptz: 1184,
  numeric: 1700,
  uuid: 2950,
  jsonb: 3802,
} as const

type TextParser = (text: string) => unknown

const identity: TextParser = (text) => text

export function parseBool(text: string): boolean {
  return text === 't'
}

export function parseInt8(text: string): bigint {
  return BigInt(text)
}

export function parseNumber(text: string): number {
  return Number(text)
}

export function parseJson(text: string): unknown {
  return JSON.parse(text)
}

export function parseBytea(text: string): Buffer {
  if (text.startsWith('\\x')) return Buffer.from(text.slice(2), 'hex')
  // bytea_output = 'escape': printable bytes as-is, `\\` for a backslash, `\ooo` octal otherwise.
  const bytes: number[] = []
  for (let i = 0; i < text.length; ) {
    if (text[i] === '\\') {
      if (text[i + 1] === '\\') {
        bytes.push(0x5c)
        i += 2
      } else {
        bytes.push(Number.parseInt(text.slice(i + 1, i + 4), 8))
        i += 4
      }
    } else {
      bytes.push(text.charCodeAt(i) & 0xff)
      i += 1
    }
  }
  return Buffer.from(bytes)
}

// ISO DateStyle output: `2024-01-02 03:04:05.123456+05:30[:15][ BC]`; the year may have 5+ digits.
const TIMESTAMP_RE = /^(\d{4,})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:([+-])(\d{2})(?::(\d{2}))?(?::(\d{2}))?)?( BC)?$/

/**
 * timestamptz / timestamp text → Date (millisecond precision, microseconds truncated).
 * `timestamp` (without time zone) is read as UTC. `infinity` / `-infinity` become the numbers
 * `Infinity` / `-Infinity`, as node-postgres and PGlite both do by default.
 */
export function parseTimestamp(text: string): Date | number {
  if (text === 'infinity') return Infinity
  if (text === '-infinity') return -Infinity
  const m = TIMESTAMP_RE.exec(text)
  if (m === null) return new Date(text) // non-ISO DateStyle: best effort
  let year = Number(m[1])
  if (m[12] !== undefined) year = 1 - year // 1 BC is year 0
  const millis = m[7] === undefined ? 0 : Number(m[7].padEnd(3, '0').slice(0, 3))
  const date = new Date(0)
  date.setUTCFullYear(year, Number(m[2]) - 1, Number(m[3]))
  date.setUTCHours(Number(m[4]), Number(m[5]), Number(m[6]), millis)
  let time = date.getTime()
  if (m[8] !== undefined) {
    const offsetSeconds = Number(m[9]) * 3600 + Number(m[10] ?? 0) * 60 + Number(m[11] ?? 0)
    time -= (m[8] === '-' ? -1 : 1) * offsetSeconds * 1000
  }
  return new Date(time)
}

/**
 * Parses a Postgres array literal (`{1,2,NULL}`, `{{"a","b"},{"c",NULL}}`, `[0:1]={1,2}`) into nested
 * JS arrays, parsing each non-NULL element with `element`.
 */
export function parseArray(text: string, element: TextParser): unknown[] {
  let i = 0
  if (text[0] === '[') i = text.indexOf('=') + 1 // explicit bounds decoration: ignore
  const level = (): unknown[] => {
    const out: unknown[] = []
    i += 1 // '{'
    if (text[i] === '}') {
      i += 1
      return out
    }
    for (;;) {
      const c = text[i]
      if (c === '{') {
        out.push(level())
      } else if (c === '"') {
        i += 1
        let value = ''
        let start = i
        while (text[i] !== '"') {
          if (text[i] === '\\') {
            value += text.slice(start, i)
            i += 1
            start = i
          }
          i += 1
          if (i > text.length) throw new Error('Malformed array literal')
        }
        value += text.slice(start, i)
        i += 1
        out.push(element(value))
      } else {
        const start = i
        while (i < text.length && text[i] !== ',' && text[i] !== '}') i += 1
        const raw = text.slice(start, i)
        out.push(raw.toUpperCase() === 'NULL' ? null : element(raw))
      }
      const sep = text[i]
      i += 1
      if (sep === '}') return out
      if (sep !== ',') throw new Error('Malformed array literal')
    }
  }
  return level()
}

const scalarParsers: Record<number, TextParser> = {
  [oid.bool]: parseBool,
  [oid.bytea]: parseBytea,
  [oid.char]: identity,
  [oid.name]: identity,
  [oid.int8]: parseInt8,
  [oid.int2]: parseNumber,
  [oid.int4]: parseNumber,
  [oid.text]: identity,
  [oid.oid]: parseNumber,
  [oid.json]: parseJson,
  [oid.float4]: parseNumber,
  [oid.float8]: parseNumber,
  [oid.bpchar]: identity,
  [oid.varchar]: identity,
  [oid.date]: identity, // 'YYYY-MM-DD': a calendar date has no time zone, so no Date object
  [oid.timestamp]: parseTimestamp,
  [oid.timestamptz]: parseTimestamp,
  [oid.numeric]: identity, // exact decimal as string
  [oid.uuid]: identity,
  [oid.jsonb]: parseJson,
}

/** Array type OID → element type OID. */
const arrayTypes: Record<number, number> = {
  1000: oid.bool,
  1001: oid.bytea,
  1002: oid.char,
  1003: oid.name,
  1016: oid.int8,
  1005: oid.int2,
  1007: oid.int4,
  1009: oid.text,
  1028: oid.oid,
  199: oid.json,
  1021: oid.float4,
  1022: oid.float8,
  1014: oid.bpchar,
  1015: oid.varchar,
  1182: oid.date,
  1115: oid.timestamp,
  1185: oid.timestamptz,
  1231: oid.numeric,
  2951: oid.uuid,
  3807: oid.jsonb,
}

/** Text-format result parsers by type OID; used verbatim by both adapters. */
export const resultParsers: Readonly<Record<number, TextParser>> = (() => {
  const all: Record<number, TextParser> = { ...scalarParsers }
  for (const [arrayOid, elementOid] of Object.entries(arrayTypes)) {
    const element = scalarParsers[elementOid] ?? identity
    all[Number(arrayOid)] = (text) => parseArray(text, element)
  }
  return all
})()

export function parserFor(typeOid: number): TextParser {
  return resultParsers[typeOid] ?? identity
}

// ---------------------------------------------------------------------------------------------
// Params

/** JSON.stringify that writes bigint as a JSON string (JSON has no 64-bit integers). */
export function toJson(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) => (typeof v === 'bigint' ? v.toString() : v))
}

function encodeBytes(bytes: Uint8Array): string {
  return `\\x${Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('hex')}`
}

function encodeArray(values: readonly unknown[]): string {
  const parts = values.map((v) => {
    if (v === null || v === undefined) return 'NULL'
    if (Array.isArray(v)) return encodeArray(v)
    const text = encodeParam(v) as string
    return `"${text.replaceAll('\\', '\\\\').replaceAll('"', '\\"')}"`
  })
  return `{${parts.join(',')}}`
}

/**
 * JS value → Postgres text input (or null):
 * string as-is; number/bigint via toString; boolean → 'true'/'false'; Date → ISO-8601 UTC;
 * Uint8Array/Buffer → bytea hex; array → Postgres array literal; any other object → JSON
 * (bigint members become JSON strings). To send a JS *array* as a json/jsonb value, pass
 * `toJson(array)` (a bare array is always a Postgres array, in both adapters).
 */
export function encodeParam(value: unknown): string | null {
  switch (typeof value) {
    case 'string':
      return value
    case 'undefined':
      return null
    case 'number':
    case 'bigint':
      return value.toString()
    case 'boolean':
      return value ? 'true' : 'false'
    case 'object':
      if (value === null) return null
      if (value instanceof Date) {
        if (Number.isNaN(value.getTime())) throw new TypeError('Invalid Date passed as a query parameter')
        return value.toISOString()
      }
      if (value instanceof Uint8Array) return encodeBytes(value)
      if (Array.isArray(value)) return encodeArray(value)
      return toJson(value)
    default:
      throw new TypeError(`Unsupported query parameter type: ${typeof value}`)
  }
}

export function encodeParams(params: readonly unknown[] | undefined): (string | null)[] {
  return params === undefined ? [] : params.map(encodeParam)
}
