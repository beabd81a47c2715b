// One canonical JSON for everything compared or hashed as "the same request" (Idempotency-Key
// material, x402 payment-identifier fingerprints): object keys sorted at every level (RFC 8785's
// order for the JSON a request body holds), undefined members dropped, bigints as digit strings.

/** JSON with sorted keys and bigints as digit strings; undefined members dropped. */
export function canonicalJson(value: unknown): string {
  if (value === null) return 'null'
  if (typeof value === 'bigint') return JSON.stringify(value.toString())
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw new TypeError('canonicalJson: non-finite number')
    return JSON.stringify(value)
  }
  if (typeof value === 'string' || typeof value === 'boolean') return JSON.stringify(value)
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`
  if (typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`
  }
  throw new TypeError(`canonicalJson: unsupported ${typeof value}`)
}
