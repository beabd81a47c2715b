// HTTP headers given in one environment variable, as users of hosted services write them: a JSON
// object of strings, or `Name: value` lines. Errors name the header, never its value (usually a key).

const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}$/
const HEADER_VALUE = /^[\t\x20-\x7e]{0,8192}$/
/** Set by the HTTP client itself: one given here would corrupt the request. */
const RESERVED = new Set(['host', 'content-length', 'content-type', 'transfer-encoding', 'connection'])

/** The headers of `raw` (empty or blank = none); throws an Error saying what is wrong. */
export function parseHeaderList(raw: string): Record<string, string> {
  const text = raw.trim()
  if (text === '') return {}
  let entries: [string, unknown][]
  if (text.startsWith('{')) {
    let parsed: unknown
    try {
      parsed = JSON.parse(text)
    } catch {
      throw new Error('is not valid JSON (expected {"Header-Name": "value", …} or Name: value lines)')
    }
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new Error('must be a JSON object of header names to string values')
    entries = Object.entries(parsed)
  } else {
    entries = text
      .split(/\r?\n/)
      .map((line) => line.trim())
      .filter((line) => line !== '')
      .map((line, index) => {
        const colon = line.indexOf(':')
        if (colon <= 0) throw new Error(`must be a JSON object or Name: value lines; line ${index + 1} has no "Name:"`)
        return [line.slice(0, colon).trim(), line.slice(colon + 1).trim()]
      })
  }
  const headers: Record<string, string> = {}
  for (const [name, value] of entries) {
    if (!HEADER_NAME.test(name)) throw new Error(`has an invalid header name "${name.slice(0, 40)}"`)
    if (RESERVED.has(name.toLowerCase())) throw new Error(`must not set ${name} (the HTTP client sets it)`)
    if (typeof value !== 'string' || !HEADER_VALUE.test(value)) throw new Error(`header ${name} must have a string value of printable ASCII characters`)
    headers[name] = value
  }
  return headers
}
