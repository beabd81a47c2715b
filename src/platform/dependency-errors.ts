// Errors that mean "a dependency is out of reach right now" (the database restarting or refusing
// connections, the cache's connection dropped, a socket reset, the blob volume full), as opposed to
// a bug. A request that meets one is answered 503 with Retry-After, so clients and load balancers
// retry instead of reading a 500 as a fault of this service; the request was not answered, and what
// it wrote (if anything) is guarded by the same idempotency and payment rules as any retried request.

/** SQLSTATEs of a database that is going away or not accepting connections. */
const UNAVAILABLE_SQLSTATES = new Set(['57P01', '57P02', '57P03', '53300'])
/** Socket failures of any connection to a dependency. */
const SOCKET_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EAI_AGAIN',
  // undici's (fetch, the Kubernetes client): a server that closed, or never answered, the connection.
  'UND_ERR_SOCKET',
  'UND_ERR_CLOSED',
  'UND_ERR_CONNECT_TIMEOUT',
  'UND_ERR_HEADERS_TIMEOUT',
])
/** A full filesystem (or quota) under the blob store: nothing the request did wrong, and it clears once space is freed. */
const STORAGE_CODES = new Set(['ENOSPC', 'EDQUOT'])
/** The pg driver's and node-redis's words for a connection that died or is closed (they carry no code). */
const DROPPED_CONNECTION =
  /^(Connection terminated|Client has encountered a connection error|timeout exceeded when trying to connect|The client is closed|Socket closed unexpectedly|Connection timeout)/

/** Which kind of dependency failure `error` is (following `cause`), or undefined when it is something else. */
export function unavailableDependency(error: unknown): 'database' | 'connection' | 'storage' | undefined {
  for (let current = error, depth = 0; typeof current === 'object' && current !== null && depth < 5; depth += 1) {
    const { code, message, name } = current as { code?: unknown; message?: unknown; name?: unknown }
    if (typeof code === 'string' && (code.startsWith('08') || UNAVAILABLE_SQLSTATES.has(code)) && code.length === 5) return 'database'
    if (typeof code === 'string' && SOCKET_CODES.has(code)) return 'connection'
    if (typeof code === 'string' && STORAGE_CODES.has(code)) return 'storage'
    if (name === 'ClientClosedError' || name === 'SocketClosedUnexpectedlyError' || name === 'ConnectionTimeoutError') return 'connection'
    if (typeof message === 'string' && DROPPED_CONNECTION.test(message)) return 'connection'
    current = (current as { cause?: unknown }).cause
  }
  return undefined
}
