// Wire constants of the payment networks we accept (see ../shared/notes/payments.md).
export const X402_NETWORK_CAIP2 = 'eip155:8453'
export const X402_NETWORK_V1 = 'base'
export const USDC_BASE_ADDRESS = '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913'
export const USDC_EIP712 = { name: 'USD Coin', version: '2' } as const
export const USDC_DECIMALS = 6
export const MPP_METHOD = 'tempo'
export const MPP_INTENT = 'charge'
export const MPP_CURRENCY = 'USD'
export const BASE_CHAIN_ID = 8453

/** EIP-3009 TransferWithAuthorization fields: the EIP-712 struct and the USDC ABI inputs alike. */
export const TRANSFER_WITH_AUTHORIZATION_FIELDS = [
  { name: 'from', type: 'address' },
  { name: 'to', type: 'address' },
  { name: 'value', type: 'uint256' },
  { name: 'validAfter', type: 'uint256' },
  { name: 'validBefore', type: 'uint256' },
  { name: 'nonce', type: 'bytes32' },
] as const
