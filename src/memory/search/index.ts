// The memory service's search side: text → terms, the blind index, and the per-owner recall index.
export { BM25_B, BM25_K1, Bm25Index } from './bm25.ts'
export { blindQueryTerms, blindTerms, blindValue, packBlindTerms, TERM_MAC_BYTES, termMac, unpackBlindTerms, VALUE_MAC_BYTES } from './blind-index.ts'
export { type Fused, reciprocalRankFusion } from './fusion.ts'
export { createOwnerIndex } from './owner-index.ts'
export { MAX_TOKEN_LENGTH, normalizeForMac, normalizeText, stemToken, termsOf, tokensOf } from './text.ts'
export { type Ranked, TopK } from './top-k.ts'
export { EXACT_BELOW, exactTopK, MAX_CANDIDATE_SHARE, MIN_CANDIDATES, NARROW_TO, REACH_SIGMAS, type VectorSearchOptions, VectorStore } from './vectors.ts'
