// Wire constants of the payment networks we accept: defined by the catalog, which advertises them
// (src/catalog/networks.ts; dependencies point payments → catalog), plus what only payments uses.
export {
  X402_NETWORK_CAIP2,
  X402_NETWORK_V1,
  USDC_BASE_ADDRESS,
  USDC_EIP712,
  USDC_DECIMALS,
  MPP_METHOD,
  MPP_INTENT,
  MPP_CURRENCY,
  BASE_CHAIN_ID,
} from '../catalog/networks.ts'

/** EIP-3009 TransferWithAuthorization fields: the EIP-712 struct and the USDC ABI inputs alike. */
export const TRANSFER_WITH_AUTHORIZATION_FIELDS = [
  { name: 'from', type: 'address' },
  { name: 'to', type: 'address' },
  { name: 'value', type: 'uint256' },
  { name: 'validAfter', type: 'uint256' },
  { name: 'validBefore', type: 'uint256' },
  { name: 'nonce', type: 'bytes32' },
] as const

/**
 * Blocks a settlement needs (its own included) before money leaves against it, when
 * CHAIN_CONFIRMATIONS is not set. Base's unsafe head can still reorganise for a few blocks; 10
 * (20 s) is past what it has shown. Other EVM chains get Ethereum's customary 12.
 */
export function defaultConfirmations(chainId: number): number {
  if (chainId === 8453) return 10
  if (chainId === 84532) return 5
  return 12
}
