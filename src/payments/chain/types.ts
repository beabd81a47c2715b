// The chain port: the one interface through which x402 settlement and refunds touch a chain.
// Two adapters implement it: `rpc` (any EVM JSON-RPC + a hot wallet; production, Base mainnet)
// and `dev` (a local anvil process + the rpc adapter pointed at it + a USDC faucet).
// Amounts are integer micros (USDC has 6 decimals) as bigint.
import type { Address, Hex } from 'viem'

import type { TransferAuthorization } from '../types.ts'

export type { TransferAuthorization }

export type SettlementResult =
  | { status: 'confirmed'; txHash: Hex; blockNumber: bigint }
  /** Reverted on-chain (txHash set) or rejected before broadcast (no txHash): nothing moved. */
  | { status: 'failed'; reason: string; txHash?: Hex }
  /**
   * Broadcast (or possibly broadcast: the RPC did not answer), receipt not seen in time:
   * outcome unknown. Reconcile later with `settlementStatus(txHash)` and, for settlements,
   * `isAuthorizationUsed(from, nonce)` (unused after `validBefore` = can never move). The adapter
   * never re-broadcasts it; a settlement's authorization may be sent again in a new transaction
   * once the node does not know this one (`transactionKnown`): the authorization's nonce makes
   * that idempotent.
   */
  | { status: 'pending'; txHash: Hex }

/** A USDC transfer a transaction is expected to carry (its Transfer log). */
export interface ExpectedTransfer {
  from: Address
  to: Address
  value: bigint
}

/**
 * Where a transaction stands on the chain, as money decisions need it. `final`: deep enough that
 * the chain will not drop it (CHAIN_CONFIRMATIONS blocks; on the dev chain, also saved to disk).
 */
export type Inclusion =
  /** Not on the chain: never mined, dropped, or its block was reorganised away. */
  | { status: 'missing' }
  | { status: 'reverted'; blockNumber: bigint }
  /** Mined; `matched`: its receipt carries the expected USDC Transfer (always true without one). */
  | { status: 'included'; blockNumber: bigint; blockHash: Hex; matched: boolean; final: boolean }

/**
 * What an EIP-3009 authorization can still do: `final` (its nonce is used in a final block),
 * `used` (used at the head, not final yet), `open` (unused, and it may still land), `dead`
 * (unused, and a final block is already past validBefore: it can never move money on this chain).
 */
export type AuthorizationFate = 'final' | 'used' | 'open' | 'dead'

/** A transaction signed by the service wallet, not necessarily broadcast. */
export interface SignedTransaction {
  hash: Hex
  nonce: number
  raw: Hex
}

export interface ChainPort {
  readonly kind: 'dev' | 'rpc'
  readonly chainId: number
  readonly usdc: Address
  /** The service wallet that submits settlements and pays refunds. */
  readonly serviceAddress: Address
  /**
   * USDC.transferWithAuthorization(from,to,value,validAfter,validBefore,nonce,signature) sent by the
   * service wallet; waits up to timeoutMs for the receipt. Throws when the node does not answer
   * before anything was sent ('failed' is only ever the chain's own verdict).
   */
  settleAuthorization(auth: TransferAuthorization, signature: Hex, options?: { timeoutMs?: number }): Promise<SettlementResult>
  /** Receipt lookup for reconciling a pending settlement. Throws if the RPC cannot be reached. */
  settlementStatus(txHash: Hex): Promise<'confirmed' | 'failed' | 'pending'>
  /**
   * Whether the node knows the transaction (in its mempool or mined): false for one that never
   * reached it (a broadcast lost with the RPC) or that it dropped. Throws if the RPC cannot be reached.
   */
  transactionKnown(txHash: Hex): Promise<boolean>
  /** Blocks a transaction needs on top of its own before money may leave against it (1 = its own block). */
  readonly confirmations: number
  /** Where `txHash` stands now (throws if the RPC cannot be reached). */
  inclusion(txHash: Hex, expected?: ExpectedTransfer): Promise<Inclusion>
  /** Whether the authorization (from, nonce), valid before `validBefore` (unix seconds), can still move money. */
  authorizationFate(from: Address, nonce: Hex, validBefore: bigint): Promise<AuthorizationFate>
  /** USDC.authorizationState(from, nonce): true once the nonce was used on-chain. */
  isAuthorizationUsed(from: Address, nonce: Hex): Promise<boolean>
  /** The transaction that used an authorization's nonce (its AuthorizationUsed log), if found in recent blocks. */
  findAuthorizationTx(from: Address, nonce: Hex): Promise<Hex | undefined>
  /**
   * USDC transfer from the service wallet (refunds). Waits for the receipt. `onSigned` runs after
   * the transaction is signed and before it is broadcast: a caller that stores it there can resume
   * it after a crash with `resend`, instead of ever paying twice.
   */
  transfer(to: Address, amount: bigint, options?: { timeoutMs?: number; onSigned?: (tx: SignedTransaction) => Promise<void> }): Promise<SettlementResult>
  /**
   * Resumes a transfer signed earlier: its receipt if mined; `superseded` if its nonce was used by
   * another transaction (it can never be mined: sign a new one); else broadcast again (same bytes,
   * same hash: idempotent) and wait for the receipt.
   */
  resend(tx: SignedTransaction, expected: { to: Address; value: bigint }, options?: { timeoutMs?: number }): Promise<SettlementResult | { status: 'superseded' }>
  balanceOf(address: Address): Promise<bigint>
  close(): Promise<void>
}

export interface DevChain extends ChainPort {
  kind: 'dev'
  rpcUrl: string
  /** test USDC mint (faucet); resolves once the mint is mined. */
  mint(to: Address, amount: bigint): Promise<Hex>
}

/** The subset of a pino logger the adapters use (a pino `Logger` fits). */
export interface ChainLogger {
  debug(obj: object, msg?: string): void
  info(obj: object, msg?: string): void
  warn(obj: object, msg?: string): void
  error(obj: object, msg?: string): void
}

export type { Address, Hex }
