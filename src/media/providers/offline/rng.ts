// Seeded randomness of the offline composer: FNV-1a of a text key → mulberry32. Every choice of
// a plan draws from a stream keyed by the prompt, the seed and what is being chosen.

export interface Rng {
  next(): number
  int(lo: number, hi: number): number
  pick<T>(items: readonly T[]): T | undefined
  chance(p: number): boolean
}

export function fnv1a(text: string): number {
  let hash = 0x811c9dc5
  for (const byte of new TextEncoder().encode(text)) hash = Math.imul(hash ^ byte, 0x01000193) >>> 0
  return hash
}

export function createRng(key: string): Rng {
  let state = fnv1a(key)
  const next = () => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  return {
    next,
    int: (lo, hi) => lo + Math.floor(next() * (hi - lo + 1)),
    pick: (items) => (items.length === 0 ? undefined : items[Math.floor(next() * items.length)]),
    chance: (p) => next() < p,
  }
}
