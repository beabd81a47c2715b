// reviewer-messages.js: validation and capping of what comes from the frame (the overlay's
// messages, which the site's own scripts can imitate) and from localStorage (a stored draft):
// pins, console entries and page addresses. Each field is checked and capped here (the gateway
// checks what is sent again).
import { config, isObject, limits } from './reviewer-page.js'

export const SEVERITIES = ['blocking', 'important', 'suggestion']
const PAGE_URL_MAX = 4096
export const TITLE_MAX = 500
const USER_AGENT_MAX = 1000
const SOURCE_MAX = 4096
const ISO_DATE = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$/

const finite = (value) => typeof value === 'number' && Number.isFinite(value)

/* @include clean.js */

export { clean }

/** page.url of a pin from the overlay's location.pathname + search + hash. */
export function pageUrlOf(path) {
  if (typeof path !== 'string' || !path.startsWith('/') || path.startsWith('//') || path.length > PAGE_URL_MAX) return null
  if (config.source.kind !== 'url') return clean(path, PAGE_URL_MAX)
  // Pins on the screenshot name the live page it shows (their point says where on it).
  if (path.startsWith('/__agent_gateway__/snapshot')) return clean(config.source.url, PAGE_URL_MAX)
  try {
    const base = new URL(config.source.url)
    const url = new URL(path, base)
    if (url.origin !== base.origin) return null
    return url.href.length <= PAGE_URL_MAX ? clean(url.href, PAGE_URL_MAX) : null
  } catch {
    return null
  }
}

/** Where the frame shows a page named by page.url. */
export function frameUrlOf(pageUrl) {
  try {
    if (config.source.kind === 'url') {
      const url = new URL(pageUrl)
      return config.siteOrigin + url.pathname + url.search + url.hash
    }
    return new URL(pageUrl, config.siteOrigin).origin === config.siteOrigin ? config.siteOrigin + pageUrl : null
  } catch {
    return null
  }
}

export const pageKey = (url) => (typeof url === 'string' ? url.split('#')[0] : '')

function isoOrNow(value) {
  return typeof value === 'string' && ISO_DATE.test(value) && !Number.isNaN(Date.parse(value)) ? value : new Date().toISOString()
}

/** A ReviewPin built from untrusted fields (the overlay's message, a stored draft), or null. */
export function sanitizePin(raw) {
  if (!isObject(raw)) return null
  if (typeof raw.id !== 'string' || !/^[A-Za-z0-9_-]{1,64}$/.test(raw.id)) return null
  if (!SEVERITIES.includes(raw.severity)) return null
  if (typeof raw.selector !== 'string' || raw.selector.length === 0 || raw.selector.length > limits.selectorMaxChars) return null
  const selector = clean(raw.selector, limits.selectorMaxChars)
  const xpath = typeof raw.xpath === 'string' && raw.xpath.length > 0 && raw.xpath.length <= limits.selectorMaxChars ? clean(raw.xpath, limits.selectorMaxChars) : undefined
  const tag = typeof raw.tag === 'string' ? clean(raw.tag.toLowerCase(), 64) : ''
  if (tag.length === 0) return null
  const b = raw.box
  const coordinate = (value) => finite(value) && Math.abs(value) <= 1e9
  if (!isObject(b) || !coordinate(b.x) || !coordinate(b.y) || !coordinate(b.width) || !coordinate(b.height) || b.width < 0 || b.height < 0) return null
  const v = raw.viewport
  const size = (value) => finite(value) && value >= 0 && value <= 100000
  if (!isObject(v) || !size(v.width) || !size(v.height)) return null
  const s = raw.scroll
  if (!isObject(s) || !coordinate(s.x) || !coordinate(s.y)) return null
  if (!isObject(raw.page) || typeof raw.page.url !== 'string' || raw.page.url.length > PAGE_URL_MAX) return null
  const p = raw.point
  const fraction = (value) => Math.min(1, Math.max(0, value))
  const pin = {
    id: raw.id,
    comment: clean(raw.comment, limits.commentMaxChars),
    severity: raw.severity,
    selector,
  }
  if (xpath !== undefined) pin.xpath = xpath
  pin.tag = tag
  pin.text = clean(raw.text, limits.textMaxChars)
  pin.box = { x: b.x, y: b.y, width: b.width, height: b.height }
  if (isObject(p) && finite(p.x) && finite(p.y)) pin.point = { x: fraction(p.x), y: fraction(p.y) }
  pin.viewport = { width: Math.round(v.width), height: Math.round(v.height) }
  pin.scroll = { x: s.x, y: s.y }
  pin.page = { url: clean(raw.page.url, PAGE_URL_MAX), title: clean(raw.page.title, TITLE_MAX) }
  pin.userAgent = clean(typeof raw.userAgent === 'string' ? raw.userAgent : navigator.userAgent, USER_AGENT_MAX)
  pin.createdAt = isoOrNow(raw.createdAt)
  return pin
}

export function sanitizeConsoleEntry(raw) {
  if (!isObject(raw) || (raw.level !== 'error' && raw.level !== 'warning') || typeof raw.message !== 'string') return null
  const entry = { level: raw.level, message: clean(raw.message, limits.consoleMessageMaxChars) }
  if (typeof raw.source === 'string' && raw.source.length > 0) entry.source = clean(raw.source, SOURCE_MAX)
  entry.at = isoOrNow(raw.at)
  return entry
}
