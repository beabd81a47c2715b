// EIP-712 digest of USDC's EIP-3009 `TransferWithAuthorization` on Base, computed directly:
// the domain separator is computed once by viem; per request only the struct is ABI-encoded and
// hashed with viem's keccak256. viem `hashTypedData` on the same message costs ~100 µs (it
// re-validates and re-encodes the domain and every field through generic code), which is more than
// the native signature recovery itself; this is ~20 µs. test/unit/x402.test.ts checks it equals
// `hashTypedData` for many random messages and edge values.
import { domainSeparator, keccak256, stringToBytes, toHex } from 'viem'
import type { Hex } from 'viem'
import { BASE_CHAIN_ID, TRANSFER_WITH_AUTHORIZATION_FIELDS, USDC_BASE_ADDRESS, USDC_EIP712 } from '../networks.ts'
import type { TransferAuthorization } from '../types.ts'

export { BASE_CHAIN_ID }

export const USDC_DOMAIN = {
  name: USDC_EIP712.name,
  version: USDC_EIP712.version,
  chainId: BASE_CHAIN_ID,
  verifyingContract: USDC_BASE_ADDRESS,
} as const

/** Same as `authorizationTypes` of `@x402/evm` (and the USDC contract). */
export const TRANSFER_WITH_AUTHORIZATION_TYPES = { TransferWithAuthorization: TRANSFER_WITH_AUTHORIZATION_FIELDS } as const

export type { TransferAuthorization }

const TYPE_HASH_HEX = keccak256(stringToBytes('TransferWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)')).slice(2)
// 0x1901 ‖ domainSeparator ‖ (structHash goes in the last 32 bytes)
const DIGEST_PREFIX = Buffer.from(`1901${domainSeparator({ domain: USDC_DOMAIN }).slice(2)}`, 'hex')
const ADDRESS_PAD = '000000000000000000000000'
const UINT256_MAX = (1n << 256n) - 1n

function word(n: bigint): string {
  if (n < 0n || n > UINT256_MAX) throw new RangeError('uint256 out of range')
  return n.toString(16).padStart(64, '0')
}

/**
 * `hashTypedData({domain: USDC_DOMAIN, types: TRANSFER_WITH_AUTHORIZATION_TYPES, primaryType:
 * 'TransferWithAuthorization', message})` as 32 bytes. Inputs must already be shape-checked
 * (`0x` + 40 / 64 hex digits, uint256 range), as `decodeX402Proof` guarantees.
 */
export function transferWithAuthorizationDigest(a: TransferAuthorization): Uint8Array {
  const struct = TYPE_HASH_HEX + ADDRESS_PAD + a.from.slice(2) + ADDRESS_PAD + a.to.slice(2) + word(a.value) + word(a.validAfter) + word(a.validBefore) + a.nonce.slice(2)
  if (struct.length !== 448) throw new RangeError('authorization fields are not 20/32-byte hex')
  const buf = Buffer.allocUnsafe(66)
  DIGEST_PREFIX.copy(buf, 0)
  buf.set(keccak256(Buffer.from(struct, 'hex'), 'bytes'), 34)
  return keccak256(buf, 'bytes')
}

/** Hex form of {@link transferWithAuthorizationDigest} (for tests and logs). */
export function transferWithAuthorizationDigestHex(a: TransferAuthorization): Hex {
  return toHex(transferWithAuthorizationDigest(a))
}
