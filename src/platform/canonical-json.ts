// One canonical JSON for everything compared or hashed as "the same request" (Idempotency-Key
// material, x402 payment-identifier fingerprints): object keys sorted at every level (RFC 8785's
// order for the JSON a request body holds), undefined members dropped, bigints as digit strings.
// Written with an explicit stack: no nesting depth can overflow the call stack, even for input
// that did not come through the HTTP parser's depth bound (src/platform/json-depth.ts).

function scalar(value: unknown): string {
  if (value === null) return 'null'
  if (typeof value === 'bigint') return JSON.stringify(value.toString())
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw new TypeError('canonicalJson: non-finite number')
    return JSON.stringify(value)
  }
  if (typeof value === 'string' || typeof value === 'boolean') return JSON.stringify(value)
  throw new TypeError(`canonicalJson: unsupported ${typeof value}`)
}

/** An open array (its items) or object (its sorted entries), and the index of the next one to write. */
interface Open {
  items: unknown[]
  entries: [string, unknown][] | undefined
  next: number
}

/** JSON with sorted keys and bigints as digit strings; undefined members dropped. */
export function canonicalJson(value: unknown): string {
  let out = ''
  const open: Open[] = []
  let current = value
  for (;;) {
    if (Array.isArray(current)) {
      out += '['
      open.push({ items: current, entries: undefined, next: 0 })
    } else if (current !== null && typeof current === 'object') {
      const entries = Object.entries(current as Record<string, unknown>)
        .filter(([, v]) => v !== undefined)
        .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      out += '{'
      open.push({ items: entries, entries, next: 0 })
    } else out += scalar(current)
    // Close every container that is done, then move to the next value of the innermost open one.
    let top = open.at(-1)
    while (top !== undefined && top.next === top.items.length) {
      out += top.entries === undefined ? ']' : '}'
      open.pop()
      top = open.at(-1)
    }
    if (top === undefined) return out
    if (top.next > 0) out += ','
    if (top.entries === undefined) current = top.items[top.next++]
    else {
      const [key, member] = top.entries[top.next++] as [string, unknown]
      out += `${JSON.stringify(key)}:`
      current = member
    }
  }
}
