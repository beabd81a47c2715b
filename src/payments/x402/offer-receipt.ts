// x402 `offer-receipt` (specs/extensions/extension-offer-and-receipt.md), EIP-712 format: each 402
// carries a signed offer of its accepts[] entry, and each settled x402 v2 payment a signed receipt
// in PAYMENT-RESPONSE `extensions["offer-receipt"]`. Payloads, EIP-712 domains and types are the
// ones @x402/extensions/offer-receipt 2.27 signs with (hashed here with viem: importing that
// module costs ~70 ms of start-up for jose and DID resolution we do not use); tests check that
// its verifyOfferSignatureEIP712 / verifyReceiptSignatureEIP712 recover our signer and that our
// signatures equal its signOfferEIP712 / signReceiptEIP712. We sign the hash synchronously
// (libsecp256k1 via tiny-secp256k1; the same RFC 6979 signature viem would make) because a 402 is
// built synchronously, and cache each offer until shortly before it expires.
//
// Keys: OFFER_RECEIPT_SIGNING_KEY is a ring of secp256k1 private keys, the first signs; every
// address of the ring is published (signerAddresses) so offers and receipts signed before a
// rotation still verify. Unset, one key is generated once and kept in service_meta (shared by
// replicas, like MPP_SECRET_KEY).
import { randomBytes } from 'node:crypto'
import type { EIP712SignedOffer, EIP712SignedReceipt, OfferPayload, ReceiptPayload } from '@x402/extensions/offer-receipt'
import type { PaymentRequirements } from '@x402/core/types'
import * as tiny from 'tiny-secp256k1'
import { type Address, type Hex, bytesToHex, hashTypedData, hexToBytes } from 'viem'
import type { Db } from '../../platform/db/index.ts'
import { generatedOnce } from '../../platform/db/service-meta.ts'
import { addressOfPrivateKey } from './recover.ts'

export const OFFER_RECEIPT_KEY = 'offer-receipt'
// The extension's EIP-712 domains and types (createOfferDomain, OFFER_TYPES, RECEIPT_TYPES).
const OFFER_DOMAIN = { name: 'x402 offer', version: '1', chainId: 1 } as const
const RECEIPT_DOMAIN = { name: 'x402 receipt', version: '1', chainId: 1 } as const
const OFFER_TYPES = {
  Offer: [
    { name: 'version', type: 'uint256' },
    { name: 'resourceUrl', type: 'string' },
    { name: 'scheme', type: 'string' },
    { name: 'network', type: 'string' },
    { name: 'asset', type: 'string' },
    { name: 'payTo', type: 'string' },
    { name: 'amount', type: 'string' },
    { name: 'validUntil', type: 'uint256' },
  ],
} as const
const RECEIPT_TYPES = {
  Receipt: [
    { name: 'version', type: 'uint256' },
    { name: 'network', type: 'string' },
    { name: 'resourceUrl', type: 'string' },
    { name: 'payer', type: 'string' },
    { name: 'issuedAt', type: 'uint256' },
    { name: 'transaction', type: 'string' },
  ],
} as const

export function hashOffer(payload: OfferPayload): Hex {
  const message = { ...payload, version: BigInt(payload.version), validUntil: BigInt(payload.validUntil) }
  return hashTypedData({ domain: OFFER_DOMAIN, types: OFFER_TYPES, primaryType: 'Offer', message })
}

export function hashReceipt(payload: ReceiptPayload): Hex {
  const message = { ...payload, version: BigInt(payload.version), issuedAt: BigInt(payload.issuedAt) }
  return hashTypedData({ domain: RECEIPT_DOMAIN, types: RECEIPT_TYPES, primaryType: 'Receipt', message })
}
/** The offer-receipt payload version we sign (spec v1). */
const PAYLOAD_VERSION = 1
/** An offer is re-signed when less than this is left of its validity. */
const OFFER_REFRESH_MARGIN_SECONDS = 60
const OFFER_CACHE_MAX = 2000
const PRIVATE_KEY_RE = /^0x[0-9a-fA-F]{64}$/

// The extension's own info schemas (not exported by the package; copied from its source, v2.27).
const OFFER_SCHEMA = {
  $schema: 'https://json-schema.org/draft/2020-12/schema',
  type: 'object',
  properties: {
    offers: {
      type: 'array',
      items: {
        type: 'object',
        properties: {
          format: { type: 'string' },
          acceptIndex: { type: 'integer' },
          payload: {
            type: 'object',
            properties: {
              version: { type: 'integer' },
              resourceUrl: { type: 'string' },
              scheme: { type: 'string' },
              network: { type: 'string' },
              asset: { type: 'string' },
              payTo: { type: 'string' },
              amount: { type: 'string' },
              validUntil: { type: 'integer' },
            },
            required: ['version', 'resourceUrl', 'scheme', 'network', 'asset', 'payTo', 'amount'],
          },
          signature: { type: 'string' },
        },
        required: ['format', 'signature'],
      },
    },
  },
  required: ['offers'],
} as const

const RECEIPT_SCHEMA = {
  $schema: 'https://json-schema.org/draft/2020-12/schema',
  type: 'object',
  properties: {
    receipt: {
      type: 'object',
      properties: {
        format: { type: 'string' },
        payload: {
          type: 'object',
          properties: {
            version: { type: 'integer' },
            network: { type: 'string' },
            resourceUrl: { type: 'string' },
            payer: { type: 'string' },
            issuedAt: { type: 'integer' },
            transaction: { type: 'string' },
          },
          required: ['version', 'network', 'resourceUrl', 'payer', 'issuedAt'],
        },
        signature: { type: 'string' },
      },
      required: ['format', 'signature'],
    },
  },
  required: ['receipt'],
} as const

/** Parses OFFER_RECEIPT_SIGNING_KEY's comma-separated ring; throws on anything but 0x + 32 bytes. */
export function parseSigningKeys(value: string): Hex[] {
  const keys = value.split(',').map((key) => key.trim())
  if (keys.length === 0 || keys.some((key) => !PRIVATE_KEY_RE.test(key))) {
    throw new RangeError('OFFER_RECEIPT_SIGNING_KEY: comma-separated 0x-prefixed 32-byte hex private keys')
  }
  return keys as Hex[]
}

/** The signing ring: configured, or one key generated once and kept in service_meta. */
export async function offerReceiptKeys(db: Db, configured: Hex[] | undefined): Promise<Hex[]> {
  if (configured && configured.length > 0) return configured
  const value = await generatedOnce(db, 'offer_receipt_signing_key', () => `0x${randomBytes(32).toString('hex')}`)
  if (!PRIVATE_KEY_RE.test(value)) throw new Error('offer_receipt_signing_key in service_meta is not a private key')
  return [value as Hex]
}

export interface OfferReceiptSigner {
  /** `did:pkh:eip155:1:<address>` of the active key (EIP-712 domain chain id 1). */
  kid: string
  /** Every address of the ring, active first: what verifiers accept. */
  signerAddresses: Address[]
  /** `extensions["offer-receipt"]` of a 402: one signed offer per accepts[] entry. */
  offers(resourceUrl: string, accepts: PaymentRequirements[]): { info: { offers: EIP712SignedOffer[] }; schema: typeof OFFER_SCHEMA }
  /** `extensions["offer-receipt"]` of a settlement response. */
  receipt(input: { resourceUrl: string; payer: string; network: string; transaction?: string }): { info: { receipt: EIP712SignedReceipt }; schema: typeof RECEIPT_SCHEMA }
}

function signDigest(digest: Hex, key: Uint8Array): Hex {
  const { signature, recoveryId } = tiny.signRecoverable(hexToBytes(digest), key)
  const out = new Uint8Array(65)
  out.set(signature, 0)
  out[64] = 27 + recoveryId
  return bytesToHex(out)
}

export function createOfferReceiptSigner(keys: Hex[], options: { now: () => number; offerValiditySeconds: number }): OfferReceiptSigner {
  if (keys.length === 0) throw new RangeError('at least one offer-receipt signing key is needed')
  const active = hexToBytes(keys[0] as Hex)
  const signerAddresses = keys.map((key) => addressOfPrivateKey(key))
  const cache = new Map<string, EIP712SignedOffer>()
  const nowSeconds = () => Math.floor(options.now() / 1000)

  function offer(resourceUrl: string, requirements: PaymentRequirements, acceptIndex: number): EIP712SignedOffer {
    const cacheKey = `${acceptIndex}|${resourceUrl}|${requirements.scheme}|${requirements.network}|${requirements.asset}|${requirements.payTo}|${requirements.amount}`
    const now = nowSeconds()
    const cached = cache.get(cacheKey)
    if (cached && cached.payload.validUntil - now > OFFER_REFRESH_MARGIN_SECONDS) return cached
    const payload: OfferPayload = {
      version: PAYLOAD_VERSION,
      resourceUrl,
      scheme: requirements.scheme,
      network: requirements.network,
      asset: requirements.asset,
      payTo: requirements.payTo,
      amount: requirements.amount,
      validUntil: now + options.offerValiditySeconds,
    }
    const signed: EIP712SignedOffer = { format: 'eip712', acceptIndex, payload, signature: signDigest(hashOffer(payload), active) }
    cache.delete(cacheKey)
    if (cache.size >= OFFER_CACHE_MAX) cache.delete(cache.keys().next().value as string)
    cache.set(cacheKey, signed)
    return signed
  }

  return {
    kid: `did:pkh:eip155:1:${signerAddresses[0]}`,
    signerAddresses,
    offers(resourceUrl, accepts) {
      return { info: { offers: accepts.map((requirements, index) => offer(resourceUrl, requirements, index)) }, schema: OFFER_SCHEMA }
    },
    receipt({ resourceUrl, payer, network, transaction }) {
      const payload: ReceiptPayload = { version: PAYLOAD_VERSION, network, resourceUrl, payer, issuedAt: nowSeconds(), transaction: transaction ?? '' }
      return { info: { receipt: { format: 'eip712', payload, signature: signDigest(hashReceipt(payload), active) } }, schema: RECEIPT_SCHEMA }
    },
  }
}
