// Prices and bounds of the memory service, defined once (SPEC Limits §5). Micros are integer
// micro-USDC; a charge is rounded up to the next whole micro (never down: a write of 1 token costs 1).

/** Embedding input, micro-USDC per million tokens. */
export const EMBEDDING_MICROS_PER_MTOK = 100_000n

/** Dreaming model prices, micro-USDC per million tokens. */
export const DREAM_PRICES = {
  large: { input: 300_000n, output: 2_500_000n },
  small: { input: 100_000n, output: 400_000n },
} as const
export type DreamModelSize = keyof typeof DREAM_PRICES

/** ceil(tokens × pricePerMillion / 1e6) in micros. */
export function tokenCostMicros(tokens: number, microsPerMillion: bigint): bigint {
  if (!Number.isInteger(tokens) || tokens < 0) throw new RangeError(`tokens must be a non-negative integer, got ${tokens}`)
  return (BigInt(tokens) * microsPerMillion + 999_999n) / 1_000_000n
}

/** What a direct-rail write is debited: its embedding input tokens at the embedding rate. */
export function embeddingCostMicros(tokens: number): bigint {
  return tokenCostMicros(tokens, EMBEDDING_MICROS_PER_MTOK)
}

/** A dreaming batch's model cost (input and output rounded up separately). */
export function dreamCostMicros(size: DreamModelSize, inputTokens: number, outputTokens: number): bigint {
  const price = DREAM_PRICES[size]
  return tokenCostMicros(inputTokens, price.input) + tokenCostMicros(outputTokens, price.output)
}

/** Recall: candidates each ranked list contributes before fusion, and the RRF constant. */
export const RRF_K = 60
export const FUSION_DEPTH = 100

/** Dreaming: raw records consolidated per batch at most, and derived records a batch may write. */
export const DREAM_BATCH_MAX = 50
export const DREAM_DERIVED_MAX = 10
