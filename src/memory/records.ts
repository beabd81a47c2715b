// A memory record as stored: every field sealed under the owner's data key, bound to the record id
// and field name, plus the blind index (keyed MACs of context, tags and stemmed terms). The only
// code that turns plaintext into a row and back.
import { createHmac } from 'node:crypto'
import type { BlindTerms, IndexedRecord, OwnerKeys } from './types.ts'
import { blindTerms, blindValue, packBlindTerms, unpackBlindTerms } from './search/blind-index.ts'
import { normalizeForMac, termsOf } from './search/text.ts'

export interface RecordInput {
  content: string
  context?: string | null | undefined
  tags?: string[] | undefined
  metadata?: Record<string, unknown> | undefined
}

/** The columns of memory_records that carry content (ciphertexts and MACs). */
export interface SealedRecord {
  dek_version: number
  content_ct: Buffer
  context_ct: Buffer | null
  tags_ct: Buffer | null
  metadata_ct: Buffer | null
  vector_ct: Buffer | null
  context_mac: Buffer | null
  tag_macs: Buffer[]
  blind_terms: Buffer
  doc_length: number
  content_mac: Buffer
}

const utf8 = (text: string) => Buffer.from(text, 'utf8')

/** The owner-keyed MAC of a content's normalised text (dedupe within one owner only). */
export function contentMac(keys: OwnerKeys, content: string): Buffer {
  return createHmac('sha256', keys.dedupeKey).update(normalizeForMac(content)).digest()
}

/** The owner-keyed MAC of a request body (idempotent retries compare it; equal bodies only). */
export function requestMac(keys: OwnerKeys, canonicalBody: string): string {
  return createHmac('sha256', keys.dedupeKey).update('request:').update(canonicalBody).digest('hex')
}

export function vectorBytes(vector: Float32Array): Buffer {
  return Buffer.from(vector.buffer, vector.byteOffset, vector.byteLength)
}

export function sealRecord(keys: OwnerKeys, id: string, input: RecordInput, vector: Float32Array | null): SealedRecord {
  const { cipher, blindKey } = keys
  const context = input.context ?? null
  const tags = input.tags ?? []
  const blind = blindTerms(blindKey, termsOf(input.content))
  return {
    dek_version: cipher.dekVersion,
    content_ct: cipher.encrypt('content', id, utf8(input.content)),
    context_ct: context === null ? null : cipher.encrypt('context', id, utf8(context)),
    tags_ct: tags.length === 0 ? null : cipher.encrypt('tags', id, utf8(JSON.stringify(tags))),
    metadata_ct: input.metadata === undefined ? null : cipher.encrypt('metadata', id, utf8(JSON.stringify(input.metadata))),
    vector_ct: vector === null ? null : cipher.encrypt('vector', id, vectorBytes(vector)),
    context_mac: context === null ? null : blindValue(blindKey, 'context', context),
    tag_macs: tags.map((tag) => blindValue(blindKey, 'tag', tag)),
    blind_terms: packBlindTerms(blind),
    doc_length: blind.length,
    content_mac: contentMac(keys, input.content),
  }
}

/** The plaintext of a row's sealed fields. */
export interface OpenedRecord {
  content: string
  context: string | null
  tags: string[]
  metadata: Record<string, unknown>
}

export function openRecord(keys: OwnerKeys, row: { id: string; content_ct: Buffer; context_ct: Buffer | null; tags_ct: Buffer | null; metadata_ct: Buffer | null }): OpenedRecord {
  const { cipher } = keys
  return {
    content: cipher.decrypt('content', row.id, row.content_ct).toString('utf8'),
    context: row.context_ct === null ? null : cipher.decrypt('context', row.id, row.context_ct).toString('utf8'),
    tags: row.tags_ct === null ? [] : (JSON.parse(cipher.decrypt('tags', row.id, row.tags_ct).toString('utf8')) as string[]),
    metadata: row.metadata_ct === null ? {} : (JSON.parse(cipher.decrypt('metadata', row.id, row.metadata_ct).toString('utf8')) as Record<string, unknown>),
  }
}

/** A row as the recall index holds it: MACs as hex, the vector decrypted (only for the current embedder). */
export function indexedRecordOf(
  keys: OwnerKeys,
  row: { seq: bigint; id: string; kind: 'raw' | 'derived'; context_mac: Buffer | null; tag_macs: Buffer[]; blind_terms: Buffer; vector_ct: Buffer | null; embedder: string },
  embedderId: string,
  dims: number,
): IndexedRecord {
  let vector: Float32Array | null = null
  if (row.vector_ct !== null && row.embedder === embedderId) {
    const bytes = keys.cipher.decrypt('vector', row.id, row.vector_ct)
    if (bytes.byteLength === dims * 4) {
      // Copy into an aligned buffer: the decrypted Buffer may sit at any offset of a pool.
      vector = new Float32Array(dims)
      new Uint8Array(vector.buffer).set(bytes)
    }
  }
  const blind: BlindTerms = unpackBlindTerms(row.blind_terms)
  return {
    seq: Number(row.seq),
    id: row.id,
    kind: row.kind,
    context: row.context_mac === null ? null : row.context_mac.toString('hex'),
    tags: row.tag_macs.map((mac) => mac.toString('hex')),
    blind,
    vector,
  }
}

/** The blind-index filters of a recall (hex MACs, as the index holds them). */
export function filterMacs(keys: OwnerKeys, filters: { context?: string | undefined; tags?: string[] | undefined }): { context?: string; tags?: string[] } {
  return {
    ...(filters.context === undefined ? {} : { context: blindValue(keys.blindKey, 'context', filters.context).toString('hex') }),
    ...(filters.tags === undefined || filters.tags.length === 0 ? {} : { tags: filters.tags.map((tag) => blindValue(keys.blindKey, 'tag', tag).toString('hex')) }),
  }
}

/** The blind MACs of a query's terms (each distinct term once). */
export function queryTerms(keys: OwnerKeys, query: string): string[] {
  return [...blindTerms(keys.blindKey, termsOf(query)).terms.keys()]
}
