// Capabilities that travel in a URL path (a review's share link, /reviews/{capability}) are
// bearer secrets: whoever reads the path can act with them. Paths that leave the request (a
// problem's `instance`, log lines, trace attributes) go through redactPath first: every path
// segment that looks like a capability (40 or more base64url characters, the length of a
// 240-bit token; 0x-hex addresses and hashes excepted, they are public) becomes `{capability}`,
// and the query string goes (it may carry tokens of other services' conventions).
const CAPABILITY_SEGMENT = /^[A-Za-z0-9_-]{40,}$/
const PUBLIC_HEX = /^0x[0-9a-fA-F]+$/

/** The path of `url` (path and query as sent) with capability segments replaced and no query. */
export function redactPath(url: string): string {
  const query = url.indexOf('?')
  const path = query < 0 ? url : url.slice(0, query)
  if (path.length < 40) return path
  return path
    .split('/')
    .map((segment) => (CAPABILITY_SEGMENT.test(segment) && !PUBLIC_HEX.test(segment) ? '{capability}' : segment))
    .join('/')
}
