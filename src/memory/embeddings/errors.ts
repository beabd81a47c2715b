// The one error type of the embedders (upstream.ts, onnx-local.ts). Messages are safe to log and
// to show an operator: they name a host:port or a directory, never a URL's credentials or an API key.

export type EmbeddingErrorKind =
  /** An attempt or the deadline ran out, or the caller cancelled. */
  | 'timeout'
  /** The upstream failed: a status, a refused or reset connection, a body over the cap. */
  | 'upstream'
  /** The answer could not be used: not JSON, wrong shape, count, order or dimensions, NaN. */
  | 'invalid_response'
  /** The embedder cannot work at all: model files missing, runtime not loadable, closed, dimensions unknown. */
  | 'unavailable'

export class EmbeddingError extends Error {
  readonly kind: EmbeddingErrorKind
  constructor(kind: EmbeddingErrorKind, message: string, options?: { cause?: unknown }) {
    super(message, options)
    this.name = 'EmbeddingError'
    this.kind = kind
  }
}

/** The vector divided by its L2 norm (computed in double precision, scaled so huge values cannot overflow), or undefined for a zero or non-finite one. */
export function l2Normalized(values: ArrayLike<number>): Float32Array | undefined {
  let max = 0
  for (let i = 0; i < values.length; i++) {
    const v = values[i]!
    if (!Number.isFinite(v)) return undefined
    max = Math.max(max, Math.abs(v))
  }
  if (max === 0) return undefined
  let sum = 0
  for (let i = 0; i < values.length; i++) sum += (values[i]! / max) ** 2
  const root = Math.sqrt(sum)
  const out = new Float32Array(values.length)
  for (let i = 0; i < values.length; i++) out[i] = values[i]! / max / root
  return out
}
