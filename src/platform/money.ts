// Money is integer micros (1 USD = 1 USDC = 1,000,000 micros) as `bigint` end to end.
// JSON carries it as a decimal string so no client ever sees a rounded float.

export type Micros = bigint

export const MICROS_PER_USD = 1_000_000n

const DIGITS = /^(0|[1-9]\d{0,30})$/

/** Parses a non-negative integer amount of micros from a JSON number or digit string. */
export function parseMicros(value: unknown): Micros | undefined {
  if (typeof value === 'bigint') return value >= 0n ? value : undefined
  if (typeof value === 'number') return Number.isSafeInteger(value) && value >= 0 ? BigInt(value) : undefined
  if (typeof value === 'string' && DIGITS.test(value)) return BigInt(value)
  return undefined
}

/** 80000n → "0.080000" (six decimals, the SPEC's price notation). */
export function formatUsd(micros: Micros): string {
  const negative = micros < 0n
  const abs = negative ? -micros : micros
  const whole = abs / MICROS_PER_USD
  const frac = (abs % MICROS_PER_USD).toString().padStart(6, '0')
  return `${negative ? '-' : ''}${whole}.${frac}`
}
