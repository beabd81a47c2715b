// Who gets the paywall page: a person's browser opening a URL, never an API client. A browser
// navigation lists text/html in Accept ahead of everything else; an x402 or MPP client sends
// application/json, */* or no Accept at all, and keeps today's JSON 402 byte for byte.

type HeaderBag = Record<string, string | string[] | undefined>

interface MediaRange {
  type: string
  subtype: string
  q: number
}

function headerOf(headers: HeaderBag, name: string): string | undefined {
  const value = headers[name]
  return Array.isArray(value) ? value.join(',') : value
}

function parseAccept(accept: string): MediaRange[] {
  const ranges: MediaRange[] = []
  for (const part of accept.split(',')) {
    const [range = '', ...params] = part.split(';')
    const [type, subtype] = range.trim().toLowerCase().split('/')
    if (!type || !subtype) continue
    let q = 1
    for (const param of params) {
      const [key, value] = param.split('=').map((text) => text.trim())
      if (key?.toLowerCase() === 'q') q = Number.isFinite(Number(value)) ? Math.min(1, Math.max(0, Number(value))) : 0
    }
    ranges.push({ type, subtype, q })
  }
  return ranges
}

/** The q a mime type gets from the most specific range that matches it (RFC 9110 §12.5.1); 0 when none does. */
function qualityOf(ranges: readonly MediaRange[], mime: string): number {
  const [type, subtype] = mime.split('/')
  let best: { specificity: number; q: number } = { specificity: -1, q: 0 }
  for (const range of ranges) {
    const specificity = range.type === type && range.subtype === subtype ? 2 : range.type === type && range.subtype === '*' ? 1 : range.type === '*' ? 0 : -1
    if (specificity > best.specificity) best = { specificity, q: range.q }
  }
  return best.q
}

/** True when Accept names text/html itself and ranks it above application/json (a tie keeps JSON). */
export function prefersHtml(accept: string | undefined): boolean {
  if (!accept) return false
  const ranges = parseAccept(accept)
  if (!ranges.some((range) => range.type === 'text' && range.subtype === 'html')) return false
  return qualityOf(ranges, 'text/html') > qualityOf(ranges, 'application/json')
}

/**
 * A top-level page load by a browser: Accept prefers HTML, and the fetch metadata, when the browser
 * sends it, says navigation (a page's own fetch() is mode cors/same-origin and keeps the JSON).
 */
export function isBrowserNavigation(headers: HeaderBag): boolean {
  const mode = headerOf(headers, 'sec-fetch-mode')
  if (mode !== undefined && mode !== 'navigate') return false
  const dest = headerOf(headers, 'sec-fetch-dest')
  if (dest !== undefined && dest !== 'document') return false
  return prefersHtml(headerOf(headers, 'accept'))
}
