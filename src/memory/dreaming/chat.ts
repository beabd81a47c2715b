// The dreaming model: an OpenAI-compatible chat completions API (OpenAI, vLLM, Ollama, llama.cpp,
// LiteLLM…).
//
// Wire contract: POST {base}/v1/chat/completions ({base} given with or without its trailing /v1,
// or as the full …/v1/chat/completions)
//   Authorization: Bearer <apiKey> (when configured), Content-Type: application/json
//   { "model", "messages": [{ "role", "content" }…], "temperature": 0, "max_tokens", "stream": false }
// Answer (2xx), validated strictly — anything else is 'invalid_response':
//   { "choices": [{ "message": { "content": string | null } }, …], "usage"?: { "prompt_tokens"?, "completion_tokens"? } }
//   - the first choice is used; a null content (a refusal, a reply cut at max_tokens by a reasoning
//     model) is the empty text, which consolidates to nothing;
//   - usage fields that are missing or not non-negative integers are counted here instead
//     (cl100k_base, see countPromptTokens), each on its own.
// Retries, back-off, Retry-After, per-attempt timeout, deadline, size cap and the key's redaction
// are the media providers' (src/media/providers/upstream/http.ts). Messages name the host:port
// only: never the key, never the URL, and never the upstream's error body (it may echo the prompt,
// i.e. an owner's decrypted memories).
import { hostPort, isRecord, jsonObjectOf, postJson, type UpstreamHttpOptions, upstreamHttp } from '../../media/providers/upstream/http.ts'
import { countTokens } from '../embeddings/tokens.ts'
import { DREAM_PRICES, type DreamModelSize } from '../limits.ts'
import type { ChatMessage, ChatModel } from '../types.ts'

export type ChatModelErrorKind =
  /** An attempt or the deadline ran out, or the caller cancelled. */
  | 'timeout'
  /** The upstream failed: a status, a refused or reset connection, a body over the cap. */
  | 'upstream'
  /** The answer could not be used: not JSON, no choices, no message, content not a string. */
  | 'invalid_response'

export class ChatModelError extends Error {
  readonly kind: ChatModelErrorKind
  constructor(kind: ChatModelErrorKind, message: string, options?: { cause?: unknown }) {
    super(message, options)
    this.name = 'ChatModelError'
    this.kind = kind
  }
}

export interface ChatModelOptions extends UpstreamHttpOptions {
  /** API base: https://api.openai.com, https://api.openai.com/v1, http://vllm:8000 … */
  url: string
  apiKey?: string | undefined
  model: string
  /** The price class billed for it (DREAM_PRICES). */
  size: DreamModelSize
  /** One attempt, including reading the body. */
  timeoutMs: number
  /** Retries after the first attempt. */
  retries: number
  fetch?: typeof fetch | undefined
}

export interface OpenAiChatModel extends ChatModel {
  readonly model: string
  /** "gpt-4o-mini (small) at api.openai.com:443": for status pages and logs. */
  readonly description: string
}

const ROLES = new Set<ChatMessage['role']>(['system', 'user', 'assistant'])
const DEFAULT_MAX_BYTES = 4 * 1024 * 1024
/** OpenAI's chat framing: tokens around each message, and those priming the reply. */
const TOKENS_PER_MESSAGE = 4
const TOKENS_REPLY_PRIMING = 3

/** The endpoint for a base URL given with or without /v1 (or as the full …/v1/chat/completions). */
export function chatCompletionsEndpoint(url: string): string {
  let parsed: URL
  try {
    parsed = new URL(url)
  } catch {
    throw new TypeError('the dreaming model URL is not a valid URL')
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') throw new TypeError(`the dreaming model URL must be http or https, not ${parsed.protocol}`)
  parsed.search = ''
  parsed.hash = ''
  const base = parsed.toString().replace(/\/+$/, '')
  if (/\/v1\/chat\/completions$/.test(base)) return base
  return /\/v1$/.test(base) ? `${base}/chat/completions` : `${base}/v1/chat/completions`
}

/** Tokens of a chat prompt as cl100k_base counts them, with OpenAI's per-message framing. */
export function countPromptTokens(messages: readonly ChatMessage[]): number {
  let total = TOKENS_REPLY_PRIMING
  for (const message of messages) total += TOKENS_PER_MESSAGE + countTokens(message.content)
  return total
}

export function createChatModel(options: ChatModelOptions): OpenAiChatModel {
  const endpoint = chatCompletionsEndpoint(options.url)
  const where = hostPort(endpoint)
  const model = options.model
  if (typeof model !== 'string' || model.trim() === '') throw new TypeError('the dreaming model must be named')
  const size = options.size
  if (!Object.hasOwn(DREAM_PRICES, size)) throw new RangeError(`the dreaming model size must be one of ${Object.keys(DREAM_PRICES).join(', ')}, got ${String(size)}`)
  if (!(Number.isFinite(options.timeoutMs) && options.timeoutMs > 0)) throw new RangeError(`the dreaming model timeout must be a positive number of ms, got ${options.timeoutMs}`)
  if (!(Number.isInteger(options.retries) && options.retries >= 0)) throw new RangeError(`the dreaming model retries must be a non-negative integer, got ${options.retries}`)
  const http = upstreamHttp({ maxBytes: DEFAULT_MAX_BYTES, ...definedOnly(options) })

  const complete: ChatModel['complete'] = async (messages, callOptions) => {
    if (!Array.isArray(messages) || messages.length === 0) throw new TypeError('complete() takes a non-empty array of messages')
    for (const message of messages) {
      if (!isRecord(message) || !ROLES.has(message.role as ChatMessage['role']) || typeof message.content !== 'string') {
        throw new TypeError('each message needs a role (system, user or assistant) and a string content')
      }
    }
    const maxTokens = callOptions?.maxTokens
    if (!(Number.isInteger(maxTokens) && maxTokens > 0)) throw new RangeError(`maxTokens must be a positive integer, got ${maxTokens}`)
    const signal = callOptions.signal ?? new AbortController().signal
    const body = await postJson(
      http,
      {
        url: endpoint,
        json: { model, messages: messages.map(({ role, content }) => ({ role, content })), temperature: 0, max_tokens: maxTokens, stream: false },
        userAgent: 'agent-gateway-memory',
        signal,
      },
      (kind, message, cause) => new ChatModelError(kind, `chat model: ${withoutBody(message)}`, { cause }),
    )
    const invalid = (what: string): ChatModelError => new ChatModelError('invalid_response', `chat model: ${where} answered with ${what}`)
    const parsed = jsonObjectOf(body, invalid)
    const choices = parsed.choices
    if (!Array.isArray(choices) || choices.length === 0) throw invalid('no choices')
    const choice: unknown = choices[0]
    if (!isRecord(choice)) throw invalid('choices[0] that is not an object')
    const message = choice.message
    if (!isRecord(message)) throw invalid('choices[0].message that is not an object')
    const content = message.content
    if (content !== null && content !== undefined && typeof content !== 'string') throw invalid(`choices[0].message.content that is ${describe(content)}`)
    const text = typeof content === 'string' ? content : ''
    const usage = isRecord(parsed.usage) ? parsed.usage : {}
    const inputTokens = tokenCount(usage.prompt_tokens) ?? countPromptTokens(messages)
    const outputTokens = tokenCount(usage.completion_tokens) ?? countTokens(text)
    return { text, inputTokens, outputTokens }
  }

  return {
    id: model,
    model,
    size,
    description: `${model} (${size}) at ${where}`,
    complete,
  }
}

/**
 * The message without the upstream's error body: `host:port answered 400: <body>` keeps
 * `host:port answered 400` (and any "; Retry-After…" or "(gave up after…)" that follows).
 */
function withoutBody(message: string): string {
  return message.replace(/(answered \d{3}): [\s\S]*?(?=; Retry-After | \(gave up after \d+ attempts\)$|$)/, '$1')
}

function tokenCount(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isInteger(value) && value >= 0 ? value : undefined
}

/** A short, content-free description of a bad value (never echoes strings). */
function describe(value: unknown): string {
  if (value === null) return 'null'
  if (Array.isArray(value)) return 'an array'
  return `a ${typeof value}`
}

// So an explicit `timeoutMs: undefined` does not erase a default.
function definedOnly<T extends object>(options: T): Partial<T> {
  return Object.fromEntries(Object.entries(options).filter(([, v]) => v !== undefined)) as Partial<T>
}
