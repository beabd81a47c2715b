// The memory service's ports, shared by its parts: keys and ciphers (crypto/), text and the
// blind index (search/), embedders (embeddings/), the per-owner recall index (search/), and
// dreaming (dreaming/). The service (service.ts) composes them over the database.
import type { Queryable } from '../platform/db/index.ts'
import type { DreamModelSize } from './limits.ts'

/** A lowercase 0x wallet, or `agent:<agentId>` for a plan holder (marketplace rail). */
export type OwnerId = string

// ------------------------------------------------------------------ keys and ciphers

/** The fields encrypted per record; each is bound to (owner, record id, field) as AAD. */
export type FieldName = 'content' | 'context' | 'tags' | 'metadata' | 'vector'

/** AES-256-GCM under one owner's data key. */
export interface FieldCipher {
  readonly dekVersion: number
  /** version(1) | dek_version(2) | nonce(12) | ciphertext | tag(16). */
  encrypt(field: FieldName, recordId: string, plaintext: Uint8Array): Buffer
  /** Throws on any tampering, on a ciphertext moved to another record/field/owner, or on a short tag. */
  decrypt(field: FieldName, recordId: string, ciphertext: Uint8Array): Buffer
}

/** Everything derived from one owner's data key (kept in process memory only, never logged). */
export interface OwnerKeys {
  owner: OwnerId
  cipher: FieldCipher
  /** HMAC key of the blind index (terms, context, tags). */
  blindKey: Buffer
  /** HMAC key of content dedupe (equal text of the same owner only). */
  dedupeKey: Buffer
}

/** Key-encryption keys by id (configuration: a Secret in the chart, a 0600 file in the embedded default). */
export interface KeyRing {
  /** The id configured as active (the database's memory_kek_state wins once set). */
  readonly activeId: string
  ids(): string[]
  /** The 32-byte key, or undefined if this ring lacks it (callers may reload() and retry once). */
  key(id: string): Buffer | undefined
  /** Re-reads the ring's source (a rotated Secret file). */
  reload(): Promise<void>
}

export interface OwnerKeyStore {
  /**
   * The owner's keys: unwrapped from memory_owner_keys (cached in process), or, with `create`,
   * a fresh data key wrapped under the active KEK and inserted (the memory_owners row must exist;
   * pass the caller's transaction so the insert commits with the first record).
   * Undefined when the owner has no key and create is false.
   */
  keysOf(q: Queryable, owner: OwnerId, options?: { create?: boolean }): Promise<OwnerKeys | undefined>
  /** Forget cached keys (tests, rotation). */
  clear(): void
}

// ------------------------------------------------------------------ text and the blind index

/** A record's blind index: term MAC (hex) → term frequency, and the length in terms. */
export interface BlindTerms {
  terms: Map<string, number>
  length: number
}

// ------------------------------------------------------------------ embeddings

export type EmbeddingMode = 'upstream' | 'local-model' | 'lexical'

export interface EmbeddingResult {
  /** Unit-length vectors, one per input, `dims` long. */
  vectors: Float32Array[]
  /** Input tokens the provider reported (upstream usage); undefined = count them ourselves. */
  tokens?: number | undefined
}

export interface Embedder {
  /** Stable id stored with each vector (vectors of different embedders are never compared). */
  readonly id: string
  readonly mode: EmbeddingMode
  readonly dims: number
  /** Human description for /readyz and the account (e.g. "lexical-semantic: hashed character n-grams"). */
  readonly description: string
  embed(texts: string[], options?: { signal?: AbortSignal }): Promise<EmbeddingResult>
  close?(): Promise<void>
}

// ------------------------------------------------------------------ the recall index (in process)

/** One record as the in-process index holds it (no plaintext). */
export interface IndexedRecord {
  seq: number
  id: string
  kind: 'raw' | 'derived'
  /** hex MAC of the context, or null. */
  context: string | null
  /** hex MACs of the tags. */
  tags: string[]
  blind: BlindTerms
  /** Unit vector of the record's embedder, or null when it was embedded by another embedder. */
  vector: Float32Array | null
}

export interface RecallQuery {
  /** Blind term MACs of the query (repeats allowed). */
  terms: string[]
  vector: Float32Array | null
  context?: string | undefined
  /** Every one of these tag MACs must be present. */
  tags?: string[] | undefined
  limit: number
}

export interface RecallHit {
  id: string
  /** Fused score (reciprocal rank fusion): comparable within one response, higher is better. */
  score: number
  lexicalRank: number | null
  vectorRank: number | null
}

export interface OwnerIndex {
  readonly dims: number
  /** Records held, and the highest seq among them (the next load asks for seq > this). */
  readonly size: number
  readonly maxSeq: number
  /** Adds records in seq order (seq > maxSeq). */
  add(records: IndexedRecord[]): void
  search(query: RecallQuery): RecallHit[]
  /** Approximate bytes held (for the bounded cache). */
  bytes(): number
}

// ------------------------------------------------------------------ dreaming

export interface ChatMessage {
  role: 'system' | 'user' | 'assistant'
  content: string
}

export interface ChatModel {
  readonly id: string
  readonly size: DreamModelSize
  complete(messages: ChatMessage[], options: { maxTokens: number; signal?: AbortSignal }): Promise<{ text: string; inputTokens: number; outputTokens: number }>
}

/** A batch of an owner's raw records to consolidate (decrypted only for the model call). */
export interface DreamBatch {
  owner: OwnerId
  /** Idempotency key of the batch (the sources' ids, hashed). */
  batchKey: string
  /** Highest source seq: the owner's dreamed_seq after the batch is committed. */
  uptoSeq: number
  sources: { id: string; content: string; createdAt: Date }[]
}

export interface DerivedMemory {
  content: string
  /** Ids of the batch's sources this statement was derived from (at least one). */
  derivedFrom: string[]
}

export type DreamOutcome = 'written' | 'duplicate' | 'over_budget' | 'empty'

/** What dreaming needs from the memory service (implemented by service.ts). */
export interface DreamHost {
  /** Owners with raw records past their dreamed_seq, at most `limit`. */
  ownersToDream(limit: number): Promise<OwnerId[]>
  /** The owner's next batch of raw records (kind raw only; never derived ones), or undefined. */
  nextBatch(owner: OwnerId, max: number): Promise<DreamBatch | undefined>
  /** What the owner can still spend on dreaming: null = unmetered (marketplace rail: included). */
  budgetMicros(owner: OwnerId): Promise<bigint | null>
  /**
   * Writes the batch's derived records (encrypted, embedded, indexed) and its charge, once per
   * (owner, batchKey): a second commit of the same batch is 'duplicate' and writes nothing; a
   * charge above the budget writes nothing but the batch row ('over_budget').
   */
  commitDream(
    batch: DreamBatch,
    derived: DerivedMemory[],
    usage: { model: string; size: DreamModelSize; inputTokens: number; outputTokens: number; costMicros: bigint },
  ): Promise<DreamOutcome>
}
