// An in-memory USDC (EIP-3009) for tests and benchmarks, with two faces on the SAME token state:
//   - memoryChain(token):              our ChainPort (what the payment guard settles through);
//   - memoryFacilitatorSigner(token):  the FacilitatorEvmSigner the reference x402 facilitator
//                                      (@x402/evm ExactEvmScheme) reads and writes through.
// Settlement is instant: a transferWithAuthorization checks the validity window, the nonce and the
// balance exactly as TestUSDC / FiatTokenV2 do (same revert strings), moves the funds and marks the
// nonce used. Signatures are NOT re-checked by default (verifySignatures: true turns it on): both
// servers under test recover the signer themselves before settling, and on a real chain that check
// runs in the node, not in the server process.
import { eip3009ABI } from '@x402/evm'
import type { FacilitatorEvmSigner } from '@x402/evm'
import {
  decodeFunctionData,
  encodeAbiParameters,
  encodeEventTopics,
  encodeFunctionResult,
  getAddress,
  keccak256,
  parseAbi,
  recoverTypedDataAddress,
  serializeSignature,
  toHex,
} from 'viem'
import type { Address, Hex, Log } from 'viem'
import { BASE_CHAIN_ID, BASE_USDC } from '../../src/payments/chain/usdc-abi.ts'
import type { ChainPort, SettlementResult, TransferAuthorization } from '../../src/payments/chain/types.ts'
import { TRANSFER_WITH_AUTHORIZATION_TYPES } from '../../src/payments/x402/eip712.ts'

/** Multicall3, as @x402/evm addresses it for its failure diagnostics. */
export const MULTICALL3_ADDRESS: Address = '0xcA11bde05977b3631167028862bE2a173976CA11'
const transferEvent = parseAbi(['event Transfer(address indexed from, address indexed to, uint256 value)'])

export interface MemoryUsdcOptions {
  /** Token address; default canonical Base USDC. */
  address?: Address
  chainId?: number
  /** EIP-712 domain name / version; default "USD Coin" / "2". */
  name?: string
  version?: string
  /** Clock in ms (block.timestamp); default Date.now. */
  now?: () => number
  /** Recover and compare the signer of every transferWithAuthorization (default false, see above). */
  verifySignatures?: boolean
}

export interface MemoryReceipt {
  hash: Hex
  status: 'success' | 'reverted'
  from: Address
  to: Address
  value: bigint
  logs: Log[]
}

export interface MemoryUsdc {
  readonly address: Address
  readonly chainId: number
  readonly name: string
  readonly version: string
  /** block.timestamp of the next block, in ms. */
  now(): number
  mint(to: Address, amount: bigint): void
  balanceOf(who: Address): bigint
  authorizationState(from: Address, nonce: Hex): boolean
  /** Throws Error(<USDC revert string>) when the call would revert; moves nothing. */
  checkTransferWithAuthorization(auth: TransferAuthorization, signature?: Hex): Promise<void>
  /** Applies the transfer (after the same checks) and returns the mined tx hash. */
  transferWithAuthorization(auth: TransferAuthorization, signature?: Hex): Promise<Hex>
  /** Moves `value` (reverts like USDC when short); `hash` names the mined tx (default: a fresh one). */
  transfer(from: Address, to: Address, value: bigint, hash?: Hex): Hex
  receipt(hash: Hex): MemoryReceipt | undefined
  /** The tx that used an authorization's nonce. */
  authorizationTx(from: Address, nonce: Hex): Hex | undefined
  /** Number of transfers mined (mints excluded). */
  readonly transfers: number
}

const key = (address: string): string => address.toLowerCase()

export function memoryUsdc(options: MemoryUsdcOptions = {}): MemoryUsdc {
  const address = getAddress(options.address ?? BASE_USDC)
  const chainId = options.chainId ?? BASE_CHAIN_ID
  const name = options.name ?? 'USD Coin'
  const version = options.version ?? '2'
  const now = options.now ?? Date.now
  const balances = new Map<string, bigint>()
  const used = new Set<string>()
  const receipts = new Map<string, MemoryReceipt>()
  const authorizationTxs = new Map<string, Hex>()
  let txCount = 0n
  let transfers = 0

  function move(from: Address, to: Address, value: bigint): void {
    const balance = balances.get(key(from)) ?? 0n
    if (value > balance) throw new Error('ERC20: transfer amount exceeds balance')
    balances.set(key(from), balance - value)
    balances.set(key(to), (balances.get(key(to)) ?? 0n) + value)
  }

  function mine(from: Address, to: Address, value: bigint, given?: Hex): Hex {
    txCount += 1n
    transfers += 1
    const hash = given ?? keccak256(toHex(`memory-usdc:${address}:${txCount}`))
    const log = {
      address,
      topics: encodeEventTopics({ abi: transferEvent, eventName: 'Transfer', args: { from, to } }),
      data: encodeAbiParameters([{ type: 'uint256' }], [value]),
      blockHash: hash,
      blockNumber: txCount,
      logIndex: 0,
      transactionHash: hash,
      transactionIndex: 0,
      removed: false,
    } as unknown as Log
    receipts.set(key(hash), { hash, status: 'success', from, to, value, logs: [log] })
    return hash
  }

  async function check(auth: TransferAuthorization, signature?: Hex): Promise<void> {
    const nowSec = BigInt(Math.floor(now() / 1000))
    if (!(nowSec > auth.validAfter)) throw new Error('FiatTokenV2: authorization is not yet valid')
    if (!(nowSec < auth.validBefore)) throw new Error('FiatTokenV2: authorization is expired')
    if (used.has(`${key(auth.from)}:${key(auth.nonce)}`)) throw new Error('FiatTokenV2: authorization is used or canceled')
    if (options.verifySignatures) {
      if (!signature) throw new Error('FiatTokenV2: invalid signature')
      const signer = await recoverTypedDataAddress({
        domain: { name, version, chainId, verifyingContract: address },
        types: TRANSFER_WITH_AUTHORIZATION_TYPES,
        primaryType: 'TransferWithAuthorization',
        message: auth,
        signature,
      }).catch(() => undefined)
      if (!signer || key(signer) !== key(auth.from)) throw new Error('FiatTokenV2: invalid signature')
    }
    if (auth.value > (balances.get(key(auth.from)) ?? 0n)) throw new Error('ERC20: transfer amount exceeds balance')
  }

  return {
    address,
    chainId,
    name,
    version,
    now,
    mint(to, amount) {
      balances.set(key(to), (balances.get(key(to)) ?? 0n) + amount)
    },
    balanceOf: (who) => balances.get(key(who)) ?? 0n,
    authorizationState: (from, nonce) => used.has(`${key(from)}:${key(nonce)}`),
    checkTransferWithAuthorization: check,
    async transferWithAuthorization(auth, signature) {
      await check(auth, signature)
      // No await between the checks above and these writes racing another settlement: the nonce is
      // re-checked synchronously here, as the EVM would in the block that includes the second tx.
      const nonceKey = `${key(auth.from)}:${key(auth.nonce)}`
      if (used.has(nonceKey)) throw new Error('FiatTokenV2: authorization is used or canceled')
      move(auth.from, auth.to, auth.value)
      used.add(nonceKey)
      const hash = mine(getAddress(auth.from), getAddress(auth.to), auth.value)
      authorizationTxs.set(nonceKey, hash)
      return hash
    },
    transfer(from, to, value, hash) {
      move(from, to, value)
      return mine(getAddress(from), getAddress(to), value, hash)
    },
    receipt: (hash) => receipts.get(key(hash)),
    authorizationTx: (from, nonce) => authorizationTxs.get(`${key(from)}:${key(nonce)}`),
    get transfers() {
      return transfers
    },
  }
}

/** Our chain port over the in-memory token: settles instantly, never pending. */
export function memoryChain(token: MemoryUsdc, options: { serviceAddress?: Address } = {}): ChainPort {
  const serviceAddress = getAddress(options.serviceAddress ?? '0x000000000000000000000000000000000000c0de')
  let closed = false
  let nonce = 0
  const assertOpen = (): void => {
    if (closed) throw new Error('chain port is closed')
  }
  return {
    kind: 'rpc',
    chainId: token.chainId,
    usdc: token.address,
    serviceAddress,
    // Instant finality: a mined transaction is final in its own block.
    confirmations: 1,
    async inclusion(txHash, expected) {
      assertOpen()
      const receipt = token.receipt(txHash)
      if (receipt === undefined) return { status: 'missing' }
      if (receipt.status !== 'success') return { status: 'reverted', blockNumber: 1n }
      const matched =
        expected === undefined ||
        (receipt.from.toLowerCase() === expected.from.toLowerCase() && receipt.to.toLowerCase() === expected.to.toLowerCase() && receipt.value === expected.value)
      return { status: 'included', blockNumber: 1n, blockHash: txHash, matched, final: true }
    },
    async authorizationFate(from, nonce, validBefore) {
      assertOpen()
      if (token.authorizationState(from, nonce)) return 'final'
      return BigInt(Math.floor(token.now() / 1000)) >= validBefore ? 'dead' : 'open'
    },
    async settleAuthorization(auth, signature): Promise<SettlementResult> {
      assertOpen()
      try {
        const txHash = await token.transferWithAuthorization(auth, signature)
        return { status: 'confirmed', txHash, blockNumber: 1n }
      } catch (error) {
        return { status: 'failed', reason: (error as Error).message }
      }
    },
    async settlementStatus(txHash) {
      assertOpen()
      const receipt = token.receipt(txHash)
      return receipt ? (receipt.status === 'success' ? 'confirmed' : 'failed') : 'pending'
    },
    async transactionKnown(txHash) {
      assertOpen()
      // Nothing waits in a mempool here: a transaction is known once mined.
      return token.receipt(txHash) !== undefined
    },
    async isAuthorizationUsed(from, nonce) {
      assertOpen()
      return token.authorizationState(from, nonce)
    },
    async findAuthorizationTx(from, nonce) {
      assertOpen()
      return token.authorizationTx(from, nonce)
    },
    async transfer(to, amount, options): Promise<SettlementResult> {
      assertOpen()
      if (amount <= 0n) return { status: 'failed', reason: 'amount must be positive' }
      if (amount > token.balanceOf(serviceAddress)) return { status: 'failed', reason: 'ERC20: transfer amount exceeds balance' }
      const signed = { hash: keccak256(toHex(`memory-chain:${serviceAddress}:${nonce}`)), nonce, raw: toHex(`signed:${to}:${amount}:${nonce}`) }
      nonce += 1
      await options?.onSigned?.(signed)
      try {
        return { status: 'confirmed', txHash: token.transfer(serviceAddress, to, amount, signed.hash), blockNumber: 1n }
      } catch (error) {
        return { status: 'failed', reason: (error as Error).message }
      }
    },
    async resend(tx, expected) {
      assertOpen()
      const receipt = token.receipt(tx.hash)
      if (receipt)
        return receipt.status === 'success' ? { status: 'confirmed', txHash: tx.hash, blockNumber: 1n } : { status: 'failed', reason: 'transaction reverted', txHash: tx.hash }
      try {
        return { status: 'confirmed', txHash: token.transfer(serviceAddress, expected.to, expected.value, tx.hash), blockNumber: 1n }
      } catch (error) {
        return { status: 'failed', reason: (error as Error).message }
      }
    },
    async balanceOf(address) {
      assertOpen()
      return token.balanceOf(address)
    },
    async close() {
      closed = true
    },
  }
}

type CallArgs = { address: Address; abi: readonly unknown[]; functionName: string; args?: readonly unknown[] }

/** transferWithAuthorization args (v,r,s or bytes signature overload) → authorization + signature. */
function authorizationOf(args: readonly unknown[]): { auth: TransferAuthorization; signature: Hex } {
  const [from, to, value, validAfter, validBefore, nonce, ...rest] = args as [Address, Address, bigint, bigint, bigint, Hex, ...unknown[]]
  const auth = { from, to, value: BigInt(value), validAfter: BigInt(validAfter), validBefore: BigInt(validBefore), nonce }
  if (rest.length === 1) return { auth, signature: rest[0] as Hex }
  const [v, r, s] = rest as [number | bigint, Hex, Hex]
  return { auth, signature: serializeSignature({ r, s, v: BigInt(v) }) }
}

/**
 * The reference facilitator's signer over the same token: getCode is non-empty for the token and
 * '0x' for everyone else (EOAs: the facilitator recovers signatures itself), readContract answers
 * the transferWithAuthorization dry-run, balanceOf, authorizationState, name, version and the
 * Multicall3 tryAggregate of its diagnostics; writeContract applies; receipts carry the Transfer log.
 */
export function memoryFacilitatorSigner(token: MemoryUsdc, options: { address?: Address } = {}): FacilitatorEvmSigner {
  const address = getAddress(options.address ?? '0x000000000000000000000000000000000000fac1')

  async function call(functionName: string, args: readonly unknown[]): Promise<unknown> {
    switch (functionName) {
      case 'transferWithAuthorization': {
        const { auth, signature } = authorizationOf(args)
        await token.checkTransferWithAuthorization(auth, signature)
        return undefined
      }
      case 'balanceOf':
        return token.balanceOf(args[0] as Address)
      case 'authorizationState':
        return token.authorizationState(args[0] as Address, args[1] as Hex)
      case 'name':
        return token.name
      case 'version':
        return token.version
      case 'decimals':
        return 6
      default:
        throw new Error(`memory USDC: ${functionName} is not modelled`)
    }
  }

  return {
    getAddresses: () => [address],
    async getCode({ address: target }: { address: Address }) {
      return key(target) === key(token.address) ? '0x6080604052' : '0x'
    },
    async readContract({ address: target, functionName, args = [] }: CallArgs) {
      if (key(target) === key(MULTICALL3_ADDRESS) && functionName === 'tryAggregate') {
        const calls = args[1] as readonly { target: Address; callData: Hex }[]
        return Promise.all(
          calls.map(async ({ target: to, callData }) => {
            if (key(to) !== key(token.address)) return { success: false, returnData: '0x' as Hex }
            try {
              const decoded = decodeFunctionData({ abi: eip3009ABI, data: callData })
              const result = await call(decoded.functionName, decoded.args ?? [])
              const returnData = result === undefined ? ('0x' as Hex) : encodeFunctionResult({ abi: eip3009ABI, functionName: decoded.functionName, result } as never)
              return { success: true, returnData }
            } catch {
              return { success: false, returnData: '0x' as Hex }
            }
          }),
        )
      }
      if (key(target) !== key(token.address)) throw new Error(`memory chain: no contract at ${target}`)
      return call(functionName, args)
    },
    async verifyTypedData(params: Parameters<FacilitatorEvmSigner['verifyTypedData']>[0]) {
      const signer = await recoverTypedDataAddress(params as never).catch(() => undefined)
      return !!signer && key(signer) === key(params.address)
    },
    async writeContract({ address: target, functionName, args }: CallArgs & { args: readonly unknown[] }) {
      if (key(target) !== key(token.address) || functionName !== 'transferWithAuthorization') {
        throw new Error(`memory chain: ${functionName} on ${target} is not modelled`)
      }
      const { auth, signature } = authorizationOf(args)
      return token.transferWithAuthorization(auth, signature)
    },
    async sendTransaction() {
      throw new Error('memory chain: raw transactions are not modelled')
    },
    async waitForTransactionReceipt({ hash }: { hash: Hex }) {
      const receipt = token.receipt(hash)
      if (!receipt) throw new Error(`memory chain: unknown transaction ${hash}`)
      return { status: receipt.status, logs: receipt.logs }
    },
  } as FacilitatorEvmSigner
}
