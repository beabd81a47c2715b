// generate_text: an OpenAI-compatible chat completion billed per token from the run's LLM reserve.
//
// Money (pure functions below):
// - cost = ceil((input_tokens x input price + output_tokens x output price) / 1,000,000), in micros,
//   with the per-million-token prices of the profile the call runs under (rates.llm_profiles);
// - before calling, the worst case is reserved: the prompt bound (UTF-8 bytes of system + prompt
//   + PROMPT_OVERHEAD_TOKENS: a token is at least one byte for byte-level tokenizers) at the input
//   price plus max_output_tokens at the output price. The reserve is the run's LLM budget,
//   llmReserveMicros(task.llm) (the profile's max_cost_usdc_micros_per_run or the task's lower
//   value); a call whose worst case does not fit is refused before anything is spent;
// - afterwards the reservation is replaced by the real cost from the upstream's `usage` (the
//   worst case when the upstream reports none).
//
// Model choice: `model_alias` names a profile (quick, standard, bulk) and so a configured model
// and its prices; `model` names a configured upstream model directly (priced under the profile it
// is configured for, else the alias or the task's profile). Without either, the task's profile.
import type { Db } from '../../platform/db/index.ts'
import { AppError } from '../../platform/errors.ts'
import type { Logger } from '../../platform/logger.ts'
import type { Micros } from '../../platform/money.ts'
import { llmReserveMicros, type LlmProfileRate, type SchedulerRates } from '../domain/rates.ts'
import { runLlmCost } from '../run-store.ts'
import { reserveLlm, settleLlm } from './meters.ts'
import type { HelperRun } from './run.ts'
import { LLM_PROFILES, type LlmProfileName } from '../contract/index.ts'

/** Tokens a chat template adds around the messages (role markers, separators). */
export const PROMPT_OVERHEAD_TOKENS = 32
/** max_output_tokens when the caller gives none (lowered to what the reserve still covers). */
export const DEFAULT_MAX_OUTPUT_TOKENS = 4096
export const MAX_OUTPUT_TOKENS = 32_768
const MILLION = 1_000_000n

export interface LlmUpstreamConfig {
  /** OpenAI-compatible API base, e.g. https://api.openai.com/v1; unset = generate_text answers 503. */
  baseUrl?: string
  apiKey?: string
  /** Model used for every profile without an entry in `models`. */
  defaultModel?: string
  /** Upstream model per profile (model_alias). */
  models?: Partial<Record<LlmProfileName, string>>
  /** Name of the output cap parameter: OpenAI's current `max_completion_tokens` or the classic `max_tokens` (default). */
  maxTokensParam?: 'max_tokens' | 'max_completion_tokens'
  timeoutMs?: number
  fetch?: typeof fetch
}

export type Reasoning = boolean | 'none' | 'minimal' | 'low' | 'medium' | 'high'

export interface GenerateTextInput {
  prompt: string
  model_alias?: LlmProfileName
  model?: string
  system?: string
  max_output_tokens?: number
  temperature?: number
  reasoning?: Reasoning
}

export interface GenerateTextOutput {
  text: string
  model: string
  usage: { input_tokens: number; output_tokens: number }
  cost_usdc_micros: string
  metadata: Record<string, unknown>
}

type TokenPrices = Pick<LlmProfileRate, 'input_micros_per_million_tokens' | 'output_micros_per_million_tokens'>

/** Micros for a number of tokens, rounded up once over the sum. */
export function tokenCostMicros(inputTokens: number, outputTokens: number, prices: TokenPrices): Micros {
  if (!Number.isSafeInteger(inputTokens) || inputTokens < 0) throw new RangeError('inputTokens must be a non-negative integer')
  if (!Number.isSafeInteger(outputTokens) || outputTokens < 0) throw new RangeError('outputTokens must be a non-negative integer')
  const scaled = BigInt(inputTokens) * prices.input_micros_per_million_tokens + BigInt(outputTokens) * prices.output_micros_per_million_tokens
  return (scaled + MILLION - 1n) / MILLION
}

/** Upper bound of the prompt's tokens. */
export function promptTokenBound(prompt: string, system?: string): number {
  return Buffer.byteLength(prompt, 'utf8') + (system === undefined ? 0 : Buffer.byteLength(system, 'utf8')) + PROMPT_OVERHEAD_TOKENS
}

/** Largest output token count whose worst case fits in `budget` (0 when not even the prompt fits). */
export function maxOutputTokensWithin(budget: Micros, promptTokens: number, prices: TokenPrices): number {
  // ceil((in*pi + out*po) / 1e6) <= budget  <=>  in*pi + out*po <= budget * 1e6
  const room = budget * MILLION - BigInt(promptTokens) * prices.input_micros_per_million_tokens
  if (room < 0n) return 0
  if (prices.output_micros_per_million_tokens <= 0n) return MAX_OUTPUT_TOKENS
  const tokens = room / prices.output_micros_per_million_tokens
  return tokens > BigInt(MAX_OUTPUT_TOKENS) ? MAX_OUTPUT_TOKENS : Number(tokens)
}

export interface ModelChoice {
  readonly model: string
  readonly profile: LlmProfileName
}

/** Which upstream model and price profile a call uses (see header), or a 4xx/503 naming why not. */
export function chooseModel(config: LlmUpstreamConfig, taskProfile: LlmProfileName, input: Pick<GenerateTextInput, 'model' | 'model_alias'>): ModelChoice {
  const models = config.models ?? {}
  if (input.model !== undefined) {
    const offered = new Set([...(config.defaultModel === undefined ? [] : [config.defaultModel]), ...Object.values(models)])
    if (!offered.has(input.model)) {
      throw new AppError(
        'VALIDATION_ERROR',
        `model ${JSON.stringify(input.model)} is not offered here; use one of ${[...offered].map((m) => JSON.stringify(m)).join(', ') || '(none configured)'} or a model_alias (${LLM_PROFILES.join(', ')})`,
        {
          field: 'body.model',
        },
      )
    }
    const configuredFor = LLM_PROFILES.find((p) => models[p] === input.model)
    return { model: input.model, profile: configuredFor ?? input.model_alias ?? taskProfile }
  }
  const profile = input.model_alias ?? taskProfile
  const model = models[profile] ?? config.defaultModel
  if (model === undefined) {
    throw new AppError('unavailable', `No LLM model is configured for profile ${profile}`, { extensions: { profile } })
  }
  return { model, profile }
}

interface ChatCompletion {
  id?: unknown
  model?: unknown
  choices?: Array<{ message?: { content?: unknown }; finish_reason?: unknown }>
  usage?: { prompt_tokens?: unknown; completion_tokens?: unknown; completion_tokens_details?: { reasoning_tokens?: unknown } }
}

export interface ChatResult {
  text: string
  model: string
  id: string | null
  finishReason: string | null
  /** null when the upstream reported no usage. */
  usage: { input: number; output: number; reasoning: number | null } | null
}

function textOf(content: unknown): string {
  if (typeof content === 'string') return content
  if (Array.isArray(content)) {
    return content
      .map((part) => (part !== null && typeof part === 'object' && typeof (part as { text?: unknown }).text === 'string' ? (part as { text: string }).text : ''))
      .join('')
  }
  return ''
}

function tokenCount(value: unknown): number | null {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0 ? value : null
}

/** One POST {baseUrl}/chat/completions. Upstream trouble is a 502/504 `unavailable` with its reason. */
export async function chatCompletion(
  config: LlmUpstreamConfig & { baseUrl: string },
  request: { model: string; prompt: string; system?: string; maxOutputTokens: number; temperature?: number; reasoning?: Reasoning },
): Promise<ChatResult> {
  const messages = [...(request.system === undefined ? [] : [{ role: 'system', content: request.system }]), { role: 'user', content: request.prompt }]
  const body: Record<string, unknown> = { model: request.model, messages, [config.maxTokensParam ?? 'max_tokens']: request.maxOutputTokens }
  if (request.temperature !== undefined) body.temperature = request.temperature
  if (request.reasoning !== undefined && request.reasoning !== false) body.reasoning_effort = request.reasoning === true ? 'medium' : request.reasoning
  const doFetch = config.fetch ?? fetch
  let response: Response
  try {
    response = await doFetch(`${config.baseUrl.replace(/\/+$/, '')}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json', ...(config.apiKey ? { authorization: `Bearer ${config.apiKey}` } : {}) },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(config.timeoutMs ?? 120_000),
    })
  } catch (err) {
    const timeout = (err as Error).name === 'TimeoutError'
    throw new AppError('unavailable', timeout ? 'The LLM upstream did not answer in time' : `The LLM upstream is unreachable: ${(err as Error).message}`, {
      status: timeout ? 504 : 502,
    })
  }
  const text = await response.text()
  if (!response.ok) {
    throw new AppError('unavailable', `The LLM upstream answered ${response.status}: ${text.slice(0, 300)}`, {
      status: 502,
      extensions: { upstream_status: response.status },
    })
  }
  let parsed: ChatCompletion
  try {
    parsed = JSON.parse(text) as ChatCompletion
  } catch {
    throw new AppError('unavailable', 'The LLM upstream answered with something that is not JSON', { status: 502 })
  }
  const choice = parsed.choices?.[0]
  if (choice === undefined) throw new AppError('unavailable', 'The LLM upstream answered without choices', { status: 502 })
  const input = tokenCount(parsed.usage?.prompt_tokens)
  const output = tokenCount(parsed.usage?.completion_tokens)
  return {
    text: textOf(choice.message?.content),
    model: typeof parsed.model === 'string' ? parsed.model : request.model,
    id: typeof parsed.id === 'string' ? parsed.id : null,
    finishReason: typeof choice.finish_reason === 'string' ? choice.finish_reason : null,
    usage: input === null || output === null ? null : { input, output, reasoning: tokenCount(parsed.usage?.completion_tokens_details?.reasoning_tokens) },
  }
}

export interface GenerateTextDeps {
  db: Db
  rates: SchedulerRates
  logger: Logger
  llm: LlmUpstreamConfig
}

/** The generate_text helper for an authenticated run. */
export async function generateText(deps: GenerateTextDeps, run: HelperRun, input: GenerateTextInput): Promise<GenerateTextOutput> {
  const llm = run.spec.llm
  if (llm === null) {
    throw new AppError('VALIDATION_ERROR', 'generate_text needs llm on the task: create it with "llm": {"profile": "quick" | "standard" | "bulk"}', {
      field: 'task.llm',
    })
  }
  const baseUrl = deps.llm.baseUrl
  if (baseUrl === undefined || baseUrl === '') {
    throw new AppError('unavailable', 'generate_text is not available: this service has no LLM upstream configured')
  }
  const choice = chooseModel(deps.llm, llm.profile, input)
  const prices = deps.rates.llm_profiles[choice.profile]
  const reserve = llmReserveMicros(llm, deps.rates)
  const promptTokens = promptTokenBound(input.prompt, input.system)

  const spent = (await runLlmCost(deps.db, run.runId)) ?? 0n
  const left = reserve > spent ? reserve - spent : 0n
  const maxOutput = input.max_output_tokens ?? Math.min(DEFAULT_MAX_OUTPUT_TOKENS, maxOutputTokensWithin(left, promptTokens, prices))
  const worstCase = tokenCostMicros(promptTokens, maxOutput, prices)
  const refuse = (spentNow: Micros): never => {
    throw new AppError(
      'PRICE_CAP_EXCEEDED',
      `generate_text could cost up to ${worstCase} micros (${promptTokens} prompt tokens at most, ${maxOutput} output tokens); the run's LLM reserve of ${reserve} micros has ${reserve > spentNow ? reserve - spentNow : 0n} left. Shorten the prompt or lower max_output_tokens.`,
      {
        field: input.max_output_tokens === undefined ? 'body.prompt' : 'body.max_output_tokens',
        extensions: { needed_micros: worstCase.toString(), llm_reserve_micros: reserve.toString(), llm_spent_micros: spentNow.toString() },
      },
    )
  }
  if (maxOutput < 1) refuse(spent)
  const reserved = await reserveLlm(deps.db, run.runId, worstCase, reserve)
  if (!reserved.ok) {
    if (reserved.refusal === 'run_ended') throw new AppError('TOKEN_EXPIRED', `Run ${run.runId} has ended`, { field: 'header.authorization' })
    refuse(reserved.meters.llm_cost_micros)
  }

  let result: ChatResult
  try {
    result = await chatCompletion(
      { ...deps.llm, baseUrl },
      {
        model: choice.model,
        prompt: input.prompt,
        maxOutputTokens: maxOutput,
        ...(input.system === undefined ? {} : { system: input.system }),
        ...(input.temperature === undefined ? {} : { temperature: input.temperature }),
        ...(input.reasoning === undefined ? {} : { reasoning: input.reasoning }),
      },
    )
  } catch (err) {
    await settleLlm(deps.db, run.runId, worstCase, 0n, 0, 0)
    throw err
  }
  const usage = result.usage
  const cost = usage === null ? worstCase : tokenCostMicros(usage.input, usage.output, prices)
  if (usage === null) deps.logger.warn({ runId: run.runId, model: result.model }, 'LLM upstream reported no usage; charged the worst case')
  const total = await settleLlm(deps.db, run.runId, worstCase, cost, usage?.input ?? promptTokens, usage?.output ?? maxOutput)
  return {
    text: result.text,
    model: result.model,
    usage: { input_tokens: usage?.input ?? promptTokens, output_tokens: usage?.output ?? maxOutput },
    cost_usdc_micros: cost.toString(),
    metadata: {
      profile: choice.profile,
      finish_reason: result.finishReason,
      upstream_id: result.id,
      reasoning_tokens: usage?.reasoning ?? null,
      usage_reported: usage !== null,
      max_output_tokens: maxOutput,
      run_llm_cost_micros: total.toString(),
      run_llm_reserve_micros: reserve.toString(),
    },
  }
}
