// The embedder backed by an OpenAI-compatible embeddings API (OpenAI, vLLM, TEI, Ollama, llama.cpp…).
//
// Wire contract: POST {base}/v1/embeddings ({base} given with or without its trailing /v1)
//   Authorization: Bearer <apiKey> (when configured), Content-Type: application/json
//   { "model": string, "input": string[], "encoding_format": "float", "dimensions"?: number }
// Answer (2xx), validated strictly — anything else is 'invalid_response':
//   { "data": [{ "index": i, "embedding": number[] }, …one per input…], "usage"?: { "prompt_tokens"?, "total_tokens"? } }
//   - every index an integer in [0, inputs), each exactly once; vectors are returned in index order;
//   - every embedding an array of finite numbers, all of the embedder's dimensions (configured, or
//     learned from the first answer and fixed from then on), not all zero;
//   - vectors are L2-normalised here (providers differ on whether they already are).
// Inputs go out in batches of `batchSize`, one after the other. `tokens` is the sum of the batches'
// usage.prompt_tokens (else usage.total_tokens); undefined when any batch did not report it, so the
// caller counts them itself rather than bill a partial sum.
// Retries, back-off, Retry-After, per-attempt timeout, deadline (per batch), size cap and the key's
// redaction are the media providers' (src/media/providers/upstream/http.ts). The URL is operator
// configuration (often an in-cluster service), so it is called directly, not through the egress guard.
import { hostPort, isRecord, jsonObjectOf, postJson, type UpstreamHttpOptions, upstreamHttp } from '../../media/providers/upstream/http.ts'
import type { Embedder, EmbeddingResult } from '../types.ts'
import { EmbeddingError, l2Normalized } from './errors.ts'

export interface UpstreamEmbedderOptions extends UpstreamHttpOptions {
  /** API base: https://api.openai.com, https://api.openai.com/v1, http://tei:8080 … (the full …/v1/embeddings is accepted too). */
  url: string
  apiKey?: string | undefined
  model: string
  /** Requested (`dimensions` in the body) and expected dimensions; unset = learned from the first answer (see probe()). */
  dimensions?: number | undefined
  /** One attempt, including reading the body. */
  timeoutMs: number
  /** Retries after the first attempt. */
  retries: number
  /** Inputs per request (default 64). */
  batchSize?: number | undefined
  fetch?: typeof fetch | undefined
}

export interface UpstreamEmbedder extends Embedder {
  readonly mode: 'upstream'
  readonly model: string
  /** The dimensions once configured or learned; undefined before (then `id` and `dims` throw). */
  readonly knownDims: number | undefined
  /** Embeds one short text to learn the dimensions (or to check the configured ones are honoured); resolves with them. */
  probe(options?: { signal?: AbortSignal }): Promise<number>
}

const DEFAULT_BATCH = 64
const DEFAULT_MAX_BYTES = 32 * 1024 * 1024
const PROBE_TEXT = 'dimension probe'

/** The endpoint for a base URL given with or without /v1 (or as the full …/v1/embeddings). */
export function embeddingsEndpoint(url: string): string {
  let parsed: URL
  try {
    parsed = new URL(url)
  } catch {
    throw new TypeError('the embeddings URL is not a valid URL')
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') throw new TypeError(`the embeddings URL must be http or https, not ${parsed.protocol}`)
  // fetch refuses them anyway, echoing the whole URL in its error: say so here, without the URL.
  if (parsed.username || parsed.password) throw new TypeError('the embeddings URL must not hold credentials: configure the API key instead')
  parsed.search = ''
  parsed.hash = ''
  const base = parsed.toString().replace(/\/+$/, '')
  if (/\/v1\/embeddings$/.test(base)) return base
  return /\/v1$/.test(base) ? `${base}/embeddings` : `${base}/v1/embeddings`
}

export function createUpstreamEmbedder(options: UpstreamEmbedderOptions): UpstreamEmbedder {
  const endpoint = embeddingsEndpoint(options.url)
  const where = hostPort(endpoint)
  const model = options.model
  if (typeof model !== 'string' || model.trim() === '') throw new TypeError('the embeddings model must be named')
  const requested = options.dimensions
  if (requested !== undefined && !(Number.isInteger(requested) && requested > 0)) throw new RangeError(`embedding dimensions must be a positive integer, got ${requested}`)
  const batchSize = options.batchSize ?? DEFAULT_BATCH
  if (!(Number.isInteger(batchSize) && batchSize > 0)) throw new RangeError(`the embedding batch size must be a positive integer, got ${batchSize}`)
  const http = upstreamHttp({ maxBytes: DEFAULT_MAX_BYTES, ...definedOnly(options) })
  let dims: number | undefined = requested

  const knownOrThrow = (): number => {
    if (dims === undefined) throw new EmbeddingError('unavailable', `the dimensions of ${model} at ${where} are not known yet: configure them or call probe() first`)
    return dims
  }

  /** One batch: the request, then the answer's validation. */
  const embedBatch = async (input: string[], signal: AbortSignal): Promise<{ vectors: Float32Array[]; tokens: number | undefined }> => {
    const body = await postJson(
      http,
      {
        url: endpoint,
        json: { model, input, encoding_format: 'float', ...(requested !== undefined ? { dimensions: requested } : {}) },
        userAgent: 'agent-gateway-memory',
        signal,
      },
      (kind, message, cause) => new EmbeddingError(kind, `embeddings: ${message}`, { cause }),
    )
    const invalid = (what: string): EmbeddingError => new EmbeddingError('invalid_response', `embeddings: ${where} answered with ${what}`)
    const parsed = jsonObjectOf(body, invalid)
    const data = parsed.data
    if (!Array.isArray(data)) throw invalid('no data array')
    if (data.length !== input.length) throw invalid(`${data.length} embeddings for ${input.length} inputs`)
    const vectors: (Float32Array | undefined)[] = new Array(input.length)
    let width: number | undefined = dims
    for (let i = 0; i < data.length; i++) {
      const item: unknown = data[i]
      if (!isRecord(item)) throw invalid(`data[${i}] that is not an object`)
      const index = item.index
      if (typeof index !== 'number' || !Number.isInteger(index) || index < 0 || index >= input.length)
        throw invalid(`data[${i}].index ${describe(index)} (expected an integer in [0, ${input.length}))`)
      if (vectors[index] !== undefined) throw invalid(`index ${index} twice`)
      const embedding = item.embedding
      if (!Array.isArray(embedding)) {
        throw invalid(`data[${i}].embedding that is ${typeof embedding === 'string' ? 'a string (encoding_format "float" ignored?)' : `not an array (${describe(embedding)})`}`)
      }
      if (width === undefined) width = embedding.length
      if (embedding.length !== width) throw invalid(`data[${i}].embedding of ${embedding.length} dimensions, expected ${width}`)
      if (width === 0) throw invalid(`data[${i}].embedding that is empty`)
      for (let j = 0; j < embedding.length; j++) {
        const v: unknown = embedding[j]
        if (typeof v !== 'number' || !Number.isFinite(v)) throw invalid(`data[${i}].embedding[${j}] that is not a finite number (${describe(v)})`)
      }
      const unit = l2Normalized(embedding as number[])
      if (!unit) throw invalid(`data[${i}].embedding that is all zeros`)
      vectors[index] = unit
    }
    // Learned once; a concurrent first answer of another width is caught here.
    if (dims === undefined) dims = width
    else if (width !== dims) throw invalid(`embeddings of ${width} dimensions, expected ${dims}`)
    return { vectors: vectors as Float32Array[], tokens: usageTokens(parsed.usage) }
  }

  const embed = async (texts: string[], embedOptions: { signal?: AbortSignal } = {}): Promise<EmbeddingResult> => {
    if (!Array.isArray(texts) || texts.some((text) => typeof text !== 'string')) throw new TypeError('embed() takes an array of strings')
    const signal = embedOptions.signal ?? new AbortController().signal
    const vectors: Float32Array[] = []
    let tokens: number | undefined = 0
    for (let start = 0; start < texts.length; start += batchSize) {
      const batch = await embedBatch(texts.slice(start, start + batchSize), signal)
      vectors.push(...batch.vectors)
      tokens = tokens === undefined || batch.tokens === undefined ? undefined : tokens + batch.tokens
    }
    return { vectors, tokens }
  }

  return {
    mode: 'upstream',
    model,
    get knownDims() {
      return dims
    },
    get dims() {
      return knownOrThrow()
    },
    get id() {
      return `upstream:${model}:${knownOrThrow()}`
    },
    get description() {
      return `upstream: ${model} at ${where} (${dims === undefined ? 'dimensions not yet known' : `${dims} dimensions`})`
    },
    embed,
    async probe(probeOptions = {}) {
      await embed([PROBE_TEXT], probeOptions)
      return knownOrThrow()
    },
  }
}

/** usage.prompt_tokens, else usage.total_tokens, as a non-negative integer; else undefined. */
function usageTokens(usage: unknown): number | undefined {
  if (!isRecord(usage)) return undefined
  for (const value of [usage.prompt_tokens, usage.total_tokens]) {
    if (typeof value === 'number' && Number.isInteger(value) && value >= 0) return value
  }
  return undefined
}

/** A short, content-free description of a bad value (never echoes strings: they may be anything). */
function describe(value: unknown): string {
  if (value === null) return 'null'
  if (value === undefined) return 'missing'
  if (typeof value === 'number') return String(value)
  if (Array.isArray(value)) return 'an array'
  return `a ${typeof value}`
}

// So an explicit `timeoutMs: undefined` does not erase a default.
function definedOnly<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>
}
