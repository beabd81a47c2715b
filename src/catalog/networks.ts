// Wire constants of the payment networks we accept (Base mainnet: x402 v2 names it by CAIP-2, v1 by slug). They are
// what the catalog advertises (the 402 recipe, x-payment-info, llms.txt) and what src/payments
// verifies against, so they live here, on the side both read: payments imports the catalog,
// never the other way (test/unit/catalog-imports.test.ts).
export const X402_NETWORK_CAIP2 = 'eip155:8453'
export const X402_NETWORK_V1 = 'base'
export const USDC_BASE_ADDRESS = '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913'
export const USDC_EIP712 = { name: 'USD Coin', version: '2' } as const
export const USDC_DECIMALS = 6
export const MPP_METHOD = 'tempo'
export const MPP_INTENT = 'charge'
export const MPP_CURRENCY = 'USD'
export const BASE_CHAIN_ID = 8453
