// secp256k1 public-key recovery for EOA signatures (and a key's address), on the fastest backend
// that loads:
//   native — `secp256k1` (N-API binding of libsecp256k1; the npm tarball ships prebuilt
//            linux-x64 glibc/musl, darwin-arm64 and win32-x64 binaries, loaded by node-gyp-build
//            at run time: no compiler, no install script, no network). ~60 µs/op.
//   wasm   — `tiny-secp256k1` (libsecp256k1 compiled to WebAssembly; runs everywhere). ~250 µs/op.
// viem's `recoverAddress` (noble, pure JS) is ~1400 µs/op and blocks the event loop that long.
// We load `secp256k1/bindings` directly: the package's main entry silently falls back to the
// pure-JS `elliptic` when the binding is missing, which we must not mistake for the native path.
import { createRequire } from 'node:module'
import * as tiny from 'tiny-secp256k1'
import { getAddress, keccak256, type Address, type Hex } from 'viem'

/** 65-byte uncompressed public key (0x04 ‖ X ‖ Y), or null when nothing recovers. */
export type RecoverPublicKey = (digest: Uint8Array, sig64: Uint8Array, recoveryId: 0 | 1) => Uint8Array | null
export type RecoveryBackendName = 'native' | 'wasm'

interface NativeSecp256k1 {
  ecdsaRecover(sig: Uint8Array, recid: number, msg32: Uint8Array, compressed: boolean): Uint8Array
  publicKeyCreate(seckey: Uint8Array, compressed: boolean): Uint8Array
}

function loadAddon(): NativeSecp256k1 | undefined {
  try {
    return createRequire(import.meta.url)('secp256k1/bindings') as NativeSecp256k1
  } catch {
    return undefined
  }
}

const addon = loadAddon()

function loadNative(): RecoverPublicKey | undefined {
  if (addon === undefined) return undefined
  return (digest, sig64, recoveryId) => {
    try {
      return addon.ecdsaRecover(sig64, recoveryId, digest, false)
    } catch {
      return null
    }
  }
}

const wasmRecover: RecoverPublicKey = (digest, sig64, recoveryId) => {
  try {
    return tiny.recover(digest, sig64, recoveryId, false)
  } catch {
    return null
  }
}

const nativeRecover = loadNative()

/** Every backend that loaded here (tests cross-check each one against viem). */
export const recoveryBackends: Partial<Record<RecoveryBackendName, RecoverPublicKey>> = {
  ...(nativeRecover ? { native: nativeRecover } : {}),
  wasm: wasmRecover,
}

/** The backend `recoverSigner` uses: native when its binary loaded, else WASM. */
export const recoveryBackend: RecoveryBackendName = nativeRecover ? 'native' : 'wasm'
const activeRecover: RecoverPublicKey = nativeRecover ?? wasmRecover

// secp256k1 group order / 2: signatures with a larger s are malleable twins, and USDC's
// ECRecover rejects them on-chain, so they would never settle.
const HALF_N = Buffer.from('7fffffffffffffffffffffffffffffff5d576e7357a4501ddfe92f46681b20a0', 'hex')

/**
 * Address (lowercase `0x…`) that produced the 65-byte `r ‖ s ‖ v` signature over `digest`, or null
 * for anything that is not a valid low-s EOA signature (v ∈ {27, 28, 0, 1}). Contract-wallet
 * signatures (ERC-1271 / ERC-6492, any other length) need the chain and are not handled here.
 */
export function recoverSigner(digest: Uint8Array, signature: Uint8Array, recover: RecoverPublicKey = activeRecover): string | null {
  if (digest.length !== 32 || signature.length !== 65) return null
  const v = signature[64]!
  const recoveryId = v === 27 || v === 0 ? 0 : v === 28 || v === 1 ? 1 : -1
  if (recoveryId < 0) return null
  if (Buffer.compare(signature.subarray(32, 64), HALF_N) > 0) return null
  const pub = recover(digest, signature.subarray(0, 64), recoveryId as 0 | 1)
  if (pub?.length !== 65) return null
  return `0x${Buffer.from(keccak256(pub.subarray(1), 'bytes').subarray(12)).toString('hex')}`
}

/**
 * The checksummed address of a private key, derived on the same backend as recovery. viem's
 * privateKeyToAddress (noble, pure JS) first builds its precomputed tables for the generator,
 * ~50-90 ms of a start; a signature needs them anyway, so a signer is built when it first signs.
 */
export function addressOfPrivateKey(privateKey: Hex): Address {
  const secret = Buffer.from(privateKey.slice(2), 'hex')
  if (secret.length !== 32) throw new TypeError('a private key is 32 bytes of hex')
  let pub: Uint8Array | null
  try {
    pub = addon ? addon.publicKeyCreate(secret, false) : tiny.pointFromScalar(secret, false)
  } catch {
    pub = null // zero, or not below the group order
  }
  if (pub?.length !== 65) throw new TypeError('not a valid secp256k1 private key')
  return getAddress(`0x${Buffer.from(keccak256(pub.subarray(1), 'bytes').subarray(12)).toString('hex')}`)
}
