// The blind index: what the database and the in-process index hold instead of words. Each term is
// HMAC-SHA256'd under the owner's blind-index key and truncated to 96 bits, so equal terms of one
// owner match and nothing else can be read from it. Known leak (documented): it reveals which
// records of one owner share terms, and how often a term occurs (tf, length).
import { createHash, createHmac, type Hash } from 'node:crypto'
import type { BlindTerms } from '../types.ts'
import { normalizeForMac } from './text.ts'

/** Bytes of a term MAC (96 bits: no collisions within any owner's vocabulary worth mentioning). */
export const TERM_MAC_BYTES = 12
/** Bytes of a context/tag MAC. */
export const VALUE_MAC_BYTES = 16

const TERM_MAC_HEX = /^[0-9a-f]{24}$/
const PACK_VERSION = 1
const HEADER_BYTES = 5 // version u8 | length u32be
const ENTRY_BYTES = TERM_MAC_BYTES + 2 // mac | tf u16be
const TF_MAX = 0xffff

// HMAC-SHA256 from precomputed pad states: H((K ⊕ opad) ‖ H((K ⊕ ipad) ‖ m)) (RFC 2104), each pad
// hashed once per key and copied per term. createHmac re-imports the key on every call: ~19 µs
// per term against ~6 µs here, which is most of a write's blind-index cost.
interface PadStates {
  inner: Hash
  outer: Hash
}
const padStates = new WeakMap<Buffer, PadStates>()

function padsOf(blindKey: Buffer): PadStates {
  let pads = padStates.get(blindKey)
  if (pads === undefined) {
    const block = Buffer.alloc(64) // SHA-256's block; a longer key is hashed first, a shorter one zero-padded
    ;(blindKey.length > 64 ? createHash('sha256').update(blindKey).digest() : blindKey).copy(block)
    const pad = (byte: number): Hash => createHash('sha256').update(block.map((b) => b ^ byte))
    pads = { inner: pad(0x36), outer: pad(0x5c) }
    block.fill(0)
    padStates.set(blindKey, pads)
  }
  return pads
}

function mac(pads: PadStates, term: string): string {
  const inner = pads.inner.copy().update(term, 'utf8').digest()
  return pads.outer.copy().update(inner).digest().subarray(0, TERM_MAC_BYTES).toString('hex')
}

/** Hex MAC of one term (already normalised and stemmed: see termsOf). */
export function termMac(blindKey: Buffer, term: string): string {
  return mac(padsOf(blindKey), term)
}

/** The blind index of a record's terms (termsOf output): MAC → tf, and the length in terms. */
export function blindTerms(blindKey: Buffer, terms: string[]): BlindTerms {
  // Count first: one HMAC per distinct term, not per occurrence.
  const counts = new Map<string, number>()
  for (const term of terms) counts.set(term, (counts.get(term) ?? 0) + 1)
  const pads = padsOf(blindKey)
  const out = new Map<string, number>()
  for (const [term, tf] of counts) out.set(mac(pads, term), tf)
  return { terms: out, length: terms.length }
}

/** MACs of a query's terms, repeats kept (RecallQuery.terms). */
export function blindQueryTerms(blindKey: Buffer, terms: string[]): string[] {
  const pads = padsOf(blindKey)
  const macs = new Map<string, string>()
  return terms.map((term) => {
    let hex = macs.get(term)
    if (hex === undefined) macs.set(term, (hex = mac(pads, term)))
    return hex
  })
}

/**
 * MAC of an exact-match filter value. The kind is bound in ("context:" / "tag:"), so a tag never
 * matches a context of the same text; the value is normalised (NFKC, trimmed) first.
 */
export function blindValue(blindKey: Buffer, kind: 'context' | 'tag', value: string): Buffer {
  return createHmac('sha256', blindKey)
    .update(`${kind}:${normalizeForMac(value)}`, 'utf8')
    .digest()
    .subarray(0, VALUE_MAC_BYTES)
}

/**
 * Compact binary form: version(1) | length u32be | entries sorted by MAC, each mac(12) | tf u16be.
 * Canonical (sorted), so equal indexes pack to equal bytes. A tf above 65,535 is stored as 65,535.
 */
export function packBlindTerms(b: BlindTerms): Buffer {
  if (!Number.isInteger(b.length) || b.length < 0 || b.length > 0xffffffff) throw new RangeError(`blind index length out of range: ${b.length}`)
  const macs = [...b.terms.keys()].sort()
  const buf = Buffer.allocUnsafe(HEADER_BYTES + macs.length * ENTRY_BYTES)
  buf.writeUInt8(PACK_VERSION, 0)
  buf.writeUInt32BE(b.length, 1)
  let offset = HEADER_BYTES
  for (const mac of macs) {
    const tf = b.terms.get(mac)!
    if (!TERM_MAC_HEX.test(mac)) throw new RangeError('blind index term is not a 12-byte lowercase hex MAC')
    if (!Number.isInteger(tf) || tf < 1) throw new RangeError(`blind index tf must be a positive integer, got ${tf}`)
    buf.write(mac, offset, TERM_MAC_BYTES, 'hex')
    buf.writeUInt16BE(Math.min(tf, TF_MAX), offset + TERM_MAC_BYTES)
    offset += ENTRY_BYTES
  }
  return buf
}

/** Inverse of packBlindTerms. Throws on anything it would not have written. */
export function unpackBlindTerms(buf: Uint8Array): BlindTerms {
  if (buf.length < HEADER_BYTES || (buf.length - HEADER_BYTES) % ENTRY_BYTES !== 0) throw new RangeError(`malformed blind index: ${buf.length} bytes`)
  const view = Buffer.from(buf.buffer, buf.byteOffset, buf.byteLength)
  if (view[0] !== PACK_VERSION) throw new RangeError(`unknown blind index version ${view[0]}`)
  const length = view.readUInt32BE(1)
  const terms = new Map<string, number>()
  let total = 0
  let previous = ''
  for (let offset = HEADER_BYTES; offset < view.length; offset += ENTRY_BYTES) {
    const mac = view.toString('hex', offset, offset + TERM_MAC_BYTES)
    const tf = view.readUInt16BE(offset + TERM_MAC_BYTES)
    // Strictly ascending MACs: the canonical order, and no duplicates.
    if (mac <= previous) throw new RangeError('malformed blind index: terms not in strictly ascending order')
    if (tf === 0) throw new RangeError('malformed blind index: zero tf')
    previous = mac
    total += tf
    terms.set(mac, tf)
  }
  // Clamped tfs only ever shrink the sum, so it never exceeds the length.
  if (total > length) throw new RangeError(`malformed blind index: tf sum ${total} exceeds length ${length}`)
  return { terms, length }
}
