// The creation-time check of a review's `url` and `callbackUrl`: the same address rule as every
// outbound request we make for someone else (src/platform/egress.ts), applied early so a bad URL is
// a 400 naming the field instead of a failed delivery later. It is not the only check: the proxy
// and the callback connect through guardedFetch, which resolves and checks again at connect time
// (DNS may answer differently by then).
import { EgressRefused, type EgressPolicy, resolveTarget } from '../platform/egress.ts'
import { AppError } from '../platform/errors.ts'

/**
 * The parsed URL when it is http(s), carries no credentials and its host resolves to a public
 * address (or is in the policy's `allow`); otherwise AppError url_not_allowed naming `field`.
 * WHATWG parsing already turns the numeric IPv4 spellings (`2130706433`, `0x7f.1`, `0177.1`,
 * `127.1`) into dotted quads, so the address rule sees the real address.
 */
export async function checkPublicUrl(raw: string, field: string, policy: EgressPolicy): Promise<URL> {
  const refuse = (why: string): never => {
    throw new AppError('url_not_allowed', `${field} ${why}`, { field })
  }
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    return refuse('is not an absolute URL')
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') refuse(`uses ${url.protocol.slice(0, 20)} which is not allowed; use http or https`)
  if (url.username !== '' || url.password !== '') refuse('contains credentials (user:password@); they are not allowed in a URL')
  if (url.hostname === '') refuse('has no host')
  const port = Number(url.port) || (url.protocol === 'https:' ? 443 : 80)
  try {
    await resolveTarget(policy, url.hostname, port)
  } catch (err) {
    if (err instanceof EgressRefused) refuse(`is not reachable: ${err.message}`)
    throw err
  }
  return url
}
