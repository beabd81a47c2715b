// Where review sites live: PUBLIC_REVIEWS_URL is a template whose first host label is `{site}`
// (`http://{site}.localhost:4025`, `https://{site}.reviews.example.com`); each review's site gets
// its own label and so its own origin, isolated from the gateway and from every other review.
import { randomBytes } from 'node:crypto'
import type { ReviewOrigins } from './types.ts'

const SITE_PLACEHOLDER = '{site}'
/** One DNS label, lower case (a Host header is compared case-insensitively, labels are ours). */
const DNS_LABEL = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/
const BASE32 = 'abcdefghijklmnopqrstuvwxyz234567'

function defaultPort(protocol: string): string {
  return protocol === 'https:' ? '443' : '80'
}

/**
 * The origins of review sites and of the reviewer page. Throws a RangeError naming the problem
 * unless `template` is an http(s) URL whose host starts with `{site}.` followed by at least one more
 * label, with no path, query, fragment or credentials, and `reviewerOrigin` is an http(s) origin.
 */
export function reviewOrigins(template: string, reviewerOrigin: string): ReviewOrigins {
  const match = /^(https?):\/\/\{site\}\.([^/?#]+?)\/?$/i.exec(template.trim())
  if (!match) throw new RangeError(`PUBLIC_REVIEWS_URL ${JSON.stringify(template)} must look like http://{site}.localhost:4025 ({site} first in the host, no path)`)
  let parsed: URL
  try {
    // Any valid label stands in for {site}, so the URL parser normalises the rest of the host and the port.
    parsed = new URL(`${match[1]}://x.${match[2]}/`)
  } catch {
    throw new RangeError(`PUBLIC_REVIEWS_URL ${JSON.stringify(template)} is not a valid URL once {site} is filled in`)
  }
  if (parsed.username !== '' || parsed.password !== '' || parsed.hostname.includes(SITE_PLACEHOLDER)) {
    throw new RangeError(`PUBLIC_REVIEWS_URL ${JSON.stringify(template)} must not carry credentials or a second {site}`)
  }
  const rest = parsed.hostname.slice(2) // without the stand-in `x.`
  if (rest === '' || rest.startsWith('[') || /^[\d.]+$/.test(rest)) {
    throw new RangeError(`PUBLIC_REVIEWS_URL ${JSON.stringify(template)} needs a DNS name after {site}. (sites are sub-domains)`)
  }
  const scheme = parsed.protocol
  const portSuffix = parsed.port === '' ? '' : `:${parsed.port}`
  // Host headers a site answers: `<label>.<rest>` with the template's port, or without a port /
  // with the scheme's default port when the template has none.
  const hostSuffixes = parsed.port === '' ? [`.${rest}`, `.${rest}:${defaultPort(scheme)}`] : [`.${rest}${portSuffix}`]

  let reviewer: string
  try {
    const url = new URL(reviewerOrigin)
    if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new Error('scheme')
    reviewer = url.origin
  } catch {
    throw new RangeError(`reviewer origin ${JSON.stringify(reviewerOrigin)} must be an http(s) origin such as http://localhost:4020`)
  }

  return {
    reviewer,
    sitePattern: `${scheme}//*.${rest}${portSuffix}`,
    site(label: string): string {
      if (!DNS_LABEL.test(label)) throw new RangeError(`site label ${JSON.stringify(label)} is not a lower-case DNS label`)
      return `${scheme}//${label}.${rest}${portSuffix}`
    },
    labelOfHost(host: string | undefined): string | undefined {
      if (typeof host !== 'string') return undefined
      const lower = host.trim().toLowerCase()
      for (const suffix of hostSuffixes) {
        if (!lower.endsWith(suffix)) continue
        const label = lower.slice(0, -suffix.length)
        return DNS_LABEL.test(label) ? label : undefined
      }
      return undefined
    },
  }
}

/** A new site label: `s-` and 26 lower-case base32 characters (128 random bits), a valid DNS label. */
export function newSiteLabel(): string {
  const bytes = randomBytes(16)
  let out = ''
  let buffer = 0
  let bits = 0
  for (const byte of bytes) {
    buffer = (buffer << 8) | byte
    bits += 8
    while (bits >= 5) {
      out += BASE32[(buffer >>> (bits - 5)) & 31]
      bits -= 5
    }
    buffer &= (1 << bits) - 1
  }
  if (bits > 0) out += BASE32[(buffer << (5 - bits)) & 31]
  return `s-${out}`
}
